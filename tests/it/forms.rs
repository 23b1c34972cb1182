//! Form and open-URL gates (`harness.form`, `harness.open_url`, issue 29): typed fields given as
//! the harness's list or as JSON Schema, values checked at their pointers before the claim,
//! host-owned gates (no loop, the host waits) and a loop's form (its inbox gets
//! `ProvideFormInput`), defaults at the deadline, and the open-URL gate's URL kept out of every
//! record but the sealed column. On SQLite and on PostgreSQL alike.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use crate::helpers::{EventStream, ServerProcess, TestApp, eventually, gate_id, race_answers, temp_db, uuid};

/// A deploy form of every harness kind and more: a select, free text, a confirm, a date, a
/// multi-select, a group and a list of rows.
fn deploy_form() -> Value {
    json!({
        "kind": "harness.form", "title": "Deploy details", "body": "The deploy server needs a target.",
        "schema": {"fields": [
            {"name": "environment", "label": "Environment", "kind": "select", "required": true,
             "options": [{"value": "prod", "label": "Production"}, {"value": "staging", "label": "Staging"}]},
            {"name": "ticket", "label": "Change ticket", "kind": "text", "max_length": 20},
            {"name": "confirm", "label": "I understand this restarts the service", "kind": "confirm", "required": true},
            {"name": "window", "kind": "date"},
            {"name": "regions", "kind": "multi_select", "max_items": 2,
             "options": [{"value": "eu"}, {"value": "us"}, {"value": "ap"}]},
            {"name": "owner", "kind": "group", "fields": [
                {"name": "name", "kind": "text", "required": true},
                {"name": "email", "kind": "email"}]},
            {"name": "steps", "kind": "list", "min_items": 1, "fields": [
                {"name": "host", "kind": "text", "required": true},
                {"name": "replicas", "kind": "integer", "minimum": 1, "maximum": 9}]}
        ]}
    })
}

fn good_values() -> Value {
    json!({"environment": "staging", "ticket": "OPS-142", "confirm": false, "window": "2026-12-24",
           "regions": ["eu", "us"], "owner": {"name": "Ada", "email": "ada@example.test"},
           "steps": [{"host": "a1", "replicas": 2}, {"host": "a2"}]})
}

