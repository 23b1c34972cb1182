//! The exactly-once path: concurrent answers, idempotency keys, routing, and every way an answer
//! can be refused without burning the gate.

use std::collections::BTreeSet;

use futures_util::future::join_all;
use reqwest::Method;
use serde_json::{Value, json};

use crate::helpers::{TestApp, answer, ask, gate_id, uuid};

fn resolutions(journal: &[Value], gate: &str) -> Vec<Value> {
    journal.iter().filter(|e| e["event"]["type"] == "GateResolved" && e["event"]["gate_id"] == gate).cloned().collect()
}

#[tokio::test]
async fn sixty_four_concurrent_answers_produce_exactly_one_resolution() {
    let app = TestApp::spawn().await;
    let (session, loop_id) = (uuid(), uuid());
    let view = app.open(&session, &ask(&loop_id, &uuid(), "Which answer wins?")).await;
    let gate = gate_id(&view);

    let texts: Vec<String> = (0..64).map(|i| format!("answer {i}")).collect();
    let answers = texts.iter().map(|text| app.answer(&session, &gate, text));
    let responses = join_all(answers).await;

    let winners: Vec<_> = responses.iter().filter(|r| r.status == 202).collect();
    assert_eq!(winners.len(), 1, "exactly one 202");
    let accepted = winners[0].json();
    let losers: Vec<Value> =
        responses.iter().filter(|r| r.status != 202).map(|r| r.clone().expect_error(409, "gate_not_ready")).collect();
    assert_eq!(losers.len(), 63);

    let view = app.view(&session, &gate).await;
    assert_eq!(view["state"], "resolved");
    assert_eq!(view["resolved_seq"], accepted["journal_seq"]);
    for loser in &losers {
        assert_eq!(loser["error"]["resolution"], view["resolution"], "every loser sees the winner");
    }
    let journal = app.journal().await;
    let resolved = resolutions(&journal, &gate);
    assert_eq!(resolved.len(), 1, "one GateResolved in the journal");
    assert_eq!(resolved[0]["journal_seq"], accepted["journal_seq"]);

    let inbox = app.inbox(&session, &loop_id).await;
    assert_eq!(inbox.len(), 1, "one command in the inbox");
    assert_eq!(inbox[0]["command"]["answer"], view["answer"]);
    assert_eq!(inbox[0]["command"]["gate_id"], gate.as_str());
}

#[tokio::test]
async fn one_shared_idempotency_key_gives_every_request_the_same_202() {
    let app = TestApp::spawn().await;
    let (session, loop_id, gate) = app.open_asking("Deploy?").await;
    let path = format!("/v1/sessions/{session}/gates/{gate}");

    let body = answer("yes");
    let requests = (0..64).map(|_| app.post_with(&path, &[("idempotency-key", "retry-1")], &body));
    let responses = join_all(requests).await;
    let seqs: BTreeSet<String> =
        responses.into_iter().map(|r| r.expect(202).json()["journal_seq"].to_string()).collect();
    assert_eq!(seqs.len(), 1, "all 64 replays carry the one resolution's seq: {seqs:?}");
    assert_eq!(resolutions(&app.journal().await, &gate).len(), 1);
    assert_eq!(app.inbox(&session, &loop_id).await.len(), 1);

    // The same key with another answer is a conflict; another key is simply too late.
    app.post_with(&path, &[("idempotency-key", "retry-1")], &answer("no"))
        .await
        .expect_error(409, "idempotency_conflict");
    app.post_with(&path, &[("idempotency-key", "retry-2")], &answer("yes")).await.expect_error(409, "gate_not_ready");
    app.post(&path, &answer("yes")).await.expect_error(409, "gate_not_ready");
}

