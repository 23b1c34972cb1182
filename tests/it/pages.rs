//! Bounded responses (issue 15): listing, journal and inbox pages are capped in bytes as well as
//! rows, a page that reaches the cap ends early with a cursor that goes on from there, and one
//! token cannot make the server hold many large pages by asking for them and reading none.

use std::collections::HashSet;

use futures_util::future::join_all;
use serde_json::{Value, json};

use crate::helpers::{Client, ServerProcess, TestApp, bounded, gate_id, temp_db, uuid};

/// The default `--max-page-bytes`.
const PAGE_BYTES: usize = 1024 * 1024;

/// The largest gate an open allows: a 4096-byte question and 64 choices of 256 bytes.
fn largest(loop_id: &str, n: usize) -> Value {
    let question = format!("{n:04} {}", "q".repeat(4091));
    let choices: Vec<String> = (0..64).map(|c| format!("{n:04}-{c:02} {}", "c".repeat(248))).collect();
    json!({"loop_id": loop_id, "tool_execution_id": uuid(), "question": question, "choices": choices})
}

/// Opens `count` of the largest gates in one session, 16 at a time.
async fn open_largest(client: &Client, session: &str, loop_id: &str, count: usize) -> Vec<Value> {
    let mut views = Vec::new();
    for chunk in (0..count).collect::<Vec<_>>().chunks(16) {
        let bodies: Vec<Value> = chunk.iter().map(|n| largest(loop_id, *n)).collect();
        views.extend(join_all(bodies.iter().map(|body| client.open(session, body))).await);
    }
    views
}

#[tokio::test]
async fn pages_of_the_largest_gates_stay_under_the_byte_cap_and_their_cursors_go_on() {
    let app = TestApp::spawn().await;
    let (session, loop_id) = (uuid(), uuid());
    let views = open_largest(&app, &session, &loop_id, 400).await;
    let one = serde_json::to_vec(&views[0]).unwrap().len();
    assert!(400 * one > 10 * PAGE_BYTES, "the gates alone are far more than a page: {one} bytes each");

    // Listings: every page within the cap (a page may pass it by less than one gate), the
    // cursors lead through all 400 exactly once.
    let (mut seen, mut pages) = (Vec::new(), 0);
    let mut path = "/v1/gates?limit=1000".to_owned();
    loop {
        let resp = app.get(&path).await.expect(200);
        assert!(resp.body.len() <= PAGE_BYTES + one, "a listing page of {} bytes", resp.body.len());
        let page = resp.json();
        seen.extend(page["gates"].as_array().unwrap().iter().map(gate_id));
        pages += 1;
        match page["next_after"].as_str() {
            Some(cursor) => path = format!("/v1/gates?limit=1000&after={cursor}"),
            None => break,
        }
    }
    assert!(pages > 10, "the cap, not the row limit, ended the pages ({pages} pages)");
    let opened: HashSet<String> = views.iter().map(gate_id).collect();
    assert_eq!(seen.len(), 400, "no gate twice");
    assert!(seen.iter().collect::<HashSet<_>>() == opened.iter().collect(), "every gate once");

    // Journal pages: the same, by `done` and `next_journal_seq`.
    let (mut events, mut from) = (0, 0);
    loop {
        let resp = app.get(&format!("/v1/journal?limit=1000&from_journal_seq={from}")).await.expect(200);
        assert!(resp.body.len() <= PAGE_BYTES + 2 * one, "a journal page of {} bytes", resp.body.len());
        let page = resp.json();
        events += page["events"].as_array().unwrap().len();
        if page["done"] == true {
            break;
        }
        from = page["next_journal_seq"].as_i64().unwrap();
    }
    assert_eq!(events, 800, "GateOpened and UserInputRequested of each gate");

    // Inbox pages: 400 answers of the largest size, paged along `next_after`.
    let big = |n: usize| format!("{n:04}-00 {}", "c".repeat(248));
    for chunk in (0..400).collect::<Vec<_>>().chunks(16) {
        let answers: Vec<(String, String)> = chunk.iter().map(|n| (gate_id(&views[*n]), big(*n))).collect();
        join_all(answers.iter().map(|(gate, text)| app.answer(&session, gate, text))).await;
    }
    let (mut commands, mut after) = (HashSet::new(), 0);
    for _ in 0..400 {
        let resp = app.get(&format!("/v1/sessions/{session}/loops/{loop_id}/commands?limit=1000&after={after}")).await;
        let page = resp.expect(200).json();
        let got = page["commands"].as_array().unwrap().clone();
        if got.is_empty() {
            break;
        }
        commands.extend(got.iter().map(|c| c["seq"].as_i64().unwrap()));
        after = page["next_after"].as_i64().unwrap();
    }
    assert_eq!(commands.len(), 400);
}