fn paths(error: &Value) -> Vec<(String, String)> {
    error["error"]["fields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["path"].as_str().unwrap().to_owned(), f["code"].as_str().unwrap().to_owned()))
        .collect()
}

#[tokio::test]
async fn a_host_owned_form_takes_typed_values_checked_at_their_pointers() {
    let app = TestApp::spawn().await;
    let session = uuid();
    let view = app.open(&session, &deploy_form()).await;
    let gate = gate_id(&view);
    assert_eq!(view.get("loop_id"), None, "a host-owned gate names no loop");
    assert_eq!((&view["gate"]["resolver"], &view["gate"]["subject"]), (&json!("session"), &json!({})));
    let controls: Vec<&str> =
        view["gate"]["prompt"]["controls"].as_array().unwrap().iter().map(|c| c["action"].as_str().unwrap()).collect();
    assert_eq!(controls, ["accept", "decline", "cancel"]);
    let owner = &view["gate"]["prompt"]["schema"]["fields"][5];
    assert_eq!((&owner["kind"], &owner["fields"][1]["label"]), (&json!("group"), &json!("email")));

    // Every problem at its pointer, and the gate stays open.
    let path = format!("/v1/sessions/{session}/gates/{gate}");
    let bad = json!({"action": "accept", "values": {
        "environment": "dev", "ticket": "x".repeat(21), "confirm": "yes", "window": "2026-02-30",
        "regions": ["eu", "eu", "mars"], "owner": {"email": "nobody"},
        "steps": [{"host": "a1", "replicas": 10}, {"replicas": 1.5}], "extra": 1}});
    let refused = app.post(&path, &bad).await.expect_error(400, "gate_values_invalid");
    let expected = [
        ("/values/extra", "unknown_key"),
        ("/values/environment", "not_a_choice"),
        ("/values/ticket", "out_of_range"),
        ("/values/confirm", "type"),
        ("/values/window", "invalid"),
        ("/values/regions/1", "duplicate"),
        ("/values/regions/2", "not_a_choice"),
        ("/values/regions", "out_of_range"),
        ("/values/owner/name", "required"),
        ("/values/owner/email", "invalid"),
        ("/values/steps/0/replicas", "out_of_range"),
        ("/values/steps/1/host", "required"),
        ("/values/steps/1/replicas", "type"),
    ];
    assert_eq!(paths(&refused), expected.map(|(p, c)| (p.to_owned(), c.to_owned())));
    app.post(&path, &json!({"action": "accept", "values": {"confirm": true}}))
        .await
        .expect_error(400, "gate_values_invalid");
    app.post(&path, &json!({"action": "later"})).await.expect_error(400, "gate_action_invalid");
    assert_eq!(app.view(&session, &gate).await["state"], "open");

    // The host waits; the person's answer wakes it with the typed values.
    let waiting = app.spawn_get(format!("{path}/wait?timeout=10"));
    app.parked_on_gate(&gate, 1).await;
    app.post(&path, &json!({"action": "accept", "values": good_values()})).await.expect(202);
    let done = waiting.await.unwrap().expect(200).json();
    assert_eq!(done["state"], "resolved");
    assert_eq!(done["decision"]["action"], "accept");
    assert_eq!(done["decision"]["values"], good_values(), "the view keeps the values as typed");
    assert_eq!(done["decision"]["source"], "user");
    let resolution = &done["resolution"];
    assert_eq!((&resolution["resolver"], &resolution["reason"]), (&json!("session"), &json!("answered")));
    assert_eq!(resolution.get("loop_id"), None);
    // The harness's audit: every value as text, keys sorted.
    let audit = serde_json::to_string(&resolution["audit"]).unwrap();
    assert_eq!(
        audit,
        r#"{"data":{"values":{"confirm":"false","environment":"staging","owner":"{\"email\":\"ada@example.test\",\"name\":\"Ada\"}","regions":"[\"eu\",\"us\"]","steps":"[{\"host\":\"a1\",\"replicas\":2},{\"host\":\"a2\"}]","ticket":"OPS-142","window":"2026-12-24"}},"kind":"form"}"#
    );
    // Two events, no command: a host gate has no loop to tell.
    let types: Vec<Value> = app
        .journal()
        .await
        .iter()
        .map(|entry| &entry["event"])
        .filter(|e| e["gate_id"] == gate || e["gate"]["id"] == gate)
        .map(|e| e["type"].clone())
        .collect();
    assert_eq!(types, [json!("GateOpened"), json!("GateResolved")]);
}

#[tokio::test]
async fn a_json_schema_form_keeps_its_order_and_refuses_what_it_cannot_enforce() {
    let app = TestApp::spawn().await;
    let session = uuid();
    let schema = r#"{"type": "object", "properties": {
        "zeta": {"type": "string", "format": "email", "title": "Your email"},
        "amount": {"type": "number", "minimum": 0, "maximum": 100, "default": 5},
        "count": {"type": "integer"},
        "ok": {"type": "boolean", "default": true},
        "size": {"type": "string", "oneOf": [{"const": "s", "title": "Small"}, {"const": "l", "title": "Large"}]},
        "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}, "uniqueItems": true},
        "when": {"type": "string", "format": "date-time"},
        "items": {"type": "array", "items": {"type": "object", "properties": {"sku": {"type": "string"}},
                                            "required": ["sku"]}}
    }, "required": ["zeta", "size"]}"#;
    // Sent as text: `json!` would sort the properties, and their order is what is tested.
    let body = format!(r#"{{"kind": "harness.form", "body": "Order", "json_schema": {schema}}}"#);
    let view = app
        .send(
            reqwest::Method::POST,
            &format!("/v1/sessions/{session}/gates"),
            &[("content-type", "application/json")],
            Some(body.into_bytes()),
        )
        .await
        .expect(201)
        .json();
    let fields = view["gate"]["prompt"]["schema"]["fields"].as_array().unwrap();
    let kinds: Vec<(&str, &str)> =
        fields.iter().map(|f| (f["name"].as_str().unwrap(), f["kind"].as_str().unwrap())).collect();
    assert_eq!(
        kinds,
        [
            ("zeta", "email"),
            ("amount", "number"),
            ("count", "integer"),
            ("ok", "confirm"),
            ("size", "select"),
            ("tags", "multi_select"),
            ("when", "date_time"),
            ("items", "list")
        ],
        "property order is field order"
    );
    assert_eq!((&fields[0]["label"], &fields[4]["options"][1]["label"]), (&json!("Your email"), &json!("Large")));
    let gate = gate_id(&view);
    let path = format!("/v1/sessions/{session}/gates/{gate}");
    let values = json!({"zeta": "a@b.test", "size": "l", "count": 3.0, "when": "2026-12-03T10:00:00+01:00",
                        "items": [{"sku": "X1"}]});
    app.post(&path, &json!({"action": "accept", "values": values})).await.expect(202);
    assert_eq!(app.view(&session, &gate).await["decision"]["values"], values);

    // Each refusal at the keyword, before anything is stored.
    let refused = app
        .post(
            &format!("/v1/sessions/{session}/gates"),
            &json!({"kind": "harness.form", "body": "x", "json_schema": {"type": "object", "properties": {
                "code": {"type": "string", "pattern": "^[A-Z]+$"},
                "n": {"type": "number", "default": "five"},
                "ref": {"$ref": "#/defs/x"}}}}),
        )
        .await
        .expect_error(400, "invalid_body");
    assert_eq!(
        paths(&refused),
        [
            ("/json_schema/properties/code/pattern".to_owned(), "invalid".to_owned()),
            ("/json_schema/properties/ref/$ref".to_owned(), "invalid".to_owned()),
            ("/json_schema/properties/ref/type".to_owned(), "required".to_owned()),
        ]
    );
    let before = app.journal().await.len();
    for body in [
        json!({"kind": "harness.form", "body": "x"}),
        json!({"kind": "harness.form", "body": "x", "schema": {"fields": []}}),
        json!({"kind": "harness.form", "body": "x", "schema": {"fields": [{"name": "a", "kind": "color"}]}}),
        json!({"kind": "harness.form", "body": "x", "schema": {"fields": [{"name": "a", "kind": "text", "options": [{"value": "x"}]}]}}),
        json!({"kind": "harness.form", "body": "x", "schema": {"fields": [{"name": "n", "kind": "number", "default": "x"}]}}),
        json!({"kind": "harness.form", "schema": {"fields": [{"name": "a", "kind": "text"}]}}),
        json!({"kind": "harness.form", "body": "x", "question": "?", "schema": {"fields": [{"name": "a", "kind": "text"}]}}),
        json!({"kind": "harness.form", "body": "x", "loop_id": uuid(), "schema": {"fields": [{"name": "a", "kind": "text"}]}}),
    ] {
        app.post(&format!("/v1/sessions/{session}/gates"), &body).await.expect_error(400, "invalid_body");
    }
    // Too deep: a group in a group in a group in a group.
    let leaf = json!({"name": "leaf", "kind": "text"});
    let deep = (0..3).fold(leaf, |inner, i| json!({"name": format!("g{i}"), "kind": "group", "fields": [inner]}));
    let refused = app
        .post(
            &format!("/v1/sessions/{session}/gates"),
            &json!({"kind": "harness.form", "body": "x",
              "schema": {"fields": [{"name": "top", "kind": "group", "fields": [deep]}]}}),
        )
        .await
        .expect_error(400, "invalid_body");
    assert_eq!(paths(&refused), [("/schema/fields/0/fields/0/fields/0/fields".to_owned(), "out_of_range".to_owned())]);
    assert_eq!(app.journal().await.len(), before, "a refused open changes nothing");
}

