//! Resource exhaustion (issue 15): clients that open connections and never finish a request, or
//! send bodies that never end, cannot take the server from anyone else. Connections are capped in
//! all and per client address until they authenticate; request heads, bodies and idle keep-alive
//! connections are timed; the open-file limit is checked at start.
//!
//! Attackers and victims use different loopback source addresses (all of 127.0.0.0/8 is
//! loopback on Linux), as they would be different hosts.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use futures_util::future::join_all;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::time::Instant;

use crate::contract;
use crate::helpers::{EventStream, ServerProcess, TestApp, ask, bounded, check_no_store, temp_db, uuid};

/// The documented bound (README "Reliability"): 1,100 unfinished heads and 200 unfinished login
/// bodies add at most this much RSS at the default caps.
const RSS_BOUND: u64 = 64 * 1024 * 1024;
/// The liveness bound: a new client is served within this long during the attack.
const LIVENESS: Duration = Duration::from_secs(2);
const ADMIN_SECRET: &str = "exhaustion-admin-secret-0123456789";

/// A tokens file with one admin token, beside `db`.
fn tokens_file(db: &Path) -> PathBuf {
    let path = db.with_file_name("tokens");
    std::fs::write(&path, format!("admin ops {ADMIN_SECRET}\n")).expect("write the tokens file");
    path
}

fn server_address(base: &str) -> SocketAddr {
    base.trim_start_matches("http://").parse().expect("a loopback address")
}

/// A TCP connection to `server` from the loopback address `source`.
async fn connect_from(source: Ipv4Addr, server: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().expect("socket");
    socket.bind(SocketAddr::new(IpAddr::V4(source), 0)).expect("bind a loopback source address");
    bounded("connect", socket.connect(server)).await.expect("connect")
}

/// `count` connections from `source`, each sent `first_bytes` (a start that never ends), opened
/// a bounded number at a time so the listen queue never overflows.
async fn connections_from(source: Ipv4Addr, server: SocketAddr, count: usize, first_bytes: &[u8]) -> Vec<TcpStream> {
    let mut all = Vec::with_capacity(count);
    for chunk in (0..count).collect::<Vec<_>>().chunks(64) {
        all.extend(
            join_all(chunk.iter().map(|_| async {
                let mut tcp = connect_from(source, server).await;
                if !first_bytes.is_empty() {
                    tcp.write_all(first_bytes).await.expect("send the start of a request");
                }
                tcp
            }))
            .await,
        );
    }
    all
}

/// Reads until the server closes the connection (end of stream or reset); what arrived before.
/// Bounded: the server must close it.
async fn until_closed(tcp: &mut (impl AsyncRead + Unpin)) -> Vec<u8> {
    let mut received = Vec::new();
    bounded("the server closes the connection", async {
        let mut chunk = [0u8; 4096];
        loop {
            match tcp.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => received.extend_from_slice(&chunk[..n]),
            }
        }
    })
    .await;
    received
}

/// One response read off a raw connection.
struct RawResponse {
    status: u16,
    content_type: Option<String>,
    cache_control: Option<String>,
    body: Vec<u8>,
}

/// Parses one whole response (head and a `Content-Length` body) from the start of `raw`.
fn parse_response(raw: &[u8]) -> Option<(RawResponse, usize)> {
    let head_end = raw.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let head = std::str::from_utf8(&raw[..head_end]).ok()?;
    let mut lines = head.split("\r\n");
    let status = lines.next()?.split(' ').nth(1)?.parse().ok()?;
    let header = |name: &str| {
        head.split("\r\n").skip(1).find_map(|line| {
            let (key, value) = line.split_once(':')?;
            key.eq_ignore_ascii_case(name).then(|| value.trim().to_owned())
        })
    };
    let length: usize = header("content-length").and_then(|n| n.parse().ok()).unwrap_or(0);
    let (content_type, cache_control) = (header("content-type"), header("cache-control"));
    let body = raw.get(head_end..head_end + length)?.to_vec();
    Some((RawResponse { status, content_type, cache_control, body }, head_end + length))
}

