//! The client side of forms (`harness.form`) and open-URL gates (`harness.open_url`):
//! `gatehouse form` and its exit codes, `gatehouse answer GATE --values JSON | --decline |
//! --cancel | --done`, `gatehouse gates` rows, and the MCP tool `ask_form` over stdio. The real
//! binary against a real server.

use std::process::Stdio;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{ChildStdin, ChildStdout, Command};

use crate::cli::{announcement, finish, gatehouse, opened_in, text};
use crate::helpers::{TestApp, ask, bounded, eventually, gate_id, temp_db, uuid};

/// A host-owned form of two fields: a required select and an integer.
fn deploy_form() -> Value {
    json!({"kind": "harness.form", "title": "Deploy", "body": "Where to?", "schema": {"fields": [
        {"name": "env", "kind": "select", "required": true,
         "options": [{"value": "prod", "label": "Production"}, {"value": "staging", "label": "Staging"}]},
        {"name": "replicas", "kind": "integer", "minimum": 1, "maximum": 5}]}})
}

/// Answers a gate over HTTP with `body`, as a person's client does.
async fn reply(app: &TestApp, session: &str, gate: &str, body: Value) {
    app.post(&format!("/v1/sessions/{session}/gates/{gate}"), &body).await.expect(202);
}

#[tokio::test]
async fn form_prints_the_values_a_person_submits() {
    let app = TestApp::spawn().await;
    let session = uuid();
    let mut filling = gatehouse(
        &app.base,
        &[
            "form",
            "--title",
            "Deploy",
            "--body",
            "Where to deploy?",
            "--field",
            "env!:select:prod,staging",
            "--field",
            "ticket:text",
            "--field",
            "ok:confirm",
            "--session",
            &session,
        ],
    )
    .spawn()
    .unwrap();
    let mut stderr = BufReader::new(filling.stderr.take().unwrap());
    let line = announcement(&mut stderr).await;
    let view = opened_in(&app, &session).await;
    let gate = gate_id(&view);
    assert!(line.contains(&format!("gate {gate} ")) && line.contains("\"Deploy\""), "{line}");
    assert!(
        line.contains("(fields: env, ticket, ok)") && line.contains("--values JSON | --decline | --cancel"),
        "{line}"
    );

    let envelope = &view["gate"];
    assert_eq!((envelope["kind"].as_str(), envelope["resolver"].as_str()), (Some("harness.form"), Some("session")));
    assert!(view.get("loop_id").is_none_or(Value::is_null), "host-owned: no loop: {view}");
    let prompt = &envelope["prompt"];
    assert_eq!((prompt["title"].as_str(), prompt["body"].as_str()), (Some("Deploy"), Some("Where to deploy?")));
    let fields = prompt["schema"]["fields"].as_array().unwrap();
    let shape: Vec<(&str, &str, bool)> = fields
        .iter()
        .map(|f| (f["name"].as_str().unwrap(), f["kind"].as_str().unwrap(), f["required"] == true))
        .collect();
    assert_eq!(shape, [("env", "select", true), ("ticket", "text", false), ("ok", "confirm", false)]);
    let options: Vec<&str> =
        fields[0]["options"].as_array().unwrap().iter().map(|o| o["value"].as_str().unwrap()).collect();
    assert_eq!(options, ["prod", "staging"]);

    app.parked_on_gate(&gate, 1).await;
    let values = json!({"env": "prod", "ticket": "OPS-42", "ok": true});
    reply(&app, &session, &gate, json!({"action": "accept", "values": values})).await;
    let filled = finish(filling).await;
    assert_eq!(filled.status.code(), Some(0), "{}", text(&filled.stderr));
    let stdout = text(&filled.stdout);
    assert_eq!(stdout.lines().count(), 1, "one line: {stdout:?}");
    assert_eq!(serde_json::from_str::<Value>(&stdout).unwrap(), values, "the values alone");
    assert!(!stdout.contains(": "), "compact JSON: {stdout}");
}

