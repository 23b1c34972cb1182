//! Authentication, roles and hardening (spec §10): the route × role matrix from `openapi.yaml`'s
//! `x-roles`, principals on answers, the login cookie and its CSRF rules, the `Host` check, the
//! fail-secure bind, per-token limits, and no secret in the log.

use std::path::{Path, PathBuf};

use reqwest::Method;
use serde_json::{Value, json};

use crate::contract;
use crate::helpers::{Client, ServerProcess, TestApp, answer, ask, bounded, gate_id, temp_db, uuid};

/// Sessions under the scoped agent's prefix start with this.
const PREFIX: &str = "aaaa";

struct Credential {
    name: &'static str,
    secret: &'static str,
}

const AGENT: Credential = Credential { name: "scoped-bot", secret: "agent-secret-aaaa-0123456789" };
const AGENT_ALL: Credential = Credential { name: "any-bot", secret: "agent-secret-all-0123456789" };
const RESPONDER: Credential = Credential { name: "alice", secret: "responder-secret-0123456789" };
const ADMIN: Credential = Credential { name: "root", secret: "admin-secret-0123456789abc" };
const ALL: [&Credential; 4] = [&AGENT, &AGENT_ALL, &RESPONDER, &ADMIN];

/// Writes the tokens file of these tests beside `db`.
fn tokens_file(db: &Path) -> PathBuf {
    let path = db.with_file_name("tokens");
    let text = format!(
        "# role name secret [session prefix]\n\
         agent {} {} {PREFIX}\n\
         agent {} {}\n\
         responder {} {}\n\
         admin {} {}\n",
        AGENT.name,
        AGENT.secret,
        AGENT_ALL.name,
        AGENT_ALL.secret,
        RESPONDER.name,
        RESPONDER.secret,
        ADMIN.name,
        ADMIN.secret
    );
    std::fs::write(&path, text).expect("write the tokens file");
    path
}

/// A server with the tokens file and generous limits (tests of the limits set their own).
async fn spawn_with_tokens(adjust: impl FnOnce(&mut gatehouse::ServeArgs)) -> (TestApp, tempfile::TempDir, PathBuf) {
    let (dir, db) = temp_db();
    let tokens = tokens_file(&db);
    let app = TestApp::start(&db, |args| {
        args.security.tokens_file = Some(tokens);
        args.security.rate_limit = 100_000;
        adjust(args);
    })
    .await;
    (app, dir, db)
}

fn session_in_prefix() -> String {
    format!("{PREFIX}{}", &uuid()[PREFIX.len()..])
}

fn session_out_of_prefix() -> String {
    format!("bbbb{}", &uuid()[4..])
}

/// A concrete path for a route template.
fn concrete(template: &str, session: &str) -> String {
    let mut path = template.to_owned();
    for (param, value) in [
        ("{session_id}", session.to_owned()),
        ("{gate_id}", uuid()),
        ("{loop_id}", uuid()),
        ("{command_id}", uuid()),
        ("{token}", "A".repeat(43)),
        ("{name}", "app.js".to_owned()),
    ] {
        path = path.replace(param, &value);
    }
    // A long-poll must not hold the matrix up.
    if path.ends_with("/wait") {
        path.push_str("?timeout=0");
    }
    path
}

/// The status of one request, reading the body only when it is not a stream (and checking it
/// against the contract then).
async fn status_of(http: &reqwest::Client, base: &str, method: &Method, path: &str, auth: Option<&str>) -> u16 {
    let mut req = http.request(method.clone(), format!("{base}{path}"));
    if let Some(secret) = auth {
        req = req.header("authorization", format!("Bearer {secret}"));
    }
    if *method == Method::POST {
        req = req.header("content-type", "application/json").body("{}");
    }
    let resp = bounded(path, req.send()).await.expect("send");
    let status = resp.status().as_u16();
    let content_type = resp.headers().get("content-type").and_then(|v| v.to_str().ok()).map(str::to_owned);
    if content_type.as_deref() != Some("text/event-stream") {
        let body = bounded(path, resp.bytes()).await.expect("body");
        contract::check_response(method.as_str(), path, status, content_type.as_deref(), &body);
    }
    status
}