#[tokio::test]
async fn answers_reach_only_the_loop_that_asked() {
    let app = TestApp::spawn().await;
    let session = uuid();
    let (loop_a, loop_b, loop_c) = (uuid(), uuid(), uuid());
    let (tool_a, tool_b) = (uuid(), uuid());
    let gate_a = gate_id(&app.open(&session, &ask(&loop_a, &tool_a, "For A?")).await);
    let gate_b = gate_id(&app.open(&session, &ask(&loop_b, &tool_b, "For B?")).await);

    // Crosswise: B's gate first, then A's.
    app.answer(&session, &gate_b, "answer for B").await.expect(202);
    app.answer(&session, &gate_a, "answer for A").await.expect(202);

    for (loop_id, gate, tool, text) in
        [(&loop_a, &gate_a, &tool_a, "answer for A"), (&loop_b, &gate_b, &tool_b, "answer for B")]
    {
        let inbox = app.inbox(&session, loop_id).await;
        assert_eq!(inbox.len(), 1, "exactly its own command");
        let command = &inbox[0]["command"];
        assert_eq!(command["type"], "ProvideUserInput");
        assert_eq!(command["loop_id"], loop_id.as_str());
        assert_eq!(command["gate_id"], gate.as_str());
        assert_eq!(command["tool_execution_id"], tool.as_str());
        assert_eq!(command["answer"], text);
        assert_eq!(command["agency"], 1);
    }
    assert!(app.inbox(&session, &loop_c).await.is_empty(), "a third loop gets nothing");
    // The same loop id in another session is another inbox.
    assert!(app.inbox(&uuid(), &loop_a).await.is_empty());
}

/// (what, method, path, headers, body, expected status, expected error code)
type Case<'a> = (&'a str, Method, String, Vec<(&'a str, &'a str)>, Option<Vec<u8>>, u16, &'a str);

