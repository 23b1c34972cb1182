//! Answer links (spec §9): `{public_url}/v1/answers/{token}` answers one gate without any other
//! credential: the token is the capability. `GET` shows a small confirm page; `POST` takes the
//! body of §5.2 and answers once, as the principal `answer-link`. A link answers; it never shows
//! what someone else answered.

use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::value::RawValue;

use super::AppState;
use super::extract::{IdempotencyKey, JsonBody, Params};
use super::gates::answer_record;
use crate::auth::PRINCIPAL_LINK;
use crate::domain::{AnswerIn, AnsweredBy, GateState};
use crate::http::error::ApiError;
use crate::store::GateRecord;

#[derive(Deserialize)]
pub(super) struct TokenPath {
    token: String,
}

async fn find(state: &AppState, token: String) -> Result<GateRecord, ApiError> {
    // Tokens are 43 base64url characters; anything else cannot match and need not be looked up.
    let plausible = token.len() == 43 && token.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    let record = if plausible { state.store.gate_by_link(token).await? } else { None };
    record.ok_or(ApiError::NotFound("no such answer link"))
}

pub(super) async fn answer_by_link(
    State(state): State<AppState>,
    Params(TokenPath { token }): Params<TokenPath>,
    IdempotencyKey(key): IdempotencyKey,
    JsonBody(body): JsonBody<AnswerIn>,
) -> Result<Response, ApiError> {
    let record = find(&state, token).await?;
    if !body.names_gate(record.view.gate_id) {
        return Err(ApiError::invalid_body("gate_id in the body must name the link's gate"));
    }
    let by = AnsweredBy::Person { principal: Some(PRINCIPAL_LINK.into()) };
    answer_record(&state, record, &body, key, by).await.map_err(|e| match e {
        // Whoever holds a link may answer, not read the answer (nor who gave it).
        ApiError::GateNotReady(resolution) => ApiError::LinkUsed(outcome(is_close(&resolution))),
        e => e,
    })
}

/// How a gate that is no longer open ended, in the words of the link's page and errors.
fn outcome(closed: bool) -> &'static str {
    if closed { "closed" } else { "answered" }
}

/// Whether a `GateResolved` is a close (it carries no action).
fn is_close(resolution: &RawValue) -> bool {
    #[derive(Deserialize)]
    struct Action {
        action: Option<serde::de::IgnoredAny>,
    }
    serde_json::from_str::<Action>(resolution.get()).is_ok_and(|r| r.action.is_none())
}

/// A small page: the question and the choices as text (never HTML from the gate), and a script
/// that posts the chosen answer as JSON to this same URL.
pub(super) async fn confirm_page(
    State(state): State<AppState>,
    Params(TokenPath { token }): Params<TokenPath>,
) -> Result<Response, ApiError> {
    let record = find(&state, token).await?;
    let gate = record.gate()?;
    let field = gate.answer_field();
    let open = record.view.state == GateState::Open;
    let mut html = String::from(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>Answer · gatehouse</title><link rel=\"stylesheet\" href=\"/static/style.css\">\
         <script type=\"module\" src=\"/static/answer.js\"></script></head><body><main class=\"link\">",
    );
    html.push_str(&format!(
        "<h1>{}</h1><p class=\"question\">{}</p>",
        escape(&gate.prompt.title),
        escape(&gate.prompt.body)
    ));
    if open {
        html.push_str("<form id=\"answer\">");
        if field.is_some_and(|f| f.options.is_empty() || f.allow_other) {
            // Text and "Send" come before the choices: Enter submits through the form's first
            // button, which must be "Send", never a choice.
            html.push_str(
                "<label>Your answer <input name=\"text\" autocomplete=\"off\"></label>\
                 <button type=\"submit\" name=\"send\">Send</button>",
            );
        }
        for option in field.map(|f| f.options.as_slice()).unwrap_or_default() {
            html.push_str(&format!(
                "<button type=\"submit\" name=\"answer\" value=\"{0}\">{0}</button>",
                escape(&option.value)
            ));
        }
        html.push_str("</form><p id=\"result\" role=\"status\"></p>");
    } else {
        // The link is a capability to answer, not to read: the page says that the gate was
        // answered or closed, never what the answer was.
        let outcome = outcome(record.view.state == GateState::Closed);
        html.push_str(&format!("<p role=\"status\">This question was already {outcome}.</p>"));
    }
    html.push_str("</main></body></html>");
    let mut response = (StatusCode::OK, html).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(super::assets::CSP));
    Ok(response)
}

/// Text for HTML: gate text is data, never markup.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn escapes_markup() {
        assert_eq!(
            super::escape("<script>\"a\" & 'b'</script>"),
            "&lt;script&gt;&quot;a&quot; &amp; &#39;b&#39;&lt;/script&gt;"
        );
    }
}
