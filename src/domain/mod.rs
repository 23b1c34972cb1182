//! Pure types and rules of gatehouse: ids, instants, the gate envelope and its prompt, answer
//! validation, journal events, commands and views. Nothing here does I/O or knows about HTTP or
//! SQLite; `store` and `http` build on it.

pub mod answer;
pub mod events;
pub mod fields;
pub mod gate;
pub mod ids;
pub mod links;
pub mod time;
pub mod view;

pub use answer::{Answer, AnswerIn, AnswerRejection, CloseIn, CloseReason};
pub use events::{AnsweredBy, Coordinates, GateOpened, GateResolved, ProvideUserInput, UserInputRequested};
pub use fields::{FieldCode, FieldError};
pub use gate::{AskUser, Gate, OpenGateIn, OpenRejection};
pub use ids::{CommandId, EventId, GateId, IdError, LoopId, SessionId, StepId, ToolExecutionId, TurnId};
pub use links::ServerKey;
pub use time::Timestamp;
pub use view::{GateState, GateView, InboxEntry, JournalEntry, JournalPage};
