//! What operators see (issue 18): `/metrics` after a scripted load, with the values the load
//! implies and accepted by `promtool check metrics`; the route's access rules on the main
//! listener and the open `--metrics-bind` one; and `--log-format json`, one parseable line per
//! request with its fields and no secret.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::StatusCode;
use serde_json::{Value, json};

use crate::helpers::{Client, EventStream, ServerProcess, ask, eventually, gate_id, temp_db, uuid};

const ADMIN: &str = "metrics-admin-0123456789";
const RESPONDER: &str = "metrics-responder-0123456789";
const AGENT: &str = "metrics-agent-0123456789";
const SECRET: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";

/// The samples of a Prometheus text exposition: `name{labels}` → value.
fn samples(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.trim().is_empty())
        .filter_map(|line| {
            let (name, value) = line.rsplit_once(' ')?;
            Some((name.to_owned(), value.parse().ok()?))
        })
        .collect()
}

/// A webhook receiver that answers 500 to the first event and 200 to every other.
async fn receiver() -> (String, Arc<Mutex<Vec<i64>>>) {
    let seen: Arc<Mutex<Vec<i64>>> = Arc::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook?key=do-not-show", listener.local_addr().unwrap());
    let got = Arc::clone(&seen);
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |body: String| {
            let got = Arc::clone(&got);
            async move {
                let seq = serde_json::from_str::<Value>(&body).unwrap()["journal_seq"].as_i64().unwrap();
                got.lock().unwrap().push(seq);
                if seq == 1 { StatusCode::INTERNAL_SERVER_ERROR } else { StatusCode::OK }
            }
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, seen)
}

