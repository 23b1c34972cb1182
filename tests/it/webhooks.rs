//! Webhook-style integrations (spec §9): signed notifications with durable retries, answer links
//! and signed answers. The receiver is a real HTTP server on 127.0.0.1, allowed by
//! `--webhook-allow-cidr` (the SSRF guard refuses loopback otherwise).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use gatehouse::common::signature::{self as sign, Secret};
use serde_json::{Value, json};

use crate::helpers::{Client, ServerProcess, Signed, TestApp, ask, eventually, gate_id, uuid};

/// Signs notifications.
const SECRET: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";
/// Verifies signed answers (`--inbound-secret-file`): never the notifications' secret.
const INBOUND: &str = "whsec_bW9yZS1yYW5kb20tYnl0ZXMtZm9yLWFuc3dlcnM=";

/// One received notification.
#[derive(Debug, Clone)]
struct Received {
    /// What the receiver answered.
    status: u16,
    id: String,
    timestamp: String,
    signature: String,
    body: Bytes,
}

impl Received {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap()
    }

    fn seq(&self) -> i64 {
        self.json()["journal_seq"].as_i64().unwrap()
    }
}

/// How the receiver answers: a status for (journal seq, attempt number from 0).
type Answering = Box<dyn Fn(i64, usize) -> u16 + Send>;

/// A webhook receiver answering with `status(journal_seq, attempt)`.
#[derive(Clone)]
struct Receiver {
    url: String,
    got: Arc<Mutex<Vec<Received>>>,
    status: Arc<Mutex<Answering>>,
}

impl Receiver {
    async fn start(status: impl Fn(i64, usize) -> u16 + Send + 'static) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        let receiver = Self { url, got: Arc::default(), status: Arc::new(Mutex::new(Box::new(status))) };
        let app = axum::Router::new().route("/hook", axum::routing::post(receive)).with_state(receiver.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        receiver
    }

    fn set(&self, status: impl Fn(i64, usize) -> u16 + Send + 'static) {
        *self.status.lock().unwrap() = Box::new(status);
    }

    fn got(&self) -> Vec<Received> {
        self.got.lock().unwrap().clone()
    }

    /// The seqs answered 2xx, in the order they arrived.
    fn delivered(&self) -> Vec<i64> {
        self.got().iter().filter(|r| (200..300).contains(&r.status)).map(Received::seq).collect()
    }
}

async fn receive(State(receiver): State<Receiver>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
    let mut received = Received {
        status: 0,
        id: header("webhook-id"),
        timestamp: header("webhook-timestamp"),
        signature: header("webhook-signature"),
        body,
    };
    let seq = received.seq();
    let mut got = receiver.got.lock().unwrap();
    let attempt = got.iter().filter(|r| r.seq() == seq).count();
    received.status = (receiver.status.lock().unwrap())(seq, attempt);
    got.push(received.clone());
    StatusCode::from_u16(received.status).unwrap()
}

fn secret_file(dir: &std::path::Path) -> std::path::PathBuf {
    write_secret(dir, "webhook.secret", SECRET)
}

fn write_secret(dir: &std::path::Path, name: &str, secret: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, format!("{secret}\n")).unwrap();
    path
}

async fn app_for(
    receiver: &Receiver,
    dir: &std::path::Path,
    adjust: impl FnOnce(&mut gatehouse::ServeArgs),
) -> TestApp {
    let secret = secret_file(dir);
    let inbound = write_secret(dir, "inbound.secret", INBOUND);
    let url = receiver.url.clone();
    TestApp::spawn_with(move |args| {
        args.webhooks.urls = vec![url];
        args.webhooks.secret_files = vec![secret.display().to_string()];
        args.webhooks.inbound_secret_file = Some(inbound);
        args.webhooks.allow_cidrs = vec!["127.0.0.1/32".into()];
        args.webhooks.retry_schedule = vec![Duration::from_millis(50), Duration::from_millis(100)];
        adjust(args);
    })
    .await
}

