//! The client subcommands: the real binary against a real server.

use std::process::{Output, Stdio};
use std::time::Duration;

use serde_json::Value;
use tokio::process::{Child, Command};

use crate::helpers::{Client, ServerProcess, TestApp, ask, bounded, eventually, gate_id, temp_db, uuid};

/// `gatehouse ARGS…` against the server at `url`, with its output captured.
fn gatehouse(url: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_gatehouse"));
    cmd.args(args)
        .env("GATEHOUSE_URL", url)
        .env_remove("RUST_LOG")
        .env_remove("GATEHOUSE_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    cmd
}

async fn finish(child: Child) -> Output {
    bounded("the command exits", child.wait_with_output()).await.expect("wait")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Waits for the one open gate of a session to appear, and returns its view.
async fn opened_in(client: &Client, session: &str) -> Value {
    let mut found = None;
    eventually("ask opens its gate", async || {
        let listing = client.get(&format!("/v1/sessions/{session}/gates")).await.expect(200).json();
        found = listing["gates"].as_array().and_then(|g| g.first()).cloned();
        found.is_some()
    })
    .await;
    found.unwrap()
}

#[tokio::test]
async fn ask_prints_the_answer_given_by_another_process_and_acks_its_command() {
    let app = TestApp::spawn().await;
    let (session, loop_id) = (uuid(), uuid());
    let asking = gatehouse(
        &app.base,
        &["ask", "Deploy?", "--choice", "yes", "--choice", "no", "--session", &session, "--loop", &loop_id],
    )
    .spawn()
    .unwrap();
    let view = opened_in(&app, &session).await;
    let gate = gate_id(&view);
    let waits = format!("/v1/sessions/{session}/gates/{gate}");
    app.parked_on_gate(&gate, 1).await;

    let answered = finish(gatehouse(&app.base, &["answer", &gate, "yes"]).spawn().unwrap()).await;
    assert_eq!(answered.status.code(), Some(0), "{}", text(&answered.stderr));
    let asked = finish(asking).await;
    assert_eq!(asked.status.code(), Some(0), "{}", text(&asked.stderr));
    assert_eq!(text(&asked.stdout), "yes\n", "the answer alone");

    assert!(app.inbox(&session, &loop_id).await.is_empty(), "ask acked its command");
    let all = app
        .get(&format!("/v1/sessions/{session}/loops/{loop_id}/commands?include_acked=true"))
        .await
        .expect(200)
        .json();
    assert!(all["commands"][0]["acked_at"].is_string());
    assert_eq!(app.get(&waits).await.expect(200).json()["answer"], "yes");
}

#[tokio::test]
async fn ask_with_a_timeout_withdraws_or_answers_with_its_default() {
    let app = TestApp::spawn().await;
    let session = uuid();
    let timed_out =
        finish(gatehouse(&app.base, &["ask", "Anyone?", "--timeout", "1s", "--session", &session]).spawn().unwrap())
            .await;
    assert_eq!(timed_out.status.code(), Some(3), "{}", text(&timed_out.stderr));
    assert_eq!(text(&timed_out.stdout), "", "nothing on stdout");
    let closed = app.get(&format!("/v1/sessions/{session}/gates?state=closed")).await.expect(200).json();
    assert_eq!(closed["gates"][0]["resolution"]["reason"], "abandoned");
    assert!(closed["gates"][0]["deadline"].is_string(), "the client deadline is shown on the gate");

    let defaulted = finish(
        gatehouse(&app.base, &["ask", "Which?", "--choice", "a", "--choice", "b", "--timeout", "1s", "--default", "b"])
            .spawn()
            .unwrap(),
    )
    .await;
    assert_eq!(defaulted.status.code(), Some(0), "{}", text(&defaulted.stderr));
    assert_eq!(text(&defaulted.stdout), "b\n");

    let json = finish(
        gatehouse(&app.base, &["ask", "As JSON?", "--timeout", "1s", "--default", "x", "--json"]).spawn().unwrap(),
    )
    .await;
    let view: Value = serde_json::from_slice(&json.stdout).expect("--json prints the view");
    assert_eq!(view["resolution"]["reason"], "policy_response");
}

#[tokio::test]
async fn sigint_withdraws_the_gate_and_exits_130() {
    let app = TestApp::spawn().await;
    let session = uuid();
    let asking = gatehouse(&app.base, &["ask", "Interrupt me", "--session", &session]).spawn().unwrap();
    let gate = gate_id(&opened_in(&app, &session).await);
    app.parked_on_gate(&gate, 1).await;
    let pid = asking.id().expect("running").to_string();
    let sent = Command::new("kill").args(["-INT", &pid]).status().await.unwrap();
    assert!(sent.success());
    let asked = finish(asking).await;
    assert_eq!(asked.status.code(), Some(130), "{}", text(&asked.stderr));
    let view = app.view(&session, &gate).await;
    assert_eq!(view["state"], "closed");
    assert_eq!(view["resolution"]["reason"], "abandoned");
}

#[tokio::test]
async fn ask_rides_out_a_server_restart() {
    let (_dir, db) = temp_db();
    let server = ServerProcess::start(&db);
    let base = server.base.clone();
    let session = uuid();
    let asking = gatehouse(&base, &["ask", "Still there?", "--session", &session]).spawn().unwrap();
    let gate = gate_id(&opened_in(&server, &session).await);
    server.kill();
    tokio::time::sleep(Duration::from_millis(500)).await;

    let server = ServerProcess::start_on(&db, base.trim_start_matches("http://"));
    server.answer(&session, &gate, "after the restart").await.expect(202);
    let asked = finish(asking).await;
    assert_eq!(asked.status.code(), Some(0), "{}", text(&asked.stderr));
    assert_eq!(text(&asked.stdout), "after the restart\n");
}

#[tokio::test]
async fn answer_reports_late_unreachable_and_usage_errors() {
    let app = TestApp::spawn().await;
    let session = uuid();
    let gate = gate_id(&app.open(&session, &ask(&uuid(), &uuid(), "Once")).await);
    app.answer(&session, &gate, "first").await.expect(202);

    let late = finish(gatehouse(&app.base, &["answer", &gate, "second"]).spawn().unwrap()).await;
    assert_eq!(late.status.code(), Some(2));
    assert!(text(&late.stderr).contains("\"first\""), "the winner on stderr: {}", text(&late.stderr));

    let unreachable = finish(gatehouse("http://127.0.0.1:9", &["answer", &gate, "x"]).spawn().unwrap()).await;
    assert_eq!(unreachable.status.code(), Some(1));
    assert!(
        text(&unreachable.stderr).contains("cannot reach gatehouse at http://127.0.0.1:9"),
        "{}",
        text(&unreachable.stderr)
    );

    let unknown = finish(gatehouse(&app.base, &["answer", &uuid(), "x"]).spawn().unwrap()).await;
    assert_eq!(unknown.status.code(), Some(1));
    assert!(text(&unknown.stderr).contains("gate not found"), "{}", text(&unknown.stderr));

    for usage in [
        &["answer"][..],
        &["ask"],
        &["ask", "Q", "--default", "x"],
        &["ask", "Q", "--timeout", "soon"],
        &["frobnicate"],
    ] {
        let out = finish(gatehouse(&app.base, usage).spawn().unwrap()).await;
        assert_eq!(out.status.code(), Some(1), "usage errors exit 1: {usage:?}");
    }
    let help = finish(gatehouse(&app.base, &["ask", "--help"]).spawn().unwrap()).await;
    assert_eq!(help.status.code(), Some(0));
    assert!(text(&help.stdout).contains("Examples:"));
}

#[tokio::test]
async fn gates_and_tail_print_what_the_server_holds() {
    let app = TestApp::spawn().await;
    let session = uuid();
    let gate = gate_id(&app.open(&session, &ask(&uuid(), &uuid(), "Listed?")).await);

    let table = finish(gatehouse(&app.base, &["gates"]).spawn().unwrap()).await;
    assert_eq!(table.status.code(), Some(0));
    let table = text(&table.stdout);
    assert!(table.starts_with("GATE"), "{table}");
    assert!(table.contains(&gate[..8]) && table.contains("Listed?"), "{table}");

    // tail follows: the two events already there, then the answer given while it runs.
    let mut tail = gatehouse(&app.base, &["tail", "--after", "0"]).spawn().unwrap();
    let mut stdout = tokio::io::BufReader::new(tail.stdout.take().unwrap());
    let mut lines = Vec::new();
    let mut read_line = async || {
        let mut line = String::new();
        bounded("a tail line", tokio::io::AsyncBufReadExt::read_line(&mut stdout, &mut line)).await.unwrap();
        serde_json::from_str::<Value>(&line).expect("one JSON object per line")
    };
    lines.push(read_line().await);
    lines.push(read_line().await);
    app.answer(&session, &gate, "yes").await.expect(202);
    lines.push(read_line().await);
    let seqs: Vec<i64> = lines.iter().map(|l| l["journal_seq"].as_i64().unwrap()).collect();
    assert_eq!(seqs, [1, 2, 3]);
    assert_eq!(lines[2]["event"]["type"], "GateResolved");
    tail.kill().await.unwrap();
}

#[tokio::test]
async fn the_cli_sends_gatehouse_token() {
    let (dir, db) = temp_db();
    let tokens = db.with_file_name("tokens");
    let (agent, responder) = ("cli-agent-secret-0123456789", "cli-responder-secret-0123456789");
    std::fs::write(&tokens, format!("agent bot {agent} abc\nresponder alice {responder}\n")).unwrap();
    let app = TestApp::start(&db, |args| args.tokens_file = Some(tokens)).await;
    let session = format!("abc{}", &uuid()[3..]);
    let asking = gatehouse(&app.base, &["ask", "Ship it?", "--session", &session])
        .env("GATEHOUSE_TOKEN", agent)
        .spawn()
        .unwrap();
    let view = opened_in(&app.bearer(agent), &session).await;
    let gate = gate_id(&view);

    let refused = finish(gatehouse(&app.base, &["answer", &gate, "yes"]).spawn().unwrap()).await;
    assert_eq!(refused.status.code(), Some(1));
    assert!(text(&refused.stderr).contains("401"), "{}", text(&refused.stderr));
    let answered =
        finish(gatehouse(&app.base, &["answer", &gate, "yes"]).env("GATEHOUSE_TOKEN", responder).spawn().unwrap())
            .await;
    assert_eq!(answered.status.code(), Some(0), "{}", text(&answered.stderr));
    let asked = finish(asking).await;
    assert_eq!((asked.status.code(), text(&asked.stdout)), (Some(0), "yes\n".to_owned()), "{}", text(&asked.stderr));
    let view = app.bearer(responder).get(&format!("/v1/gates/{gate}")).await.expect(200).json();
    assert_eq!(view["resolution"]["source"]["principal"], "alice");
    drop(app.stop().await);
    drop(dir);
}
