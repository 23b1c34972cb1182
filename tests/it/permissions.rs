//! Permission gates (`harness.permission`, issue 28): open with a prepared tool call, approve it as
//! it is, approve an edit checked against the input's schema, or deny it with a reason; the
//! harness's shapes for all of it; the default policy. On SQLite and on PostgreSQL alike (the
//! `TestApp` runs on whichever the suite runs on).

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::{Value, json};

use crate::helpers::{TestApp, eventually, gate_id, race_answers, uuid};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/permission/");

fn fixture(name: &str) -> Value {
    let text = std::fs::read_to_string(format!("{FIXTURES}{name}")).unwrap_or_else(|e| panic!("{name}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// A permission request for `Bash` with an editable input and its schema.
pub fn request(loop_id: &str, tool: &str) -> Value {
    json!({
        "kind": "harness.permission", "loop_id": loop_id, "tool_execution_id": tool,
        "tool_name": "Bash", "summary": "Run the migration",
        "requirements": ["write to the production database"],
        "tool_input": {"command": "./migrate --env prod", "timeout": 60},
        "tool_input_schema": schema(),
        "risk": "high", "editable": true
    })
}

fn schema() -> Value {
    json!({
        "type": "object", "required": ["command"], "additionalProperties": false,
        "properties": {
            "command": {"type": "string", "minLength": 1, "maxLength": 200, "pattern": "^\\./"},
            "timeout": {"type": "integer", "minimum": 1, "maximum": 600},
            "env": {"enum": ["staging", "prod"]},
            "flags": {"type": "array", "items": {"type": "string"}, "maxItems": 3, "uniqueItems": true},
            "dry_run": {"type": "boolean"},
            "retries": {"type": "integer", "multipleOf": 1, "exclusiveMaximum": 5}
        }
    })
}

struct Opened {
    session: String,
    loop_id: String,
    gate: String,
    view: Value,
}

async fn open(app: &TestApp, body: impl FnOnce(&str, &str) -> Value) -> Opened {
    let (session, loop_id) = (uuid(), uuid());
    let view = app.open(&session, &body(&loop_id, &uuid())).await;
    Opened { gate: gate_id(&view), session, loop_id, view }
}

impl Opened {
    fn path(&self) -> String {
        format!("/v1/sessions/{}/gates/{}", self.session, self.gate)
    }
}

/// The events of one gate, in journal order.
async fn events_of(app: &TestApp, gate: &str) -> Vec<Value> {
    let journal = app.journal().await;
    let of_gate = |e: &&Value| e["event"]["gate_id"] == gate || e["event"]["gate"]["id"] == gate;
    journal.iter().filter(of_gate).map(|e| e["event"].clone()).collect()
}

async fn only_command(app: &TestApp, opened: &Opened) -> Value {
    let inbox = app.inbox(&opened.session, &opened.loop_id).await;
    assert_eq!(inbox.len(), 1, "one command per decision: {inbox:?}");
    inbox[0]["command"].clone()
}

fn field_paths(body: &Value) -> Vec<(String, String)> {
    body["error"]["fields"]
        .as_array()
        .unwrap_or_else(|| panic!("fields in {body}"))
        .iter()
        .map(|f| (f["path"].as_str().unwrap().to_owned(), f["code"].as_str().unwrap().to_owned()))
        .collect()
}

/// Replaces the fixture's placeholders with what this gate's run minted.
fn placeholders(fixture: &Value, ids: &[(&str, &str)]) -> Value {
    let mut text = fixture.to_string();
    for (placeholder, value) in ids {
        text = text.replace(&format!("\"<{placeholder}>\""), &format!("\"{value}\""));
    }
    serde_json::from_str(&text).unwrap()
}

/// Every member of `expected` is in `actual` with the same value (recursively into objects; arrays
/// exactly), and `actual`'s other top-level members are among `additive`.
fn conforms(what: &str, actual: &Value, expected: &Value, additive: &[&str]) {
    let (Value::Object(actual_map), Value::Object(expected_map)) = (actual, expected) else {
        assert_eq!(actual, expected, "{what}");
        return;
    };
    for (key, value) in expected_map {
        let got = actual_map.get(key).unwrap_or_else(|| panic!("{what}: {key} is missing in {actual}"));
        match (key.as_str(), value) {
            ("created_at" | "event_id" | "command_id", Value::String(placeholder)) if placeholder.starts_with('<') => {
                assert!(got.is_string(), "{what}: {key}")
            }
            (_, Value::Object(_)) => conforms(&format!("{what}.{key}"), got, value, &[]),
            _ => assert_eq!(got, value, "{what}: {key}"),
        }
    }
    let extra: BTreeSet<&str> =
        actual_map.keys().map(String::as_str).filter(|k| !expected_map.contains_key(*k)).collect();
    let allowed: BTreeSet<&str> = additive.iter().copied().collect();
    assert!(extra.is_subset(&allowed), "{what}: members beyond the harness's: {:?}", extra.difference(&allowed));
}

#[tokio::test]
async fn harness_shapes() {
    let app = TestApp::spawn().await;
    let ids: Vec<(&str, String)> =
        ["session_id", "loop_id", "tool_execution_id", "turn_id", "step_id"].iter().map(|k| (*k, uuid())).collect();
    let fill = |fixture: &Value, pairs: &[(&str, String)]| {
        let borrowed: Vec<(&str, &str)> = pairs.iter().map(|(k, v)| (*k, v.as_str())).collect();
        placeholders(fixture, &borrowed)
    };
    let (session, loop_id, tool) = (ids[0].1.clone(), ids[1].1.clone(), ids[2].1.clone());
    let view = app.open(&session, &fill(&fixture("open.json"), &ids)).await;
    let gate = gate_id(&view);
    let mut with_gate = ids.clone();
    with_gate.push(("gate_id", gate.clone()));

    let events = events_of(&app, &gate).await;
    let types: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(types, ["GateOpened", "PermissionRequested"], "in the one open transaction, in this order");
    let opened = fill(&fixture("gate_opened.json"), &with_gate);
    let mut envelope = events[0].clone();
    let call = envelope["gate"].as_object_mut().unwrap().remove("tool_call");
    assert!(call.is_some_and(|c| c["tool_name"] == "Bash"), "the additive tool_call");
    conforms("GateOpened", &envelope, &opened, &[]);
    let requested = fill(&fixture("permission_requested.json"), &with_gate);
    conforms("PermissionRequested", &events[1], &requested, &["gate_id"]);
    assert_eq!(events[1]["gate_id"], gate.as_str(), "additive gate_id, as UserInputRequested has");
    // The request's members in the harness's declaration order, `scope` always written: the
    // journal's own bytes (a parsed value has lost its order).
    let raw = String::from_utf8(app.get("/v1/journal?limit=1000").await.expect(200).body).unwrap();
    let ordered = format!(
        r#""request":{{"tool_name":"Bash","summary":"git push origin main","execution_id":"{tool}","command":"git push origin main","working_directory":"/workspace/repo","expires_at_unix_milli":1784549400000,"requirements":[{{"kind":"command.execute","scope":"","match":"git push origin main","description":"run command: git push origin main","grant_class":"command.start.v1","grant_target":"git push origin main","candidates":[{{"kind":"command.execute","match":"Bash(git push:*)","description":"Bash(git push:*)","grant_class":"command.start.v1","grant_target":"git push origin main"}}]}}"#
    );
    assert!(raw.contains(&ordered), "the request in the harness's key order: {raw}");

    // Approve always: its audit lists requirements and candidates; the command names the action.
    app.post(&format!("/v1/sessions/{session}/gates/{gate}"), &json!({"action": "Approve always for this workspace"}))
        .await
        .expect(202);
    let events = events_of(&app, &gate).await;
    conforms("GateResolved", &events[2], &fill(&fixture("gate_resolved_approve_always.json"), &with_gate), &[]);
    assert_eq!(events[3]["type"], "PermissionDecided");
    assert_eq!((events[3]["effect"].as_str(), events[3]["reason"].as_str()), (Some("approve"), Some("approved")));
    let inbox = app.inbox(&session, &loop_id).await;
    conforms(
        "ApproveToolCall",
        &inbox[0]["command"],
        &fill(&fixture("approve_tool_call.json"), &with_gate),
        // gatehouse's additive members; turn and step as ProvideUserInput carries them.
        &["tool_input", "edited", "turn_id", "step_id"],
    );

    // Approve and Deny on twins of the same request.
    for (action, resolved, command) in [
        (json!({"action": "Approve"}), "gate_resolved_approve.json", "approve_tool_call.json"),
        (json!({"action": "Deny"}), "gate_resolved_deny.json", "deny_tool_call.json"),
    ] {
        let twin: Vec<(&str, String)> =
            ids.iter().map(|(k, v)| if *k == "tool_execution_id" { (*k, uuid()) } else { (*k, v.clone()) }).collect();
        let view = app.open(&session, &fill(&fixture("open.json"), &twin)).await;
        let gate = gate_id(&view);
        app.post(&format!("/v1/sessions/{session}/gates/{gate}"), &action).await.expect(202);
        let mut with_gate = twin.clone();
        with_gate.push(("gate_id", gate.clone()));
        let events = events_of(&app, &gate).await;
        conforms(resolved, &events[2], &fill(&fixture(resolved), &with_gate), &[]);
        let inbox = app.inbox(&session, &loop_id).await;
        let mine = inbox.iter().find(|e| e["command"]["gate_id"] == gate.as_str()).expect("its command");
        let mut expected = fill(&fixture(command), &with_gate);
        if action["action"] == "Approve" {
            expected["action"] = json!("Approve");
        }
        conforms(command, &mine["command"], &expected, &["tool_input", "edited", "reason", "turn_id", "step_id"]);
    }
}

#[tokio::test]
async fn a_decision_reaches_the_loop_with_the_input_it_runs_with() {
    let app = TestApp::spawn().await;
    let gate = open(&app, request).await;
    let envelope = &gate.view["gate"];
    assert_eq!(envelope["prompt"]["title"], "Approve tool call");
    assert_eq!(envelope["prompt"]["body"], "Run the migration\n\nCapabilities:\n- write to the production database");
    let controls: Vec<&str> =
        envelope["prompt"]["controls"].as_array().unwrap().iter().map(|c| c["action"].as_str().unwrap()).collect();
    assert_eq!(controls, ["Approve", "Deny"], "nothing to save, so no Approve always");
    assert_eq!(envelope["tool_call"]["risk"], "high");
    assert!(gate.view["deadline"].is_string(), "the default policy sets a deadline");

    // A plain approval runs the original input.
    app.post(&gate.path(), &json!({"action": "Approve"})).await.expect(202);
    let command = only_command(&app, &gate).await;
    assert_eq!(command["type"], "ApproveToolCall");
    assert_eq!(command["tool_input"], json!({"command": "./migrate --env prod", "timeout": 60}));
    assert!(command.get("edited").is_none(), "not edited: {command}");
    let view = app.get(&gate.path()).await.expect(200).json();
    let decision = &view["decision"];
    assert_eq!((decision["effect"].as_str(), decision["edited"].as_bool()), (Some("approve"), Some(false)));
    assert_eq!(decision["source"], "user");
    assert!(view.get("answer").is_none(), "an AskUser answer's text only");

    // A denial carries its reason to the model.
    let denied = open(&app, request).await;
    let reason = "not during business hours <script>&";
    app.post(&denied.path(), &json!({"action": "Deny", "values": {"reason": reason, "tool_input": {"x": 1}}}))
        .await
        .expect(202);
    let command = only_command(&app, &denied).await;
    assert_eq!((command["type"].as_str(), command["reason"].as_str()), (Some("DenyToolCall"), Some(reason)));
    assert!(command.get("tool_input").is_none(), "a denial runs nothing: {command}");
    let events = events_of(&app, &denied.gate).await;
    assert!(events[2].get("audit").is_none(), "a denial has no audit (harness rule)");
    assert_eq!((events[3]["effect"].as_str(), events[3]["message"].as_str()), (Some("deny"), Some(reason)));
    let waited = app.get(&format!("{}/wait?timeout=1", denied.path())).await.expect(200).json();
    assert_eq!(
        (waited["decision"]["effect"].as_str(), waited["decision"]["reason"].as_str()),
        (Some("deny"), Some(reason))
    );

    // Filtered by kind.
    app.open(&gate.session, &json!({"loop_id": gate.loop_id, "tool_execution_id": uuid(), "question": "Also?"})).await;
    let listed =
        app.get(&format!("/v1/sessions/{}/gates?kind=harness.permission", gate.session)).await.expect(200).json();
    let kinds: BTreeSet<&str> =
        listed["gates"].as_array().unwrap().iter().map(|g| g["gate"]["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, BTreeSet::from(["harness.permission"]));
    app.get("/v1/gates?kind=harness.nope").await.expect_error(400, "invalid_parameter");
}

#[tokio::test]
async fn broken_edits_leave_the_gate_open_and_a_valid_edit_arrives_as_sent() {
    let app = TestApp::spawn().await;
    let gate = open(&app, request).await;
    let broken = [
        (json!({"timeout": 60}), "/values/tool_input/command", "required"),
        (json!({"command": 5}), "/values/tool_input/command", "type"),
        (json!({"command": ""}), "/values/tool_input/command", "invalid"),
        (json!({"command": "rm -rf /"}), "/values/tool_input/command", "invalid"),
        (json!({"command": format!("./{}", "x".repeat(300))}), "/values/tool_input/command", "too_long"),
        (json!({"command": "./m", "timeout": 0}), "/values/tool_input/timeout", "out_of_range"),
        (json!({"command": "./m", "timeout": 601}), "/values/tool_input/timeout", "out_of_range"),
        (json!({"command": "./m", "timeout": 1.5}), "/values/tool_input/timeout", "type"),
        (json!({"command": "./m", "timeout": "60"}), "/values/tool_input/timeout", "type"),
        (json!({"command": "./m", "env": "dev"}), "/values/tool_input/env", "not_a_choice"),
        (json!({"command": "./m", "flags": "-v"}), "/values/tool_input/flags", "type"),
        (json!({"command": "./m", "flags": [1]}), "/values/tool_input/flags/0", "type"),
        (json!({"command": "./m", "flags": ["a", "a"]}), "/values/tool_input/flags", "duplicate"),
        (json!({"command": "./m", "flags": ["a", "b", "c", "d"]}), "/values/tool_input/flags", "too_long"),
        (json!({"command": "./m", "dry_run": "yes"}), "/values/tool_input/dry_run", "type"),
        (json!({"command": "./m", "retries": 5}), "/values/tool_input/retries", "out_of_range"),
        (json!({"command": "./m", "extra": true}), "/values/tool_input", "unknown_key"),
        (json!({"command": null}), "/values/tool_input/command", "type"),
        (json!([]), "/values/tool_input", "type"),
        (json!("./migrate"), "/values/tool_input", "type"),
        (json!({"command": "./m", "timeout": -1, "env": 3}), "/values/tool_input/timeout", "out_of_range"),
        (json!({"command": "./m", "retries": 2.5}), "/values/tool_input/retries", "type"),
    ];
    assert!(broken.len() >= 20);
    for (input, path, code) in &broken {
        let body = app
            .post(&gate.path(), &json!({"action": "Approve", "values": {"tool_input": input}}))
            .await
            .expect_error(400, "gate_values_invalid");
        let fields = field_paths(&body);
        assert!(fields.contains(&(path.to_string(), code.to_string())), "{input}: {fields:?}");
    }
    assert_eq!(app.get(&gate.path()).await.expect(200).json()["state"], "open", "every refusal left it open");
    assert!(app.inbox(&gate.session, &gate.loop_id).await.is_empty());
    assert_eq!(events_of(&app, &gate.gate).await.len(), 2, "refused edits journal nothing");

    let edit = json!({"command": "./migrate --env staging", "timeout": 30, "flags": ["--dry"], "env": "staging"});
    let keyed = async |body: Value| app.post_with(&gate.path(), &[("idempotency-key", "edit-1")], &body).await;
    let approve_edit = json!({"action": "Approve", "values": {"tool_input": edit}});
    let accepted = keyed(approve_edit.clone()).await.expect(202).json();
    let command = only_command(&app, &gate).await;
    assert_eq!((command["tool_input"].clone(), command["edited"].clone()), (edit.clone(), json!(true)));
    let events = events_of(&app, &gate.gate).await;
    assert_eq!((events[3]["edited"].clone(), events[3]["tool_input"].clone()), (json!(true), edit.clone()));
    // The same key and edit is the same 202; another edit under it is a conflict; anyone else 409.
    let replay = keyed(approve_edit).await.expect(202).json();
    assert_eq!(replay, accepted);
    keyed(json!({"action": "Approve"})).await.expect_error(409, "idempotency_conflict");
    let lost = app.post(&gate.path(), &json!({"action": "Deny"})).await.expect_error(409, "gate_not_ready");
    assert_eq!(lost["error"]["resolution"]["action"], "Approve", "the loser learns who won");
}

#[tokio::test]
async fn answers_outside_the_controls_or_the_gate_are_refused() {
    let app = TestApp::spawn().await;
    let fixed = open(&app, |loop_id, tool| {
        json!({"kind": "harness.permission", "loop_id": loop_id, "tool_execution_id": tool, "tool_name": "Read",
               "tool_input": {"path": "/etc/hosts"}})
    })
    .await;
    for action in ["approve", "Approve always for this workspace", "answer", "", "Allow"] {
        app.post(&fixed.path(), &json!({"action": action})).await.expect_error(400, "gate_action_invalid");
    }
    let body = app
        .post(&fixed.path(), &json!({"action": "Approve", "values": {"tool_input": {"path": "/etc/shadow"}}}))
        .await
        .expect_error(400, "gate_values_invalid");
    assert_eq!(field_paths(&body), [("/values/tool_input".to_owned(), "unknown_key".to_owned())], "not editable");
    let body = app
        .post(&fixed.path(), &json!({"action": "Deny", "values": {"reason": 42}}))
        .await
        .expect_error(400, "gate_values_invalid");
    assert_eq!(field_paths(&body), [("/values/reason".to_owned(), "type".to_owned())]);
    assert_eq!(events_of(&app, &fixed.gate).await.len(), 2, "refusals change nothing");
    // Values that carry no authority are ignored, as in the harness.
    app.post(&fixed.path(), &json!({"action": "Approve", "values": {"scope": "session", "accepted_grants": ["*"]}}))
        .await
        .expect(202);
    let command = only_command(&app, &fixed).await;
    assert_eq!(command["tool_input"], json!({"path": "/etc/hosts"}));
    assert!(!command.to_string().contains("accepted_grants"), "{command}");
}

#[tokio::test]
async fn bad_permission_requests_get_field_errors_and_write_nothing() {
    let app = TestApp::spawn().await;
    let session = uuid();
    let path = format!("/v1/sessions/{session}/gates");
    let base = |extra: Value| {
        let mut body =
            json!({"kind": "harness.permission", "loop_id": uuid(), "tool_execution_id": uuid(), "tool_name": "Bash"});
        body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        body
    };
    let cases = [
        (json!({"tool_name": null}), "/tool_name", "empty"),
        (json!({"tool_name": " Bash"}), "/tool_name", "blank"),
        (json!({"tool_name": 7}), "/tool_name", "type"),
        (json!({"tool_input_schema": {"type": "nope"}}), "/tool_input_schema", "invalid"),
        (json!({"tool_input_schema": "object"}), "/tool_input_schema", "type"),
        (json!({"tool_input_schema": {"$ref": "https://example.com/s.json"}}), "/tool_input_schema", "invalid"),
        (
            json!({"tool_input": {"n": "x"}, "tool_input_schema": {"properties": {"n": {"type": "integer"}}}}),
            "/tool_input/n",
            "type",
        ),
        (json!({"tool_input": [1]}), "/tool_input", "type"),
        (json!({"tool_input": {"big": "x".repeat(70 * 1024)}}), "/tool_input", "too_long"),
        (json!({"tool_input_schema": {"description": "x".repeat(70 * 1024)}}), "/tool_input_schema", "too_long"),
        (json!({"risk": "extreme"}), "/risk", "not_a_choice"),
        (json!({"editable": true}), "/tool_input", "required"),
        (json!({"editable": "yes"}), "/editable", "type"),
        (json!({"requirements": "all"}), "/requirements", "type"),
        (json!({"requirements": ["a", "a"]}), "/requirements/1", "duplicate"),
        (json!({"requirements": [{"kind": "x"}]}), "/requirements/0", "type"),
        (json!({"requirements": (0..33).map(|i| i.to_string()).collect::<Vec<_>>()}), "/requirements", "too_long"),
        (
            json!({"requirements": [{"kind": "network", "match": "m", "description": "d", "grant_class": "c"}]}),
            "/requirements/0/grant_class",
            "required",
        ),
        (json!({"execution_id": "another"}), "/execution_id", "invalid"),
        (json!({"question": "Really?"}), "/question", "unknown_key"),
        (json!({"summary": "x".repeat(5000)}), "/summary", "too_long"),
        (
            json!({"response_policy": {"timeout": 1, "on_timeout": "respond", "response": {"action": "answer"}}}),
            "/response_policy/response/action",
            "not_a_choice",
        ),
    ];
    for (extra, at, code) in cases {
        let body = base(extra.clone());
        let refused = app.post(&path, &body).await.expect(400).json();
        let fields = field_paths(&refused);
        assert!(fields.contains(&(at.to_owned(), code.to_owned())), "{extra}: {refused}");
    }
    assert!(app.journal().await.is_empty(), "refused opens write nothing");
    // An AskUser member on a permission gate and a permission member on an AskUser gate.
    let ask = json!({"loop_id": uuid(), "tool_execution_id": uuid(), "question": "Q", "tool_input": {}});
    let refused = app.post(&path, &ask).await.expect_error(400, "invalid_body");
    assert_eq!(field_paths(&refused), [("/tool_input".to_owned(), "unknown_key".to_owned())]);
}

#[tokio::test]
async fn a_reask_finds_its_gate_and_the_cap_counts_permission_gates() {
    let app = TestApp::spawn_with(|args| args.http.max_open_gates = 2).await;
    let (session, loop_id, tool) = (uuid(), uuid(), uuid());
    let path = format!("/v1/sessions/{session}/gates");
    let first = app.post(&path, &request(&loop_id, &tool)).await.expect(201).json();
    let again = app.post(&path, &request(&loop_id, &tool)).await.expect(200).json();
    assert_eq!(gate_id(&first), gate_id(&again));
    let mut changed = request(&loop_id, &tool);
    changed["tool_input"]["timeout"] = json!(61);
    app.post(&path, &changed).await.expect_error(409, "gate_conflict");
    // An AskUser question for the same tool execution is another question, not a re-ask.
    app.post(&path, &json!({"loop_id": loop_id, "tool_execution_id": tool, "question": "Run it?"}))
        .await
        .expect_error(409, "gate_conflict");
    app.post(&path, &request(&loop_id, &uuid())).await.expect(201);
    app.post(&path, &request(&loop_id, &uuid())).await.expect_error(503, "gate_capacity");
    app.post(&path, &request(&loop_id, &tool)).await.expect(200);
}

#[tokio::test]
async fn the_default_policy_denies_at_its_deadline() {
    let app = TestApp::spawn_with(|args| args.http.permission_timeout = Duration::from_millis(300)).await;
    let gate = open(&app, request).await;
    let policy = &gate.view["gate"]["response_policy"];
    assert_eq!(*policy, json!({"timeout": 300_000_000, "on_timeout": "respond", "response": {"action": "Deny"}}));
    eventually("the policy denies the call", async || {
        app.get(&gate.path()).await.expect(200).json()["state"] == "resolved"
    })
    .await;
    let view = app.get(&gate.path()).await.expect(200).json();
    let resolution = &view["resolution"];
    assert_eq!((resolution["action"].as_str(), resolution["reason"].as_str()), (Some("Deny"), Some("policy_response")));
    assert_eq!(resolution["source"], json!({"kind": "policy", "reason": "timeout"}));
    assert_eq!(
        (view["decision"]["effect"].as_str(), view["decision"]["source"].as_str()),
        (Some("deny"), Some("policy"))
    );
    let command = only_command(&app, &gate).await;
    assert_eq!(command["type"], "DenyToolCall");
    assert!(command.get("agency").is_none(), "a policy is no person: {command}");
    let events = events_of(&app, &gate.gate).await;
    assert_eq!(
        (events[3]["type"].as_str(), events[3]["reason"].as_str()),
        (Some("PermissionDecided"), Some("timed_out"))
    );

    // A policy of the request's own wins over the default; a `wait` one waits.
    let waits = open(&app, |loop_id, tool| {
        let mut body = request(loop_id, tool);
        body["response_policy"] = json!({"on_timeout": "wait"});
        body
    })
    .await;
    assert!(waits.view["gate"].get("response_policy").is_none(), "{}", waits.view);
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(app.get(&waits.path()).await.expect(200).json()["state"], "open");
    let approves = open(&app, |loop_id, tool| {
        let mut body = request(loop_id, tool);
        body["response_policy"] =
            json!({"timeout": 100_000_000, "on_timeout": "respond", "response": {"action": "Approve"}});
        body
    })
    .await;
    eventually("the policy approves", async || {
        app.get(&approves.path()).await.expect(200).json()["state"] == "resolved"
    })
    .await;
    let command = only_command(&app, &approves).await;
    assert_eq!((command["type"].as_str(), command["action"].as_str()), (Some("ApproveToolCall"), Some("Approve")));
}

/// Racer `i`'s decision on a `request` gate: an edit, a denial or a plain approval, each telling
/// whose it was.
pub fn racer(i: usize) -> Value {
    match i % 3 {
        0 => json!({"action": "Approve", "values": {"tool_input": {"command": format!("./racer {i}")}}}),
        1 => json!({"action": "Deny", "values": {"reason": format!("racer {i}")}}),
        _ => json!({"action": "Approve", "values": {"note": format!("racer {i}")}}),
    }
}

/// The winner's decision is the gate's, and its command carries exactly it.
pub fn check_winner(winner: usize, view: &Value, command: &Value) {
    let decision = &view["decision"];
    match winner % 3 {
        0 => {
            let input = json!({"command": format!("./racer {winner}")});
            assert_eq!((&decision["tool_input"], &decision["edited"]), (&input, &json!(true)), "{view}");
            assert_eq!((command["type"].as_str(), &command["tool_input"]), (Some("ApproveToolCall"), &input));
        }
        1 => {
            let reason = format!("racer {winner}");
            assert_eq!(decision["reason"], reason.as_str(), "{view}");
            assert_eq!(
                (command["type"].as_str(), command["reason"].as_str()),
                (Some("DenyToolCall"), Some(reason.as_str()))
            );
        }
        _ => {
            assert_eq!((decision["effect"].as_str(), decision["edited"].as_bool()), (Some("approve"), Some(false)));
            assert_eq!((command["type"].as_str(), command.get("edited")), (Some("ApproveToolCall"), None));
        }
    }
}

#[tokio::test]
async fn a_thousand_decisions_on_one_gate_have_one_winner() {
    let app = TestApp::spawn_with(|args| args.http.max_unauthenticated_per_address = 4096).await;
    let gate = open(&app, request).await;
    let winner = race_answers(std::slice::from_ref(&app.client), &gate.path(), 1000, racer).await;
    let events = events_of(&app, &gate.gate).await;
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["GateOpened", "PermissionRequested", "GateResolved", "PermissionDecided"]);
    let command = only_command(&app, &gate).await;
    check_winner(winner, &app.get(&gate.path()).await.expect(200).json(), &command);
}
