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
use super::gates::{answer_record, open_url_of};
use crate::auth::PRINCIPAL_LINK;
use crate::domain::gate::{Control, FORM, OPEN_URL};
use crate::domain::tool_call::{DENY, Risk, ToolCall};
use crate::domain::{AnswerIn, AnsweredBy, Gate, GateState};
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
/// that posts the chosen answer as JSON to this same URL. A permission gate shows its approval
/// card instead (see `approval_card`), a form its fields (`form`), an open-URL gate its link
/// (`open_url`): the link holder may follow it, as a person logged in to the inbox may.
pub(super) async fn confirm_page(
    State(state): State<AppState>,
    Params(TokenPath { token }): Params<TokenPath>,
) -> Result<Response, ApiError> {
    let record = find(&state, token).await?;
    let gate = record.gate()?;
    let gate_state = record.view.state;
    // The URL is readable only while the gate is open; once it is not, the page shows no link.
    let url = if gate.kind == OPEN_URL && gate_state == GateState::Open { open_url_of(&state, &record)? } else { None };
    let mut html = String::from(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>Answer · gatehouse</title><link rel=\"stylesheet\" href=\"/static/style.css\">\
         <script type=\"module\" src=\"/static/answer.js\"></script></head><body><main class=\"link\">",
    );
    match &gate.tool_call {
        Some(call) => approval_card(&mut html, &gate, call, gate_state),
        None if gate.kind == FORM => form(&mut html, &gate, gate_state),
        None if gate.kind == OPEN_URL => open_url(&mut html, &gate, gate_state, url.as_deref()),
        None => question(&mut html, &gate, gate_state),
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

/// An AskUser gate: its question, and while it is open the text field and the choices.
fn question(html: &mut String, gate: &Gate, state: GateState) {
    let field = gate.answer_field();
    html.push_str(&format!(
        "<h1>{}</h1><p class=\"question\">{}</p>",
        escape(&gate.prompt.title),
        escape(&gate.prompt.body)
    ));
    if state == GateState::Open {
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
        let outcome = outcome(state == GateState::Closed);
        html.push_str(&format!("<p role=\"status\">This question was already {outcome}.</p>"));
    }
}

/// A permission gate: the call (tool, summary, risk, requirements, input as it was asked for) and,
/// while it is open, its controls: the approvals, Edit when the call is editable, and Deny in a
/// form of its own with an optional reason, so Enter in the reason denies and never approves.
/// `answer.js` builds the editor from the original input and its schema, which travel as JSON in
/// data attributes: attribute-escaped like all gate text, so they are inert until parsed.
fn approval_card(html: &mut String, gate: &Gate, call: &ToolCall, state: GateState) {
    let request = &call.request;
    let risk = call.risk.map(risk_name);
    let severe = matches!(call.risk, Some(Risk::High | Risk::Critical));
    html.push_str(&format!("<h1>{}</h1>", escape(&gate.prompt.title)));
    match risk.filter(|_| severe) {
        Some(risk) => {
            html.push_str(&format!("<article class=\"card approval risk-{risk}\" aria-labelledby=\"tool-name\">"))
        }
        None => html.push_str("<article class=\"card approval\" aria-labelledby=\"tool-name\">"),
    }
    html.push_str(&format!(
        "<div class=\"tool-head\"><h2 id=\"tool-name\" class=\"tool-name\">{}</h2>",
        escape(&request.tool_name)
    ));
    if let Some(risk) = risk {
        html.push_str(&format!("<span class=\"risk risk-{risk}\" data-risk=\"{risk}\">{risk} risk</span>"));
    }
    html.push_str("</div>");
    if !request.summary.is_empty() {
        html.push_str(&format!("<p class=\"summary\">{}</p>", escape(&request.summary)));
    }
    if !request.requirements.is_empty() {
        html.push_str("<div class=\"requirements\"><p class=\"label\">Needs</p><ul>");
        for requirement in &request.requirements {
            html.push_str(&format!("<li>{}</li>", escape(&requirement.description)));
        }
        html.push_str("</ul>");
        let saves: Vec<&str> = request.candidate_descriptions().collect();
        if !saves.is_empty() {
            html.push_str(&format!("<p class=\"saves\">Approve always saves: {}</p>", escape(&saves.join("; "))));
        }
        html.push_str("</div>");
    }
    if let Some(input) = &call.tool_input {
        let pretty = serde_json::to_string_pretty(input).expect("JSON values serialise");
        html.push_str(&format!(
            "<div class=\"input\"><p class=\"label\">Input</p><pre class=\"tool-input\">{}</pre></div>",
            escape(&pretty)
        ));
    }
    html.push_str("</article>");

    if state != GateState::Open {
        // As for a question: that it was decided, never how, nor by whom.
        let outcome = outcome(state == GateState::Closed);
        html.push_str(&format!("<p role=\"status\">This tool call was already {outcome}.</p>"));
        return;
    }
    let editable_input = call.tool_input.as_ref().filter(|_| call.editable);
    html.push_str("<div id=\"decide\"");
    if let Some(input) = editable_input {
        let json = |value: &serde_json::Value| escape(&value.to_string());
        html.push_str(&format!(" data-tool-input=\"{}\"", json(input)));
        if let Some(schema) = &call.tool_input_schema {
            html.push_str(&format!(" data-tool-input-schema=\"{}\"", json(schema)));
        }
    }
    html.push_str("><div class=\"actions\">");
    let controls = &gate.prompt.controls;
    control_buttons(html, controls.iter().filter(|c| c.action != DENY));
    if editable_input.is_some() {
        html.push_str("<button type=\"button\" class=\"choice\" id=\"edit\">Edit input…</button>");
    }
    html.push_str("</div>");
    if let Some(deny) = controls.iter().find(|c| c.action == DENY) {
        html.push_str(&format!(
            "<form id=\"deny\" class=\"deny\"><label for=\"reason\">Reason for denying (optional)</label>\
             <div class=\"free-row\"><input id=\"reason\" name=\"reason\" autocomplete=\"off\">\
             <button type=\"submit\" class=\"deny-button\" data-action=\"{}\">{}</button></div></form>",
            escape(&deny.action),
            escape(&deny.label)
        ));
    }
    html.push_str("</div><p id=\"result\" class=\"result\" role=\"status\"></p>");
}

/// A form gate: its title and text, and while it is open a slot that `answer.js` fills with the
/// fields and controls (form.js, as on the inbox), built from the prompt embedded as JSON.
fn form(html: &mut String, gate: &Gate, state: GateState) {
    html.push_str(&format!(
        "<h1>{}</h1><p class=\"summary\">{}</p>",
        escape(&gate.prompt.title),
        escape(&gate.prompt.body)
    ));
    if state != GateState::Open {
        let outcome = outcome(state == GateState::Closed);
        html.push_str(&format!("<p role=\"status\">This form was already {outcome}.</p>"));
        return;
    }
    html.push_str(&format!(
        "<div id=\"form-gate\" class=\"card\"></div>\
         <script type=\"application/json\" id=\"form-prompt\">{}</script>\
         <noscript><p>This form needs JavaScript.</p></noscript>\
         <p id=\"result\" class=\"result\" role=\"status\"></p>",
        script_json(&gate.prompt)
    ));
}

/// An open-URL gate: its title and text, where the link goes (its origin, prominently), and while
/// it is open the link itself and the controls. The URL came from whoever opened the gate: it is
/// text in an attribute like any gate text, and a link only when it is http(s).
fn open_url(html: &mut String, gate: &Gate, state: GateState, url: Option<&str>) {
    html.push_str(&format!(
        "<h1>{}</h1><p class=\"summary\">{}</p>",
        escape(&gate.prompt.title),
        escape(&gate.prompt.body)
    ));
    if let Some(origin) = &gate.prompt.origin {
        html.push_str(&format!("<p class=\"origin\">This opens <strong>{}</strong></p>", escape(origin)));
    }
    if state != GateState::Open {
        let outcome = outcome(state == GateState::Closed);
        html.push_str(&format!("<p role=\"status\">This request was already {outcome}.</p>"));
        return;
    }
    html.push_str("<div id=\"open-url\">");
    match url {
        Some(url) if is_web_url(url) => html.push_str(&format!(
            "<p class=\"open-url\"><a href=\"{0}\" target=\"_blank\" rel=\"noopener noreferrer\">{0}</a></p>",
            escape(url)
        )),
        Some(url) => html.push_str(&format!("<p class=\"open-url\"><code>{}</code></p>", escape(url))),
        None => html.push_str("<p class=\"open-url\">The link is not available.</p>"),
    }
    html.push_str("<div class=\"actions\">");
    control_buttons(html, gate.prompt.controls.iter());
    html.push_str("</div></div><p id=\"result\" class=\"result\" role=\"status\"></p>");
}

/// The buttons of `controls`, the first as the main one; `answer.js` sends the one pressed.
fn control_buttons<'a>(html: &mut String, controls: impl Iterator<Item = &'a Control>) {
    for (i, control) in controls.enumerate() {
        let class = if i == 0 { "send" } else { "choice" };
        html.push_str(&format!(
            "<button type=\"button\" class=\"{class}\" data-action=\"{}\">{}</button>",
            escape(&control.action),
            escape(&control.label)
        ));
    }
}

/// Whether a URL may be an `href`: http(s) only, never `javascript:` or `data:`, whatever the
/// open let through.
fn is_web_url(url: &str) -> bool {
    let lower = url.get(..8).unwrap_or(url).to_ascii_lowercase();
    lower.starts_with("https://") || lower.starts_with("http://")
}

/// JSON for a `<script type="application/json">`: the HTML parser ends the element at the first
/// `</script`, inside a JSON string or not, so no `<` may appear. `<`, `>` and `&` occur only
/// inside JSON strings, where `\u003c`, `\u003e` and `\u0026` mean the same characters.
fn script_json(value: &impl serde::Serialize) -> String {
    serde_json::to_string(value)
        .expect("JSON values serialise")
        .replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
}

fn risk_name(risk: Risk) -> &'static str {
    match risk {
        Risk::Low => "low",
        Risk::Medium => "medium",
        Risk::High => "high",
        Risk::Critical => "critical",
    }
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
    use serde_json::json;

    use super::*;
    use crate::domain::GateId;
    use crate::domain::open::{OpenGateIn, OpenRules};

    #[test]
    fn escapes_markup() {
        assert_eq!(
            super::escape("<script>\"a\" & 'b'</script>"),
            "&lt;script&gt;&quot;a&quot; &amp; &#39;b&#39;&lt;/script&gt;"
        );
    }

    /// A permission gate opened from `body` (with its ids filled in), as the store would keep it.
    fn permission_gate(body: serde_json::Value) -> Gate {
        let mut body = body;
        body["kind"] = json!("harness.permission");
        body["loop_id"] = json!("6a1d6d3e-7f0e-4c4b-9a51-0f5f0c1d2e3f");
        body["tool_execution_id"] = json!("0b0c6b1e-2a3d-4e5f-8a9b-1c2d3e4f5a6b");
        let open: OpenGateIn = serde_json::from_value(body).unwrap();
        open.validate(OpenRules::default()).unwrap().gate(GateId::mint())
    }

    fn card(gate: &Gate, state: GateState) -> String {
        let mut html = String::new();
        approval_card(&mut html, gate, gate.tool_call.as_ref().unwrap(), state);
        html
    }

    #[test]
    fn the_approval_card_is_escaped_text_and_its_json_survives_the_attribute() {
        let input = json!({"command": "echo '</pre><script>alert(1)</script>' \"&amp;\""});
        let gate = permission_gate(json!({
            "tool_name": "<b>Bash</b>",
            "summary": "<img src=x onerror=alert(1)>",
            "requirements": ["<i>push</i>"],
            "tool_input": input,
            "tool_input_schema": {"type": "object", "description": "\"><script>"},
            "risk": "critical",
            "editable": true,
        }));
        let html = card(&gate, GateState::Open);
        for markup in ["<b>", "<img", "<i>", "<script", "</pre><script"] {
            assert!(!html.contains(markup), "{markup} is escaped: {html}");
        }
        assert!(html.contains("&lt;b&gt;Bash&lt;/b&gt;"), "{html}");
        assert!(html.contains("class=\"card approval risk-critical\""), "{html}");
        assert!(html.contains("critical risk"), "{html}");
        assert!(html.contains("id=\"edit\""), "editable: {html}");
        assert!(html.contains("<form id=\"deny\""), "{html}");
        // What the browser reads back from the attribute is the input itself.
        let start = html.find("data-tool-input=\"").unwrap() + "data-tool-input=\"".len();
        let attribute = &html[start..start + html[start..].find('"').unwrap()];
        let unescaped = attribute
            .replace("&quot;", "\"")
            .replace("&#39;", "'")
            .replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&amp;", "&");
        assert_eq!(serde_json::from_str::<serde_json::Value>(&unescaped).unwrap(), input);
    }

    #[test]
    fn a_decided_permission_gate_says_so_and_offers_nothing() {
        let gate = permission_gate(json!({"tool_name": "Read", "risk": "low", "tool_input": {"path": "a"}}));
        let html = card(&gate, GateState::Resolved);
        assert!(html.contains("This tool call was already answered."), "{html}");
        assert!(!html.contains("<button") && !html.contains("id=\"decide\""), "{html}");
        assert!(html.contains("class=\"card approval\""), "low risk is plain: {html}");
        assert!(card(&gate, GateState::Closed).contains("This tool call was already closed."));
        // Not editable: no editor, and no copy of the input for one.
        let open = card(&gate, GateState::Open);
        assert!(!open.contains("id=\"edit\"") && !open.contains("data-tool-input"), "{open}");
    }

    /// A host-owned gate of `kind` with `prompt`, as the store keeps its envelope.
    fn gate_of(kind: &str, prompt: serde_json::Value) -> Gate {
        serde_json::from_value(json!({
            "id": GateId::mint(), "kind": kind, "resolver": "session", "blocks": "session", "effect": "resume",
            "subject": {}, "prompt": prompt,
        }))
        .unwrap()
    }

    fn page(render: impl FnOnce(&mut String)) -> String {
        let mut html = String::new();
        render(&mut html);
        html
    }

    #[test]
    fn a_form_page_embeds_its_prompt_as_inert_json_that_reads_back_intact() {
        let gate = gate_of(
            FORM,
            json!({
                "title": "</script><script>alert(1)</script>",
                "body": "<b>Deploy</b> & more",
                "schema": {"fields": [{
                    "name": "target", "label": "</SCRIPT><img src=x onerror=alert(1)>", "kind": "text",
                    "description": "<!-- ends here? --> & \u{2028}",
                }]},
                "controls": [{"action": "accept", "label": "Submit"}, {"action": "decline", "label": "Decline"}],
            }),
        );
        let html = page(|html| form(html, &gate, GateState::Open));
        assert_eq!(html.to_ascii_lowercase().matches("<script").count(), 1, "only the data block: {html}");
        assert!(html.contains("&lt;b&gt;Deploy&lt;/b&gt; &amp; more"), "{html}");
        let open = "<script type=\"application/json\" id=\"form-prompt\">";
        let start = html.find(open).unwrap() + open.len();
        let embedded = &html[start..start + html[start..].find("</script>").unwrap()];
        assert!(!embedded.contains(['<', '>', '&']), "{embedded}");
        let parsed: serde_json::Value = serde_json::from_str(embedded).unwrap();
        assert_eq!(parsed, serde_json::to_value(&gate.prompt).unwrap());
        assert!(html.contains("<div id=\"form-gate\""), "{html}");

        let answered = page(|html| form(html, &gate, GateState::Resolved));
        assert!(answered.contains("This form was already answered."), "{answered}");
        assert!(!answered.contains("form-prompt") && !answered.contains("form-gate"), "{answered}");
        assert!(page(|html| form(html, &gate, GateState::Closed)).contains("This form was already closed."));
    }

    #[test]
    fn an_open_url_page_shows_the_origin_and_links_only_a_web_url_escaped() {
        let gate = gate_of(
            OPEN_URL,
            json!({
                "title": "Authorize <GitHub>", "body": "Sign in, then confirm here.", "origin": "https://github.com",
                "requires_completion": true,
                "controls": [
                    {"action": "accept", "label": "I have completed it"},
                    {"action": "decline", "label": "Decline"},
                    {"action": "cancel", "label": "Cancel"},
                ],
            }),
        );
        let url = "https://github.com/login/device?code=AB&next=\"><script>alert(1)</script>";
        let html = page(|html| open_url(html, &gate, GateState::Open, Some(url)));
        assert!(html.contains("<h1>Authorize &lt;GitHub&gt;</h1>"), "{html}");
        assert!(html.contains("This opens <strong>https://github.com</strong>"), "{html}");
        assert!(!html.to_ascii_lowercase().contains("<script"), "{html}");
        let escaped =
            "https://github.com/login/device?code=AB&amp;next=&quot;&gt;&lt;script&gt;alert(1)&lt;/script&gt;";
        assert!(
            html.contains(&format!(
                "<a href=\"{escaped}\" target=\"_blank\" rel=\"noopener noreferrer\">{escaped}</a>"
            )),
            "{html}"
        );
        assert!(
            html.contains("<button type=\"button\" class=\"send\" data-action=\"accept\">I have completed it</button>")
        );
        assert!(
            html.contains("data-action=\"decline\">Decline</button>")
                && html.contains("data-action=\"cancel\">Cancel</button>")
        );

        let script = page(|html| open_url(html, &gate, GateState::Open, Some("javascript:alert(1)")));
        assert!(!script.contains("href=") && script.contains("<code>javascript:alert(1)</code>"), "{script}");
        // Once answered: no link and no buttons, even if a URL were at hand.
        let answered = page(|html| open_url(html, &gate, GateState::Resolved, Some(url)));
        assert!(answered.contains("This request was already answered."), "{answered}");
        assert!(!answered.contains("href=") && !answered.contains("<button"), "{answered}");
        assert!(answered.contains("This opens <strong>https://github.com</strong>"), "{answered}");
    }

    #[test]
    fn only_http_and_https_become_links() {
        for url in ["https://github.com/x", "HTTP://example.com", "Https://a.b/é"] {
            assert!(is_web_url(url), "{url}");
        }
        for url in ["javascript:alert(1)", "data:text/html,x", "ftp://example.com", "http:/x", "https:", "é"] {
            assert!(!is_web_url(url), "{url}");
        }
    }
}