#[tokio::test]
async fn a_loops_form_is_re_asked_idempotently_and_its_answer_reaches_the_inbox() {
    let app = TestApp::spawn().await;
    let (session, loop_id, tool) = (uuid(), uuid(), uuid());
    let mut body = deploy_form();
    body["loop_id"] = json!(loop_id);
    body["tool_execution_id"] = json!(tool);
    let view = app.open(&session, &body).await;
    let gate = gate_id(&view);
    assert_eq!((&view["loop_id"], &view["gate"]["resolver"]), (&json!(loop_id), &json!("loop")));
    assert_eq!(view["gate"]["subject"]["tool_execution_id"], tool);
    let gates = format!("/v1/sessions/{session}/gates");
    assert_eq!(gate_id(&app.post(&gates, &body).await.expect(200).json()), gate, "the same form again");
    body["body"] = json!("Something else");
    app.post(&gates, &body).await.expect_error(409, "gate_conflict");

    app.post(&format!("{gates}/{gate}"), &json!({"action": "accept", "values": good_values()})).await.expect(202);
    let inbox = app.inbox(&session, &loop_id).await;
    assert_eq!(inbox.len(), 1);
    let command = &inbox[0]["command"];
    assert_eq!((&command["type"], &command["action"]), (&json!("ProvideFormInput"), &json!("accept")));
    assert_eq!((&command["values"], &command["tool_execution_id"]), (&good_values(), &json!(tool)));
    assert_eq!(command["agency"], 1);

    // A declined form's command carries the action alone: values sent with it are ignored.
    let (tool, mut body) = (uuid(), deploy_form());
    body["loop_id"] = json!(loop_id);
    body["tool_execution_id"] = json!(tool);
    let declined = gate_id(&app.open(&session, &body).await);
    app.post(&format!("{gates}/{declined}"), &json!({"action": "decline", "values": {"x": 1}})).await.expect(202);
    let command = &app.inbox(&session, &loop_id).await[1]["command"];
    assert_eq!((&command["action"], command.get("values")), (&json!("decline"), None));
    let view = app.view(&session, &declined).await;
    assert_eq!(view["resolution"].get("audit"), None, "a decline keeps no audit");
    assert_eq!(view["decision"].get("values"), None);
}