/// Spec §10's route × role table, written out here independently of the code, so a wrong
/// `Access` on a route (which would be documented and enforced consistently) is still caught.
#[test]
fn the_route_table_is_the_one_of_spec_section_10() {
    const AGENT: &str = "agent,admin";
    const SESSION_READ: &str = "agent,responder,admin";
    const RESPONDER: &str = "responder,admin";
    let spec: std::collections::BTreeSet<(&str, &str, &str)> = [
        ("POST", "/v1/sessions/{session_id}/gates", AGENT),
        ("POST", "/v1/sessions/{session_id}/gates/{gate_id}/close", AGENT),
        ("GET", "/v1/sessions/{session_id}/loops/{loop_id}/commands", AGENT),
        ("POST", "/v1/sessions/{session_id}/loops/{loop_id}/commands/{command_id}/ack", AGENT),
        ("GET", "/v1/sessions/{session_id}/gates", SESSION_READ),
        ("GET", "/v1/sessions/{session_id}/gates/{gate_id}", SESSION_READ),
        ("GET", "/v1/sessions/{session_id}/gates/{gate_id}/wait", SESSION_READ),
        ("GET", "/v1/sessions/{session_id}/gates/{gate_id}/url", RESPONDER),
        ("GET", "/v1/sessions/{session_id}/events", SESSION_READ),
        ("GET", "/v1/sessions/{session_id}/journal", SESSION_READ),
        ("GET", "/v1/gates", RESPONDER),
        ("GET", "/v1/gates/{gate_id}", RESPONDER),
        ("GET", "/v1/events", RESPONDER),
        ("GET", "/v1/journal", RESPONDER),
        ("POST", "/v1/sessions/{session_id}/gates/{gate_id}", "responder,admin,webhook"),
        ("GET", "/v1/webhooks/deliveries", "admin"),
        ("GET", "/metrics", "admin"),
        ("GET", "/healthz", "open"),
        ("GET", "/readyz", "open"),
        ("GET", "/", "open"),
        ("GET", "/static/{name}", "open"),
        ("GET", "/openapi.yaml", "open"),
        ("GET", "/v1/capabilities", "open"),
        ("POST", "/v1/login", "open"),
        ("POST", "/v1/logout", "open"),
        ("GET", "/v1/answers/{token}", "link"),
        ("POST", "/v1/answers/{token}", "link"),
    ]
    .into_iter()
    .collect();
    let served: Vec<(String, &str, String)> = gatehouse::http::route_table()
        .into_iter()
        .map(|(m, p, access)| (m.to_string(), p, access.names().join(",")))
        .collect();
    let served: std::collections::BTreeSet<(&str, &str, &str)> =
        served.iter().map(|(m, p, r)| (m.as_str(), *p, r.as_str())).collect();
    assert_eq!(served, spec);
}

#[tokio::test]
async fn every_route_gives_every_role_the_documented_status() {
    let (app, _dir, _db) = spawn_with_tokens(|_| {}).await;
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let documented = contract::documented_operations();
    assert!(documented.len() > 20, "the matrix covers every documented operation");
    let mut checked = 0;
    for (method, template, roles) in &documented {
        let method = Method::from_bytes(method.as_bytes()).unwrap();
        let roles: Vec<&str> = roles.split(',').collect();
        let guarded = !roles.contains(&"open") && !roles.contains(&"link");
        let scoped = template.contains("{session_id}");
        let cases: [(&str, Option<&str>, String); 7] = [
            ("no token", None, session_in_prefix()),
            ("a wrong token", Some("not-a-token-0123456789"), session_in_prefix()),
            ("the agent in its prefix", Some(AGENT.secret), session_in_prefix()),
            ("the agent out of its prefix", Some(AGENT.secret), session_out_of_prefix()),
            ("an agent of all sessions", Some(AGENT_ALL.secret), session_out_of_prefix()),
            ("the responder", Some(RESPONDER.secret), session_out_of_prefix()),
            ("the admin", Some(ADMIN.secret), session_out_of_prefix()),
        ];
        for (who, secret, session) in cases {
            let path = concrete(template, &session);
            let status = status_of(&http, &app.base, &method, &path, secret).await;
            let role = match secret {
                Some(s) if s == AGENT.secret || s == AGENT_ALL.secret => Some("agent"),
                Some(s) if s == RESPONDER.secret => Some("responder"),
                Some(s) if s == ADMIN.secret => Some("admin"),
                _ => None,
            };
            let expected = match role {
                _ if !guarded => None,
                None => Some(401),
                Some(role) if !roles.contains(&role) => Some(403),
                Some("agent") if who == "the agent out of its prefix" && scoped => Some(403),
                Some(_) => None,
            };
            match expected {
                Some(expected) => assert_eq!(status, expected, "{who}: {method} {path}"),
                None => assert!(status != 401 && status != 403, "{who}: {method} {path} gave {status}"),
            }
            checked += 1;
        }
    }
    eprintln!("route × role matrix: {checked} requests over {} operations", documented.len());
}

