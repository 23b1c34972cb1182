//! The client subcommands on permission gates (`harness.permission`): `gatehouse approve` and its
//! exit codes, `gatehouse answer GATE approve|deny`, and `gatehouse gates` naming the tool. The
//! real binary against a real server.

use serde_json::{Value, json};
use tokio::io::BufReader;
use tokio::process::Command;

use crate::cli::{announcement, controls_terminal, finish, gatehouse, text};
use crate::helpers::{Client, TestApp, ask, eventually, gate_id, uuid};

/// The test's side of the API (every response checked against the contract, as everywhere).
struct Http {
    client: Client,
}

impl Http {
    fn of(app: &TestApp) -> Self {
        Self { client: app.client.clone() }
    }

    async fn get(&self, path: &str) -> Value {
        self.client.get(path).await.expect(200).json()
    }

    async fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        let reply = self.client.post(path, body).await;
        let body = if reply.body.is_empty() { Value::Null } else { reply.json() };
        (reply.status, body)
    }

    /// Opens a gate in `session` and returns its view.
    async fn open(&self, session: &str, body: &Value) -> Value {
        let (status, view) = self.post(&format!("/v1/sessions/{session}/gates"), body).await;
        assert_eq!(status, 201, "{view}");
        view
    }

    async fn view(&self, gate: &str) -> Value {
        self.get(&format!("/v1/gates/{gate}")).await
    }

    /// Waits for the one open gate of a session (the command opened it), and returns its view.
    async fn opened_in(&self, session: &str) -> Value {
        let mut found = None;
        eventually("the command opens its gate", async || {
            let listing = self.get(&format!("/v1/sessions/{session}/gates?state=open")).await;
            found = listing["gates"].as_array().and_then(|g| g.first()).cloned();
            found.is_some()
        })
        .await;
        found.unwrap()
    }

    /// The loop's commands, acknowledged or not.
    async fn commands(&self, session: &str, loop_id: &str) -> Vec<Value> {
        let inbox = self.get(&format!("/v1/sessions/{session}/loops/{loop_id}/commands?include_acked=true")).await;
        inbox["commands"].as_array().cloned().unwrap_or_default()
    }
}

const SCHEMA: &str = r#"{"type":"object","required":["command"],"properties":{"command":{"type":"string"}}}"#;

/// An open body for a permission gate of `loop_id`'s tool execution `tool`.
fn permission(loop_id: &str, tool: &str, tool_name: &str, input: Value) -> Value {
    json!({"kind": "harness.permission", "loop_id": loop_id, "tool_execution_id": tool, "tool_name": tool_name,
           "tool_input": input})
}

/// Decides a gate over HTTP with `body`, as a person's client does.
async fn decide(http: &Http, session: &str, gate: &str, body: Value) {
    let (status, reply) = http.post(&format!("/v1/sessions/{session}/gates/{gate}"), &body).await;
    assert_eq!(status, 202, "{reply}");
}