#[tokio::test]
async fn a_forms_default_answer_is_checked_at_open_and_given_at_the_deadline() {
    let app = TestApp::spawn().await;
    let session = uuid();
    let gates = format!("/v1/sessions/{session}/gates");
    let mut body = deploy_form();
    body["response_policy"] = json!({"timeout": 100_000_000, "on_timeout": "respond", "response": {"action": "accept", "values": {"confirm": true}}});
    let refused = app.post(&gates, &body).await.expect_error(400, "gate_values_invalid");
    assert_eq!(paths(&refused), [("/response_policy/response/values/environment".to_owned(), "required".to_owned())]);
    body["response_policy"]["response"]["values"] = good_values();
    let accepted = gate_id(&app.open(&session, &body).await);
    body["response_policy"]["response"] = json!({"action": "cancel"});
    let cancelled = gate_id(&app.open(&session, &body).await);
    for (gate, action) in [(&accepted, "accept"), (&cancelled, "cancel")] {
        eventually("the deadline answers", async || app.view(&session, gate).await["state"] == "resolved").await;
        let view = app.view(&session, gate).await;
        assert_eq!(view["resolution"]["source"], json!({"kind": "policy", "reason": "timeout"}));
        assert_eq!(
            (&view["resolution"]["reason"], &view["decision"]["action"]),
            (&json!("policy_response"), &json!(action))
        );
        assert_eq!(view["decision"]["source"], "policy");
    }
    assert_eq!(app.view(&session, &accepted).await["decision"]["values"], good_values());
}