#[tokio::test]
async fn answers_record_the_token_name_and_policy_answers_none() {
    let (app, _dir, _db) = spawn_with_tokens(|_| {}).await;
    let agent = app.bearer(AGENT.secret);
    let session = session_in_prefix();
    for who in [&RESPONDER, &ADMIN] {
        let view = agent.open(&session, &ask(&uuid(), &uuid(), "Who answers?")).await;
        app.bearer(who.secret).answer(&session, &gate_id(&view), "me").await.expect(202);
        let view = agent.view(&session, &gate_id(&view)).await;
        assert_eq!(view["resolution"]["source"], json!({"kind": "user", "principal": who.name}));
    }
    // A timeout answer and a close carry no principal.
    let mut timed = ask(&uuid(), &uuid(), "Default?");
    timed["response_policy"] = json!({"timeout": 1_000_000, "on_timeout": "respond", "response": {"action": "answer", "values": {"answer": "d"}}});
    let timed = gate_id(&agent.open(&session, &timed).await);
    crate::helpers::eventually("the timeout answers", async || {
        agent.view(&session, &timed).await["state"] == "resolved"
    })
    .await;
    assert_eq!(
        agent.view(&session, &timed).await["resolution"]["source"],
        json!({"kind": "policy", "reason": "timeout"})
    );
    let closed = gate_id(&agent.open(&session, &ask(&uuid(), &uuid(), "Withdrawn?")).await);
    agent.post(&format!("/v1/sessions/{session}/gates/{closed}/close"), &json!({})).await.expect(200);
    let source = &agent.view(&session, &closed).await["resolution"]["source"];
    assert!(source.get("principal").is_none(), "{source}");
}

/// Logs in and returns the cookie pair (`gatehouse_login=…`) and the whole Set-Cookie header.
async fn login(client: &Client, secret: &str) -> (String, String) {
    let resp = client.post("/v1/login", &json!({"token": secret})).await.expect(204);
    let set_cookie = resp.headers["set-cookie"].to_str().unwrap().to_owned();
    let pair = set_cookie.split(';').next().unwrap().to_owned();
    (pair, set_cookie)
}