#[tokio::test]
async fn approve_prints_the_final_input_approved_as_it_is_or_edited() {
    let app = TestApp::spawn().await;
    let http = Http::of(&app);
    let (dir, _) = crate::helpers::temp_db();
    let schema = dir.path().join("schema.json");
    std::fs::write(&schema, SCHEMA).unwrap();
    let schema = schema.display().to_string();
    let input = r#"{ "command": "git push origin main" }"#;

    let (session, loop_id) = (uuid(), uuid());
    let approving =
        gatehouse(&app.base, &["approve", "Bash", "--input", input, "--session", &session, "--loop", &loop_id])
            .spawn()
            .unwrap();
    let view = http.opened_in(&session).await;
    let gate = gate_id(&view);
    assert_eq!(view["gate"]["kind"], "harness.permission");
    assert_eq!(view["gate"]["tool_call"]["tool_input"], json!({"command": "git push origin main"}));
    app.parked_on_gate(&gate, 1).await;
    decide(&http, &session, &gate, json!({"action": "Approve"})).await;
    let approved = finish(approving).await;
    assert_eq!(approved.status.code(), Some(0), "{}", text(&approved.stderr));
    assert_eq!(text(&approved.stdout), "{\"command\":\"git push origin main\"}\n", "compact, one line");
    let commands = http.commands(&session, &loop_id).await;
    assert_eq!(commands[0]["command"]["type"], "ApproveToolCall");
    assert!(commands[0]["acked_at"].is_string(), "approve acked its command: {commands:?}");

    let session = uuid();
    let approving = gatehouse(
        &app.base,
        &[
            "approve",
            "Bash",
            "--input",
            input,
            "--schema",
            &schema,
            "--editable",
            "--risk",
            "high",
            "--session",
            &session,
        ],
    )
    .spawn()
    .unwrap();
    let view = http.opened_in(&session).await;
    let gate = gate_id(&view);
    let call = &view["gate"]["tool_call"];
    assert_eq!((call["editable"].as_bool(), call["risk"].as_str()), (Some(true), Some("high")));
    assert_eq!(call["tool_input_schema"], serde_json::from_str::<Value>(SCHEMA).unwrap(), "--schema is sent");
    app.parked_on_gate(&gate, 1).await;
    let edit = json!({"command": "git push origin feature"});
    decide(&http, &session, &gate, json!({"action": "Approve", "values": {"tool_input": edit}})).await;
    let approved = finish(approving).await;
    assert_eq!(approved.status.code(), Some(0), "{}", text(&approved.stderr));
    assert_eq!(text(&approved.stdout), format!("{edit}\n"), "the person's edit, not the input asked for");
}