/// Sends `request` and reads its response, leaving the connection open; the response is checked
/// against the contract as `method path`.
async fn exchange(tcp: &mut TcpStream, method: &str, path: &str, request: &str) -> RawResponse {
    tcp.write_all(request.as_bytes()).await.expect("send a request");
    let mut raw = Vec::new();
    let response = bounded("a response", async {
        let mut chunk = [0u8; 4096];
        loop {
            if let Some((response, _)) = parse_response(&raw) {
                return response;
            }
            let n = tcp.read(&mut chunk).await.expect("read a response");
            assert!(n > 0, "{method} {path}: the server closed the connection instead of answering");
            raw.extend_from_slice(&chunk[..n]);
        }
    })
    .await;
    check_raw(method, path, &response);
    response
}

fn check_raw(method: &str, path: &str, response: &RawResponse) {
    contract::check_response(method, path, response.status, response.content_type.as_deref(), &response.body);
    if response.content_type.as_deref().is_some_and(|ct| ct.starts_with("application/json")) {
        assert_eq!(response.cache_control.as_deref(), Some("no-store"), "{method} {path}");
    }
}

fn get(path: &str, token: Option<&str>) -> String {
    let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
    format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}\r\n")
}

/// The start of a request head that never ends.
const UNFINISHED_HEAD: &[u8] = b"GET /v1/gates HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Still-Typing: ";

/// How long each connection took to be closed, from `since`: (fastest, slowest).
async fn close_times(connections: Vec<TcpStream>, since: Instant) -> (Duration, Duration, Vec<Vec<u8>>) {
    let closing = connections.into_iter().map(|mut tcp| {
        tokio::spawn(async move {
            let received = until_closed(&mut tcp).await;
            (since.elapsed(), received)
        })
    });
    let closed: Vec<(Duration, Vec<u8>)> = join_all(closing).await.into_iter().map(|r| r.expect("task")).collect();
    let fastest = closed.iter().map(|(t, _)| *t).min().unwrap_or_default();
    let slowest = closed.iter().map(|(t, _)| *t).max().unwrap_or_default();
    (fastest, slowest, closed.into_iter().map(|(_, received)| received).collect())
}

#[tokio::test]
async fn eleven_hundred_unfinished_heads_and_two_hundred_short_bodies_do_not_stop_a_new_client() {
    // This test process holds 1,300 sockets too.
    rlimit::increase_nofile_limit(u64::MAX).expect("raise this process's open-file limit");
    let (dir, db) = temp_db();
    let tokens = tokens_file(&db);
    // A public server's setup, at every default cap and timeout.
    let server = ServerProcess::start_with(&db, "127.0.0.1:0", &["--tokens-file", tokens.to_str().unwrap()]);
    let addr = server_address(&server.base);
    let admin = server.bearer(ADMIN_SECRET);
    admin.get("/v1/gates").await.expect(200);
    let before = server.rss_bytes();

    // 1,100 connections that never finish their heads, from five addresses (each under its
    // per-address budget, so the server must hold them all), and 200 login bodies left one byte
    // short of the largest size an unauthenticated request may declare.
    let attack_began = Instant::now();
    let mut heads = Vec::new();
    for host in 1..=5 {
        heads.extend(connections_from(Ipv4Addr::new(127, 0, 1, host), addr, 220, UNFINISHED_HEAD).await);
    }
    const DECLARED: usize = 64 * 1024;
    let mut login = format!(
        "POST /v1/login HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {DECLARED}\r\n\r\n"
    )
    .into_bytes();
    login.extend_from_slice(b"{\"token\":\"");
    login.resize(login.len() + DECLARED - 1 - 10, b'a');
    let bodies = connections_from(Ipv4Addr::new(127, 0, 2, 1), addr, 200, &login).await;
    let set_up = attack_began.elapsed();

    // A new client, from another host, with a token: served, within the liveness bound.
    let client = reqwest::Client::builder()
        .no_proxy()
        .local_address(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)))
        .build()
        .expect("client");
    let asked = Instant::now();
    let response =
        bounded("the new client", client.get(format!("{}/v1/gates", server.base)).bearer_auth(ADMIN_SECRET).send())
            .await
            .expect("the new client is served");
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let body = bounded("the new client's body", response.bytes()).await.expect("body");
    let served_in = asked.elapsed();
    contract::check_response(
        "GET",
        "/v1/gates",
        status,
        headers.get("content-type").and_then(|v| v.to_str().ok()),
        &body,
    );
    check_no_store("GET /v1/gates", &headers);
    assert_eq!(status, 200);
    assert!(served_in < LIVENESS, "the new client waited {served_in:?}");
    let grown = server.rss_bytes().saturating_sub(before);

    // Every attacking connection is closed by its timeout: the heads after --header-timeout
    // (10 s), the bodies after --body-idle-timeout (10 s) with a JSON 408.
    let ((head_first, head_last, _), (body_first, body_last, answers)) =
        tokio::join!(close_times(heads, attack_began), close_times(bodies, attack_began));
    for answer in &answers {
        let (response, _) = parse_response(answer).expect("a 408 before the close");
        assert_eq!(response.status, 408);
        check_raw("POST", "/v1/login", &response);
        let error: serde_json::Value = serde_json::from_slice(&response.body).expect("JSON");
        assert_eq!(error["error"]["code"], "request_timeout");
    }
    eprintln!(
        "exhaustion: 1100 unfinished heads and 200 short login bodies set up in {set_up:.1?}; a new client got 200 in \
         {served_in:.0?} (bound {LIVENESS:?}); RSS grew by {:.1} MiB (bound {} MiB); heads closed after {head_first:.1?} \
         to {head_last:.1?}, bodies answered 408 and closed after {body_first:.1?} to {body_last:.1?}",
        grown as f64 / (1 << 20) as f64,
        RSS_BOUND >> 20,
    );
    assert!(grown < RSS_BOUND, "RSS grew by {grown} bytes");
    admin.get("/readyz").await.expect(200);
    drop(server);
    drop(dir);
}

