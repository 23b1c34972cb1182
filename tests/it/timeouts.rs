//! Timeout policies (spec §8): deadlines recorded, default answers given through the same claim
//! as a person's, durable across SIGKILL, one timer for all, caps and deadline ordering.

use std::time::Duration;

use futures_util::StreamExt;
use serde_json::{Value, json};

use crate::helpers::{Client, ServerProcess, TestApp, ask, eventually, gate_id, temp_db, uuid};

const SECOND: i64 = 1_000_000_000;

/// An open body whose policy answers `default` after `timeout_ns`.
fn responding(loop_id: &str, timeout_ns: i64, default: &str) -> Value {
    let mut body = ask(loop_id, &uuid(), "Which database?");
    body["choices"] = json!(["postgres", "mysql"]);
    body["response_policy"] = json!({"timeout": timeout_ns, "on_timeout": "respond", "response": {"action": "answer", "values": {"answer": default}}});
    body
}

fn resolutions(journal: &[Value], gate: &str) -> Vec<Value> {
    journal
        .iter()
        .filter(|e| e["event"]["type"] == "GateResolved" && e["event"]["gate_id"] == gate)
        .map(|e| e["event"].clone())
        .collect()
}

#[tokio::test]
async fn a_respond_policy_answers_with_its_template_at_the_deadline() {
    let app = TestApp::spawn().await;
    let (session, loop_id) = (uuid(), uuid());
    let view = app.open(&session, &responding(&loop_id, SECOND, "postgres")).await;
    let gate = gate_id(&view);
    assert!(view["deadline"].is_string());
    assert_eq!(view["gate"]["response_policy"]["on_timeout"], "respond");

    let resolved = app.get(&format!("/v1/sessions/{session}/gates/{gate}/wait?timeout=30")).await.expect(200).json();
    assert_eq!(resolved["state"], "resolved");
    assert_eq!(resolved["answer"], "postgres");
    let resolution = &resolved["resolution"];
    assert_eq!(resolution["reason"], "policy_response");
    assert_eq!(resolution["action"], "answer");
    assert_eq!(resolution["source"], json!({"kind": "policy", "reason": "timeout"}));
    assert_eq!(resolution["audit"]["data"]["answer_preview"], "postgres");

    let inbox = app.inbox(&session, &loop_id).await;
    assert_eq!(inbox.len(), 1);
    assert_eq!(inbox[0]["command"]["answer"], "postgres");
    assert!(inbox[0]["command"].get("agency").is_none(), "a policy answer has no agency");
    eventually("the deadline is disarmed", async || app.armed_deadlines() == 0).await;
}

#[tokio::test]
async fn a_person_who_answers_first_wins_and_the_deadline_is_dropped() {
    let app = TestApp::spawn().await;
    let (session, loop_id) = (uuid(), uuid());
    let gate = gate_id(&app.open(&session, &responding(&loop_id, 3 * SECOND, "postgres")).await);
    eventually("armed once the open committed", async || app.armed_deadlines() == 1).await;
    app.answer(&session, &gate, "mysql").await.expect(202);
    eventually("the deadline is disarmed", async || app.armed_deadlines() == 0).await;

    // Past the deadline, the person's answer is still the only one.
    tokio::time::sleep(Duration::from_millis(3500)).await;
    let journal = app.journal().await;
    let resolved = resolutions(&journal, &gate);
    assert_eq!(resolved.len(), 1);
    assert_eq!(resolved[0]["reason"], "answered");
    assert_eq!(resolved[0]["source"]["kind"], "user");
    let inbox = app.inbox(&session, &loop_id).await;
    assert_eq!(inbox.len(), 1);
    assert_eq!(inbox[0]["command"]["answer"], "mysql");
    assert_eq!(inbox[0]["command"]["agency"], 1);
}

#[tokio::test]
async fn a_deadline_that_passed_while_the_server_was_down_is_answered_at_start() {
    let (_dir, db) = temp_db();
    let (session, loop_id) = (uuid(), uuid());
    let server = ServerProcess::start(&db);
    let gate = gate_id(&server.open(&session, &responding(&loop_id, SECOND, "postgres")).await);
    server.kill();
    tokio::time::sleep(Duration::from_secs(2)).await;

    let server = ServerProcess::start(&db);
    // Overdue gates are answered before the server says it listens (and so before it serves).
    let listening = gatehouse::domain::Timestamp::now().to_string();
    let view = server.view(&session, &gate).await;
    assert_eq!(view["state"], "resolved");
    assert_eq!(view["resolution"]["reason"], "policy_response");
    let answered_at = view["resolution"]["created_at"].as_str().unwrap();
    assert!(answered_at < listening.as_str(), "answered at {answered_at}, before listening at {listening}");
    let inbox = server.inbox(&session, &loop_id).await;
    assert_eq!(inbox.len(), 1);
    assert_eq!(inbox[0]["command"]["answer"], "postgres");
}