#[tokio::test]
async fn sixty_four_answers_to_one_form_have_one_winner() {
    let app = TestApp::spawn().await;
    let (session, loop_id) = (uuid(), uuid());
    let mut body = deploy_form();
    body["loop_id"] = json!(loop_id);
    body["tool_execution_id"] = json!(uuid());
    let gate = gate_id(&app.open(&session, &body).await);
    let path = format!("/v1/sessions/{session}/gates/{gate}");
    let clients = [app.client.clone()];
    let winner = race_answers(&clients, &path, 64, |i| match i % 3 {
        0 => json!({"action": "decline"}),
        _ => json!({"action": "accept", "values": {"environment": "prod", "confirm": true,
                    "steps": [{"host": format!("h{i}")}]}}),
    })
    .await;
    let inbox = app.inbox(&session, &loop_id).await;
    assert_eq!(inbox.len(), 1, "one command");
    match winner % 3 {
        0 => assert_eq!(inbox[0]["command"]["action"], "decline"),
        _ => assert_eq!(inbox[0]["command"]["values"]["steps"][0]["host"], format!("h{winner}")),
    }
}

/// The tokens of the open-URL test.
const AGENT: &str = "agent-secret-forms-0123456789";
const RESPONDER: &str = "responder-secret-forms-0123456789";
const ADMIN: &str = "admin-secret-forms-0123456789";
const SECRET: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";
/// What must appear nowhere but in the responder's read of it: the URL's query.
const MARKER: &str = "device-code-Q7XK3";

/// A webhook receiver that keeps every body it is sent.
async fn receiver() -> (String, Arc<Mutex<Vec<String>>>) {
    let got: Arc<Mutex<Vec<String>>> = Arc::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let keep = Arc::clone(&got);
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |body: String| async move {
            keep.lock().unwrap().push(body);
            axum::http::StatusCode::NO_CONTENT
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, got)
}