#[tokio::test]
async fn one_address_holds_a_bounded_number_of_connections_until_they_authenticate() {
    let (dir, db) = temp_db();
    let tokens = tokens_file(&db);
    // The default budget (256); a long header timeout, so any close seen here is the budget's.
    let server = ServerProcess::start_with(
        &db,
        "127.0.0.1:0",
        &["--tokens-file", tokens.to_str().unwrap(), "--header-timeout", "5m"],
    );
    let addr = server_address(&server.base);
    let attacker = Ipv4Addr::new(127, 0, 3, 1);
    let mut held = connections_from(attacker, addr, 256, b"").await;

    // The next one from that address is closed at once, without an answer.
    let mut refused = connect_from(attacker, addr).await;
    let _ = refused.write_all(get("/healthz", None).as_bytes()).await;
    assert!(until_closed(&mut refused).await.is_empty(), "closed without a word");
    // Another address is served.
    let mut other = connect_from(Ipv4Addr::new(127, 0, 3, 2), addr).await;
    assert_eq!(exchange(&mut other, "GET", "/healthz", &get("/healthz", None)).await.status, 200);

    // A request that passes the guard with a token authenticates its connection: the address
    // has room for one more.
    let authed = exchange(&mut held[0], "GET", "/v1/gates", &get("/v1/gates", Some(ADMIN_SECRET))).await;
    assert_eq!(authed.status, 200);
    let mut admitted = connect_from(attacker, addr).await;
    // An open route needs no credential, so this connection still counts…
    assert_eq!(exchange(&mut admitted, "GET", "/healthz", &get("/healthz", None)).await.status, 200);
    // …and so does one whose token was wrong.
    let wrong = exchange(&mut held[1], "GET", "/v1/gates", &get("/v1/gates", Some("not-a-token-at-all-0000"))).await;
    assert_eq!(wrong.status, 401);
    let mut refused = connect_from(attacker, addr).await;
    let _ = refused.write_all(get("/healthz", None).as_bytes()).await;
    assert!(until_closed(&mut refused).await.is_empty(), "the address is at its budget again");

    // Closing connections gives the budget back.
    held.truncate(200);
    crate::helpers::eventually("the server sees the closes", async || {
        let mut probe = connect_from(attacker, addr).await;
        probe.write_all(get("/healthz", None).as_bytes()).await.is_ok() && {
            let mut chunk = [0u8; 64];
            matches!(probe.read(&mut chunk).await, Ok(n) if n > 0)
        }
    })
    .await;
    drop(held);
    drop(server);
    drop(dir);
}