#[tokio::test]
async fn a_thousand_deadlines_resolve_exactly_once_with_one_timer() {
    let app = TestApp::spawn().await;
    let metrics = tokio::runtime::Handle::current().metrics();
    // A client without keep-alive, so no connection task outlives its request.
    let client = Client::without_keep_alive(app.base.clone());
    client.get("/healthz").await.expect(200);
    // The test's own keep-alive connection (used for the checks below) belongs to the baseline.
    app.get("/healthz").await.expect(200);
    // The baseline: the server's own long-lived tasks, once the first connection has closed.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let baseline = metrics.num_alive_tasks();

    let session = uuid();
    let opened: Vec<String> = futures_util::stream::iter(0..1000)
        .map(|i| {
            let client = client.clone();
            let session = session.clone();
            async move {
                // Deadlines spread over 1 to 3 s.
                let body = responding(&uuid(), SECOND + i * 2_000_000, "postgres");
                gate_id(&client.open(&session, &body).await)
            }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    assert_eq!(opened.len(), 1000);

    eventually("every gate is answered", async || {
        let open = app.get(&format!("/v1/sessions/{session}/gates?state=open&limit=1")).await.expect(200).json();
        open["gates"].as_array().unwrap().is_empty()
    })
    .await;
    let events: Vec<Value> =
        app.journal_all().await.into_iter().filter(|e| e["event"]["type"] == "GateResolved").collect();
    assert_eq!(events.len(), 1000, "one GateResolved per gate, nothing more");
    let mut gates: Vec<&str> = events.iter().map(|e| e["event"]["gate_id"].as_str().unwrap()).collect();
    gates.sort();
    gates.dedup();
    assert_eq!(gates.len(), 1000);
    assert!(events.iter().all(|e| e["event"]["reason"] == "policy_response"));
    eventually("no deadline stays armed", async || app.armed_deadlines() == 0).await;
    // On PostgreSQL each pooled connection has a task of its own, and the pool grows under load
    // (to at most 16 connections): those are not tasks per gate.
    let pool = if crate::database::on_postgres() { 16 } else { 0 };
    eventually("no task per gate outlives it", async || {
        let alive = metrics.num_alive_tasks();
        eprintln!("alive tasks: {alive} (baseline {baseline}, pooled connections up to {pool})");
        alive <= baseline + pool
    })
    .await;
}

#[tokio::test]
async fn bad_policies_and_the_open_gates_cap_give_the_documented_errors() {
    let app = TestApp::spawn_with(|args| {
        args.http.max_timeout = Duration::from_secs(3600);
        args.http.max_open_gates = 2;
    })
    .await;
    let session = uuid();
    let path = format!("/v1/sessions/{session}/gates");
    let field = |body: &Value| {
        (
            body["error"]["fields"][0]["path"].as_str().unwrap_or("").to_owned(),
            body["error"]["fields"][0]["code"].as_str().unwrap_or("").to_owned(),
        )
    };

    let mut bad_action = responding(&uuid(), SECOND, "postgres");
    bad_action["response_policy"]["response"]["action"] = json!("approve");
    let body = app.post(&path, &bad_action).await.expect_error(400, "gate_action_invalid");
    assert_eq!(field(&body), ("/response_policy/response/action".into(), "not_a_choice".into()));

    let not_a_choice = responding(&uuid(), SECOND, "oracle");
    let body = app.post(&path, &not_a_choice).await.expect_error(400, "gate_values_invalid");
    assert_eq!(field(&body), ("/response_policy/response/values/answer".into(), "not_a_choice".into()));

    let policy = |p: Value| {
        let mut body = ask(&uuid(), &uuid(), "Q");
        body["response_policy"] = p;
        body
    };
    let cases = [
        (json!({"timeout": SECOND, "on_timeout": "model_decide"}), "/response_policy/on_timeout", "out_of_range"),
        (json!({"timeout": SECOND, "on_timeout": "respond"}), "/response_policy/response", "required"),
        (
            json!({"on_timeout": "respond", "response": {"action": "answer", "values": {"answer": "x"}}}),
            "/response_policy/timeout",
            "required",
        ),
        (
            json!({"timeout": SECOND, "response": {"action": "answer", "values": {"answer": "x"}}}),
            "/response_policy/response",
            "unknown_key",
        ),
        (json!({"timeout": 7200 * SECOND}), "/response_policy/timeout", "out_of_range"),
        (
            json!({"timeout": SECOND, "on_timeout": "respond", "response": {"action": "answer", "extra": 1}}),
            "/response_policy",
            "type",
        ),
    ];
    for (p, path_, code) in cases {
        let body = app.post(&path, &policy(p.clone())).await.expect_error(400, "invalid_body");
        assert_eq!(field(&body), (path_.into(), code.into()), "{p}");
    }

    // The cap counts open gates of the session; a re-ask at the cap still finds its gate.
    let first = ask(&uuid(), &uuid(), "one");
    let gate = gate_id(&app.open(&session, &first).await);
    app.open(&session, &ask(&uuid(), &uuid(), "two")).await;
    let refused = app.post(&path, &ask(&uuid(), &uuid(), "three")).await.expect_error(503, "gate_capacity");
    assert_eq!(refused["error"]["retryable"], true);
    app.post(&path, &first).await.expect(200);
    app.open(&uuid(), &ask(&uuid(), &uuid(), "another session")).await;
    app.answer(&session, &gate, "done").await.expect(202);
    app.open(&session, &ask(&uuid(), &uuid(), "three")).await;
}

#[tokio::test]
async fn listings_order_by_deadline_with_gates_without_one_last() {
    let app = TestApp::spawn().await;
    let session = uuid();
    let with = |minutes: i64, q: &str| {
        let mut body = ask(&uuid(), &uuid(), q);
        body["response_policy"] = json!({"timeout": minutes * 60 * SECOND, "on_timeout": "wait"});
        body
    };
    let none_a = gate_id(&app.open(&session, &ask(&uuid(), &uuid(), "no deadline a")).await);
    let late = gate_id(&app.open(&session, &with(30, "late")).await);
    let soon = gate_id(&app.open(&session, &with(5, "soon")).await);
    let none_b = gate_id(&app.open(&session, &ask(&uuid(), &uuid(), "no deadline b")).await);
    let middle = gate_id(&app.open(&session, &with(10, "middle")).await);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(app.armed_deadlines(), 0, "wait policies record a deadline only");

    let expected = [&soon, &middle, &late, &none_a, &none_b];
    let seen = app.listed_gate_ids(&format!("/v1/sessions/{session}/gates?order=deadline&limit=2")).await;
    assert_eq!(seen, expected.map(|g| g.to_owned()));
    app.get("/v1/gates?order=deadline&after=o5").await.expect_error(400, "invalid_parameter");
}

#[tokio::test]
async fn a_person_and_the_timer_at_the_same_moment_make_one_resolution() {
    let app = TestApp::spawn().await;
    for round in 0..5 {
        let (session, loop_id) = (uuid(), uuid());
        let gate = gate_id(&app.open(&session, &responding(&loop_id, SECOND, "postgres")).await);
        // Answer right around the deadline; either may win, never both.
        tokio::time::sleep(Duration::from_millis(950 + round * 20)).await;
        let person = app.answer(&session, &gate, "mysql").await;
        assert!(person.status == 202 || person.status == 409, "{}", person.status);
        let view = app.get(&format!("/v1/sessions/{session}/gates/{gate}/wait?timeout=10")).await.expect(200).json();
        let journal = app.journal().await;
        let resolved = resolutions(&journal, &gate);
        assert_eq!(resolved.len(), 1);
        let expected = if person.status == 202 { "mysql" } else { "postgres" };
        assert_eq!(view["answer"], expected);
        let inbox = app.inbox(&session, &loop_id).await;
        assert_eq!(inbox.len(), 1);
        assert_eq!(inbox[0]["command"]["answer"], expected);
    }
    eventually("nothing stays armed", async || app.armed_deadlines() == 0).await;
}

#[tokio::test]
async fn listings_order_by_resolution_with_open_gates_last() {
    let app = TestApp::spawn().await;
    let session = uuid();
    let mut gates = Vec::new();
    for i in 0..4 {
        gates.push(gate_id(&app.open(&session, &ask(&uuid(), &uuid(), &format!("Q{i}"))).await));
    }
    let still_open = gate_id(&app.open(&session, &ask(&uuid(), &uuid(), "open")).await);
    // Resolved in another order than opened: 2, 0, 3, then 1 closed.
    for i in [2, 0, 3] {
        app.answer(&session, &gates[i], "done").await.expect(202);
    }
    app.send(reqwest::Method::POST, &format!("/v1/sessions/{session}/gates/{}/close", gates[1]), &[], None)
        .await
        .expect(200);

    let expected = [&gates[1], &gates[3], &gates[0], &gates[2], &still_open];
    let seen = app.listed_gate_ids(&format!("/v1/sessions/{session}/gates?order=resolved&limit=2")).await;
    assert_eq!(seen, expected.map(|g| g.to_owned()));
    let finished = app
        .get(&format!("/v1/sessions/{session}/gates?state=resolved,closed&order=resolved&limit=2"))
        .await
        .expect(200)
        .json();
    let ids: Vec<String> = finished["gates"].as_array().unwrap().iter().map(gate_id).collect();
    assert_eq!(ids, [gates[1].clone(), gates[3].clone()]);
}
