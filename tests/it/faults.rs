//! Storage faults (spec §7 `--fault-file`): a failed write is a retryable 503 that changes
//! nothing, `/readyz` reports it, and the writer finds its way back once storage recovers.

use std::path::{Path, PathBuf};

use crate::database::sqlite_only;
use crate::helpers::{Client, TestApp, ask, eventually, gate_id, sqlite_db, uuid};

/// Polls `/readyz` until it answers `status` (bounded).
async fn await_ready(client: &Client, status: u16) {
    eventually(&format!("/readyz answers {status}"), async || client.get("/readyz").await.status == status).await;
}

fn set_fault(path: &Path, fault: &str) {
    std::fs::write(path, fault).unwrap();
}

/// A server whose storage fails as the file `fault` says (empty or absent: no fault), kept in a
/// directory of its own that lives as long as the returned `TempDir`. `None` on PostgreSQL, where
/// the test is skipped: the fault file is SQLite's.
async fn with_fault_file() -> Option<(tempfile::TempDir, PathBuf, TestApp)> {
    if sqlite_only("the fault file and the write lock") {
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let fault = dir.path().join("fault");
    let app = TestApp::spawn_with(|args| args.store.fault_file = Some(fault.clone())).await;
    Some((dir, fault, app))
}

#[tokio::test]
async fn a_read_only_database_fails_answers_with_a_retryable_503_and_recovers() {
    let Some((_dir, fault, app)) = with_fault_file().await else {
        return;
    };
    let (session, loop_id, gate) = app.open_asking("Through a fault?").await;
    let path = format!("/v1/sessions/{session}/gates/{gate}");
    let key = [("idempotency-key", "retry-me")];

    set_fault(&fault, "readonly");
    let body =
        app.post_with(&path, &key, &crate::helpers::answer("yes")).await.expect_error(503, "storage_unavailable");
    assert_eq!(body["error"]["retryable"], true);
    assert!(!body["error"]["message"].as_str().unwrap().contains("readonly"), "no internal causes in 5xx bodies");
    app.get("/readyz").await.expect_error(503, "storage_unavailable");
    // Nothing changed, and reads still work.
    assert_eq!(app.view(&session, &gate).await["state"], "open");
    assert!(app.inbox(&session, &loop_id).await.is_empty());

    set_fault(&fault, "");
    await_ready(&app, 200).await;
    let accepted = app.post_with(&path, &key, &crate::helpers::answer("yes")).await.expect(202).json();
    let again = app.post_with(&path, &key, &crate::helpers::answer("yes")).await.expect(202).json();
    assert_eq!(accepted, again, "the retry with the same key is the same answer");
    assert_eq!(app.inbox(&session, &loop_id).await.len(), 1);
}

#[tokio::test]
async fn a_full_disk_rolls_back_the_whole_transaction_and_recovers() {
    let Some((_dir, fault, app)) = with_fault_file().await else {
        return;
    };
    let session = uuid();
    let big = "q".repeat(4000);
    let body = ask(&uuid(), &uuid(), &big);
    let loop_id = uuid();
    let waiting = gate_id(&app.open(&session, &ask(&loop_id, &uuid(), &big)).await);
    let events_before = app.journal().await.len();

    set_fault(&fault, "full:1");
    app.post(&format!("/v1/sessions/{session}/gates"), &body).await.expect_error(503, "storage_unavailable");
    await_ready(&app, 503).await;
    let refused = app.answer(&session, &waiting, &big).await.expect_error(503, "storage_unavailable");
    assert_eq!(refused["error"]["retryable"], true);
    assert_eq!(app.journal().await.len(), events_before, "no half-written gate or answer");
    assert_eq!(app.view(&session, &waiting).await["state"], "open", "the open gate stays open");
    assert!(app.inbox(&session, &loop_id).await.is_empty());

    set_fault(&fault, "");
    await_ready(&app, 200).await;
    // The same open is simply made again, and the answer goes through.
    app.post(&format!("/v1/sessions/{session}/gates"), &body).await.expect(201);
    app.answer(&session, &waiting, &big).await.expect(202);
    assert_eq!(app.journal().await.len(), events_before + 3);
    assert_eq!(app.inbox(&session, &loop_id).await.len(), 1);
}

#[tokio::test]
async fn a_timeout_answer_that_fails_is_retried_until_storage_recovers() {
    let Some((_dir, fault, app)) = with_fault_file().await else {
        return;
    };
    let (session, loop_id) = (uuid(), uuid());
    let mut body = ask(&loop_id, &uuid(), "Default me");
    body["response_policy"] = serde_json::json!({"timeout": 500_000_000, "on_timeout": "respond",
        "response": {"action": "answer", "values": {"answer": "fallback"}}});
    let gate = gate_id(&app.open(&session, &body).await);
    set_fault(&fault, "readonly");
    await_ready(&app, 503).await; // the timer's claim failed
    assert_eq!(app.view(&session, &gate).await["state"], "open");
    assert_eq!(app.armed_deadlines(), 1, "a failed claim stays armed");

    set_fault(&fault, "");
    let view = app.get(&format!("/v1/sessions/{session}/gates/{gate}/wait?timeout=30")).await.expect(200).json();
    assert_eq!(view["answer"], "fallback", "answered once storage was back");
    assert_eq!(app.inbox(&session, &loop_id).await.len(), 1);
}

#[tokio::test]
async fn another_connection_holding_the_write_lock_gives_retryable_503s_and_the_server_recovers() {
    let Some((dir, db)) = sqlite_db("the fault file and the write lock") else {
        return;
    };
    let app = TestApp::start(&db, |_| {}).await;
    let (session, loop_id, gate) = app.open_asking("Locked out?").await;
    let path = format!("/v1/sessions/{session}/gates/{gate}");
    let key = [("idempotency-key", "through-the-lock")];
    let journal_before = app.journal().await;

    // A second connection (not a gatehouse) takes SQLite's write lock and holds it.
    let intruder = rusqlite::Connection::open(&db).unwrap();
    intruder.execute_batch("BEGIN IMMEDIATE").unwrap();
    let body =
        app.post_with(&path, &key, &crate::helpers::answer("yes")).await.expect_error(503, "storage_unavailable");
    assert_eq!(body["error"]["retryable"], true);
    app.get("/readyz").await.expect_error(503, "storage_unavailable");
    // Nothing is half-written: the gate is open, the journal and the inbox are as they were.
    assert_eq!(app.view(&session, &gate).await["state"], "open");
    assert_eq!(app.journal().await, journal_before);
    assert!(app.inbox(&session, &loop_id).await.is_empty());

    intruder.execute_batch("ROLLBACK").unwrap();
    await_ready(&app, 200).await;
    app.post_with(&path, &key, &crate::helpers::answer("yes")).await.expect(202);
    assert_eq!(app.inbox(&session, &loop_id).await.len(), 1);
    drop(intruder);
    drop(app.stop().await);
    drop(dir);
}
