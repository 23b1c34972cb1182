//! What survives a crash, and what refuses to start: the real binary, SIGKILL and restarts on the
//! same database file.

use std::ffi::OsStr;
use std::time::Duration;

use futures_util::future::join_all;

use crate::database::sqlite_only;
use crate::helpers::{
    EventStream, NET_TIMEOUT, ServerProcess, TestApp, ask, bounded, gate_id, sqlite_db, temp_db, uuid,
};

#[tokio::test]
async fn a_gate_opened_before_sigkill_is_answerable_after_restart() {
    let (_dir, db) = temp_db();
    let server = ServerProcess::start(&db);
    let (session, loop_id, gate) = server.open_asking("Survive?").await;
    server.kill();

    let server = ServerProcess::start(&db);
    assert_eq!(server.view(&session, &gate).await["state"], "open");
    server.answer(&session, &gate, "yes").await.expect(202);
    let inbox = server.inbox(&session, &loop_id).await;
    assert_eq!(inbox.len(), 1);
    assert_eq!(inbox[0]["command"]["answer"], "yes");
}

#[tokio::test]
async fn an_acknowledged_answer_survives_sigkill_until_the_loop_acks_it() {
    let (_dir, db) = temp_db();
    let server = ServerProcess::start(&db);
    let (session, loop_id, gate) = server.open_asking("Deploy?").await;
    let path = format!("/v1/sessions/{session}/gates/{gate}");
    let key = [("idempotency-key", "deploy-1")];
    let accepted = server.post_with(&path, &key, &crate::helpers::answer("ship it")).await.expect(202).json();
    // Killed right after the 202: no shutdown code, no checkpoint.
    server.kill();

    let server = ServerProcess::start(&db);
    // A client that never saw its 202 retries with the same key and gets it now.
    let replayed = server.post_with(&path, &key, &crate::helpers::answer("ship it")).await.expect(202).json();
    assert_eq!(replayed, accepted);
    let inbox = server.inbox(&session, &loop_id).await;
    assert_eq!(inbox.len(), 1, "the acknowledged answer is still delivered");
    let command = &inbox[0]["command"];
    assert_eq!(command["answer"], "ship it");
    assert_eq!(command["gate_id"], gate.as_str());
    let view = server.view(&session, &gate).await;
    assert_eq!(view["resolved_seq"], accepted["journal_seq"]);

    let command_id = command["command_id"].as_str().unwrap();
    let ack = format!("/v1/sessions/{session}/loops/{loop_id}/commands/{command_id}/ack");
    server.send(reqwest::Method::POST, &ack, &[], None).await.expect(204);
    assert_eq!(server.terminate(Duration::from_secs(5)), Some(0));

    let server = ServerProcess::start(&db);
    assert!(server.inbox(&session, &loop_id).await.is_empty(), "acked: gone from the default view");
    let all = server.inbox_with_acked(&session, &loop_id).await;
    assert_eq!(all.len(), 1);
    assert_eq!(all[0]["command"]["command_id"], command_id);
    assert!(all[0]["acked_at"].is_string());
}

#[tokio::test]
async fn sigterm_ends_streams_and_long_polls_and_closes_the_database_cleanly() {
    let (_dir, db) = temp_db();
    let server = ServerProcess::start(&db);
    let (session, loop_id, gate) = server.open_asking("Still there?").await;

    let wait = server.spawn_get(format!("/v1/sessions/{session}/gates/{gate}/wait?timeout=60"));
    let poll = server.spawn_get(format!("/v1/sessions/{session}/loops/{loop_id}/commands?wait=60"));
    // A hundred open streams: journal streams and inbox streams.
    let inbox = format!("/v1/sessions/{session}/loops/{loop_id}/commands");
    let mut streams = join_all((0..100).map(|i| {
        let path = if i % 2 == 0 { "/v1/events?after=0" } else { inbox.as_str() };
        EventStream::connect(&server.client, path, &[])
    }))
    .await;
    // And a client that sent half a body and went quiet.
    let addr: std::net::SocketAddr = server.base.trim_start_matches("http://").parse().unwrap();
    let mut half = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST /v1/sessions/{session}/gates HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"loop_id\""
    );
    tokio::io::AsyncWriteExt::write_all(&mut half, head.as_bytes()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let code = tokio::task::spawn_blocking(move || server.terminate(Duration::from_secs(5))).await.unwrap();
    assert_eq!(code, Some(0), "a clean exit within 5 s of SIGTERM");
    for stream in &mut streams {
        // Whatever was buffered, then the end of the body.
        while let Some(frame) = stream.next_within(NET_TIMEOUT).await.expect("the stream ends") {
            assert!(frame.event.as_deref() != Some("reset"), "{frame:?}");
        }
    }
    // Long-polls were answered (still open, nothing queued), not cut off.
    assert_eq!(bounded("wait", wait).await.unwrap().expect(200).json()["state"], "open");
    assert!(bounded("poll", poll).await.unwrap().expect(200).json()["commands"].as_array().unwrap().is_empty());

    // Checkpointed and closed: no WAL left behind, and the file is sound.
    let wal = db.with_extension("db-wal");
    assert!(!wal.exists() || std::fs::metadata(&wal).unwrap().len() == 0, "the WAL was checkpointed");
    let conn = rusqlite::Connection::open(&db).unwrap();
    let check: String = conn.query_row("PRAGMA integrity_check", [], |r| r.get(0)).unwrap();
    assert_eq!(check, "ok");
}