/// A receiver that accepts every notification, and a server (`app_for`, then `adjust`) that
/// notifies it, its secret files in a new directory that lives as long as the returned `TempDir`.
async fn app_with_receiver(adjust: impl FnOnce(&mut gatehouse::ServeArgs)) -> (Receiver, tempfile::TempDir, TestApp) {
    let receiver = Receiver::start(|_, _| 200).await;
    let dir = tempfile::tempdir().unwrap();
    let app = app_for(&receiver, dir.path(), adjust).await;
    (receiver, dir, app)
}

#[tokio::test]
async fn every_event_is_delivered_signed_in_order_with_answer_links() {
    let (receiver, _dir, app) = app_with_receiver(|_| {}).await;
    let session = uuid();
    let mut body = ask(&uuid(), &uuid(), "Ship <script>alert(1)</script>?");
    body["choices"] = json!(["yes", "no"]);
    let gate = gate_id(&app.open(&session, &body).await);
    let other = gate_id(&app.open(&session, &ask(&uuid(), &uuid(), "Second")).await);
    app.answer(&session, &other, "done").await.expect(202);
    eventually("five deliveries", async || receiver.got().len() >= 5).await;

    let got = receiver.got();
    assert_eq!(got.iter().map(Received::seq).collect::<Vec<_>>(), [1, 2, 3, 4, 5], "journal order, once each");
    let secret: Secret = SECRET.parse().unwrap();
    let journal = app.journal().await;
    for (received, entry) in got.iter().zip(&journal) {
        let now = received.timestamp.parse::<u64>().unwrap();
        sign::verify(&secret, &received.id, &received.timestamp, &received.signature, &received.body, now)
            .expect("signed over the exact bytes");
        assert_eq!(received.id, entry["event"]["event_id"].as_str().unwrap(), "webhook-id is the event's id");
        let payload = received.json();
        assert_eq!(payload["v"], 1);
        assert_eq!(payload["event"], entry["event"]);
        assert_eq!(payload.get("answer_url").is_some(), entry["event"]["type"] == "GateOpened");
    }

    // The first GateOpened's answer link answers that gate, once, as `answer-link`.
    let link = got[0].json()["answer_url"].as_str().unwrap().to_owned();
    let path = link.strip_prefix(&app.base).expect("the link points at this server").to_owned();
    let page = app.get(&path).await.expect(200);
    let html = String::from_utf8_lossy(&page.body);
    assert!(html.contains("Ship &lt;script&gt;alert(1)&lt;/script&gt;?"), "gate text is escaped: {html}");
    assert!(!html.contains("<script>alert"));
    assert_eq!(page.headers["referrer-policy"], "no-referrer");
    let accepted = app.post(&path, &crate::helpers::answer("yes")).await.expect(202).json();
    assert_eq!(accepted["gate_id"], gate.as_str());
    let view = app.view(&session, &gate).await;
    assert_eq!(view["resolution"]["source"], json!({"kind": "user", "principal": "answer-link"}));
    // Once answered, the link answers nothing, and shows nobody what was answered (nor who).
    let late = app.post(&path, &crate::helpers::answer("no")).await.expect_error(409, "gate_not_ready");
    assert!(late["error"].get("resolution").is_none(), "{late}");
    assert_eq!(late["error"]["message"], "this question was already answered");
    let page = app.get(&path).await.expect(200);
    let html = String::from_utf8_lossy(&page.body);
    assert!(html.contains("This question was already answered."), "{html}");
    assert!(!html.contains("yes") && !html.contains("answer-link"), "the answer stays private: {html}");
    let closed = gate_id(&app.open(&session, &ask(&uuid(), &uuid(), "Withdrawn?")).await);
    app.post(&format!("/v1/sessions/{session}/gates/{closed}/close"), &json!({})).await.expect(200);
    eventually("the second gate's link", async || receiver.got().len() >= 8).await;
    let second =
        receiver.got().iter().filter_map(|r| r.json()["answer_url"].as_str().map(str::to_owned)).nth(2).unwrap();
    let second = second.strip_prefix(&app.base).unwrap().to_owned();
    let closed_answer = app.post(&second, &crate::helpers::answer("x")).await.expect_error(409, "gate_not_ready");
    assert_eq!(closed_answer["error"]["message"], "this question was already closed");
    let unknown = format!("/v1/answers/{}", "A".repeat(43));
    app.post(&unknown, &crate::helpers::answer("no")).await.expect_error(404, "not_found");
    app.get(&unknown).await.expect_error(404, "not_found");
}