#[tokio::test]
async fn the_login_cookie_survives_a_restart_and_state_changes_need_json_and_our_origin() {
    let (app, dir, db) = spawn_with_tokens(|_| {}).await;
    app.post("/v1/login", &json!({"token": "wrong-secret-0123456789"})).await.expect_error(401, "unauthorized");
    app.post("/v1/login", &json!({"token": 5})).await.expect_error(400, "invalid_body");
    let (cookie, set_cookie) = login(&app, RESPONDER.secret).await;
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/", "Max-Age="] {
        assert!(set_cookie.contains(attribute), "{set_cookie}");
    }
    let page = app.with_header("cookie", &cookie);
    page.get("/v1/gates").await.expect(200);

    let tokens = tokens_file(&db);
    drop(app.stop().await);
    let app = TestApp::start(&db, |args| args.security.tokens_file = Some(tokens.clone())).await;
    let page = app.with_header("cookie", &cookie);
    page.get("/v1/gates").await.expect(200);

    let session = uuid();
    let gate = gate_id(&app.bearer(ADMIN.secret).open(&session, &ask(&uuid(), &uuid(), "From the page?")).await);
    let path = format!("/v1/sessions/{session}/gates/{gate}");
    let body = answer("yes").to_string().into_bytes();
    let origin = app.base.clone();
    let cases: [(&str, Vec<(&str, &str)>); 3] = [
        ("no Origin", vec![("content-type", "application/json")]),
        ("another Origin", vec![("content-type", "application/json"), ("origin", "http://evil.example")]),
        ("not JSON", vec![("content-type", "text/plain"), ("origin", origin.as_str())]),
    ];
    for (what, headers) in cases {
        let resp = page.send(Method::POST, &path, &headers, Some(body.clone())).await;
        assert_eq!(
            resp.expect_error(403, "forbidden")["error"]["message"].as_str().map(|m| m.contains("cookie")),
            Some(true),
            "{what}"
        );
    }
    let admin = app.bearer(ADMIN.secret);
    assert_eq!(admin.view(&session, &gate).await["state"], "open", "refused requests change nothing");
    let null_origin = [("content-type", "application/json"), ("origin", "null")];
    page.send(Method::POST, &path, &null_origin, Some(body.clone())).await.expect_error(403, "forbidden");
    let headers = [("content-type", "application/json"), ("origin", origin.as_str())];
    page.send(Method::POST, &path, &headers, Some(body)).await.expect(202);
    let view = admin.view(&session, &gate).await;
    assert_eq!(view["resolution"]["source"]["principal"], RESPONDER.name);

    // A forged or tampered cookie is refused.
    let tampered = format!("{}x", cookie);
    app.with_header("cookie", &tampered).get("/v1/gates").await.expect_error(401, "unauthorized");
    // Changing the token's secret ends the logins made with the old one.
    std::fs::write(&tokens, format!("responder {} a-brand-new-secret-0123456789\n", RESPONDER.name)).unwrap();
    drop(app.stop().await);
    let app = TestApp::start(&db, |args| args.security.tokens_file = Some(tokens)).await;
    app.with_header("cookie", &cookie).get("/v1/gates").await.expect_error(401, "unauthorized");
    drop(dir);
}

#[tokio::test]
async fn loopback_binds_serve_only_known_host_names() {
    let app = TestApp::spawn_with(|args| args.security.allowed_hosts = vec!["gates.internal".into()]).await;
    for host in ["localhost:1", "127.0.0.1", "[::1]:8080", "gates.internal:443", "LOCALHOST"] {
        app.send(Method::GET, "/healthz", &[("host", host)], None).await.expect(200);
    }
    for host in ["evil.example", "127.0.0.2", "localhost.evil.example"] {
        let resp = app.send(Method::GET, "/v1/gates", &[("host", host)], None).await;
        // Errors too are only ever what their Content-Type says.
        assert_eq!(resp.headers["x-content-type-options"], "nosniff");
        resp.expect_error(403, "forbidden");
    }
    // Open routes too: a rebinding page must not even read the contract.
    app.send(Method::GET, "/openapi.yaml", &[("host", "evil.example")], None).await.expect_error(403, "forbidden");
}

#[test]
fn a_public_bind_needs_tokens_or_an_explicit_opt_in() {
    let (dir, db) = temp_db();
    let run = |bind: &str, extra: &[&str]| ServerProcess::serve_to_exit(&db, bind, extra);
    // 192.0.2.1 (TEST-NET-1) is never this machine's: once the security check passes, binding it
    // fails, so nothing ever listens on a public address.
    let (code, stderr) = run("192.0.2.1:0", &[]);
    assert_eq!(code, Some(1));
    assert!(stderr.contains("refusing to listen on 192.0.2.1:0 without --tokens-file"), "{stderr}");
    let (code, stderr) = run("0.0.0.0:0", &[]);
    assert_eq!(code, Some(1));
    assert!(stderr.contains("refusing to listen"), "{stderr}");

    let (code, stderr) = run("192.0.2.1:0", &["--insecure-public-bind"]);
    assert_eq!(code, Some(1));
    assert!(stderr.contains("cannot listen on 192.0.2.1:0"), "the opt-in passes the check: {stderr}");
    let tokens = tokens_file(&db);
    let (code, stderr) = run("192.0.2.1:0", &["--tokens-file", tokens.to_str().unwrap()]);
    assert_eq!(code, Some(1));
    assert!(stderr.contains("cannot listen on 192.0.2.1:0"), "a tokens file passes the check: {stderr}");

    let (code, stderr) = run("0.0.0.0:0", &["--insecure-public-bind"]);
    assert_eq!(code, Some(1));
    assert!(stderr.contains("--public-url is required"), "{stderr}");

    std::fs::write(&tokens, "admin webhook a-secret-of-enough-length\n").unwrap();
    let (code, stderr) = run("127.0.0.1:0", &["--tokens-file", tokens.to_str().unwrap()]);
    assert_eq!(code, Some(1));
    assert!(stderr.contains("tokens file line 1") && stderr.contains("reserved"), "{stderr}");
    drop(dir);
}