#[tokio::test]
async fn form_exits_2_when_declined_or_cancelled_and_3_when_nobody_answers_in_time() {
    let app = TestApp::spawn().await;
    for (how, said) in [("--decline", "declined by a person"), ("--cancel", "cancelled by a person")] {
        let session = uuid();
        let filling =
            gatehouse(&app.base, &["form", "--body", "Which?", "--field", "what:text", "--session", &session])
                .spawn()
                .unwrap();
        let gate = gate_id(&opened_in(&app, &session).await);
        app.parked_on_gate(&gate, 1).await;
        let answered = finish(gatehouse(&app.base, &["answer", &gate[..8], how]).spawn().unwrap()).await;
        assert_eq!(answered.status.code(), Some(0), "{how}: {}", text(&answered.stderr));
        let filled = finish(filling).await;
        assert_eq!(filled.status.code(), Some(2), "{how}: {}", text(&filled.stderr));
        assert_eq!(text(&filled.stdout), "", "{how}: no values");
        assert!(text(&filled.stderr).contains(said), "{how}: {}", text(&filled.stderr));
    }

    let session = uuid();
    let timed_out = finish(
        gatehouse(
            &app.base,
            &["form", "--body", "Anyone?", "--field", "x:text", "--timeout", "1s", "--session", &session],
        )
        .spawn()
        .unwrap(),
    )
    .await;
    assert_eq!(timed_out.status.code(), Some(3), "{}", text(&timed_out.stderr));
    assert_eq!(text(&timed_out.stdout), "");
    assert!(text(&timed_out.stderr).contains("no answer in time"), "{}", text(&timed_out.stderr));
    let gates = app.get(&format!("/v1/sessions/{session}/gates?state=resolved")).await.expect(200).json();
    let view = &gates["gates"][0];
    assert_eq!(
        (view["decision"]["action"].as_str(), view["decision"]["source"].as_str()),
        (Some("cancel"), Some("policy")),
        "{view}"
    );
    assert_eq!(
        view["gate"]["response_policy"],
        json!({"timeout": 1_000_000_000, "on_timeout": "respond", "response": {"action": "cancel"}})
    );
}

#[tokio::test]
async fn form_withdraws_its_gate_on_a_stop_signal() {
    let app = TestApp::spawn().await;
    let session = uuid();
    let filling = gatehouse(&app.base, &["form", "--body", "Stop me", "--field", "x:text", "--session", &session])
        .spawn()
        .unwrap();
    let gate = gate_id(&opened_in(&app, &session).await);
    app.parked_on_gate(&gate, 1).await;
    let pid = filling.id().expect("running").to_string();
    assert!(Command::new("kill").args(["-TERM", &pid]).status().await.unwrap().success());
    let stopped = finish(filling).await;
    assert_eq!(stopped.status.code(), Some(143), "{}", text(&stopped.stderr));
    assert!(text(&stopped.stderr).contains("withdrawn"), "{}", text(&stopped.stderr));
    let view = app.view(&session, &gate).await;
    assert_eq!((view["state"].as_str(), view["resolution"]["reason"].as_str()), (Some("closed"), Some("abandoned")));
}