#[tokio::test]
async fn failed_deliveries_are_retried_with_identical_bytes_then_dead_lettered() {
    // Event 1 always fails; event 2 fails once, then succeeds; the rest succeed.
    let receiver = Receiver::start(|seq, attempt| match (seq, attempt) {
        (1, _) => 500,
        (2, 0) => 503,
        _ => 200,
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let app = app_for(&receiver, dir.path(), |_| {}).await;
    let (session, _, gate) = app.open_asking("Retry?").await;
    app.answer(&session, &gate, "ok").await.expect(202);
    eventually("the endpoint moves past the dead letter", async || receiver.delivered() == [2, 3]).await;

    let got = receiver.got();
    let of = |seq| got.iter().filter(|r| r.seq() == seq).cloned().collect::<Vec<_>>();
    assert_eq!(of(1).len(), 3, "one attempt and two retries, then a dead letter");
    assert!(of(1).windows(2).all(|w| w[0].body == w[1].body && w[0].id == w[1].id), "a retry is the same message");
    assert_eq!(of(2).len(), 2);
    let failed = app.get("/v1/webhooks/deliveries?status=failed").await.expect(200).json();
    assert_eq!(failed["deliveries"].as_array().unwrap().len(), 1);
    assert_eq!(failed["deliveries"][0]["journal_seq"], 1);
    assert_eq!(failed["deliveries"][0]["attempts"], 3);
    assert_eq!(failed["deliveries"][0]["last_error"], "HTTP 500");
    let pending = app.get("/v1/webhooks/deliveries?status=pending").await.expect(200).json();
    assert!(pending["deliveries"].as_array().unwrap().is_empty());
    app.get("/v1/webhooks/deliveries?status=lost").await.expect_error(400, "invalid_parameter");
}

#[tokio::test]
async fn a_410_disables_the_endpoint_until_it_is_reenabled() {
    let receiver = Receiver::start(|_, _| 410).await;
    let dir = tempfile::tempdir().unwrap();
    let secret = secret_file(dir.path());
    let db = dir.path().join("gatehouse.db");
    let url = receiver.url.clone();
    let flags = |args: &mut gatehouse::ServeArgs| {
        args.webhooks.urls = vec![url.clone()];
        args.webhooks.secret_files = vec![secret.display().to_string()];
        args.webhooks.allow_cidrs = vec!["127.0.0.1/32".into()];
        // Short retries: were a 410 an ordinary failure, a retry would arrive at once.
        args.webhooks.retry_schedule = vec![Duration::from_millis(20); 5];
    };
    let disabled =
        |db: &std::path::Path| crate::database::query_bool(db, "SELECT disabled_at IS NOT NULL FROM webhook_endpoints");
    let app = TestApp::start(&db, flags).await;
    let session = uuid();
    app.open(&session, &ask(&uuid(), &uuid(), "Gone?")).await;
    eventually("the first delivery", async || !receiver.got().is_empty()).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(receiver.got().len(), 1, "disabled after the 410: nothing more is sent");
    app.stop().await;
    assert!(disabled(&db), "the disabling is stored");

    // Still disabled after a restart; re-enabled by the flag, it resumes where it stopped.
    let app = TestApp::start(&db, flags).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(receiver.got().len(), 1, "the disabling is persisted");
    app.stop().await;
    receiver.set(|_, _| 200);
    let reenable = receiver.url.clone();
    let app = TestApp::start(&db, move |args| {
        flags(args);
        args.webhooks.reenable = vec![reenable];
    })
    .await;
    eventually("both events delivered", async || receiver.delivered() == [1, 2]).await;
    app.stop().await;
    assert!(!disabled(&db), "re-enabled");
}

#[tokio::test]
async fn deliveries_survive_a_crash_of_the_server() {
    let receiver = Receiver::start(|_, _| 503).await;
    let dir = tempfile::tempdir().unwrap();
    let secret = secret_file(dir.path());
    let db = dir.path().join("gatehouse.db");
    let secret_flag = secret.to_string_lossy().into_owned();
    let flags = [
        "--webhook-url",
        &receiver.url,
        "--webhook-secret-file",
        &secret_flag,
        "--webhook-allow-cidr",
        "127.0.0.1/32",
        "--webhook-retry-schedule",
        "100ms,100ms,100ms,100ms,100ms,100ms,100ms,100ms,100ms,30s",
    ];
    let server = ServerProcess::start_with(&db, "127.0.0.1:0", &flags);
    let session = uuid();
    server.open(&session, &ask(&uuid(), &uuid(), "Crash?")).await;
    eventually("a failed attempt", async || !receiver.got().is_empty()).await;
    server.kill();

    receiver.set(|_, _| 200);
    let _server = ServerProcess::start_with(&db, "127.0.0.1:0", &flags);
    // A request the killed server had already sent may still arrive: at least once, in order.
    eventually("delivered after the restart", async || {
        let mut delivered = receiver.delivered();
        delivered.dedup();
        delivered == [1, 2]
    })
    .await;
}

/// Asserts that `gate` was answered by a signed request: the `webhook` principal is its source.
async fn assert_answered_by_webhook(client: &Client, session: &str, gate: &str) {
    let view = client.view(session, gate).await;
    assert_eq!(view["resolution"]["source"], json!({"kind": "user", "principal": "webhook"}));
}

#[tokio::test]
async fn signed_answers_authenticate_as_webhook() {
    let (_receiver, _dir, app) = app_with_receiver(|_| {}).await;
    let (session, _, gate) = app.open_asking("Signed?").await;
    let path = format!("/v1/sessions/{session}/gates/{gate}");
    let body = json!({"gate_id": gate, "action": "answer", "values": {"answer": "from the bot"}}).to_string();
    let signed = |id: &str, timestamp: u64, body: &str| Signed::new(INBOUND, id, timestamp, body.as_bytes());
    let now = gatehouse::domain::Timestamp::now().unix_seconds();
    let send = async |signed: Signed, body: &str| {
        app.send(reqwest::Method::POST, &path, &signed.headers(), Some(body.as_bytes().to_vec())).await
    };

    send(signed("msg_1", now, "{\"other\":1}"), &body).await.expect_error(401, "unauthorized");
    // The secret that signs notifications cannot sign an answer: a receiver of notifications
    // must not be able to answer gates.
    let notification = |id: &str| Signed::new(SECRET, id, now, body.as_bytes());
    send(notification("msg_n"), &body).await.expect_error(401, "unauthorized");
    // A signed body that names no gate could be replayed onto any gate: refused.
    let unnamed = crate::helpers::answer("from the bot").to_string();
    send(signed("msg_0", now, &unnamed), &unnamed).await.expect_error(401, "unauthorized");
    send(signed("msg_1", now - 400, &body), &body).await.expect_error(401, "unauthorized");
    assert_eq!(app.view(&session, &gate).await["state"], "open", "refused signatures change nothing");
    let first = send(signed("msg_1", now, &body), &body).await.expect(202).json();
    // A redelivery of the same message is the same answer (webhook-id is the idempotency key).
    let again = send(signed("msg_1", now, &body), &body).await.expect(202).json();
    assert_eq!(first, again);
    assert_answered_by_webhook(&app, &session, &gate).await;
}

#[tokio::test]
async fn with_tokens_a_signature_stands_in_for_a_token_on_answers_only() {
    let receiver = Receiver::start(|_, _| 200).await;
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, "admin root signed-test-admin-0123456789\n").unwrap();
    let app = app_for(&receiver, dir.path(), |args| args.security.tokens_file = Some(tokens)).await;
    let admin = app.bearer("signed-test-admin-0123456789");
    let (session, _, gate) = admin.open_asking("Signed, with tokens?").await;
    let path = format!("/v1/sessions/{session}/gates/{gate}");
    let body = json!({"gate_id": gate, "action": "answer", "values": {"answer": "bot"}}).to_string();
    let now = gatehouse::domain::Timestamp::now().unix_seconds();
    let signature = Signed::new(INBOUND, "msg_t", now, body.as_bytes());
    let signed = signature.headers();
    // Unsigned and uncredentialled: 401. A signature does not open any other route.
    app.post(&path, &json!({"gate_id": gate, "action": "answer", "values": {"answer": "x"}}))
        .await
        .expect_error(401, "unauthorized");
    app.send(reqwest::Method::GET, &path, &signed[1..], None).await.expect_error(401, "unauthorized");
    // A stray or stale signature gets its 401 before any other check looks at the request.
    let stray = [("webhook-signature", "v1,AAAA"), ("content-type", "text/plain")];
    app.send(reqwest::Method::POST, &path, &stray, Some(b"x".to_vec())).await.expect_error(401, "unauthorized");
    let stale_ts = (now - 3600).to_string();
    let stale = [signed[0], signed[1], ("webhook-timestamp", stale_ts.as_str()), signed[3]];
    app.send(reqwest::Method::POST, &path, &stale, Some(body.clone().into_bytes()))
        .await
        .expect_error(401, "unauthorized");
    let mut forged = body.clone().into_bytes();
    forged[0] = b' ';
    app.send(reqwest::Method::POST, &path, &signed, Some(forged)).await.expect_error(401, "unauthorized");
    app.send(reqwest::Method::POST, &path, &signed, Some(body.into_bytes())).await.expect(202);
    assert_answered_by_webhook(&admin, &session, &gate).await;
}

#[tokio::test]
async fn signed_answers_need_the_inbound_secret() {
    // Notifications only: a signed answer has nothing to be verified with.
    let (_receiver, _dir, app) = app_with_receiver(|args| args.webhooks.inbound_secret_file = None).await;
    let (session, _, gate) = app.open_asking("Signed without an inbound secret?").await;
    let body = json!({"gate_id": gate, "action": "answer", "values": {"answer": "bot"}}).to_string();
    let now = gatehouse::domain::Timestamp::now().unix_seconds();
    for secret in [SECRET, INBOUND] {
        let signed = Signed::new(secret, "msg_x", now, body.as_bytes());
        let path = format!("/v1/sessions/{session}/gates/{gate}");
        let refused = app.send(reqwest::Method::POST, &path, &signed.headers(), Some(body.clone().into_bytes())).await;
        let error = refused.expect_error(401, "unauthorized");
        assert!(error["error"]["message"].as_str().unwrap().contains("--inbound-secret-file"), "{error}");
    }
    assert_eq!(app.view(&session, &gate).await["state"], "open");
}

#[tokio::test]
async fn each_endpoint_may_sign_with_its_own_secret() {
    let (a, b) = (Receiver::start(|_, _| 200).await, Receiver::start(|_, _| 200).await);
    let dir = tempfile::tempdir().unwrap();
    let shared = secret_file(dir.path());
    let own = write_secret(dir.path(), "b.secret", INBOUND);
    let (a_url, b_url) = (a.url.clone(), b.url.clone());
    let app = TestApp::spawn_with(move |args| {
        args.webhooks.urls = vec![a_url, b_url.clone()];
        args.webhooks.secret_files = vec![shared.display().to_string(), format!("{b_url}={}", own.display())];
        args.webhooks.allow_cidrs = vec!["127.0.0.1/32".into()];
    })
    .await;
    app.open(&uuid(), &ask(&uuid(), &uuid(), "Two receivers?")).await;
    eventually("both receivers got both events", async || a.got().len() >= 2 && b.got().len() >= 2).await;
    let verifies = |got: &Received, secret: &str| {
        let now = gatehouse::domain::Timestamp::now().unix_seconds();
        sign::verify(&secret.parse().unwrap(), &got.id, &got.timestamp, &got.signature, &got.body, now).is_ok()
    };
    for got in a.got() {
        assert!(verifies(&got, SECRET) && !verifies(&got, INBOUND), "the shared secret signs a's requests");
    }
    for got in b.got() {
        assert!(verifies(&got, INBOUND) && !verifies(&got, SECRET), "b's own secret signs b's requests");
    }
    app.stop().await;
}

#[test]
fn unsafe_or_unsigned_webhook_settings_refuse_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let secret = secret_file(dir.path());
    let db = dir.path().join("x.db");
    let start = |extra: &[&str]| ServerProcess::serve_to_exit(&db, "127.0.0.1:0", extra);
    let secret = secret.to_string_lossy().into_owned();
    let (code, stderr) = start(&["--webhook-url", "http://127.0.0.1:9/hook", "--webhook-secret-file", &secret]);
    assert_eq!(code, Some(1));
    assert!(stderr.contains("127.0.0.1"), "loopback is refused without an allow-list: {stderr}");
    let (code, stderr) = start(&["--webhook-url", "http://user:pw@example.com/hook", "--webhook-secret-file", &secret]);
    assert_eq!(code, Some(1), "{stderr}");
    let (code, stderr) = start(&["--webhook-url", "http://example.com/hook"]);
    assert_eq!(code, Some(1));
    assert!(stderr.contains("--webhook-secret-file"), "{stderr}");
}