#[tokio::test]
async fn posts_are_rate_limited_per_token_and_refused_ones_change_nothing() {
    let (app, _dir, _db) = spawn_with_tokens(|args| args.security.rate_limit = 2).await;
    let agent = app.bearer(AGENT_ALL.secret);
    let session = uuid();
    let opens = (0..20).map(|i| {
        let agent = agent.clone();
        let path = format!("/v1/sessions/{session}/gates");
        async move { agent.post(&path, &ask(&uuid(), &uuid(), &format!("Burst {i}?"))).await }
    });
    let results = bounded("the burst", futures_util::future::join_all(opens)).await;
    let created = results.iter().filter(|r| r.status == 201).count();
    let limited: Vec<_> = results.iter().filter(|r| r.status == 429).collect();
    assert_eq!(created + limited.len(), 20, "only 201 or 429");
    assert!(created >= 1 && !limited.is_empty(), "{created} created, {} limited", limited.len());
    for resp in &limited {
        let body = (*resp).clone().expect_error(429, "rate_limited");
        assert_eq!(body["error"]["retryable"], true);
        let retry_after: u64 = resp.headers["retry-after"].to_str().unwrap().parse().unwrap();
        assert!(retry_after >= 1, "Retry-After {retry_after}");
    }
    let listed = app.bearer(ADMIN.secret).listed_gate_ids(&format!("/v1/sessions/{session}/gates?state=open")).await;
    assert_eq!(listed.len(), created, "a refused open stored nothing");
    // Another token has its own budget; reads are not limited.
    app.bearer(ADMIN.secret).open(&session, &ask(&uuid(), &uuid(), "Admin?")).await;
    for _ in 0..10 {
        agent.get(&format!("/v1/sessions/{session}/gates")).await.expect(200);
    }
}

#[tokio::test]
async fn streams_are_capped_per_token() {
    let (app, _dir, _db) = spawn_with_tokens(|args| args.security.max_streams_per_token = 2).await;
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let open = |secret: &'static str| {
        let req = http
            .get(format!("{}/v1/events", app.base))
            .header("accept", "text/event-stream")
            .header("authorization", format!("Bearer {secret}"));
        async move { bounded("stream", req.send()).await.expect("stream") }
    };
    let first = open(RESPONDER.secret).await;
    let second = open(RESPONDER.secret).await;
    assert_eq!((first.status().as_u16(), second.status().as_u16()), (200, 200));
    let third = open(RESPONDER.secret).await;
    assert_eq!(third.status(), 429);
    assert!(third.headers().contains_key("retry-after"));
    let body: Value = bounded("body", third.json()).await.unwrap();
    assert_eq!(body["error"]["code"], "rate_limited");
    assert_eq!(open(ADMIN.secret).await.status(), 200, "another token has its own streams");
    drop(first);
    crate::helpers::eventually("a closed stream frees its slot", async || {
        let again = open(RESPONDER.secret).await;
        again.status() == 200
    })
    .await;
    drop(second);
}

#[tokio::test]
async fn open_mode_needs_no_credentials_and_records_no_principal() {
    let app = TestApp::spawn().await;
    let (session, _, gate) = app.open_asking("Open?").await;
    app.answer(&session, &gate, "yes").await.expect(202);
    assert_eq!(app.view(&session, &gate).await["resolution"]["source"], json!({"kind": "user"}));
    let resp = app.post("/v1/login", &json!({"token": "anything-at-all-0123"})).await.expect(204);
    assert!(resp.headers.get("set-cookie").is_none(), "nothing to log into");
    // A token sent anyway is ignored, not refused.
    app.bearer("whatever").get("/v1/gates").await.expect(200);
}

