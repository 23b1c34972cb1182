//! The AskUser gate (`harness.ask_user`): a question for a person, free text or one of some
//! choices (spec §5.1). `open.rs` validates the request; this builds the envelope.

use serde::Serialize;

use super::gate::{
    ANSWER, ASK_USER, ChoiceOption, Control, Field, FieldKind, Gate, Prompt, ResponsePolicy, Schema, Subject,
};
use super::ids::{GateId, LoopId, StepId, ToolExecutionId, TurnId};

pub const DEFAULT_TITLE: &str = "User input requested";
pub const MAX_QUESTION_BYTES: usize = 4096;
pub const MAX_TITLE_BYTES: usize = 256;
pub const MAX_CHOICES: usize = 64;
pub const MAX_CHOICE_BYTES: usize = 256;

/// A validated AskUser question: who asks, and the normalised content that decides whether a
/// re-ask is the same question.
#[derive(Debug, Clone, PartialEq)]
pub struct AskUser {
    pub loop_id: LoopId,
    pub tool_execution_id: ToolExecutionId,
    pub content: AskContent,
}

/// Everything a re-ask must repeat exactly (spec §5.1), after defaults are applied. Its canonical
/// text is stored with the gate, so a member added later must be skipped while at its default,
/// or every stored gate would stop matching its own re-ask.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AskContent {
    pub question: String,
    pub choices: Vec<String>,
    pub allow_other: bool,
    pub title: String,
    pub turn_id: Option<TurnId>,
    pub step_id: Option<StepId>,
    pub response_policy: Option<ResponsePolicy>,
}

impl AskUser {
    /// The envelope of the gate this question opens.
    pub fn gate(&self, id: GateId) -> Gate {
        let c = &self.content;
        let kind = if c.choices.is_empty() { FieldKind::Text } else { FieldKind::Select };
        let field = Field {
            required: true,
            options: c.choices.iter().map(|v| ChoiceOption { value: v.clone(), label: v.clone() }).collect(),
            allow_other: c.allow_other,
            ..Field::plain(ANSWER, "Answer", kind)
        };
        Gate {
            id,
            kind: ASK_USER.into(),
            resolver: "loop".into(),
            blocks: "tool_call".into(),
            effect: "resume".into(),
            subject: Subject {
                tool_execution_id: Some(self.tool_execution_id),
                turn_id: c.turn_id,
                step_id: c.step_id,
            },
            prompt: Prompt {
                title: c.title.clone(),
                body: c.question.clone(),
                origin: None,
                schema: Some(Schema { fields: vec![field] }),
                controls: vec![Control { action: ANSWER.into(), label: "Answer".into() }],
                requires_completion: false,
            },
            response_policy: c.response_policy.clone(),
            restorable: false,
            tool_call: None,
        }
    }
}
