//! Opening, re-asking, reading, listing, waiting for and closing gates.

use std::collections::BTreeSet;

use futures_util::future::join_all;
use serde_json::{Value, json};

use crate::helpers::{TestApp, answer, ask, bounded, gate_id, uuid};

#[tokio::test]
async fn an_open_gate_has_the_harness_envelope_and_two_events() {
    let app = TestApp::spawn().await;
    let (session, loop_id, tool, turn, step) = (uuid(), uuid(), uuid(), uuid(), uuid());
    let mut body = ask(&loop_id, &tool, "Which database should I migrate first?");
    body["turn_id"] = json!(turn);
    body["step_id"] = json!(step);
    body["choices"] = json!(["postgres", "mysql"]);
    let resp = app.post(&format!("/v1/sessions/{session}/gates"), &body).await.expect(201);
    let view = resp.json();
    let gate = gate_id(&view);
    assert_eq!(resp.headers["location"].to_str().unwrap(), format!("/v1/sessions/{session}/gates/{gate}"));
    assert_eq!(view["state"], "open");
    assert_eq!(
        view["gate"],
        json!({
            "id": gate, "kind": "harness.ask_user", "resolver": "loop", "blocks": "tool_call", "effect": "resume",
            "subject": {"tool_execution_id": tool, "turn_id": turn, "step_id": step},
            "prompt": {
                "title": "User input requested", "body": "Which database should I migrate first?",
                "schema": {"fields": [{"name": "answer", "label": "Answer", "kind": "select", "required": true,
                    "options": [{"value": "postgres", "label": "postgres"}, {"value": "mysql", "label": "mysql"}]}]},
                "controls": [{"action": "answer", "label": "Answer"}]
            }
        })
    );
    for absent in ["deadline", "resolved_seq", "resolution", "answer"] {
        assert!(view.get(absent).is_none(), "{absent} is omitted while open");
    }

    let journal = app.journal().await;
    let types: Vec<&str> = journal.iter().map(|e| e["event"]["type"].as_str().unwrap()).collect();
    assert_eq!(types, ["GateOpened", "UserInputRequested"], "GateOpened precedes UserInputRequested");
    assert_eq!(journal[0]["journal_seq"], view["opened_seq"]);
    for entry in &journal {
        let event = &entry["event"];
        assert_eq!(event["session_id"], session.as_str());
        assert_eq!(event["loop_id"], loop_id.as_str());
        assert_eq!(event["turn_id"], turn.as_str());
        assert_eq!(event["step_id"], step.as_str());
        assert_eq!(event["v"], 1);
    }
    assert_eq!(journal[0]["event"]["created_at"], view["opened_at"]);
    assert_eq!(journal[0]["event"]["gate"], view["gate"]);
    let requested = &journal[1]["event"];
    assert_eq!(requested["tool_execution_id"], tool.as_str());
    assert_eq!(requested["question"], "Which database should I migrate first?");
    assert_eq!(requested["choices"], json!(["postgres", "mysql"]));
    assert_eq!(requested["gate_id"], gate.as_str());

    // The same gate by id alone.
    let by_id = app.get(&format!("/v1/gates/{gate}")).await.expect(200).json();
    assert_eq!(by_id, view);
}

#[tokio::test]
async fn a_reask_with_the_same_content_returns_the_same_gate_in_any_state() {
    let app = TestApp::spawn().await;
    let (session, loop_id, tool) = (uuid(), uuid(), uuid());
    let mut body = ask(&loop_id, &tool, "Deploy?");
    body["response_policy"] = json!({"timeout": 300_000_000_000_i64, "on_timeout": "wait"});
    let first = app.open(&session, &body).await;
    assert!(first["deadline"].is_string(), "a timeout records a deadline");
    let events = app.journal().await.len();

    let path = format!("/v1/sessions/{session}/gates");
    let again = app.post(&path, &body).await.expect(200);
    assert_eq!(again.json(), first);
    assert!(again.headers.contains_key("location"));
    assert_eq!(app.journal().await.len(), events, "a re-ask adds no events");

    app.answer(&session, &gate_id(&first), "go").await.expect(202);
    let after = app.post(&path, &body).await.expect(200).json();
    assert_eq!(after["state"], "resolved", "the current view, whatever its state");
    assert_eq!(gate_id(&after), gate_id(&first));

    // Different content for the same tool execution is a conflict carrying the existing gate.
    let mut changed = body.clone();
    changed["question"] = json!("Deploy now?");
    let conflict = app.post(&path, &changed).await.expect_error(409, "gate_conflict");
    assert_eq!(conflict["error"]["gate"], after);
}