#[test]
fn no_secret_reaches_the_log() {
    let (dir, db) = temp_db();
    let tokens = tokens_file(&db);
    let server = ServerProcess::start_with_env(
        &db,
        "127.0.0.1:0",
        &["--tokens-file", tokens.to_str().unwrap()],
        &[("RUST_LOG", "trace")],
    );
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let cookie = runtime.block_on(async {
        let session = uuid();
        for who in ALL {
            server.bearer(who.secret).get("/v1/gates").await;
        }
        server.bearer("a-wrong-secret-0123456789").get("/v1/gates").await.expect(401);
        let gate = gate_id(&server.bearer(ADMIN.secret).open(&session, &ask(&uuid(), &uuid(), "Logged?")).await);
        server.bearer(RESPONDER.secret).answer(&session, &gate, "yes").await.expect(202);
        let (cookie, _) = login(&server, RESPONDER.secret).await;
        server.with_header("cookie", &cookie).get("/v1/gates").await.expect(200);
        cookie
    });
    // Let the last lines reach the pipe.
    std::thread::sleep(std::time::Duration::from_millis(200));
    let log = server.log_lines().join("\n");
    assert!(log.contains("logged in on the page"), "the log is captured: {}", &log[..log.len().min(2000)]);
    let cookie_value = cookie.split_once('=').unwrap().1;
    for secret in ALL.iter().map(|c| c.secret).chain(["a-wrong-secret-0123456789", cookie_value]) {
        assert!(!log.contains(secret), "a secret reached the log");
    }
    server.kill();
    drop(dir);
}

#[tokio::test]
async fn cors_answers_only_the_listed_origins() {
    let listed = "http://ops.example:8443";
    let app = TestApp::spawn_with(|args| args.security.cors_origins = vec![listed.to_owned()]).await;
    let closed = TestApp::spawn().await;
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let preflight = async |base: &str, origin: &str| {
        let req = http
            .request(Method::OPTIONS, format!("{base}/v1/gates"))
            .header("origin", origin)
            .header("access-control-request-method", "GET")
            .header("access-control-request-headers", "authorization");
        let resp = bounded("preflight", req.send()).await.unwrap();
        let allowed = resp.headers().get("access-control-allow-origin").map(|v| v.to_str().unwrap().to_owned());
        let credentials = resp.headers().get("access-control-allow-credentials").is_some();
        (allowed, credentials)
    };
    assert_eq!(preflight(&app.base, listed).await, (Some(listed.to_owned()), true));
    assert_eq!(preflight(&app.base, "http://evil.example").await.0, None);
    assert_eq!(preflight(&closed.base, listed).await.0, None, "no --cors-origin, no CORS");
    // Without --cors-origin, OPTIONS is a method like any other the route does not serve.
    let options = http.request(Method::OPTIONS, format!("{}/v1/gates", closed.base)).send();
    let options = bounded("options", options).await.unwrap();
    assert_eq!(options.status(), 405);
    let body: serde_json::Value = bounded("options body", options.json()).await.unwrap();
    assert_eq!(body["error"]["code"], "method_not_allowed");
    // A simple GET from the listed origin is allowed to read the answer; never a wildcard.
    let resp = app.send(Method::GET, "/v1/gates", &[("origin", listed)], None).await.expect(200);
    assert_eq!(resp.headers["access-control-allow-origin"], listed);
}