/// A receiver that counts every `webhook-id` it is sent (on arrival, before it answers) and
/// answers its first request only after `delay`.
#[derive(Clone)]
struct SlowReceiver {
    url: String,
    ids: Arc<Mutex<Vec<String>>>,
    answered: Arc<std::sync::atomic::AtomicUsize>,
    delay: Duration,
}

impl SlowReceiver {
    async fn start(delay: Duration) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        let receiver = Self { url, ids: Arc::default(), answered: Arc::default(), delay };
        let app = axum::Router::new().route("/hook", axum::routing::post(Self::receive)).with_state(receiver.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        receiver
    }

    async fn receive(State(receiver): State<Self>, headers: HeaderMap) -> StatusCode {
        let id = headers.get("webhook-id").and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
        let first = {
            let mut ids = receiver.ids.lock().unwrap();
            ids.push(id);
            ids.len() == 1
        };
        if first {
            tokio::time::sleep(receiver.delay).await;
        }
        receiver.answered.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        StatusCode::OK
    }

    fn ids(&self) -> Vec<String> {
        self.ids.lock().unwrap().clone()
    }
}

#[tokio::test]
async fn a_delivery_in_flight_at_sigterm_is_finished_and_not_sent_again() {
    // Answered well within the shutdown grace (3 s).
    let receiver = SlowReceiver::start(Duration::from_secs(1)).await;
    let dir = tempfile::tempdir().unwrap();
    let secret = secret_file(dir.path()).to_string_lossy().into_owned();
    let db = dir.path().join("gatehouse.db");
    let flags = [
        "--webhook-url",
        &receiver.url,
        "--webhook-secret-file",
        &secret,
        "--webhook-allow-cidr",
        "127.0.0.1/32",
        "--webhook-retry-schedule",
        "100ms,100ms,100ms",
    ];
    let server = ServerProcess::start_with(&db, "127.0.0.1:0", &flags);
    server.open(&uuid(), &ask(&uuid(), &uuid(), "Restart me?")).await;
    eventually("the first notification is in flight", async || !receiver.ids().is_empty()).await;
    assert_eq!(receiver.answered.load(std::sync::atomic::Ordering::SeqCst), 0, "still in flight");
    // Off this test's runtime thread, which also runs the receiver.
    let exit = tokio::task::spawn_blocking(move || server.terminate(Duration::from_secs(15))).await.unwrap();
    assert_eq!(exit, Some(0), "a clean shutdown");
    assert_eq!(receiver.answered.load(std::sync::atomic::Ordering::SeqCst), 1, "the server waited for the answer");

    // After the restart the endpoint carries on after the delivered event: the rest of the first
    // gate's events, then the second gate's, each once.
    let server = ServerProcess::start_with(&db, "127.0.0.1:0", &flags);
    server.open(&uuid(), &ask(&uuid(), &uuid(), "Once each?")).await;
    let journal = server.journal().await;
    let expected: Vec<String> =
        journal.iter().map(|entry| entry["event"]["event_id"].as_str().unwrap().to_owned()).collect();
    assert_eq!(expected.len(), 4);
    // Deliveries go in journal order: once the last event arrived, a resent one would have too.
    eventually("every event delivered", async || receiver.ids().last() == expected.last()).await;
    assert_eq!(receiver.ids(), expected, "every webhook-id once, none twice across the restart");
}