#[tokio::test]
async fn in_open_mode_a_complete_request_head_is_what_authenticates_a_connection() {
    let app = TestApp::spawn_with(|args| {
        args.http.max_unauthenticated_per_address = 3;
        args.http.header_timeout = Duration::from_secs(300);
    })
    .await;
    let addr = server_address(&app.base);
    let client = Ipv4Addr::new(127, 0, 5, 1);
    // Three connections that each made a request no longer count…
    let mut served = Vec::new();
    for _ in 0..3 {
        let mut tcp = connect_from(client, addr).await;
        assert_eq!(exchange(&mut tcp, "GET", "/healthz", &get("/healthz", None)).await.status, 200);
        served.push(tcp);
    }
    // …so three silent ones fit, and a fourth does not.
    let mut silent = connections_from(client, addr, 3, b"").await;
    let mut refused = connect_from(client, addr).await;
    let _ = refused.write_all(get("/healthz", None).as_bytes()).await;
    assert!(until_closed(&mut refused).await.is_empty(), "the fourth silent connection is closed at once");
    assert_eq!(exchange(&mut silent[0], "GET", "/healthz", &get("/healthz", None)).await.status, 200);
    drop((served, silent));
    app.stop().await;
}

#[tokio::test]
async fn past_the_connection_cap_new_connections_are_closed_at_once() {
    let app = TestApp::spawn_with(|args| {
        args.http.max_connections = Some(20);
        args.http.header_timeout = Duration::from_secs(300);
    })
    .await;
    let addr = server_address(&app.base);
    let mut open = Vec::new();
    for host in 1..=4 {
        open.extend(connections_from(Ipv4Addr::new(127, 0, 6, host), addr, 5, b"").await);
    }
    // The 21st, from yet another address: closed at once, without an answer.
    let mut refused = connect_from(Ipv4Addr::new(127, 0, 6, 9), addr).await;
    let _ = refused.write_all(get("/healthz", None).as_bytes()).await;
    assert!(until_closed(&mut refused).await.is_empty());
    // The connections under the cap are served.
    assert_eq!(exchange(&mut open[19], "GET", "/healthz", &get("/healthz", None)).await.status, 200);
    // A closed connection frees its place.
    drop(open.pop());
    crate::helpers::eventually("a place is free again", async || {
        let mut probe = connect_from(Ipv4Addr::new(127, 0, 6, 9), addr).await;
        probe.write_all(get("/healthz", None).as_bytes()).await.is_ok() && {
            let mut chunk = [0u8; 64];
            matches!(probe.read(&mut chunk).await, Ok(n) if n > 0)
        }
    })
    .await;
    drop(open);
    app.stop().await;
}