#[tokio::test]
async fn cookies_are_trusted_from_listed_origins_and_agents_match_prefixes_in_any_case() {
    let listed = "https://ops.example";
    let (app, _dir, _db) = spawn_with_tokens(|args| args.security.cors_origins = vec![listed.to_owned()]).await;
    let (cookie, _) = login(&app, ADMIN.secret).await;
    let page = app.with_header("cookie", &cookie);
    let session = session_in_prefix().to_uppercase();
    let body = ask(&uuid(), &uuid(), "From the ops console?").to_string().into_bytes();
    let headers = [("content-type", "application/json"), ("origin", listed)];
    page.send(Method::POST, &format!("/v1/sessions/{session}/gates"), &headers, Some(body)).await.expect(201);
    // The scoped agent reads the same session whether its id is written in upper or lower case.
    let agent = app.bearer(AGENT.secret);
    agent.get(&format!("/v1/sessions/{session}/gates")).await.expect(200);
    agent.get(&format!("/v1/sessions/{}/gates", session.to_lowercase())).await.expect(200);
    let outside = session_out_of_prefix().to_uppercase();
    agent.get(&format!("/v1/sessions/{outside}/gates")).await.expect_error(403, "forbidden");
    // A malformed id is a 400 before any 403.
    agent.get("/v1/sessions/not-a-uuid/gates").await.expect_error(400, "invalid_parameter");
    app.bearer(RESPONDER.secret).get("/v1/webhooks/deliveries?status=pending").await.expect_error(403, "forbidden");
}

/// `n` requests with wrong tokens, one at a time; how many got 401 and how many 429 (each 429
/// with a `Retry-After`), and the last `Retry-After`.
async fn guess(client: &Client, n: usize) -> (usize, usize, u64) {
    let (mut refused, mut throttled, mut retry_after) = (0, 0, 0);
    for i in 0..n {
        let wrong = format!("Bearer a-wrong-guess-{i:012}");
        let resp = client.send(Method::GET, "/v1/gates", &[("authorization", &wrong)], None).await;
        match resp.status {
            401 => refused += 1,
            429 => {
                throttled += 1;
                retry_after = resp.headers["retry-after"].to_str().unwrap().parse().unwrap();
            }
            other => panic!("a wrong token got {other}"),
        }
    }
    (refused, throttled, retry_after)
}

#[tokio::test]
async fn failed_authentication_is_throttled_per_client_address() {
    let (app, _dir, _db) = spawn_with_tokens(|_| {}).await;
    let guesser = app.via_address("127.0.0.1".parse().unwrap());
    let started = std::time::Instant::now();
    let (refused, throttled, retry_after) = guess(&guesser, 1000).await;
    // --auth-failures (30 a minute, all at once or one every 2 s), then 429 without looking.
    let refilled = (started.elapsed().as_secs_f64() / 2.0).ceil() as usize;
    assert!((30..=30 + refilled).contains(&refused), "{refused} refused in {:?}", started.elapsed());
    assert_eq!(refused + throttled, 1000);
    assert!((1..=2).contains(&retry_after), "one failure comes back every 2 s: {retry_after}");
    // The right token from the guessing address waits too: a 429 tells a guesser nothing.
    let error = guesser.bearer(ADMIN.secret).get("/v1/gates").await.expect_error(429, "rate_limited");
    assert!(error["error"]["message"].as_str().unwrap().contains("failed to authenticate"), "{error}");
    guesser.post("/v1/login", &json!({"token": RESPONDER.secret})).await.expect_error(429, "rate_limited");
    // Routes that take no credential are not held up.
    guesser.get("/healthz").await.expect(200);

    // Another address is not locked out, not even for a moment.
    let other = app.via_address("127.0.0.2".parse().unwrap());
    other.bearer(ADMIN.secret).get("/v1/gates").await.expect(200);
    other.bearer("one-wrong-guess-0123456789").get("/v1/gates").await.expect_error(401, "unauthorized");

    // After Retry-After the guesser gets a try again: the right token passes.
    tokio::time::sleep(std::time::Duration::from_secs(retry_after)).await;
    guesser.bearer(ADMIN.secret).get("/v1/gates").await.expect(200);
}

