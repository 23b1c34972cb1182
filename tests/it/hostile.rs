//! Bad input is harmless (spec §10): a property test sends arbitrary bytes, arbitrary JSON and
//! near-valid bodies, with arbitrary ids, queries, media types and credentials, to every route.
//! No response is a 5xx (a handler panic would be a 500), and nothing changes unless the
//! status is 2xx.

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use reqwest::Method;
use serde_json::{Value, json};

use crate::helpers::{TestApp, ask, bounded, gate_id, uuid};

/// The admin's secret in this test's tokens file.
const ADMIN: &str = "hostile-admin-secret-0123456789";

/// One generated request.
#[derive(Debug, Clone)]
struct Hostile {
    route: usize,
    method: Option<Method>,
    ids: Vec<IdChoice>,
    query: Option<String>,
    content_type: Option<&'static str>,
    auth: AuthChoice,
    idempotency_key: Option<String>,
    body: Option<Vec<u8>>,
}

#[derive(Debug, Clone)]
enum IdChoice {
    /// The id of the open gate's session, gate, loop, or a real command.
    Known,
    Fresh,
    Garbage(String),
}

#[derive(Debug, Clone)]
enum AuthChoice {
    Admin,
    None,
    Garbage(String),
    /// A made-up login cookie.
    Cookie(String),
    /// A made-up webhook signature, with or without the other two headers.
    Signature(String, bool),
    /// The admin, behind a `Host` the server does not serve.
    ForeignHost(String),
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(Value::from),
        ".{0,40}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 64, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
            prop::collection::btree_map("[a-z_]{0,12}", inner, 0..8)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Bodies close to valid ones, so the deeper checks are reached too.
fn near_valid() -> impl Strategy<Value = Value> {
    let text = prop_oneof![Just("a".to_owned()), Just(String::new()), ".{0,20}"];
    prop_oneof![
        (prop_oneof![Just("answer"), Just("cancel"), Just("")], text.clone())
            .prop_map(|(action, answer)| json!({"action": action, "values": {"answer": answer}})),
        (text.clone(), json_value()).prop_map(|(question, extra)| json!({
            "loop_id": uuid(), "tool_execution_id": uuid(), "question": question, "response_policy": extra
        })),
        (text.clone(), json_value()).prop_map(|(reason, extra)| json!({"reason": reason, "extra": extra})),
        text.prop_map(|token| json!({"token": token})),
    ]
}

fn hostile(routes: usize) -> impl Strategy<Value = Hostile> {
    let method = prop_oneof![
        4 => Just(None),
        1 => prop_oneof![Just(Method::GET), Just(Method::POST), Just(Method::PUT), Just(Method::DELETE)].prop_map(Some),
    ];
    let id = prop_oneof![
        3 => Just(IdChoice::Known),
        1 => Just(IdChoice::Fresh),
        1 => "[A-Za-z0-9._~%-]{0,40}".prop_map(IdChoice::Garbage),
    ];
    let content_type = prop_oneof![
        Just(Some("application/json")),
        Just(Some("application/json; charset=utf-8")),
        Just(Some("text/plain")),
        Just(None),
    ];
    let auth = prop_oneof![
        8 => Just(AuthChoice::Admin),
        2 => Just(AuthChoice::None),
        1 => "[ -~]{0,40}".prop_map(AuthChoice::Garbage),
        1 => "[A-Za-z0-9._-]{0,60}".prop_map(AuthChoice::Cookie),
        1 => ("v1,[A-Za-z0-9+/=]{0,50}", any::<bool>()).prop_map(|(s, full)| AuthChoice::Signature(s, full)),
        1 => "[a-z0-9.-]{1,20}(:[0-9]{1,5})?".prop_map(AuthChoice::ForeignHost),
    ];
    let body = prop_oneof![
        1 => Just(None),
        2 => prop::collection::vec(any::<u8>(), 0..1024).prop_map(Some),
        2 => json_value().prop_map(|v| Some(v.to_string().into_bytes())),
        3 => near_valid().prop_map(|v| Some(v.to_string().into_bytes())),
    ];
    (
        0..routes,
        method,
        prop::collection::vec(id, 3),
        prop::option::of("[a-z_]{1,15}=[A-Za-z0-9%._-]{0,20}(&[a-z_]{1,15}=[0-9a-z-]{0,12}){0,2}"),
        content_type,
        auth,
        prop::option::of("[ -~]{0,300}"),
        body,
    )
        .prop_map(|(route, method, ids, query, content_type, auth, idempotency_key, body)| Hostile {
            route,
            method,
            ids,
            query,
            content_type,
            auth,
            idempotency_key,
            body,
        })
}

/// What the server holds: every journal event and the loop's whole inbox (acks included).
async fn snapshot(app: &TestApp, session: &str, loop_id: &str) -> (Vec<Value>, Vec<Value>) {
    let admin = app.bearer(ADMIN);
    (admin.journal_all().await, admin.inbox_all(session, loop_id).await)
}

#[test]
fn arbitrary_requests_never_fail_the_server_and_refusals_change_nothing() {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let (dir, db) = crate::helpers::temp_db();
    let tokens = db.with_file_name("tokens");
    std::fs::write(&tokens, format!("admin root {ADMIN}\n")).unwrap();
    let app = runtime.block_on(TestApp::start(&db, |args| {
        args.security.tokens_file = Some(tokens);
        args.security.rate_limit = 1_000_000;
        // Small enough that some generated bodies are too large (413).
        args.http.max_body = 200;
        // Most generated credentials are wrong: were they throttled, the admin's own requests
        // (and the snapshots) would get 429 too.
        args.security.auth_failures = 1_000_000;
    }));
    let (session, loop_id) = (uuid(), uuid());
    // One open gate and one answered gate whose command sits in the inbox, as targets.
    let (open_gate, command) = runtime.block_on(async {
        let admin = app.bearer(ADMIN);
        let open = gate_id(&admin.open(&session, &ask(&loop_id, &uuid(), "Open?")).await);
        let answered = gate_id(&admin.open(&session, &ask(&loop_id, &uuid(), "Answered?")).await);
        admin.answer(&session, &answered, "yes").await.expect(202);
        let inbox = admin.inbox(&session, &loop_id).await;
        (open, inbox[0]["command"]["command_id"].as_str().expect("command id").to_owned())
    });
    // The login cookie's name is the server's own: a made-up value goes under it.
    let cookie_name = runtime.block_on(async {
        let login = app.post("/v1/login", &serde_json::json!({"token": ADMIN})).await.expect(204);
        let set_cookie = login.headers["set-cookie"].to_str().unwrap().to_owned();
        set_cookie.split('=').next().unwrap().to_owned()
    });
    let routes = gatehouse::http::route_table();
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let base = app.base.clone();
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(300);
    let mut runner = TestRunner::new(Config { cases, failure_persistence: None, ..Config::default() });
    let statuses = std::sync::Mutex::new(std::collections::BTreeMap::<u16, usize>::new());
    let result = runner.run(&hostile(routes.len()), |case| {
        let (method, template, _) = &routes[case.route];
        let method = case.method.clone().unwrap_or_else(|| method.clone());
        let mut ids = case.ids.iter();
        let mut path = String::new();
        for segment in template.split('/').skip(1) {
            path.push('/');
            let known = match segment {
                "{session_id}" => session.clone(),
                "{gate_id}" => open_gate.clone(),
                "{loop_id}" => loop_id.clone(),
                "{command_id}" => command.clone(),
                "{token}" => "A".repeat(43),
                "{name}" => "app.js".into(),
                literal => {
                    path.push_str(literal);
                    continue;
                }
            };
            path.push_str(&match ids.next().unwrap_or(&IdChoice::Known) {
                IdChoice::Known => known,
                IdChoice::Fresh => uuid(),
                IdChoice::Garbage(text) => text.clone(),
            });
        }
        if let Some(query) = &case.query {
            path = format!("{path}?{query}");
        }
        // A long-poll parks; it is not what this test is about.
        if path.contains("/wait") {
            path = format!("{}?timeout=0", path.split('?').next().unwrap());
        }
        let status = runtime.block_on(async {
            let before = snapshot(&app, &session, &loop_id).await;
            let mut req = http.request(method.clone(), format!("{base}{path}"));
            match &case.auth {
                AuthChoice::Admin => req = req.header("authorization", format!("Bearer {ADMIN}")),
                AuthChoice::None => {}
                AuthChoice::Garbage(text) => req = req.header("authorization", text.as_str()),
                AuthChoice::Cookie(value) => req = req.header("cookie", format!("{cookie_name}={value}")),
                AuthChoice::Signature(signature, full) => {
                    req = req.header("webhook-signature", signature.as_str());
                    if *full {
                        let now = gatehouse::domain::Timestamp::now().unix_seconds().to_string();
                        req = req.header("webhook-id", "msg_hostile").header("webhook-timestamp", now);
                    }
                }
                AuthChoice::ForeignHost(host) => {
                    req = req.header("authorization", format!("Bearer {ADMIN}")).header("host", host.as_str());
                }
            }
            if let Some(ct) = case.content_type {
                req = req.header("content-type", ct);
            }
            if let Some(key) = &case.idempotency_key {
                req = req.header("idempotency-key", key.as_str());
            }
            if let Some(body) = &case.body {
                req = req.body(body.clone());
            }
            let resp = bounded(&path, req.send()).await.expect("the server answers");
            let status = resp.status().as_u16();
            // Streams are not read; everything else is read whole.
            let stream = resp.headers().get("content-type").is_some_and(|ct| ct == "text/event-stream");
            if !stream {
                bounded(&path, resp.bytes()).await.expect("a whole body");
            }
            let after = snapshot(&app, &session, &loop_id).await;
            (status, before == after)
        });
        let (status, unchanged) = status;
        *statuses.lock().unwrap().entry(status).or_default() += 1;
        prop_assert!(status < 500, "{method} {path} gave {status} for {case:?}");
        prop_assert!((200..300).contains(&status) || unchanged, "{method} {path} gave {status} but changed state");
        Ok(())
    });
    eprintln!("hostile requests by status: {:?}", statuses.lock().unwrap());
    if let Err(e) = result {
        panic!("{e}");
    }
    runtime.block_on(async { drop(app.stop().await) });
    drop(dir);
}