#[tokio::test]
async fn metrics_count_a_scripted_load_and_json_logs_carry_each_request() {
    let (dir, db) = temp_db();
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, format!("admin ops {ADMIN}\nresponder alice {RESPONDER}\nagent bot {AGENT}\n")).unwrap();
    let secret = dir.path().join("webhook.secret");
    std::fs::write(&secret, SECRET).unwrap();
    let (hook, seen) = receiver().await;
    let flags = [
        "--tokens-file",
        tokens.to_str().unwrap(),
        "--webhook-url",
        &hook,
        "--webhook-secret-file",
        secret.to_str().unwrap(),
        "--webhook-allow-cidr",
        "127.0.0.1/32",
        "--webhook-retry-schedule",
        "50ms",
        "--metrics-bind",
        "127.0.0.1:0",
        "--log-format",
        "json",
    ];
    let server = ServerProcess::start_with(&db, "127.0.0.1:0", &flags);
    let (agent, person) = (server.bearer(AGENT), server.bearer(RESPONDER));

    // The load: four opens (one with a timeout that answers itself), an answer, a lost race, a
    // wrong answer, a close, a stream and a long-poll left open, webhook deliveries (the first
    // fails twice and is dead-lettered).
    let session = uuid();
    let mut gates = Vec::new();
    for question in ["One?", "Two?", "Three?"] {
        let mut body = ask(&uuid(), &uuid(), question);
        body["choices"] = json!(["yes", "no"]);
        gates.push(gate_id(&agent.open(&session, &body).await));
    }
    let mut timed = ask(&uuid(), &uuid(), "Timed?");
    timed["response_policy"] = json!({"timeout": 300_000_000, "on_timeout": "respond", "response": {"action": "answer", "values": {"answer": "late"}}});
    let timed = gate_id(&agent.open(&session, &timed).await);
    person.answer(&session, &gates[0], "yes").await.expect(202);
    person.answer(&session, &gates[0], "no").await.expect_error(409, "gate_not_ready");
    person.answer(&session, &gates[1], "maybe").await.expect_error(400, "gate_values_invalid");
    agent.post(&format!("/v1/sessions/{session}/gates/{}/close", gates[2]), &json!({})).await.expect(200);
    let admin = server.bearer(ADMIN);
    eventually("the deadline answers", async || admin.view(&session, &timed).await["state"] == "resolved").await;
    let _stream = EventStream::connect(&admin, "/v1/events", &[]).await;
    let waiting = person.spawn_get(format!("/v1/sessions/{session}/gates/{}/wait?timeout=30", gates[1]));
    eventually("webhooks caught up", async || seen.lock().unwrap().iter().filter(|s| **s == 1).count() == 2).await;
    let head = admin.journal_all().await.last().unwrap()["journal_seq"].as_i64().unwrap();
    eventually("every event delivered", async || seen.lock().unwrap().contains(&head)).await;

    // Who may read it: an admin on the main listener, anyone on --metrics-bind.
    server.get("/metrics").await.expect_error(401, "unauthorized");
    person.get("/metrics").await.expect_error(403, "forbidden");
    let text = eventually_text(&admin, |s| s.get("gatehouse_long_polls_parked{kind=\"gate\"}") == Some(&1.0)).await;
    let mut lines = server.log_lines();
    let metrics_url = lines
        .iter()
        .find_map(|line| line.split("metrics on ").nth(1).map(|rest| rest.split('"').next().unwrap().to_owned()))
        .expect("the metrics listener's address is logged");
    let open_text = reqwest::get(&metrics_url).await.unwrap();
    assert_eq!(open_text.status(), 200, "--metrics-bind needs no token");
    assert!(open_text.text().await.unwrap().contains("gatehouse_gates_open"));

    let s = samples(&text);
    let value = |name: &str| *s.get(name).unwrap_or_else(|| panic!("{name} is missing from:\n{text}"));
    let expect = |name: &str, expected: f64| assert_eq!(value(name), expected, "{name}");
    expect("gatehouse_gates_opened_total", 4.0);
    expect("gatehouse_gates_resolved_total{reason=\"answered\"}", 1.0);
    expect("gatehouse_gates_resolved_total{reason=\"policy_response\"}", 1.0);
    expect("gatehouse_gates_resolved_total{reason=\"owner_closed\"}", 1.0);
    expect("gatehouse_answers_refused_total{code=\"gate_not_ready\"}", 1.0);
    expect("gatehouse_answers_refused_total{code=\"gate_values_invalid\"}", 1.0);
    expect("gatehouse_gates_open", 1.0);
    expect("gatehouse_sessions_with_open_gates", 1.0);
    assert!(value("gatehouse_oldest_open_gate_age_seconds") > 0.0);
    assert!(value("gatehouse_writer_batch_size_count") >= 1.0);
    assert!(value("gatehouse_writer_batch_size_sum") >= 7.0, "4 opens, an answer, a close, a timeout answer");
    assert!(value("gatehouse_writer_commit_duration_seconds_count") >= 1.0);
    expect("gatehouse_storage_errors_total", 0.0);
    expect("gatehouse_writer_queue_depth", 0.0);
    expect("gatehouse_streams_open{kind=\"journal\"}", 1.0);
    expect("gatehouse_long_polls_parked{kind=\"gate\"}", 1.0);
    expect("gatehouse_stalled_connections_closed_total", 0.0);
    expect("gatehouse_webhook_deliveries_total{outcome=\"failed\"}", 2.0);
    expect("gatehouse_webhook_dead_letters_total", 1.0);
    assert!(value("gatehouse_webhook_deliveries_total{outcome=\"delivered\"}") >= 9.0);
    let endpoint = "endpoint=\"http://127.0.0.1";
    let backlog = s.iter().find(|(k, _)| k.starts_with("gatehouse_webhook_backlog{") && k.contains(endpoint));
    assert_eq!(backlog.map(|(_, v)| *v), Some(0.0), "caught up");
    assert!(!text.contains("do-not-show"), "an endpoint's query string is not a label");
    expect("gatehouse_timer_fired_total{outcome=\"answered\"}", 1.0);
    expect("gatehouse_timer_armed_deadlines", 0.0);
    expect(
        "gatehouse_http_requests_total{method=\"POST\",route=\"/v1/sessions/{session_id}/gates\",status=\"201\"}",
        4.0,
    );
    expect("gatehouse_http_requests_total{method=\"GET\",route=\"/metrics\",status=\"401\"}", 1.0);
    assert!(
        value(
            "gatehouse_http_request_duration_seconds_count{method=\"POST\",route=\"/v1/sessions/{session_id}/gates/{gate_id}\"}"
        ) >= 3.0
    );
    assert!(value("gatehouse_process_resident_memory_bytes") > 1e6);
    assert!(value("gatehouse_process_open_fds") > 3.0);
    assert!(value("gatehouse_process_start_time_seconds") > 1.7e9);
    expect(&format!("gatehouse_build_info{{version=\"{}\"}}", env!("CARGO_PKG_VERSION")), 1.0);
    for name in s.keys() {
        assert!(!name.contains(&session) && !gates.iter().any(|g| name.contains(g.as_str())), "an id in {name}");
    }
    promtool_check(&text);

    person.answer(&session, &gates[1], "no").await.expect(202);
    waiting.await.unwrap().expect(200);

    // The log: JSON, a line per request with its fields, and no secret anywhere.
    lines.extend(server.log_lines());
    let requests: Vec<Value> = lines
        .iter()
        .map(|line| serde_json::from_str::<Value>(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}")))
        .filter(|line| line["message"] == "request")
        .collect();
    assert!(requests.len() >= 15, "{} request lines", requests.len());
    for line in &requests {
        for field in ["request_id", "method", "route", "status", "latency_ms"] {
            assert!(line.get(field).is_some(), "{field} missing: {line}");
        }
    }
    let opened =
        requests.iter().find(|l| l["route"] == "/v1/sessions/{session_id}/gates" && l["status"] == 201).unwrap();
    assert_eq!(opened["principal"], "bot");
    let refused = requests.iter().find(|l| l["status"] == 409).unwrap();
    assert_eq!((refused["principal"].as_str(), refused["code"].as_str()), (Some("alice"), Some("gate_not_ready")));
    assert_eq!(requests.iter().find(|l| l["status"] == 401).unwrap()["level"], "INFO");
    for secret in [ADMIN, RESPONDER, AGENT, SECRET, "do-not-show"] {
        assert!(!lines.iter().any(|line| line.contains(secret)), "{secret} reached the log");
    }
}

/// The metrics once `ready` holds for their samples (a parked long-poll registers a moment after
/// its request was sent).
async fn eventually_text(admin: &Client, ready: impl Fn(&BTreeMap<String, f64>) -> bool) -> String {
    let mut text = String::new();
    for _ in 0..200 {
        let got = admin.get("/metrics").await.expect(200);
        assert_eq!(got.headers["content-type"], gatehouse::metrics::CONTENT_TYPE);
        text = String::from_utf8(got.body).unwrap();
        if ready(&samples(&text)) {
            return text;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the metrics never showed what the load implies:\n{text}");
}

/// `promtool check metrics` (Debian's `prometheus` package, which `.ci/test` installs and then
/// requires with `GATEHOUSE_TEST_PROMTOOL`): the exposition must lint clean.
fn promtool_check(text: &str) {
    use std::io::Write;
    let child = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(child) => child,
        Err(e) if std::env::var_os("GATEHOUSE_TEST_PROMTOOL").is_none() => {
            return eprintln!("skipped promtool check metrics (not installed: {e})");
        }
        Err(e) => panic!("GATEHOUSE_TEST_PROMTOOL is set but promtool cannot run: {e}"),
    };
    child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && said.trim().is_empty(), "promtool check metrics:\n{said}");
}