#[tokio::test]
async fn permission_gates_notify_their_events_and_take_signed_and_linked_decisions() {
    let (receiver, _dir, app) = app_with_receiver(|_| {}).await;
    let (session, loop_id) = (uuid(), uuid());
    let linked = gate_id(&app.open(&session, &crate::permissions::request(&loop_id, &uuid())).await);
    let signed_gate = gate_id(&app.open(&session, &crate::permissions::request(&loop_id, &uuid())).await);
    eventually("both gates' two events", async || receiver.got().len() >= 4).await;
    let types = |got: &[Received]| {
        got.iter().map(|r| r.json()["event"]["type"].as_str().unwrap().to_owned()).collect::<Vec<_>>()
    };
    assert_eq!(types(&receiver.got()), ["GateOpened", "PermissionRequested", "GateOpened", "PermissionRequested"]);

    // The answer link takes an edit, checked like any other answer.
    let link = receiver.got()[0].json()["answer_url"].as_str().unwrap().to_owned();
    let path = link.strip_prefix(&app.base).unwrap().to_owned();
    let bad = json!({"action": "Approve", "values": {"tool_input": {"command": 1}}});
    app.post(&path, &bad).await.expect_error(400, "gate_values_invalid");
    let edit = json!({"command": "./migrate --env staging"});
    app.post(&path, &json!({"action": "Approve", "values": {"tool_input": edit}})).await.expect(202);
    let view = app.view(&session, &linked).await;
    assert_eq!(
        (view["decision"]["tool_input"].clone(), view["decision"]["principal"].clone()),
        (edit, json!("answer-link"))
    );

    // A signed denial, as a chat integration would send it.
    let body =
        json!({"gate_id": signed_gate, "action": "Deny", "values": {"reason": "ask again on Monday"}}).to_string();
    let now = gatehouse::domain::Timestamp::now().unix_seconds();
    let signed = Signed::new(INBOUND, "msg_deny", now, body.as_bytes());
    let answer = format!("/v1/sessions/{session}/gates/{signed_gate}");
    app.send(reqwest::Method::POST, &answer, &signed.headers(), Some(body.into_bytes())).await.expect(202);
    assert_answered_by_webhook(&app, &session, &signed_gate).await;
    assert_eq!(app.view(&session, &signed_gate).await["decision"]["reason"], "ask again on Monday");

    eventually("both decisions' two events", async || receiver.got().len() >= 8).await;
    let got = receiver.got();
    assert_eq!(types(&got[4..]), ["GateResolved", "PermissionDecided", "GateResolved", "PermissionDecided"]);
    let decided = got[7].json();
    assert_eq!(
        (decided["event"]["effect"].as_str(), decided["event"]["message"].as_str()),
        (Some("deny"), Some("ask again on Monday"))
    );
    assert_eq!(
        got.iter().map(Received::seq).collect::<Vec<_>>(),
        (1..=8).collect::<Vec<_>>(),
        "journal order, once each"
    );
}