#[test]
fn a_connection_cap_the_open_file_limit_cannot_hold_refuses_to_start() {
    let (_dir, db) = temp_db();
    let (code, stderr) = ServerProcess::serve_to_exit(&db, "127.0.0.1:0", &["--max-connections", "9000000"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("open-file limit"), "{stderr}");
    assert!(stderr.contains("lower --max-connections"), "the message names the flag to lower: {stderr}");
    assert!(!db.exists(), "refused before the database was created");
}

#[tokio::test]
async fn under_a_hard_open_file_limit_of_1024_the_defaults_fit_themselves_but_an_explicit_cap_is_refused() {
    let (_dir, db) = temp_db();
    let server = ServerProcess::start_under_open_file_limit(&db, "127.0.0.1:0", 1024, &[]);
    let lines = server.log_lines();
    assert!(!lines.iter().any(|line| line.contains("above --max-connections")), "streams fit: {lines:#?}");
    let warnings: Vec<&String> = lines.iter().filter(|line| line.contains("open-file limit")).collect();
    assert_eq!(warnings.len(), 1, "one warning says what was lowered: {warnings:#?}");
    for says in ["WARN", "1024", "ulimit -Hn", "--max-connections 768", "--max-streams 768"] {
        assert!(warnings[0].contains(says), "{says:?} in {}", warnings[0]);
    }
    server.get("/healthz").await.expect(200);
    drop(server);

    let (_dir, db) = temp_db();
    let (code, stderr) =
        ServerProcess::serve_to_exit_under(Some(1024), &db, "127.0.0.1:0", &["--max-connections", "16384"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("the open-file limit is 1024"), "{stderr}");
    assert!(stderr.contains("lower --max-connections (GATEHOUSE_MAX_CONNECTIONS) to at most 768"), "{stderr}");
    assert!(!db.exists(), "refused before the database was created");
}

/// Sends `request` (whole, if the server reads it) and reads its one answer until the server
/// closes the connection.
async fn refused_head(source: Ipv4Addr, server: SocketAddr, request: &str) -> (RawResponse, serde_json::Value) {
    let mut tcp = connect_from(source, server).await;
    // The server may answer and close before it has read all of it.
    let _ = tcp.write_all(request.as_bytes()).await;
    let raw = until_closed(&mut tcp).await;
    let (response, used) = parse_response(&raw).expect("an answer before the close");
    assert_eq!(used, raw.len(), "one answer, then the close");
    assert_eq!(response.content_type.as_deref(), Some("application/json"));
    assert_eq!(response.cache_control.as_deref(), Some("no-store"));
    let error: serde_json::Value = serde_json::from_slice(&response.body).expect("a JSON body");
    (response, error)
}

#[tokio::test]
async fn a_uri_too_long_gets_414_and_header_fields_too_large_get_431_both_as_json() {
    let app = TestApp::spawn().await;
    let addr = server_address(&app.base);
    let host = Ipv4Addr::new(127, 0, 8, 1);

    // A 100 KB session id.
    let path = format!("/v1/sessions/{}/gates", "a".repeat(100_000));
    let (response, error) = refused_head(host, addr, &get(&path, None)).await;
    assert_eq!(response.status, 414, "{error}");
    assert_eq!(error["error"]["code"], "uri_too_long", "{error}");
    assert_eq!(error["error"]["retryable"], false, "{error}");
    assert!(error["error"]["message"].as_str().is_some_and(|m| m.contains("URI")), "{error}");

    // A normal request line with a 40 KB header field.
    let request = format!("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Padding: {}\r\n\r\n", "p".repeat(40_000));
    let (response, error) = refused_head(host, addr, &request).await;
    assert_eq!(response.status, 431, "{error}");
    assert_eq!(error["error"]["code"], "headers_too_large", "{error}");
    assert_eq!(error["error"]["retryable"], false, "{error}");

    // Heads that fit are not refused, a long URI among them, on a kept-alive connection.
    let mut tcp = connect_from(host, addr).await;
    let long = format!("/v1/gates/{}", "a".repeat(20_000));
    tcp.write_all(get(&long, None).as_bytes()).await.expect("send a long URI that fits");
    let mut raw = Vec::new();
    let status = bounded("an answer", async {
        let mut chunk = [0u8; 4096];
        loop {
            if let Some((response, _)) = parse_response(&raw) {
                return response.status;
            }
            let n = tcp.read(&mut chunk).await.expect("read");
            assert!(n > 0, "closed instead of answering");
            raw.extend_from_slice(&chunk[..n]);
        }
    })
    .await;
    assert!(status != 414 && status != 431 && status < 500, "{status}");
    assert_eq!(exchange(&mut tcp, "GET", "/healthz", &get("/healthz", None)).await.status, 200);
    drop(tcp);
    app.stop().await;
}

#[tokio::test]
async fn heads_idle_connections_and_bodies_are_timed_but_streams_are_not() {
    let app = TestApp::spawn_with(|args| {
        args.http.header_timeout = Duration::from_millis(500);
        args.http.keep_alive_timeout = Duration::from_millis(500);
        args.http.body_idle_timeout = Duration::from_millis(500);
        args.http.body_timeout = Duration::from_secs(2);
    })
    .await;
    let addr = server_address(&app.base);
    let host = Ipv4Addr::new(127, 0, 7, 1);
    let session = uuid();
    // A stream outlives every one of these timeouts.
    let mut stream = EventStream::connect(&app, &format!("/v1/sessions/{session}/events"), &[]).await;

    // A head that never ends is closed, without an answer.
    let mut head = connect_from(host, addr).await;
    head.write_all(UNFINISHED_HEAD).await.unwrap();
    assert!(until_closed(&mut head).await.is_empty());

    // A head sent in pieces, none of them late, is served: the clock is per head, not per read.
    let mut pieces = connect_from(host, addr).await;
    let request = get("/healthz", None);
    let (first, rest) = request.split_at(10);
    pieces.write_all(first.as_bytes()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(exchange(&mut pieces, "GET", "/healthz", rest).await.status, 200);
    // Then, kept alive and silent, it is closed.
    assert!(until_closed(&mut pieces).await.is_empty());

    // A body that stops gets 408 and the connection is closed.
    let path = format!("/v1/sessions/{session}/gates");
    let open = format!(
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"loop"
    );
    let mut stalled = connect_from(host, addr).await;
    stalled.write_all(open.as_bytes()).await.unwrap();
    let (response, _) = parse_response(&until_closed(&mut stalled).await).expect("an answer before the close");
    check_raw("POST", &path, &response);
    let error: serde_json::Value = serde_json::from_slice(&response.body).unwrap();
    assert_eq!((response.status, error["error"]["code"].as_str()), (408, Some("request_timeout")));
    assert!(error["error"]["message"].as_str().unwrap().contains("no new byte"), "{error}");

    // A body that trickles, never idle for long, still has to arrive whole in time.
    let (mut answer, mut trickle) = connect_from(host, addr).await.into_split();
    trickle.write_all(open.as_bytes()).await.unwrap();
    let trickling = tokio::spawn(async move {
        for _ in 0..40 {
            tokio::time::sleep(Duration::from_millis(150)).await;
            if trickle.write_all(b" ").await.is_err() {
                return;
            }
        }
    });
    let (response, _) = parse_response(&until_closed(&mut answer).await).expect("an answer before the close");
    trickling.abort();
    let error: serde_json::Value = serde_json::from_slice(&response.body).unwrap();
    assert_eq!((response.status, error["error"]["code"].as_str()), (408, Some("request_timeout")));
    assert!(error["error"]["message"].as_str().unwrap().contains("not complete"), "{error}");

    // The stream was busy all along: it is still open and delivers.
    let gate = app.open(&session, &ask(&uuid(), &uuid(), "Still streaming?")).await;
    loop {
        let (_, event) = bounded("the stream delivers", stream.next_enduring()).await;
        if event["type"] == "GateOpened" {
            assert_eq!(event["gate"]["id"], gate["gate"]["id"]);
            break;
        }
    }
    app.stop().await;
}

#[tokio::test]
async fn requests_without_a_token_may_send_only_small_bodies() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = tokens_file(&dir.path().join("gatehouse.db"));
    let secret = dir.path().join("webhook.secret");
    std::fs::write(&secret, "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD\n").unwrap();
    let app = TestApp::spawn_with(|args| {
        args.security.tokens_file = Some(tokens);
        args.webhooks.inbound_secret_file = Some(secret);
    })
    .await;
    let admin = app.bearer(ADMIN_SECRET);
    let session = uuid();
    let gate = crate::helpers::gate_id(&admin.open(&session, &ask(&uuid(), &uuid(), "Small bodies?")).await);
    let big = |bytes: usize| format!("{{\"token\":\"{}\"}}", "a".repeat(bytes)).into_bytes();
    let json = [("content-type", "application/json")];

    // The login: 64 KiB at most, whether declared or streamed.
    let over = app.send(reqwest::Method::POST, "/v1/login", &json, Some(big(70_000))).await;
    let error = over.expect_error(413, "payload_too_large");
    assert!(error["error"]["message"].as_str().unwrap().contains("65536"), "{error}");
    app.send_chunked("/v1/login", &json, big(70_000)).await.expect_error(413, "payload_too_large");
    app.send(reqwest::Method::POST, "/v1/login", &json, Some(big(60_000))).await.expect_error(401, "unauthorized");

    // A signed answer: refused for its size before its signature is even looked at.
    let now = gatehouse::domain::Timestamp::now().unix_seconds();
    let secret: gatehouse::common::signature::Secret = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD".parse().unwrap();
    let signature = gatehouse::common::signature::sign(&secret, "msg_big", now, &big(70_000));
    let now = now.to_string();
    let signed = [
        ("content-type", "application/json"),
        ("webhook-id", "msg_big"),
        ("webhook-timestamp", now.as_str()),
        ("webhook-signature", signature.as_str()),
    ];
    let path = format!("/v1/sessions/{session}/gates/{gate}");
    app.send(reqwest::Method::POST, &path, &signed, Some(big(70_000))).await.expect_error(413, "payload_too_large");

    // With a token, --max-body (1 MiB) applies: a large body is read, and judged on its content.
    let mut long = ask(&uuid(), &uuid(), &"q".repeat(100_000));
    long["choices"] = serde_json::json!(["yes"]);
    admin.post(&format!("/v1/sessions/{session}/gates"), &long).await.expect_error(400, "invalid_body");
    app.stop().await;
}