#[tokio::test]
async fn refused_answers_change_nothing_and_the_gate_stays_answerable() {
    let app = TestApp::spawn_with(|args| args.http.max_body = 64 * 1024).await;
    let (session, loop_id) = (uuid(), uuid());
    let mut open = ask(&loop_id, &uuid(), "Which database?");
    open["choices"] = json!(["postgres", "mysql"]);
    let gate = gate_id(&app.open(&session, &open).await);
    let other_session_gate = gate_id(&app.open(&uuid(), &ask(&uuid(), &uuid(), "Elsewhere?")).await);
    let path = format!("/v1/sessions/{session}/gates/{gate}");
    let head_before = app.journal().await.len();

    let ok = answer("postgres").to_string();
    let long_key = "k".repeat(256);
    let json_ct = ("content-type", "application/json");
    let raw = |s: &str| Some(s.as_bytes().to_vec());
    let cases: Vec<Case> = vec![
        (
            "bad session id",
            Method::POST,
            format!("/v1/sessions/not-a-uuid/gates/{gate}"),
            vec![json_ct],
            raw(&ok),
            400,
            "invalid_parameter",
        ),
        (
            "bad gate id",
            Method::POST,
            format!("/v1/sessions/{session}/gates/1234"),
            vec![json_ct],
            raw(&ok),
            400,
            "invalid_parameter",
        ),
        (
            "nil session id",
            Method::POST,
            format!("/v1/sessions/00000000-0000-0000-0000-000000000000/gates/{gate}"),
            vec![json_ct],
            raw(&ok),
            400,
            "invalid_parameter",
        ),
        (
            "braced gate id",
            Method::POST,
            format!("/v1/sessions/{session}/gates/{{{gate}}}"),
            vec![json_ct],
            raw(&ok),
            400,
            "invalid_parameter",
        ),
        (
            "empty Idempotency-Key",
            Method::POST,
            path.clone(),
            vec![json_ct, ("idempotency-key", "")],
            raw(&ok),
            400,
            "invalid_parameter",
        ),
        (
            "Idempotency-Key with a space",
            Method::POST,
            path.clone(),
            vec![json_ct, ("idempotency-key", "a b")],
            raw(&ok),
            400,
            "invalid_parameter",
        ),
        (
            "Idempotency-Key over 255 bytes",
            Method::POST,
            path.clone(),
            vec![json_ct, ("idempotency-key", &long_key)],
            raw(&ok),
            400,
            "invalid_parameter",
        ),
        (
            "text/plain",
            Method::POST,
            path.clone(),
            vec![("content-type", "text/plain")],
            raw(&ok),
            415,
            "unsupported_media_type",
        ),
        ("no content type", Method::POST, path.clone(), vec![], raw(&ok), 415, "unsupported_media_type"),
        (
            "form post",
            Method::POST,
            path.clone(),
            vec![("content-type", "application/x-www-form-urlencoded")],
            raw("action=answer"),
            415,
            "unsupported_media_type",
        ),
        (
            "over --max-body",
            Method::POST,
            path.clone(),
            vec![json_ct],
            Some(answer(&"x".repeat(70 * 1024)).to_string().into_bytes()),
            413,
            "payload_too_large",
        ),
        ("empty body", Method::POST, path.clone(), vec![json_ct], raw(""), 400, "invalid_body"),
        ("malformed JSON", Method::POST, path.clone(), vec![json_ct], raw("{\"action\":"), 400, "invalid_body"),
        ("trailing data", Method::POST, path.clone(), vec![json_ct], raw(&format!("{ok} {ok}")), 400, "invalid_body"),
        ("not an object", Method::POST, path.clone(), vec![json_ct], raw("[1]"), 400, "invalid_body"),
        (
            "duplicate top-level key",
            Method::POST,
            path.clone(),
            vec![json_ct],
            raw(r#"{"action":"answer","action":"answer","values":{"answer":"postgres"}}"#),
            400,
            "invalid_body",
        ),
        (
            "duplicate key inside values",
            Method::POST,
            path.clone(),
            vec![json_ct],
            raw(r#"{"action":"answer","values":{"answer":"postgres","answer":"mysql"}}"#),
            400,
            "invalid_body",
        ),
        (
            "unknown top-level field",
            Method::POST,
            path.clone(),
            vec![json_ct],
            raw(r#"{"action":"answer","values":{"answer":"postgres"},"extra":1}"#),
            400,
            "invalid_body",
        ),
        (
            "values not an object",
            Method::POST,
            path.clone(),
            vec![json_ct],
            raw(r#"{"action":"answer","values":"postgres"}"#),
            400,
            "invalid_body",
        ),
        (
            "gate_id naming another gate",
            Method::POST,
            path.clone(),
            vec![json_ct],
            raw(&json!({"gate_id": other_session_gate, "action": "answer", "values": {"answer": "postgres"}})
                .to_string()),
            400,
            "invalid_body",
        ),
        (
            "unknown gate",
            Method::POST,
            format!("/v1/sessions/{session}/gates/{}", uuid()),
            vec![json_ct],
            raw(&ok),
            404,
            "gate_not_found",
        ),
        (
            "gate of another session",
            Method::POST,
            format!("/v1/sessions/{session}/gates/{other_session_gate}"),
            vec![json_ct],
            raw(&ok),
            404,
            "gate_not_found",
        ),
        (
            "action not a control",
            Method::POST,
            path.clone(),
            vec![json_ct],
            raw(r#"{"action":"Answer","values":{"answer":"postgres"}}"#),
            400,
            "gate_action_invalid",
        ),
        (
            "no action",
            Method::POST,
            path.clone(),
            vec![json_ct],
            raw(r#"{"values":{"answer":"postgres"}}"#),
            400,
            "gate_action_invalid",
        ),
        (
            "unknown key in values",
            Method::POST,
            path.clone(),
            vec![json_ct],
            raw(r#"{"action":"answer","values":{"answer":"postgres","scope":"all"}}"#),
            400,
            "gate_values_invalid",
        ),
        (
            "non-string answer",
            Method::POST,
            path.clone(),
            vec![json_ct],
            raw(r#"{"action":"answer","values":{"answer":42}}"#),
            400,
            "gate_values_invalid",
        ),
        (
            "missing answer",
            Method::POST,
            path.clone(),
            vec![json_ct],
            raw(r#"{"action":"answer","values":{}}"#),
            400,
            "gate_values_invalid",
        ),
        (
            "empty answer",
            Method::POST,
            path.clone(),
            vec![json_ct],
            raw(&answer("").to_string()),
            400,
            "gate_values_invalid",
        ),
        (
            "not a choice (case differs)",
            Method::POST,
            path.clone(),
            vec![json_ct],
            raw(&answer("Postgres").to_string()),
            400,
            "gate_values_invalid",
        ),
        ("wrong method", Method::DELETE, path.clone(), vec![], None, 405, "method_not_allowed"),
        ("unknown route", Method::POST, format!("{path}/nope"), vec![json_ct], raw(&ok), 404, "not_found"),
    ];
    for (name, method, path, headers, body, status, code) in cases {
        let resp = app.send(method, &path, &headers, body).await;
        assert_eq!(
            (resp.status, resp.json()["error"]["code"].as_str().unwrap_or("").to_owned()),
            (status, code.to_owned()),
            "{name}: {}",
            String::from_utf8_lossy(&resp.body)
        );
    }

    // Field details say exactly what is wrong.
    let body = app
        .post(&path, &json!({"action": "answer", "values": {"answer": "Postgres", "x~y": 1}}))
        .await
        .expect_error(400, "gate_values_invalid");
    let fields: BTreeSet<(String, String)> = body["error"]["fields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["path"].as_str().unwrap().to_owned(), f["code"].as_str().unwrap().to_owned()))
        .collect();
    assert_eq!(
        fields,
        BTreeSet::from([
            ("/values/answer".into(), "not_a_choice".into()),
            ("/values/x~0y".into(), "unknown_key".into())
        ])
    );

    // Nothing changed: still open, no new events, and the one-shot answer is still there.
    assert_eq!(app.view(&session, &gate).await["state"], "open");
    assert_eq!(app.journal().await.len(), head_before);
    assert!(app.inbox(&session, &loop_id).await.is_empty());
    app.post(&path, &answer("postgres")).await.expect(202);
    assert_eq!(app.inbox(&session, &loop_id).await[0]["command"]["answer"], "postgres");
}

#[tokio::test]
async fn answers_are_checked_against_their_bounds() {
    let app = TestApp::spawn().await;
    let session = uuid();
    let free = gate_id(&app.open(&session, &ask(&uuid(), &uuid(), "Anything?")).await);
    let too_long = "é".repeat(8193); // 16386 bytes
    let body = app.answer(&session, &free, &too_long).await.expect_error(400, "gate_values_invalid");
    assert_eq!(body["error"]["fields"][0]["code"], "too_long");
    // Exactly at the limit is fine, and the preview keeps 80 scalar values.
    let at_limit = "é".repeat(8192);
    app.answer(&session, &free, &at_limit).await.expect(202);
    let view = app.view(&session, &free).await;
    assert_eq!(view["answer"], at_limit.as_str());
    let preview = view["resolution"]["audit"]["data"]["answer_preview"].as_str().unwrap();
    assert_eq!(preview.chars().count(), 80);

    let mut open = ask(&uuid(), &uuid(), "Pick or say");
    open["choices"] = json!(["a", "b"]);
    open["allow_other"] = json!(true);
    let other = gate_id(&app.open(&session, &open).await);
    app.answer(&session, &other, "something else").await.expect(202);
}

#[tokio::test]
async fn a_full_gate_response_body_is_accepted_and_its_source_ignored() {
    let app = TestApp::spawn().await;
    let (session, _, gate) = app.open_asking("Q?").await;
    let body = json!({"gate_id": gate.to_uppercase(), "action": "answer", "values": {"answer": "A"}, "source": {"kind": "policy", "reason": "timeout"}});
    app.post(&format!("/v1/sessions/{session}/gates/{gate}"), &body).await.expect(202);
    let view = app.view(&session, &gate).await;
    assert_eq!(view["resolution"]["source"], json!({"kind": "user"}), "the server stamps provenance");
    assert_eq!(view["resolution"]["reason"], "answered");
}

#[tokio::test]
async fn on_a_resolved_gate_the_key_and_state_are_checked_before_the_answer() {
    let app = TestApp::spawn().await;
    let (session, _, gate) = app.open_asking("Order?").await;
    let path = format!("/v1/sessions/{session}/gates/{gate}");
    app.post_with(&path, &[("idempotency-key", "k")], &answer("first")).await.expect(202);

    let bad_action = json!({"action": "nope", "values": {"answer": "x"}});
    let bad_values = json!({"action": "answer", "values": {"answer": 1}});
    // The winner's key with an answer that does not even fit: a conflict, not a 400.
    app.post_with(&path, &[("idempotency-key", "k")], &bad_values).await.expect_error(409, "idempotency_conflict");
    // Without the key: the gate is simply no longer open.
    app.post(&path, &bad_action).await.expect_error(409, "gate_not_ready");
    app.post(&path, &bad_values).await.expect_error(409, "gate_not_ready");
    // A 404 comes before all of that.
    app.post(&format!("/v1/sessions/{}/gates/{gate}", uuid()), &bad_action).await.expect_error(404, "gate_not_found");
}

#[tokio::test]
async fn chunked_bodies_follow_the_same_rules() {
    let app = TestApp::spawn_with(|args| args.http.max_body = 4096).await;
    let (session, _, gate) = app.open_asking("Chunked?").await;
    let path = format!("/v1/sessions/{session}/gates/{gate}");
    let body = answer("yes").to_string().into_bytes();
    app.send_chunked(&path, &[], body.clone()).await.expect_error(415, "unsupported_media_type");
    let big = answer(&"x".repeat(8000)).to_string().into_bytes();
    app.send_chunked(&path, &[("content-type", "application/json")], big).await.expect_error(413, "payload_too_large");
    assert_eq!(app.view(&session, &gate).await["state"], "open");
    app.send_chunked(&path, &[("content-type", "application/json; charset=utf-8")], body).await.expect(202);
}