#[tokio::test]
async fn an_open_url_gates_url_reaches_only_an_allowed_responder_while_it_is_open() {
    let (_dir, db) = temp_db();
    let tokens = db.with_file_name("tokens");
    std::fs::write(&tokens, format!("agent bot {AGENT}\nresponder alice {RESPONDER}\nadmin root {ADMIN}\n")).unwrap();
    let secret = db.with_file_name("webhook.secret");
    std::fs::write(&secret, format!("{SECRET}\n")).unwrap();
    let (hook, received) = receiver().await;
    let server = ServerProcess::start_with_env(
        &db,
        "127.0.0.1:0",
        &[
            "--tokens-file",
            tokens.to_str().unwrap(),
            "--webhook-url",
            &hook,
            "--webhook-secret-file",
            secret.to_str().unwrap(),
            "--webhook-allow-cidr",
            "127.0.0.1/32",
        ],
        &[("RUST_LOG", "debug")],
    );
    let (agent, responder, admin) = (server.bearer(AGENT), server.bearer(RESPONDER), server.bearer(ADMIN));
    let session = uuid();
    let mut stream = EventStream::connect(&admin, "/v1/events", &[]).await;
    let url = format!("https://login.example.test/device?code={MARKER}&return=%2Fdone");
    let gates = format!("/v1/sessions/{session}/gates");
    for bad in ["ftp://login.example.test/x", "https://user:pw@login.example.test/", "/relative"] {
        let refused = agent.post(&gates, &json!({"kind": "harness.open_url", "body": "Sign in", "url": bad})).await;
        let refused = refused.expect_error(400, "invalid_body");
        assert!(!refused.to_string().contains("login.example"), "errors never repeat the URL: {refused}");
    }
    let loop_owned = json!({"kind": "harness.open_url", "body": "Sign in", "url": url, "loop_id": uuid()});
    agent.post(&gates, &loop_owned).await.expect_error(400, "invalid_body");
    let opened = agent
        .post(
            &gates,
            &json!({"kind": "harness.open_url", "title": "Authorize", "body": "Sign in, then confirm here.",
                               "url": url, "requires_completion": true}),
        )
        .await
        .expect(201)
        .json();
    let gate = gate_id(&opened);
    let prompt = &opened["gate"]["prompt"];
    assert_eq!(
        (&prompt["origin"], &prompt["requires_completion"]),
        (&json!("https://login.example.test"), &json!(true))
    );
    assert_eq!(prompt["controls"][0]["label"], "I have completed it");
    assert_eq!(opened["gate"].get("restorable"), None);

    // Only someone who may answer reads the URL, and only while the gate is open.
    let url_path = format!("{gates}/{gate}/url");
    agent.get(&url_path).await.expect_error(403, "forbidden");
    server.get(&url_path).await.expect_error(401, "unauthorized");
    assert_eq!(responder.get(&url_path).await.expect(200).json(), json!({"url": url}));
    // A non-open-URL gate has none.
    let form = agent.post(&gates, &deploy_form()).await.expect(201).json();
    responder.get(&format!("{gates}/{}/url", gate_id(&form))).await.expect_error(404, "gate_not_found");
    let sealed = |db: &std::path::Path| {
        crate::database::query_bool(db, "SELECT count(*) = 1 FROM gates WHERE secret IS NOT NULL")
    };
    assert!(sealed(&db), "the URL is kept, sealed");

    responder
        .post(&format!("{gates}/{gate}"), &json!({"action": "accept", "values": {"ignored": true}}))
        .await
        .expect(202);
    responder.get(&url_path).await.expect_error(409, "gate_not_ready");
    assert!(
        !crate::database::query_bool(&db, "SELECT count(*) > 0 FROM gates WHERE secret IS NOT NULL"),
        "forgotten once answered"
    );
    let view = responder.view(&session, &gate).await;
    assert_eq!(view["decision"]["action"], "accept");
    assert_eq!((view["resolution"].get("audit"), view["decision"].get("values")), (None, None));

    // Everything else the server produced: the stream, the journal, views and listings, the
    // webhook bodies, the metrics and every log line.
    let frames = stream.enduring_until(view["resolved_seq"].as_i64().unwrap()).await;
    let everything = [
        serde_json::to_string(&frames.iter().map(|(_, e)| e).collect::<Vec<_>>()).unwrap(),
        serde_json::to_string(&admin.journal_all().await).unwrap(),
        admin.get("/v1/gates?limit=100").await.expect(200).json().to_string(),
        admin.get(&format!("{gates}?kind=harness.open_url")).await.expect(200).json().to_string(),
        view.to_string(),
        String::from_utf8_lossy(&admin.get("/metrics").await.expect(200).body).into_owned(),
    ];
    // Three events: the two gates' GateOpened and the open-URL gate's GateResolved.
    eventually("the webhook gets every event", async || received.lock().unwrap().len() >= 3).await;
    let hooks = received.lock().unwrap().join("\n");
    assert!(hooks.contains(&gate), "the webhook was told of the gate");
    for (what, text) in ["stream", "journal", "listing", "kind listing", "view", "metrics", "webhooks"]
        .iter()
        .zip(everything.iter().chain([&hooks]))
    {
        assert!(!text.contains(MARKER) && !text.contains("login.example.test/device"), "the URL is in the {what}");
    }
    drop(stream);
    let logs = server.log_lines();
    assert!(logs.len() > 10, "the server logged its requests");
    assert!(!logs.iter().any(|line| line.contains(MARKER)), "the URL is in the log");
    server.terminate(Duration::from_secs(10));
    // On SQLite, not even the database files hold it in clear.
    if !crate::database::on_postgres() {
        for file in std::fs::read_dir(db.parent().unwrap()).unwrap().map(|e| e.unwrap().path()) {
            let bytes = std::fs::read(&file).unwrap();
            assert!(!bytes.windows(MARKER.len()).any(|w| w == MARKER.as_bytes()), "the URL is in clear in {file:?}");
        }
    }
}