#[tokio::test]
async fn a_second_server_on_the_same_database_refuses_to_start() {
    let Some((_dir, db)) = sqlite_db("the lock file (replicas may share a PostgreSQL database)") else {
        return;
    };
    let first = ServerProcess::start(&db);
    let (code, stderr) = ServerProcess::serve_to_exit(&db, "127.0.0.1:0", &[]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("in use by another gatehouse server"), "a clear message: {stderr}");
    // The first one is unaffected.
    first.get("/readyz").await.expect(200);
}

#[test]
fn unusable_database_files_give_clear_errors() {
    if sqlite_only("a database file") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let start = |db: &std::path::Path| ServerProcess::serve_to_exit(db, "127.0.0.1:0", &[]);

    let garbage = dir.path().join("garbage.db");
    std::fs::write(&garbage, vec![0x5a; 8192]).unwrap();
    let (code, stderr) = start(&garbage);
    assert_eq!(code, Some(1));
    assert!(stderr.contains("is not a SQLite database"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");

    let newer = dir.path().join("newer.db");
    {
        let conn = rusqlite::Connection::open(&newer).unwrap();
        conn.execute_batch("CREATE TABLE t (x); PRAGMA application_id = 1734440037; PRAGMA user_version = 99;")
            .unwrap();
    }
    let (code, stderr) = start(&newer);
    assert_eq!(code, Some(1));
    assert!(stderr.contains("schema version 99, newer than this gatehouse"), "{stderr}");

    let foreign = dir.path().join("foreign.db");
    rusqlite::Connection::open(&foreign).unwrap().execute_batch("CREATE TABLE notes (body TEXT);").unwrap();
    let (code, stderr) = start(&foreign);
    assert_eq!(code, Some(1));
    assert!(stderr.contains("not a gatehouse database"), "{stderr}");

    let (code, stderr) =
        ServerProcess::run_to_exit(&[OsStr::new("serve"), OsStr::new("--sync"), OsStr::new("sometimes")]);
    assert_eq!(code, Some(1), "usage errors exit 1: {stderr}");
    let (code, _) = ServerProcess::run_to_exit(&[OsStr::new("serve"), OsStr::new("--help")]);
    assert_eq!(code, Some(0));
}

#[tokio::test]
async fn a_forced_second_writer_cannot_break_exactly_once() {
    let Some((dir, db)) = sqlite_db("a second SQLite connection") else {
        return;
    };
    let app = TestApp::start(&db, |_| {}).await;
    let (session, loop_id, gate) = app.open_asking("Guarded?").await;
    app.answer(&session, &gate, "first").await.expect(202);

    // A second connection, past the server's lock file, writes as it likes.
    let intruder = rusqlite::Connection::open(&db).unwrap();
    intruder.busy_timeout(Duration::from_secs(5)).unwrap();
    let second_resolution = intruder.execute(
        "INSERT INTO journal (session_id, gate_id, type, event) VALUES (?1, ?2, 'GateResolved', '{}')",
        [&session, &gate],
    );
    assert!(second_resolution.unwrap_err().to_string().contains("UNIQUE"), "one resolution per gate");
    let second_command = intruder.execute(
        "INSERT INTO inbox (session_id, loop_id, command_id, gate_id, command) VALUES (?1, ?2, ?3, ?4, '{}')",
        [&session, &loop_id, &uuid(), &gate],
    );
    assert!(second_command.unwrap_err().to_string().contains("UNIQUE"), "one command per gate");

    // Even with the gate forced open again, a second answer cannot resolve it twice.
    intruder
        .execute("UPDATE gates SET state = 'open', resolved_seq = NULL, answer = NULL WHERE gate_id = ?1", [&gate])
        .unwrap();
    // The guards refuse the second claim's journal row: the server reports an internal error (the
    // file was tampered with), outside the contract, so this request bypasses its checks.
    let url = format!("{}/v1/sessions/{session}/gates/{gate}", app.base);
    let resp = reqwest::Client::new().post(url).json(&crate::helpers::answer("second")).send().await.unwrap();
    assert_eq!(resp.status(), 500, "a second answer must not be accepted");
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], "internal", "no internal cause leaks: {body}");
    let resolutions = app.journal().await.iter().filter(|e| e["event"]["type"] == "GateResolved").count();
    assert_eq!(resolutions, 1);
    let inbox = app.inbox(&session, &loop_id).await;
    assert_eq!(inbox.len(), 1);
    assert_eq!(inbox[0]["command"]["answer"], "first");
    app.get("/healthz").await.expect(200);
    drop(intruder);
    drop(app.stop().await);
    drop(dir);
}