#[tokio::test]
async fn twenty_concurrent_identical_reasks_make_one_gate() {
    let app = TestApp::spawn().await;
    let (session, loop_id, tool) = (uuid(), uuid(), uuid());
    let body = ask(&loop_id, &tool, "Once?");
    let path = format!("/v1/sessions/{session}/gates");
    let responses = join_all((0..20).map(|_| app.post(&path, &body))).await;
    let statuses: Vec<u16> = responses.iter().map(|r| r.status).collect();
    assert_eq!(statuses.iter().filter(|s| **s == 201).count(), 1, "{statuses:?}");
    assert_eq!(statuses.iter().filter(|s| **s == 200).count(), 19, "{statuses:?}");
    let ids: BTreeSet<String> = responses.iter().map(|r| gate_id(&r.json())).collect();
    assert_eq!(ids.len(), 1);
    let listing = app.get(&format!("/v1/sessions/{session}/gates")).await.expect(200).json();
    assert_eq!(listing["gates"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn upper_and_lower_case_uuids_address_the_same_gate() {
    let app = TestApp::spawn().await;
    let (session, loop_id, tool) = (uuid(), uuid(), uuid());
    let upper = ask(&loop_id.to_uppercase(), &tool.to_uppercase(), "Case?");
    let view = app.open(&session.to_uppercase(), &upper).await;
    assert_eq!(view["session_id"], session.as_str(), "stored and emitted lower-case");
    assert_eq!(view["loop_id"], loop_id.as_str());
    let gate = gate_id(&view);

    let lower = app.post(&format!("/v1/sessions/{session}/gates"), &ask(&loop_id, &tool, "Case?")).await.expect(200);
    assert_eq!(gate_id(&lower.json()), gate);
    let read = app.view(&session.to_uppercase(), &gate.to_uppercase()).await;
    assert_eq!(gate_id(&read), gate);
    app.answer(&session.to_uppercase(), &gate.to_uppercase(), "yes").await.expect(202);
    assert_eq!(app.inbox(&session, &loop_id.to_uppercase()).await.len(), 1);
}

#[tokio::test]
async fn bad_open_requests_are_refused_with_field_details() {
    let app = TestApp::spawn().await;
    let session = uuid();
    let path = format!("/v1/sessions/{session}/gates");
    let nil = "00000000-0000-0000-0000-000000000000";

    app.post(&format!("/v1/sessions/{nil}/gates"), &ask(&uuid(), &uuid(), "Q"))
        .await
        .expect_error(400, "invalid_parameter");
    let fields = |body: Value| -> Vec<(String, String)> {
        body["error"]["fields"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| (f["path"].as_str().unwrap().to_owned(), f["code"].as_str().unwrap().to_owned()))
            .collect()
    };
    let cases = [
        (ask(nil, &uuid(), "Q"), vec![("/loop_id", "type")]),
        (json!({"loop_id": uuid(), "question": "Q"}), vec![("/tool_execution_id", "required")]),
        (ask(&uuid(), nil, "Q"), vec![("/tool_execution_id", "type")]),
        (
            json!({"loop_id": 5, "tool_execution_id": uuid(), "question": ["Q"]}),
            vec![("/loop_id", "type"), ("/question", "type")],
        ),
        (
            json!({"loop_id": uuid(), "tool_execution_id": uuid(), "question": "Q", "choices": []}),
            vec![("/choices", "out_of_range")],
        ),
        (ask(&uuid(), &uuid(), ""), vec![("/question", "empty")]),
        (ask(&uuid(), &uuid(), " \n\t"), vec![("/question", "blank")]),
        (ask(&uuid(), &uuid(), &"q".repeat(4097)), vec![("/question", "too_long")]),
        (
            json!({"loop_id": uuid(), "tool_execution_id": uuid(), "question": "Q", "choices": ["a", "a"]}),
            vec![("/choices/1", "duplicate")],
        ),
        (
            json!({"loop_id": uuid(), "tool_execution_id": uuid(), "question": "Q", "choices": (0..65).map(|i| i.to_string()).collect::<Vec<_>>()}),
            vec![("/choices", "out_of_range")],
        ),
        (
            json!({"loop_id": uuid(), "tool_execution_id": uuid(), "question": "Q", "allow_other": true}),
            vec![("/allow_other", "out_of_range")],
        ),
        (
            json!({"loop_id": uuid(), "tool_execution_id": uuid(), "question": "Q", "response_policy": {"timeout": -5}}),
            vec![("/response_policy/timeout", "out_of_range")],
        ),
    ];
    for (body, expected) in cases {
        let got = fields(app.post(&path, &body).await.expect_error(400, "invalid_body"));
        let expected: Vec<(String, String)> = expected.into_iter().map(|(p, c)| (p.to_owned(), c.to_owned())).collect();
        assert_eq!(got, expected, "{body}");
    }
    let mut unknown = ask(&uuid(), &uuid(), "Q");
    unknown["payload"] = json!({});
    app.post(&path, &unknown).await.expect_error(400, "invalid_body");
    let mut other_kind = ask(&uuid(), &uuid(), "Q");
    other_kind["kind"] = json!("harness.elicitation");
    app.post(&path, &other_kind).await.expect_error(400, "gate_kind_mismatch");

    assert!(app.journal().await.is_empty(), "refused opens write nothing");
}

#[tokio::test]
async fn closing_withdraws_without_a_command() {
    let app = TestApp::spawn().await;
    let (session, loop_id, gate) = app.open_asking("Still needed?").await;
    let close = format!("/v1/sessions/{session}/gates/{gate}/close");
    // An empty body (even one labelled JSON, as browsers' fetch may send) means the default reason.
    let json_ct = [("content-type", "application/json")];
    let closed = app.send(reqwest::Method::POST, &close, &json_ct, Some(Vec::new())).await.expect(200).json();
    assert_eq!(closed["state"], "closed");
    let resolution = &closed["resolution"];
    assert_eq!(resolution["reason"], "owner_closed");
    for absent in ["action", "source", "audit"] {
        assert!(resolution.get(absent).is_none(), "a close has no {absent}");
    }
    assert!(closed.get("answer").is_none());
    assert!(app.inbox(&session, &loop_id).await.is_empty(), "a close sends no command");

    let again = app.post(&close, &json!({"reason": "abandoned"})).await.expect_error(409, "gate_not_ready");
    assert_eq!(again["error"]["resolution"], *resolution);
    app.answer(&session, &gate, "late").await.expect_error(409, "gate_not_ready");

    let other = gate_id(&app.open(&session, &ask(&loop_id, &uuid(), "Abandon me")).await);
    let abandoned = app
        .post(&format!("/v1/sessions/{session}/gates/{other}/close"), &json!({"reason": "abandoned"}))
        .await
        .expect(200)
        .json();
    assert_eq!(abandoned["resolution"]["reason"], "abandoned");
    app.post(&format!("/v1/sessions/{session}/gates/{other}/close"), &json!({"reason": "bored"}))
        .await
        .expect_error(400, "invalid_body");
    app.post(&format!("/v1/sessions/{session}/gates/{}/close", uuid()), &json!({}))
        .await
        .expect_error(404, "gate_not_found");
}

#[tokio::test]
async fn listings_filter_order_and_page_with_a_snapshot_head() {
    let app = TestApp::spawn().await;
    let (s1, s2) = (uuid(), uuid());
    let mut s1_gates = Vec::new();
    for i in 0..5 {
        s1_gates.push(gate_id(&app.open(&s1, &ask(&uuid(), &uuid(), &format!("Q{i}"))).await));
    }
    let s2_gate = gate_id(&app.open(&s2, &ask(&uuid(), &uuid(), "Other session")).await);
    app.answer(&s1, &s1_gates[1], "done").await.expect(202);
    app.send(reqwest::Method::POST, &format!("/v1/sessions/{s1}/gates/{}/close", s1_gates[3]), &[], None)
        .await
        .expect(200);
    let head = app.journal().await.last().unwrap()["journal_seq"].clone();

    let ids = |listing: &Value| -> Vec<String> { listing["gates"].as_array().unwrap().iter().map(gate_id).collect() };
    let all = app.get(&format!("/v1/sessions/{s1}/gates")).await.expect(200).json();
    assert_eq!(ids(&all), s1_gates);
    assert_eq!(all["journal_seq"], head);
    assert!(all.get("next_after").is_none(), "no more rows, no cursor");

    let open = app.get(&format!("/v1/sessions/{s1}/gates?state=open")).await.expect(200).json();
    assert_eq!(ids(&open), [s1_gates[0].clone(), s1_gates[2].clone(), s1_gates[4].clone()]);
    let settled = app.get(&format!("/v1/sessions/{s1}/gates?state=resolved,closed")).await.expect(200).json();
    assert_eq!(ids(&settled), [s1_gates[1].clone(), s1_gates[3].clone()]);

    // Paging newest first, two at a time, until the cursor runs out.
    let seen = app.listed_gate_ids(&format!("/v1/sessions/{s1}/gates?order=newest&limit=2")).await;
    let newest: Vec<String> = s1_gates.iter().rev().cloned().collect();
    assert_eq!(seen, newest);

    let everywhere = app.get("/v1/gates?limit=1000").await.expect(200).json();
    assert_eq!(ids(&everywhere).len(), 6);
    assert!(ids(&everywhere).contains(&s2_gate));

    for bad in ["state=pending", "order=sideways", "limit=0", "limit=1001", "limit=x", "after=garbage"] {
        app.get(&format!("/v1/gates?{bad}")).await.expect_error(400, "invalid_parameter");
    }
    // A cursor of one order is refused by the other.
    let first = app.get("/v1/gates?limit=1").await.expect(200).json();
    let cursor = first["next_after"].as_str().unwrap().to_owned();
    app.get(&format!("/v1/gates?order=newest&after={cursor}")).await.expect_error(400, "invalid_parameter");
}

#[tokio::test]
async fn wait_returns_when_the_gate_is_answered() {
    let app = TestApp::spawn().await;
    let (session, _, gate) = app.open_asking("Wait for me").await;
    let wait = format!("/v1/sessions/{session}/gates/{gate}/wait");

    let still_open = app.get(&format!("{wait}?timeout=0")).await.expect(200).json();
    assert_eq!(still_open["state"], "open");
    app.get(&format!("{wait}?timeout=61")).await.expect_error(400, "invalid_parameter");
    app.get(&format!("/v1/sessions/{session}/gates/{}/wait?timeout=1", uuid()))
        .await
        .expect_error(404, "gate_not_found");

    let waiter = app.spawn_get(format!("{wait}?timeout=60"));
    app.parked_on_gate(&gate, 1).await;
    let accepted = app.answer(&session, &gate, "here").await.expect(202).json();
    let resolved = bounded("wait returns", waiter).await.unwrap().expect(200).json();
    assert_eq!(resolved["state"], "resolved");
    assert_eq!(resolved["answer"], "here");
    assert_eq!(resolved["resolved_seq"], accepted["journal_seq"]);
}

/// A gate once read is served from memory (the SQLite store's gate cache). Whatever changes it
/// must be seen by every read that follows the change's reply: by a GET, by a long-poll the change
/// woke, and by the answer path's own lookup (a replay finds its key, a late answer the winner),
/// also while other reads keep the gate cached up to the moment it changes.
#[tokio::test]
async fn a_gate_read_before_it_changes_is_never_served_stale_after() {
    let app = TestApp::spawn().await;
    let (session, loop_id) = (uuid(), uuid());
    for round in 0..20 {
        let gate = gate_id(&app.open(&session, &ask(&loop_id, &uuid(), &format!("Round {round}?"))).await);
        let path = format!("/v1/sessions/{session}/gates/{gate}");
        assert_eq!(app.get(&path).await.expect(200).json()["state"], "open");
        let waiter = app.spawn_get(format!("{path}/wait?timeout=60"));
        app.parked_on_gate(&gate, 1).await;

        // Readers keep reading the gate while it is answered.
        let readers: Vec<_> = (0..4).map(|_| app.spawn_get(path.clone())).collect();
        let key = format!("round-{round}");
        let accepted = app.post_with(&path, &[("idempotency-key", &key)], &answer("yes")).await.expect(202).json();
        let view = app.get(&path).await.expect(200).json();
        assert_eq!(view["state"], "resolved", "round {round}: the GET after the 202");
        assert_eq!(view["resolved_seq"], accepted["journal_seq"]);
        let woken = bounded("the long-poll returns", waiter).await.unwrap().expect(200).json();
        assert_eq!(woken["state"], "resolved", "round {round}: the long-poll the answer woke");
        for reader in readers {
            let state = reader.await.unwrap().expect(200).json()["state"].clone();
            assert!(state == "open" || state == "resolved", "{state}");
        }

        let replay = app.post_with(&path, &[("idempotency-key", &key)], &answer("yes")).await.expect(202).json();
        assert_eq!(replay, accepted, "round {round}: the replay finds the winner's key");
        let late = app.answer(&session, &gate, "no").await.expect_error(409, "gate_not_ready");
        assert_eq!(late["error"]["resolution"], view["resolution"]);
    }

    let gate = gate_id(&app.open(&session, &ask(&loop_id, &uuid(), "Close me")).await);
    let path = format!("/v1/sessions/{session}/gates/{gate}");
    assert_eq!(app.get(&path).await.expect(200).json()["state"], "open");
    app.post(&format!("{path}/close"), &json!({})).await.expect(200);
    assert_eq!(app.get(&path).await.expect(200).json()["state"], "closed");
    assert_eq!(app.get(&format!("/v1/gates/{gate}")).await.expect(200).json()["state"], "closed");
}

#[tokio::test]
async fn journal_pages_follow_the_harness_paging_rules() {
    let app = TestApp::spawn().await;
    let (s1, s2) = (uuid(), uuid());
    app.open(&s1, &ask(&uuid(), &uuid(), "one")).await; // seqs 1, 2
    app.open(&s2, &ask(&uuid(), &uuid(), "two")).await; // seqs 3, 4
    app.open(&s1, &ask(&uuid(), &uuid(), "three")).await; // seqs 5, 6

    let page = app.get("/v1/journal?from_journal_seq=2&limit=3").await.expect(200).json();
    let seqs: Vec<i64> =
        page["events"].as_array().unwrap().iter().map(|e| e["journal_seq"].as_i64().unwrap()).collect();
    assert_eq!(seqs, [2, 3, 4]);
    assert_eq!(page["next_journal_seq"], 5);
    assert_eq!(page["done"], false);
    let last = app.get("/v1/journal?from_journal_seq=5&limit=3").await.expect(200).json();
    assert_eq!(last["events"].as_array().unwrap().len(), 2);
    assert_eq!(last["next_journal_seq"], 7);
    assert_eq!(last["done"], true);
    let empty = app.get("/v1/journal?from_journal_seq=50").await.expect(200).json();
    assert_eq!(empty, json!({"events": [], "next_journal_seq": 50, "done": true}));

    let session = app.get(&format!("/v1/sessions/{s1}/journal")).await.expect(200).json();
    let seqs: Vec<i64> =
        session["events"].as_array().unwrap().iter().map(|e| e["journal_seq"].as_i64().unwrap()).collect();
    assert_eq!(seqs, [1, 2, 5, 6], "only this session's events, gaps allowed");

    for bad in ["from_journal_seq=-1", "from_journal_seq=x", "limit=0", "limit=1001"] {
        app.get(&format!("/v1/journal?{bad}")).await.expect_error(400, "invalid_parameter");
    }
}

#[tokio::test]
async fn meta_routes() {
    let app = TestApp::spawn().await;
    let caps = app.get("/v1/capabilities").await.expect(200).json();
    assert_eq!(caps["protocol"], "gatehouse");
    assert_eq!(caps["version"], 1);
    assert_eq!(
        caps["gate_kinds"],
        json!(["harness.ask_user", "harness.permission", "harness.form", "harness.open_url"])
    );
    assert_eq!(app.get("/healthz").await.expect(200).json(), json!({"status": "ok"}));
    assert_eq!(app.get("/readyz").await.expect(200).json(), json!({"status": "ready"}));
    let spec = app.get("/openapi.yaml").await.expect(200);
    assert_eq!(spec.body, std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/openapi.yaml")).unwrap());
    let page = app.get("/").await.expect(200);
    assert_eq!(page.headers["content-type"], "text/html; charset=utf-8");
    assert!(page.headers["content-security-policy"].to_str().unwrap().contains("default-src 'self'"));
    assert!(String::from_utf8_lossy(&page.body).contains("/static/app.js"));
    let script = app.get("/static/app.js").await.expect(200);
    assert_eq!(script.headers["content-type"], "text/javascript; charset=utf-8");
    let errors = app.get("/static/nope.js").await;
    // JSON answers, errors too, are never cached (every `Client` response is checked for that);
    // the page and its files keep their own revalidating header.
    assert_eq!(errors.headers["cache-control"], "no-store");
    errors.expect_error(404, "not_found");
    assert_eq!(page.headers["cache-control"], "no-cache");
    assert_eq!(script.headers["cache-control"], "no-cache");
    // A graceful stop drains and returns cleanly.
    app.stop().await;
}

#[tokio::test]
async fn every_member_of_the_content_decides_whether_a_reask_is_the_same() {
    let app = TestApp::spawn().await;
    let session = uuid();
    let path = format!("/v1/sessions/{session}/gates");
    let (loop_id, tool, turn) = (uuid(), uuid(), uuid());
    let mut base = ask(&loop_id, &tool, "Which?");
    base["choices"] = json!(["a", "b"]);
    base["turn_id"] = json!(turn);
    let gate = gate_id(&app.open(&session, &base).await);

    // Spelled differently, same content: defaults written out, ids in upper case, null members.
    let mut same = base.clone();
    same["title"] = json!("User input requested");
    same["allow_other"] = json!(false);
    same["turn_id"] = json!(turn.to_uppercase());
    same["step_id"] = Value::Null;
    same["kind"] = json!("harness.ask_user");
    assert_eq!(gate_id(&app.post(&path, &same).await.expect(200).json()), gate);

    let changes = [
        ("choices", json!(["b", "a"])),
        ("choices", Value::Null),
        ("allow_other", json!(true)),
        ("title", json!("Another title")),
        ("turn_id", json!(uuid())),
        ("step_id", json!(uuid())),
        ("response_policy", json!({"timeout": 60_000_000_000_i64})),
    ];
    for (member, value) in changes {
        let mut changed = base.clone();
        changed[member] = value.clone();
        let conflict = app.post(&path, &changed).await.expect_error(409, "gate_conflict");
        assert_eq!(gate_id(&conflict["error"]["gate"]), gate, "{member} = {value}");
    }
    // The same tool execution id under another loop is another question.
    let other_loop = app.post(&path, &ask(&uuid(), &tool, "Which?")).await.expect(201).json();
    assert_ne!(gate_id(&other_loop), gate);
}