#[tokio::test]
async fn form_reads_a_json_schema_or_fields_from_a_file_and_refuses_what_is_no_form() {
    let app = TestApp::spawn().await;
    let (dir, _) = temp_db();
    // Out of alphabetical order: the form keeps the file's order.
    let json_schema = dir.path().join("deploy.schema.json");
    std::fs::write(
        &json_schema,
        r#"{"type": "object", "required": ["zone"],
            "properties": {"zone": {"type": "string", "enum": ["eu", "us"], "title": "Zone"},
                           "count": {"type": "integer", "minimum": 1},
                           "approved": {"type": "boolean"}}}"#,
    )
    .unwrap();
    let fields = dir.path().join("fields.json");
    std::fs::write(&fields, r#"{"fields": [{"name": "when", "kind": "date", "label": "When"}]}"#).unwrap();

    for (file, names, values) in [
        (&json_schema, vec!["zone", "count", "approved"], json!({"zone": "eu", "count": 2})),
        (&fields, vec!["when"], json!({"when": "2026-12-03"})),
    ] {
        let session = uuid();
        let path = file.display().to_string();
        let filling =
            gatehouse(&app.base, &["form", "--body", "From a file", "--schema", &path, "--session", &session])
                .spawn()
                .unwrap();
        let view = opened_in(&app, &session).await;
        let gate = gate_id(&view);
        let shown: Vec<&str> = view["gate"]["prompt"]["schema"]["fields"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["name"].as_str().unwrap())
            .collect();
        assert_eq!(shown, names, "{path}");
        app.parked_on_gate(&gate, 1).await;
        reply(&app, &session, &gate, json!({"action": "accept", "values": values})).await;
        let filled = finish(filling).await;
        assert_eq!(filled.status.code(), Some(0), "{path}: {}", text(&filled.stderr));
        assert_eq!(serde_json::from_slice::<Value>(&filled.stdout).unwrap(), values, "{path}");
    }

    // The server refuses a constraint it would not enforce, naming where it is.
    let unsupported = dir.path().join("pattern.schema.json");
    std::fs::write(&unsupported, r#"{"type": "object", "properties": {"code": {"type": "string", "pattern": "^A"}}}"#)
        .unwrap();
    let path = unsupported.display().to_string();
    let refused = finish(gatehouse(&app.base, &["form", "--body", "x", "--schema", &path]).spawn().unwrap()).await;
    assert_eq!(refused.status.code(), Some(1));
    let said = text(&refused.stderr);
    assert!(said.contains("\n  /json_schema/") && said.contains("pattern"), "{said}");

    for (args, why) in [
        (&["form", "--body", "x"][..], "--field"),
        (&["form", "--field", "x:text"], "--body"),
        (&["form", "--body", "x", "--field", "x:string"], "the kinds are"),
        (&["form", "--body", "x", "--field", "env:select"], "needs its options"),
        (&["form", "--body", "x", "--field", "a:text", "--field", "a!:confirm"], "two --field are named a"),
        (&["form", "--body", "x", "--schema", "/nonexistent/form.json"], "cannot read the schema"),
        (&["form", "--body", "x", "--field", "a:text", "--schema", &path], "cannot be used with"),
    ] {
        let out = finish(gatehouse(&app.base, args).spawn().unwrap()).await;
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", text(&out.stderr));
        assert!(text(&out.stderr).contains(why), "{args:?}: {}", text(&out.stderr));
    }
    assert_eq!(app.get("/v1/gates?state=open").await.expect(200).json()["gates"], json!([]), "nothing left open");

    let help = finish(gatehouse(&app.base, &["form", "--help"]).spawn().unwrap()).await;
    let help = text(&help.stdout);
    assert!(help.contains("NAME[!]:KIND[:OPTIONS]") && help.contains("3 nobody answered in time"), "{help}");
    assert!(help.contains("GATEHOUSE_TOKEN"), "{help}");
}

#[tokio::test]
async fn answer_values_that_break_the_form_print_each_field_and_leave_it_open() {
    let app = TestApp::spawn().await;
    let session = uuid();
    let gate = gate_id(&app.open(&session, &deploy_form()).await);

    let broken =
        finish(gatehouse(&app.base, &["answer", &gate, "--values", r#"{"env":"dev","replicas":9}"#]).spawn().unwrap())
            .await;
    assert_eq!(broken.status.code(), Some(1));
    let said = text(&broken.stderr);
    assert!(said.contains("gate_values_invalid"), "{said}");
    assert!(said.contains("\n  /values/env: ") && said.contains("\n  /values/replicas: "), "{said}");
    for (args, why) in [
        (&["prod"][..], "is a form: answer it with --values JSON, an object of its fields (env, replicas)"),
        (&["--done"], "is a form"),
        (&["--values", "[1]"], "JSON object"),
        (&["--values", "{}", "--decline"], "cannot be used with"),
        (&["--decline", "--reason", "no"], "cannot be used with"),
    ] {
        let refused =
            finish(gatehouse(&app.base, &[&["answer", gate.as_str()][..], args].concat()).spawn().unwrap()).await;
        assert_eq!(refused.status.code(), Some(1), "{args:?}");
        assert!(text(&refused.stderr).contains(why), "{args:?}: {}", text(&refused.stderr));
    }
    assert_eq!(app.view(&session, &gate).await["state"], "open", "every refusal left the form open");

    let accepted = finish(
        gatehouse(&app.base, &["answer", &gate[..8], "--values", r#"{"env":"prod","replicas":3}"#]).spawn().unwrap(),
    )
    .await;
    assert_eq!(accepted.status.code(), Some(0), "{}", text(&accepted.stderr));
    let decision = &app.view(&session, &gate).await["decision"];
    assert_eq!(
        (decision["action"].as_str(), &decision["values"]),
        (Some("accept"), &json!({"env": "prod", "replicas": 3}))
    );
    let late = finish(gatehouse(&app.base, &["answer", &gate, "--cancel"]).spawn().unwrap()).await;
    assert_eq!(late.status.code(), Some(2));
    assert!(text(&late.stderr).contains("already accepted by a person"), "{}", text(&late.stderr));

    // A question's gate takes no form flags.
    let question = gate_id(&app.open(&session, &ask(&uuid(), &uuid(), "Which?")).await);
    let refused = finish(gatehouse(&app.base, &["answer", &question, "--decline"]).spawn().unwrap()).await;
    assert_eq!(refused.status.code(), Some(1));
    assert!(text(&refused.stderr).contains("--decline is for forms and open-URL gates"), "{}", text(&refused.stderr));
}

#[tokio::test]
async fn open_url_gates_are_answered_with_done_and_listed_by_their_site_only() {
    let app = TestApp::spawn().await;
    let session = uuid();
    let url = "https://github.com/login/device?code=SECRET-1234";
    let open_url = |body: &str| json!({"kind": "harness.open_url", "title": "Authorize", "body": body, "url": url});
    let done = gate_id(&app.open(&session, &open_url("Sign in, then say so")).await);
    let declined = gate_id(&app.open(&session, &open_url("Or decline")).await);
    app.open(&session, &deploy_form()).await;

    let listed = finish(gatehouse(&app.base, &["gates"]).spawn().unwrap()).await;
    assert_eq!(listed.status.code(), Some(0));
    let table = text(&listed.stdout);
    assert!(!table.contains("SECRET"), "the URL is a secret: {table}");
    let row = table.lines().find(|l| l.contains(&done[..8])).expect("the open-URL row");
    assert!(
        row.contains("  open_url    https://github.com: Sign in") && row.ends_with("--done, --decline, --cancel"),
        "{row}"
    );
    let row = table.lines().find(|l| l.contains("  form  ")).expect("the form row");
    assert!(row.contains("Where to?") && row.ends_with("fields: env, replicas"), "{row}");

    for (gate, args, action) in [(&done, &["--done"][..], "accept"), (&declined, &["--decline"], "decline")] {
        let refused = finish(gatehouse(&app.base, &["answer", gate, "--values", r#"{"a":1}"#]).spawn().unwrap()).await;
        assert_eq!(refused.status.code(), Some(1));
        assert!(text(&refused.stderr).contains("--done once it is done"), "{}", text(&refused.stderr));
        let answered =
            finish(gatehouse(&app.base, &[&["answer", gate.as_str()][..], args].concat()).spawn().unwrap()).await;
        assert_eq!(answered.status.code(), Some(0), "{args:?}: {}", text(&answered.stderr));
        assert_eq!(app.view(&session, gate).await["decision"]["action"], action);
    }
}

/// `gatehouse mcp` on pipes, spoken to in JSON-RPC lines as an MCP client would.
struct Mcp {
    stdin: ChildStdin,
    stdout: Lines<BufReader<ChildStdout>>,
    _child: tokio::process::Child,
}

impl Mcp {
    async fn start(base: &str, session: &str) -> Self {
        let mut child = gatehouse(base, &["mcp", "--session", session]).stdin(Stdio::piped()).spawn().unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut mcp = Self { stdin, stdout, _child: child };
        let params = json!({"protocolVersion": "2025-06-18", "capabilities": {},
                            "clientInfo": {"name": "gatehouse-it", "version": "1"}});
        let hello = mcp.call(0, "initialize", params).await;
        assert_eq!(hello["serverInfo"]["name"], "gatehouse", "{hello}");
        mcp.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).await;
        mcp
    }

    async fn send(&mut self, message: Value) {
        let line = format!("{message}\n");
        self.stdin.write_all(line.as_bytes()).await.unwrap();
        self.stdin.flush().await.unwrap();
    }

    /// Sends request `id` and returns its result (notifications on the way are skipped).
    async fn call(&mut self, id: u64, method: &str, params: Value) -> Value {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})).await;
        self.result(id).await
    }

    async fn result(&mut self, id: u64) -> Value {
        bounded("the MCP server answers", async {
            loop {
                let line = self.stdout.next_line().await.unwrap().expect("the MCP server's stdout ended");
                let message: Value = serde_json::from_str(&line).expect("one JSON-RPC message per line");
                if message["id"] == id {
                    assert!(message.get("error").is_none(), "{message}");
                    return message["result"].clone();
                }
            }
        })
        .await
    }
}

#[tokio::test]
async fn mcp_ask_form_returns_the_persons_values_as_structured_content() {
    let app = TestApp::spawn().await;
    let session = uuid();
    let mut mcp = Mcp::start(&app.base, &session).await;
    let tools = mcp.call(1, "tools/list", json!({})).await;
    let tool = tools["tools"].as_array().unwrap().iter().find(|t| t["name"] == "ask_form").expect("ask_form listed");
    let inputs = tool["inputSchema"]["properties"].as_object().unwrap();
    assert!(["message", "fields", "json_schema", "title", "timeout_seconds"].iter().all(|k| inputs.contains_key(*k)));
    let outputs = tool["outputSchema"]["properties"].as_object().unwrap();
    assert!(["action", "values", "principal", "timed_out"].iter().all(|k| outputs.contains_key(*k)), "{tool}");

    let args = json!({"title": "Deploy", "message": "Where should this go?", "fields": [
        {"name": "env", "kind": "select", "required": true, "options": [{"value": "prod"}, {"value": "staging"}]},
        {"name": "note", "kind": "text"}]});
    mcp.send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                    "params": {"name": "ask_form", "arguments": args}}))
        .await;
    let view = opened_in(&app, &session).await;
    let gate = gate_id(&view);
    assert_eq!(
        (view["gate"]["kind"].as_str(), view["gate"]["resolver"].as_str()),
        (Some("harness.form"), Some("loop"))
    );
    assert_eq!(view["gate"]["prompt"]["body"], "Where should this go?");
    let loop_id = view["loop_id"].as_str().expect("the MCP server's loop owns the form").to_owned();
    app.parked_on_gate(&gate, 1).await;
    reply(&app, &session, &gate, json!({"action": "accept", "values": {"env": "staging"}})).await;
    let result = mcp.result(2).await;
    assert_ne!(result["isError"], true, "{result}");
    assert_eq!(
        result["structuredContent"],
        json!({"action": "accept", "values": {"env": "staging"}, "principal": null, "timed_out": false})
    );
    let commands = app.inbox_all(&session, &loop_id).await;
    assert_eq!(commands[0]["command"]["type"], "ProvideFormInput", "{commands:?}");
    assert!(commands[0]["acked_at"].is_string(), "the tool took the values: {commands:?}");

    // A decline is a reply, not a tool error; a form the server refuses is one, naming the field.
    let args =
        json!({"message": "Again?", "json_schema": {"type": "object", "properties": {"ok": {"type": "boolean"}}}});
    mcp.send(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                    "params": {"name": "ask_form", "arguments": args}}))
        .await;
    eventually("the second form opens", async || {
        let open = app.get(&format!("/v1/sessions/{session}/gates?state=open")).await.expect(200).json();
        open["gates"].as_array().is_some_and(|g| g.len() == 1)
    })
    .await;
    let open = app.get(&format!("/v1/sessions/{session}/gates?state=open")).await.expect(200).json();
    let second = gate_id(&open["gates"][0]);
    reply(&app, &session, &second, json!({"action": "decline"})).await;
    let declined = mcp.result(3).await;
    assert_eq!(
        declined["structuredContent"],
        json!({"action": "decline", "values": null, "principal": null, "timed_out": false})
    );
    let bad = json!({"message": "Bad", "fields": [{"name": "env", "kind": "select"}]});
    let refused = mcp.call(4, "tools/call", json!({"name": "ask_form", "arguments": bad})).await;
    assert_eq!(refused["isError"], true, "{refused}");
    let said = refused["content"][0]["text"].as_str().unwrap();
    assert!(said.contains("/schema/fields/0"), "{said}");
}