#[tokio::test]
async fn a_truncated_database_gives_a_clear_error_at_start() {
    let Some((dir, db)) = sqlite_db("a database file") else {
        return;
    };
    let app = TestApp::start(&db, |_| {}).await;
    for _ in 0..50 {
        app.open(&uuid(), &ask(&uuid(), &uuid(), &"q".repeat(2000))).await;
    }
    drop(app.stop().await);
    let full = std::fs::read(&db).unwrap();
    for keep in [full.len() / 2, full.len() - 4096, 4096, 100] {
        let cut = db.with_file_name(format!("cut-{keep}.db"));
        std::fs::write(&cut, &full[..keep]).unwrap();
        let (code, stderr) = ServerProcess::serve_to_exit(&cut, "127.0.0.1:0", &[]);
        assert_eq!(code, Some(1), "{keep} bytes: {stderr}");
        assert!(!stderr.contains("panicked"), "{keep} bytes: {stderr}");
        let said = stderr.lines().last().unwrap_or_default();
        assert!(said.contains(&cut.display().to_string()), "names the file: {said}");
        assert!(
            ["truncated", "damaged", "corrupt", "not a SQLite database"].iter().any(|w| said.contains(w)),
            "{said}"
        );
        eprintln!("{keep} of {} bytes: {said}", full.len());
    }
    drop(dir);
}

/// On a fresh server, `writers` at once open and answer `rounds` gates each with 4 KB questions
/// (each round writes several full pages), back to back; then the WAL file must hold fewer than
/// `bound` frames (it never shrinks: SQLite writes it over from its start).
async fn assert_wal_stays_below(bound: u64, writers: usize, rounds: usize) {
    let Some((_dir, db)) = sqlite_db("the SQLite WAL") else {
        return;
    };
    let app = TestApp::start(&db, |_| {}).await;
    let question = "q".repeat(4000);
    join_all((0..writers).map(|_| async {
        let (session, loop_id) = (uuid(), uuid());
        for n in 0..rounds {
            let gate = gate_id(&app.open(&session, &ask(&loop_id, &uuid(), &question)).await);
            app.answer(&session, &gate, &format!("answer {n}")).await.expect(202);
        }
    }))
    .await;
    let wal = std::fs::metadata(db.with_extension("db-wal")).expect("a WAL beside the database").len();
    drop(app.stop().await);
    let frames = wal / (4096 + 24);
    assert!(frames < bound, "the WAL holds {frames} frames");
}

/// The checkpointer copies the WAL back beside the writer and hands it the last short tail, so
/// SQLite starts the WAL over (its automatic checkpoint is replaced) even with commits back to
/// back: the WAL file stays near the threshold of 1000 frames while far more are written. When
/// the checkpointer does nothing, the writer's own fallback lets the WAL reach 4000 frames.
#[tokio::test]
async fn the_checkpointer_keeps_the_wal_near_its_threshold() {
    assert_wal_stays_below(1600, 1, 600).await;
}

/// Many writers at once: batches of commits leave the checkpointer's passes less of a chance to
/// copy every frame, and the checkpoints (the checkpointer's, its tail, past 4000 frames the
/// writer's own) still keep the WAL bounded while several times its bound is written. Without any
/// checkpoint it would hold every frame.
#[tokio::test]
async fn steady_writes_keep_the_wal_bounded() {
    assert_wal_stays_below(4600, 16, 100).await;
}
