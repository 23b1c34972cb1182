//! Pure types and rules of gatehouse: ids, instants, the gate envelope and its kinds, open and
//! answer validation, journal events, commands and views. Nothing here does I/O or knows about
//! HTTP or SQLite; `store` and `http` build on it.
//!
//! Kinds: `ask_user.rs` (a question), `permission.rs` (leave to run a tool call, whose call and
//! decision are `tool_call.rs`), `form.rs` (typed fields; `json_schema.rs` reads them from JSON
//! Schema) and `open_url.rs` (send a person to a URL) build their envelopes (`gate.rs`);
//! `open.rs` validates an open request into a `Question` of one kind; `answer.rs` checks an
//! answer against its gate.

pub mod answer;
pub mod ask_user;
pub mod events;
pub mod fields;
pub mod form;
pub mod gate;
pub mod ids;
pub mod json_schema;
pub mod links;
pub mod open;
pub mod open_url;
pub mod permission;
pub mod time;
pub mod tool_call;
pub mod view;

pub use answer::{Answer, AnswerIn, AnswerRejection, CloseIn, CloseReason, Reply};
pub use ask_user::AskUser;
pub use events::{
    AnsweredBy, Coordinates, GateOpened, GateResolved, PermissionDecided, PermissionRequested, ProvideUserInput,
    UserInputRequested,
};
pub use fields::{FieldCode, FieldError};
pub use gate::Gate;
pub use ids::{CommandId, EventId, GateId, IdError, LoopId, SessionId, StepId, ToolExecutionId, TurnId};
pub use links::ServerKey;
pub use open::{OpenGateIn, OpenRejection, OpenRules, Question};
pub use permission::Permission;
pub use time::Timestamp;
pub use tool_call::Decision;
pub use view::{GateState, GateView, InboxEntry, JournalEntry, JournalPage};
