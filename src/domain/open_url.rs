//! The open-URL gate (`harness.open_url`): send a person to a URL (a device login, a payment
//! page) and hear back when they are done. Always host-owned. The URL is a secret of the gate:
//! only its bare origin is in the envelope, so it is never journaled, streamed or listed; the
//! store keeps it sealed with the server key for the people allowed to answer.

use serde::Serialize;

use super::fields::{FieldCode, FieldError};
use super::form::controls;
use super::gate::{Gate, OPEN_URL, Prompt, ResponsePolicy, SESSION, Subject};
use super::ids::GateId;

pub const DEFAULT_TITLE: &str = "Action requested";
pub const MAX_URL_BYTES: usize = 4096;

/// A validated open-URL request: the content (what everyone may see) and the URL.
#[derive(Debug, Clone, PartialEq)]
pub struct OpenUrl {
    pub content: OpenUrlContent,
    pub url: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OpenUrlContent {
    pub title: String,
    pub body: String,
    pub origin: String,
    pub requires_completion: bool,
    pub response_policy: Option<ResponsePolicy>,
}

impl OpenUrl {
    pub fn gate(&self, id: GateId) -> Gate {
        let c = &self.content;
        let accept = if c.requires_completion { "I have completed it" } else { "Done" };
        Gate {
            id,
            kind: OPEN_URL.into(),
            resolver: SESSION.into(),
            blocks: "session".into(),
            effect: "resume".into(),
            subject: Subject { tool_execution_id: None, turn_id: None, step_id: None },
            prompt: Prompt {
                title: c.title.clone(),
                body: c.body.clone(),
                origin: Some(c.origin.clone()),
                schema: None,
                controls: controls(accept),
                requires_completion: c.requires_completion,
            },
            response_policy: c.response_policy.clone(),
            // The URL is not kept in the clear, so nothing could restore the gate's purpose.
            restorable: false,
            tool_call: None,
        }
    }
}

/// The bare origin (`scheme://host[:port]`) of an absolute http(s) URL with no credentials in
/// it. Messages never repeat the URL: it is a secret, and error bodies are logged.
pub fn origin_of(path: &str, url: &str) -> Result<String, FieldError> {
    let invalid = |message: &str| FieldError::new(path, FieldCode::Invalid, message);
    if url.len() > MAX_URL_BYTES {
        let message = format!("must be at most {MAX_URL_BYTES} bytes (got {})", url.len());
        return Err(FieldError::new(path, FieldCode::TooLong, message));
    }
    let parsed = url::Url::parse(url).map_err(|e| invalid(&format!("is not an absolute URL ({e})")))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(invalid("must be an http or https URL"));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(invalid("must not carry a user name or password"));
    }
    match parsed.origin() {
        url::Origin::Tuple(..) if parsed.host_str().is_some_and(|h| !h.is_empty()) => {
            Ok(parsed.origin().ascii_serialization())
        }
        _ => Err(invalid("must have a host")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_origin_is_bare_and_the_message_never_repeats_the_url() {
        assert_eq!(origin_of("/url", "https://github.com/login/device?code=ABCD#x").unwrap(), "https://github.com");
        assert_eq!(origin_of("/url", "http://127.0.0.1:8443/a").unwrap(), "http://127.0.0.1:8443");
        for bad in ["ftp://x.test/secret-token", "https://me:pw@x.test/secret-token", "secret-token", "mailto:a@b"] {
            let problem = origin_of("/url", bad).unwrap_err();
            assert!(!problem.message.contains("secret-token") && !problem.message.contains("pw"), "{problem:?}");
        }
    }
}