#[tokio::test]
async fn behind_a_trusted_proxy_the_forwarded_address_is_the_client() {
    let proxied = |app: &TestApp, client: &str| app.with_header("x-forwarded-for", &format!("198.51.100.1, {client}"));
    let (app, _dir, _db) = spawn_with_tokens(|args| args.security.trusted_proxies = vec!["127.0.0.1/32".into()]).await;
    let (refused, throttled, _) = guess(&proxied(&app, "203.0.113.7"), 40).await;
    assert!(refused >= 30 && throttled >= 5, "{refused} refused, {throttled} throttled");
    // The same proxy, another client behind it: its own budget.
    proxied(&app, "203.0.113.8").bearer(ADMIN.secret).get("/v1/gates").await.expect(200);
    proxied(&app, "203.0.113.7").bearer(ADMIN.secret).get("/v1/gates").await.expect_error(429, "rate_limited");
    app.stop().await;

    // From a peer that is not a trusted proxy, X-Forwarded-For is the client's own word: ignored.
    let (app, _dir, _db) = spawn_with_tokens(|_| {}).await;
    let (refused, throttled, _) = guess(&proxied(&app, "203.0.113.7"), 40).await;
    assert!(refused >= 30 && throttled >= 5, "{refused} refused, {throttled} throttled");
    proxied(&app, "203.0.113.8").bearer(ADMIN.secret).get("/v1/gates").await.expect_error(429, "rate_limited");
}

/// The cookie pair from a Set-Cookie header (`name=value`).
fn cookie_pair(set_cookie: &str) -> &str {
    set_cookie.split(';').next().unwrap()
}

#[tokio::test]
async fn login_cookies_are_this_servers_own_and_the_page_can_log_out() {
    let (app, _dir, db) = spawn_with_tokens(|_| {}).await;
    let (cookie, set_cookie) = login(&app, RESPONDER.secret).await;
    let name = cookie.split('=').next().unwrap().to_owned();
    assert!(name.starts_with("gatehouse_login_") && name.len() == "gatehouse_login_".len() + 12, "{name}");
    assert!(!set_cookie.contains("Secure"), "plain http: {set_cookie}");

    // Agent tokens have no use for the page: refused, and no cookie.
    let refused = app.post("/v1/login", &json!({"token": AGENT.secret})).await;
    assert!(refused.headers.get("set-cookie").is_none());
    refused.expect_error(403, "forbidden");

    // A second server on this host (another port, another database) names its cookie otherwise:
    // neither reads nor overwrites the other's login.
    let (other, _other_dir, _) = spawn_with_tokens(|_| {}).await;
    let (other_cookie, _) = login(&other, RESPONDER.secret).await;
    assert_ne!(other_cookie.split('=').next().unwrap(), name);
    other.with_header("cookie", &cookie).get("/v1/gates").await.expect_error(401, "unauthorized");
    let both = format!("{other_cookie}; {cookie}");
    app.with_header("cookie", &both).get("/v1/gates").await.expect(200);
    other.with_header("cookie", &both).get("/v1/gates").await.expect(200);

    // A cookie of our name planted for a deeper path comes first in the header: the one this
    // server signed still counts, and a lone forged one is refused.
    let shadowed = format!("{name}=forged.value; {cookie}");
    app.with_header("cookie", &shadowed).get("/v1/gates").await.expect(200);
    app.with_header("cookie", &format!("{name}=forged.value")).get("/v1/gates").await.expect_error(401, "unauthorized");

    // Logging out expires the cookie in the browser.
    let out = app.send(Method::POST, "/v1/logout", &[], None).await.expect(204);
    let expired = out.headers["set-cookie"].to_str().unwrap();
    assert_eq!(cookie_pair(expired), format!("{name}="));
    assert!(expired.contains("Max-Age=0") && !expired.contains("Max-Age=604800"), "{expired}");
    app.stop().await;

    // Behind an https public URL the cookie is a __Host- one, Secure, for Path=/ and no Domain.
    let tokens = tokens_file(&db);
    let app = TestApp::start(&db, |args| {
        args.security.tokens_file = Some(tokens);
        args.public_url = Some("https://gates.example.com".into());
    })
    .await;
    let (secure, set_cookie) = login(&app, RESPONDER.secret).await;
    assert_eq!(secure.split('=').next().unwrap(), format!("__Host-{name}"), "the same key, the same name");
    assert!(set_cookie.contains("; Secure") && set_cookie.contains("Path=/") && !set_cookie.contains("Domain"));
    app.with_header("cookie", &secure).get("/v1/gates").await.expect(200);
    app.with_header("cookie", &cookie).get("/v1/gates").await.expect_error(401, "unauthorized");
}