/// A client that sends one request and never reads the answer (a small receive window, so the
/// server's writes stall at once).
async fn unread(base: &str, path: &str, token: &str) -> tokio::net::TcpStream {
    use tokio::io::AsyncWriteExt;
    let addr: std::net::SocketAddr = base.trim_start_matches("http://").parse().unwrap();
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut stream = bounded("connect", socket.connect(addr)).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {token}\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    stream
}

/// The status of a response, from the first bytes of it (the rest is left unread).
async fn status_of(stream: &mut tokio::net::TcpStream) -> u16 {
    use tokio::io::AsyncReadExt;
    let mut head = [0u8; 12];
    bounded("a status line", stream.read_exact(&mut head)).await.unwrap();
    std::str::from_utf8(&head[9..12]).unwrap().parse().unwrap()
}

#[tokio::test]
async fn twelve_unread_large_pages_of_one_token_hold_bounded_memory() {
    let (dir, db) = temp_db();
    let tokens = dir.path().join("tokens");
    let (admin, reader) = ("admin-secret-0123456789", "reader-secret-0123456789");
    std::fs::write(&tokens, format!("admin ops {admin}\nresponder reader {reader}\n")).unwrap();
    let server = ServerProcess::start_with(
        &db,
        "127.0.0.1:0",
        &["--tokens-file", tokens.to_str().unwrap(), "--rate-limit", "100000"],
    );
    let client = server.client.bearer(admin);
    open_largest(&client, &uuid(), &uuid(), 400).await;

    // Warm up what any reads would grow (read connections and their caches, threads), reading
    // pages whole, so what follows measures pages held for clients that do not read.
    let reading = server.client.bearer(reader);
    for _ in 0..3 {
        let reads = (0..4).map(|_| reading.send(reqwest::Method::GET, "/v1/gates?limit=1000", &[], None));
        assert!(join_all(reads).await.iter().all(|r| r.status == 200));
    }
    let before = server.rss_bytes();
    let mut stuck = Vec::new();
    for _ in 0..12 {
        stuck.push(unread(&server.base, "/v1/gates?limit=1000", reader).await);
    }
    let mut statuses = Vec::new();
    for stream in &mut stuck {
        statuses.push(status_of(stream).await);
    }
    let served = statuses.iter().filter(|s| **s == 200).count();
    assert_eq!(served, 4, "--max-page-reads-per-token (4) pages in flight, the others refused: {statuses:?}");
    assert!(statuses.iter().all(|s| [200, 429].contains(s)), "{statuses:?}");
    let grown = server.rss_bytes().saturating_sub(before);
    eprintln!(
        "twelve unread large pages: {served} served, RSS grew by {:.1} MiB (bound 8 MiB)",
        grown as f64 / 1048576.0
    );
    assert!(grown < 8 * 1024 * 1024, "RSS grew by {grown} bytes");

    // Closed unread, the pages are freed: the token reads again.
    drop(stuck);
    crate::helpers::eventually("the page reads are given back", async || {
        reading.send(reqwest::Method::GET, "/v1/gates?limit=1", &[], None).await.status == 200
    })
    .await;
}