#[tokio::test]
async fn approve_exits_4_when_a_person_denies_and_3_when_nobody_decides_in_time() {
    let app = TestApp::spawn().await;
    let http = Http::of(&app);
    let session = uuid();
    let approving = gatehouse(&app.base, &["approve", "deploy", "--input", r#"{"env":"prod"}"#, "--session", &session])
        .spawn()
        .unwrap();
    let gate = gate_id(&http.opened_in(&session).await);
    app.parked_on_gate(&gate, 1).await;
    let denied =
        finish(gatehouse(&app.base, &["answer", &gate, "deny", "--reason", "not on a Friday"]).spawn().unwrap()).await;
    assert_eq!(denied.status.code(), Some(0), "{}", text(&denied.stderr));
    let approved = finish(approving).await;
    assert_eq!(approved.status.code(), Some(4), "{}", text(&approved.stderr));
    assert_eq!(text(&approved.stdout), "", "nothing to run");
    let said = text(&approved.stderr);
    assert!(said.contains("denied by a person: not on a Friday"), "{said}");
    let decision = &http.view(&gate).await["decision"];
    assert_eq!((decision["effect"].as_str(), decision["reason"].as_str()), (Some("deny"), Some("not on a Friday")));

    let session = uuid();
    let timed_out = finish(
        gatehouse(&app.base, &["approve", "deploy", "--input", "{}", "--timeout", "1s", "--session", &session])
            .spawn()
            .unwrap(),
    )
    .await;
    assert_eq!(timed_out.status.code(), Some(3), "a denial by policy is a timeout: {}", text(&timed_out.stderr));
    assert_eq!(text(&timed_out.stdout), "");
    assert!(text(&timed_out.stderr).contains("denied by policy"), "{}", text(&timed_out.stderr));
    let gates = http.get(&format!("/v1/sessions/{session}/gates?state=resolved")).await;
    let view = &gates["gates"][0];
    assert_eq!(
        (view["decision"]["effect"].as_str(), view["decision"]["source"].as_str()),
        (Some("deny"), Some("policy"))
    );
    assert_eq!(
        view["gate"]["response_policy"],
        json!({"timeout": 1_000_000_000, "on_timeout": "respond",
                                                       "response": {"action": "Deny"}})
    );
}

#[tokio::test]
async fn approve_withdraws_its_gate_on_a_stop_signal_and_refuses_what_is_not_a_call() {
    let app = TestApp::spawn().await;
    let http = Http::of(&app);
    let session = uuid();
    let approving = gatehouse(&app.base, &["approve", "Bash", "--input", "{}", "--session", &session]).spawn().unwrap();
    let gate = gate_id(&http.opened_in(&session).await);
    app.parked_on_gate(&gate, 1).await;
    let pid = approving.id().expect("running").to_string();
    assert!(Command::new("kill").args(["-TERM", &pid]).status().await.unwrap().success());
    let stopped = finish(approving).await;
    assert_eq!(stopped.status.code(), Some(143), "{}", text(&stopped.stderr));
    let view = http.view(&gate).await;
    assert_eq!((view["state"].as_str(), view["resolution"]["reason"].as_str()), (Some("closed"), Some("abandoned")));

    for input in ["[1]", "\"ls\"", "{\"command\":", "ls"] {
        let refused = finish(gatehouse(&app.base, &["approve", "Bash", "--input", input]).spawn().unwrap()).await;
        assert_eq!(refused.status.code(), Some(1), "a usage error, as every other: {input}");
        assert!(text(&refused.stderr).contains("JSON object"), "{input}: {}", text(&refused.stderr));
    }
    let missing = finish(
        gatehouse(&app.base, &["approve", "Bash", "--input", "{}", "--schema", "/nonexistent/s.json"]).spawn().unwrap(),
    )
    .await;
    assert_eq!(missing.status.code(), Some(1));
    assert!(text(&missing.stderr).contains("cannot read the schema"), "{}", text(&missing.stderr));
    // The server's field problems, one per line, `path: message`.
    let invalid =
        finish(gatehouse(&app.base, &["approve", " Bash", "--input", r#"{"x":1}"#, "--risk", "high"]).spawn().unwrap())
            .await;
    assert_eq!(invalid.status.code(), Some(1));
    let said = text(&invalid.stderr);
    assert!(said.contains("(400 invalid_body)\n  /tool_name: must not begin or end with whitespace"), "{said}");
    assert_eq!(http.get("/v1/gates?state=open").await["gates"], json!([]), "nothing was left open");

    let help = finish(gatehouse(&app.base, &["approve", "--help"]).spawn().unwrap()).await;
    let help = text(&help.stdout);
    assert!(help.contains("0 approved; 4 denied by a person") && help.contains("exits 3, not 4"), "{help}");
}

#[tokio::test]
async fn answer_decides_a_permission_gate_and_an_edit_that_breaks_the_schema_leaves_it_open() {
    let app = TestApp::spawn().await;
    let http = Http::of(&app);
    let session = uuid();
    let mut body = permission(&uuid(), &uuid(), "Bash", json!({"command": "ls"}));
    body["editable"] = json!(true);
    body["tool_input_schema"] = serde_json::from_str(SCHEMA).unwrap();
    let gate = gate_id(&http.open(&session, &body).await);

    let broken =
        finish(gatehouse(&app.base, &["answer", &gate, "approve", "--input", r#"{"command":5}"#]).spawn().unwrap())
            .await;
    assert_eq!(broken.status.code(), Some(1));
    let said = text(&broken.stderr);
    assert!(said.contains("\n  /values/tool_input/command: 5 is not of type \"string\""), "{said}");
    for (args, why) in [
        (&["approve-always"][..], "no approve-always"),
        (&["maybe"], "approve or deny"),
        (&["deny", "--input", "{}"], "--input goes with approve"),
        (&["approve", "--reason", "because"], "--reason goes with deny"),
        (&["approve", "--input", "[1]"], "JSON object"),
    ] {
        let refused =
            finish(gatehouse(&app.base, &[&["answer", gate.as_str()][..], args].concat()).spawn().unwrap()).await;
        assert_eq!(refused.status.code(), Some(1), "{args:?}");
        assert!(text(&refused.stderr).contains(why), "{args:?}: {}", text(&refused.stderr));
    }
    assert_eq!(http.view(&gate).await["state"], "open", "every refusal left the gate open");

    let denied =
        finish(gatehouse(&app.base, &["answer", &gate[..8], "deny", "--reason", "not today"]).spawn().unwrap()).await;
    assert_eq!(denied.status.code(), Some(0), "{}", text(&denied.stderr));
    let view = http.view(&gate).await;
    assert_eq!(
        (view["decision"]["effect"].as_str(), view["decision"]["reason"].as_str()),
        (Some("deny"), Some("not today"))
    );
    let late = finish(gatehouse(&app.base, &["answer", &gate, "approve"]).spawn().unwrap()).await;
    assert_eq!(late.status.code(), Some(2));
    assert!(
        text(&late.stderr).contains("already denied by a person") && text(&late.stderr).contains("\"not today\""),
        "{}",
        text(&late.stderr)
    );

    // An edit that fits is approved as the edit.
    let mut body = permission(&uuid(), &uuid(), "Bash", json!({"command": "ls"}));
    body["editable"] = json!(true);
    let edited = gate_id(&http.open(&session, &body).await);
    let approved = finish(
        gatehouse(&app.base, &["answer", &edited, "approve", "--input", r#"{"command":"ls -la"}"#]).spawn().unwrap(),
    )
    .await;
    assert_eq!(approved.status.code(), Some(0), "{}", text(&approved.stderr));
    let decision = &http.view(&edited).await["decision"];
    assert_eq!(
        (decision["tool_input"].clone(), decision["edited"].as_bool()),
        (json!({"command": "ls -la"}), Some(true))
    );

    // A question's answer may be the word "approve": the gate's kind decides.
    let question = gate_id(&http.open(&session, &ask(&uuid(), &uuid(), "Which word?")).await);
    let answered = finish(gatehouse(&app.base, &["answer", &question, "approve"]).spawn().unwrap()).await;
    assert_eq!(answered.status.code(), Some(0), "{}", text(&answered.stderr));
    assert_eq!(http.view(&question).await["answer"], "approve");
}

#[tokio::test]
async fn gates_shows_the_kind_and_the_tool_name_escaped() {
    let app = TestApp::spawn().await;
    let http = Http::of(&app);
    http.open(&uuid(), &ask(&uuid(), &uuid(), "Plain question?")).await;
    let session = uuid();
    // OSC 52 would set the clipboard, the newline would start a row of its own, U+202E turns
    // the rest of the line around.
    let tool = "Ba\u{1b}]52;c;eA==\u{7}sh\nrm -rf \u{202e}x";
    let shown = "Ba\\u{1b}]52;c;eA==\\u{7}sh\\nrm -rf \\u{202e}x";
    let mut approving = gatehouse(
        &app.base,
        &["approve", tool, "--input", r#"{"p":"\u001b[2J"}"#, "--risk", "critical", "--session", &session],
    )
    .spawn()
    .unwrap();
    let mut stderr = BufReader::new(approving.stderr.take().unwrap());
    let line = announcement(&mut stderr).await;
    assert!(line.contains(shown) && !controls_terminal(&line), "approve's stderr line: {line:?}");
    assert!(line.contains("approve") && line.contains("deny"), "it says how to decide: {line}");

    let listed = finish(gatehouse(&app.base, &["gates"]).spawn().unwrap()).await;
    assert_eq!(listed.status.code(), Some(0));
    let table = text(&listed.stdout);
    assert!(!controls_terminal(&table), "{table:?}");
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 3, "a header and one line per gate: {table}");
    assert!(lines[0].contains("KIND") && lines[0].contains("QUESTION / TOOL CALL"), "{table}");
    let asking = lines.iter().find(|l| l.contains("Plain question?")).expect("the question's row");
    assert!(asking.contains("  ask  "), "{asking}");
    let permission = lines.iter().find(|l| l.contains("permission")).expect("the permission row");
    assert!(permission.contains(&shown[..28]) && permission.ends_with("approve, deny"), "{permission}");

    let gate = gate_id(&http.opened_in(&session).await);
    let denied = finish(gatehouse(&app.base, &["answer", &gate, "deny"]).spawn().unwrap()).await;
    assert_eq!(denied.status.code(), Some(0), "{}", text(&denied.stderr));
    let approved = finish(approving).await;
    assert_eq!(approved.status.code(), Some(4));
}
