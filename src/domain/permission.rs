//! The permission gate (`harness.permission`): leave to run one prepared tool call, approved as
//! it is, approved with an edited input, or denied with a reason. The envelope is built as the
//! harness builds it (gate-kinds reference §1.2): a fixed title, the summary with the
//! capabilities and what "Approve always" saves, and the approval controls; the call itself rides
//! along in the additive `tool_call`.

use serde::Serialize;
use serde_json::Value;

use super::gate::{Control, Gate, PERMISSION, Prompt, ResponsePolicy, Subject};
use super::ids::{GateId, LoopId, StepId, ToolExecutionId, TurnId};
use super::tool_call::{APPROVE, APPROVE_ALWAYS, DENY, Risk, ToolCall, ToolRequest};

pub const TITLE: &str = "Approve tool call";
/// The harness's default policy for a permission gate: deny after 5 minutes (`--permission-timeout`).
pub const DEFAULT_TIMEOUT_NANOS: i64 = 300 * 1_000_000_000;

/// A validated permission request: who asks, and the content that decides whether a re-ask is
/// the same request.
#[derive(Debug, Clone, PartialEq)]
pub struct Permission {
    pub loop_id: LoopId,
    pub tool_execution_id: ToolExecutionId,
    pub content: PermissionContent,
}

/// Everything a re-ask must repeat exactly, after defaults (the default policy among them).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PermissionContent {
    pub request: ToolRequest,
    pub tool_input: Option<Value>,
    pub tool_input_schema: Option<Value>,
    pub risk: Option<Risk>,
    pub editable: bool,
    pub turn_id: Option<TurnId>,
    pub step_id: Option<StepId>,
    pub response_policy: Option<ResponsePolicy>,
}

impl Permission {
    pub fn tool_call(&self) -> ToolCall {
        let c = &self.content;
        ToolCall {
            request: c.request.clone(),
            tool_input: c.tool_input.clone(),
            tool_input_schema: c.tool_input_schema.clone(),
            risk: c.risk,
            editable: c.editable,
        }
    }

    /// The envelope of the gate this request opens.
    pub fn gate(&self, id: GateId) -> Gate {
        let c = &self.content;
        let call = self.tool_call();
        let mut controls = vec![Control::named(APPROVE)];
        if call.has_candidates() {
            controls.push(Control::named(APPROVE_ALWAYS));
        }
        controls.push(Control::named(DENY));
        Gate {
            id,
            kind: PERMISSION.into(),
            resolver: "loop".into(),
            blocks: "tool_call".into(),
            effect: "resume".into(),
            subject: Subject {
                tool_execution_id: Some(self.tool_execution_id),
                turn_id: c.turn_id,
                step_id: c.step_id,
            },
            prompt: Prompt {
                title: TITLE.into(),
                body: body(&c.request),
                origin: None,
                schema: None,
                controls,
                requires_completion: false,
            },
            response_policy: c.response_policy.clone(),
            restorable: true,
            tool_call: Some(call),
        }
    }
}

/// The harness's body grammar: the summary (here the tool's name when there is none), then
/// `Capabilities:` with one line per requirement, then `Approve always saves:` with one line per
/// candidate.
fn body(request: &ToolRequest) -> String {
    let mut body = if request.summary.is_empty() { request.tool_name.clone() } else { request.summary.clone() };
    if !request.requirements.is_empty() {
        body.push_str("\n\nCapabilities:");
        for requirement in &request.requirements {
            body.push_str("\n- ");
            body.push_str(&requirement.description);
        }
    }
    let candidates: Vec<&str> = request.candidate_descriptions().collect();
    if !candidates.is_empty() {
        body.push_str("\n\nApprove always saves:");
        for description in candidates {
            body.push_str("\n- ");
            body.push_str(description);
        }
    }
    body
}
