//! The client subcommands: the real binary against a real server.

use std::process::{Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use gatehouse::store::sqlite::PendingCommit;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, ChildStderr, Command};

use crate::helpers::{Client, ServerProcess, TestApp, ask, bounded, eventually, gate_id, temp_db, uuid};

/// `gatehouse ARGS…` against the server at `url`, with its output captured.
pub(crate) fn gatehouse(url: &str, args: &[&str]) -> Command {
    against(url, env!("CARGO_BIN_EXE_gatehouse"), args)
}

/// `PROGRAM ARGS…` with what a `gatehouse` it runs sees: the server at `url`, no token and no
/// `RUST_LOG` from this environment, no stdin, its output captured. `gatehouse` itself, or a
/// wrapper (`timeout`, `script`) that runs it.
fn against(url: &str, program: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(program);
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

pub(crate) async fn finish(child: Child) -> Output {
    bounded("the command exits", child.wait_with_output()).await.expect("wait")
}

pub(crate) fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Reads `ask`'s (or `approve`'s) stderr up to the line that announces its gate, and returns that line.
pub(crate) async fn announcement(stderr: &mut BufReader<ChildStderr>) -> String {
    bounded("ask announces its gate", async {
        loop {
            let mut line = String::new();
            assert_ne!(stderr.read_line(&mut line).await.expect("read stderr"), 0, "stderr ended first");
            if line.contains("gatehouse answer") {
                return line;
            }
        }
    })
    .await
}

/// Characters that would drive a terminal: ESC, BEL, CSI (C1), a bidi override, a CR.
pub(crate) fn controls_terminal(text: &str) -> bool {
    text.chars().any(|c| matches!(c, '\u{1b}' | '\u{7}' | '\u{9b}' | '\u{202e}' | '\u{2066}' | '\r'))
}

/// Waits for the one open gate of a session to appear, and returns its view.
pub(crate) async fn opened_in(client: &Client, session: &str) -> Value {
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
    let all = app.inbox_with_acked(&session, &loop_id).await;
    assert!(all[0]["acked_at"].is_string());
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
    assert_eq!(view["gate_id"], view["gate"]["id"], "--json names the gate at the top level");
}

#[tokio::test]
async fn sigint_sigterm_and_sighup_withdraw_the_gate_and_exit_128_plus_the_signal() {
    let app = TestApp::spawn().await;
    for (signal, code) in [("INT", 130), ("TERM", 143), ("HUP", 129)] {
        let session = uuid();
        let asking = gatehouse(&app.base, &["ask", "Stop me", "--session", &session]).spawn().unwrap();
        let gate = gate_id(&opened_in(&app, &session).await);
        app.parked_on_gate(&gate, 1).await;
        let pid = asking.id().expect("running").to_string();
        let sent = Command::new("kill").args([&format!("-{signal}"), &pid]).status().await.unwrap();
        assert!(sent.success(), "kill -{signal}");
        let asked = finish(asking).await;
        assert_eq!(asked.status.code(), Some(code), "SIG{signal}: {}", text(&asked.stderr));
        assert!(text(&asked.stderr).contains("withdrawn"), "SIG{signal}: {}", text(&asked.stderr));
        let view = app.view(&session, &gate).await;
        assert_eq!(
            (view["state"].as_str(), view["resolution"]["reason"].as_str()),
            (Some("closed"), Some("abandoned"))
        );
    }
}

/// GNU `timeout` sends its SIGTERM to the command and again to the command's process group: the
/// second copy, a moment later, is the same stop, not a person insisting, so the gate is still
/// withdrawn (before, a copy that landed during the withdrawal gave it up).
#[tokio::test]
async fn a_stop_signal_delivered_twice_still_withdraws_the_gate() {
    // Once armed, every commit takes 300 ms, so the second copy lands while the close is on its
    // way to the disk.
    let slow = Arc::new(AtomicBool::new(false));
    let (sqlite, postgres) = (Arc::clone(&slow), Arc::clone(&slow));
    let hooks = gatehouse::Hooks {
        before_commit: Some(Arc::new(move |_: &PendingCommit<'_>| {
            if sqlite.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(300));
            }
        })),
        pg_before_commit: Some(Arc::new(move |_jobs| {
            let slow = postgres.load(Ordering::SeqCst);
            Box::pin(async move {
                if slow {
                    tokio::time::sleep(Duration::from_millis(300)).await;
                }
            })
        })),
    };
    let app = TestApp::spawn_hooked(hooks, |_| {}).await;
    let session = uuid();
    let asking = gatehouse(&app.base, &["ask", "Stop me twice", "--session", &session]).spawn().unwrap();
    let gate = gate_id(&opened_in(&app, &session).await);
    app.parked_on_gate(&gate, 1).await;
    slow.store(true, Ordering::SeqCst);
    let pid = asking.id().expect("running").to_string();
    let script = r#"kill -TERM "$1"; sleep 0.05; kill -TERM "$1""#;
    let sent = Command::new("sh").args(["-c", script, "sh", &pid]).status().await.unwrap();
    assert!(sent.success(), "both copies reached the running ask");
    let asked = finish(asking).await;
    assert_eq!(asked.status.code(), Some(143), "{}", text(&asked.stderr));
    assert!(text(&asked.stderr).contains("withdrawn"), "{}", text(&asked.stderr));
    let view = app.view(&session, &gate).await;
    assert_eq!((view["state"].as_str(), view["resolution"]["reason"].as_str()), (Some("closed"), Some("abandoned")));
}

#[tokio::test]
async fn ask_under_timeout_leaves_no_gate_open() {
    let app = TestApp::spawn().await;
    let session = uuid();
    // As a CI job would: `timeout` sends SIGTERM after 5 s and waits for the exit.
    let timed = against(
        &app.base,
        "timeout",
        &["5", env!("CARGO_BIN_EXE_gatehouse"), "ask", "Anyone there?", "--session", &session],
    )
    .spawn()
    .unwrap();
    let timed = finish(timed).await;
    assert_eq!(timed.status.code(), Some(124), "timeout stopped it: {}", text(&timed.stderr));
    let gates = app.listed_gate_ids(&format!("/v1/sessions/{session}/gates?limit=10")).await;
    for gate in &gates {
        let view = app.view(&session, gate).await;
        assert_eq!(
            (view["state"].as_str(), view["resolution"]["reason"].as_str()),
            (Some("closed"), Some("abandoned")),
            "ask said: {}",
            text(&timed.stderr)
        );
    }
    // Only a machine too slow to open a gate in 5 s gets here with none; then none is open either.
    if gates.is_empty() {
        eprintln!("note: ask had not opened its gate when timeout stopped it");
    }
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
async fn ask_stops_waiting_when_the_server_refuses_its_token() {
    let (dir, db) = temp_db();
    let tokens = dir.path().join("tokens");
    let agent = "cli-revoked-agent-0123456789";
    std::fs::write(&tokens, format!("agent bot {agent}\n")).unwrap();
    let tokens_flag = tokens.display().to_string();
    let server = ServerProcess::start_with(&db, "127.0.0.1:0", &["--tokens-file", &tokens_flag]);
    let base = server.base.clone();
    let session = uuid();
    let asking =
        gatehouse(&base, &["ask", "Revoked?", "--session", &session]).env("GATEHOUSE_TOKEN", agent).spawn().unwrap();
    opened_in(&server.bearer(agent), &session).await;
    server.kill();

    // Restarted without that token: waiting on would never end; ask says why and how to resume.
    std::fs::write(&tokens, "agent other cli-another-agent-0123456789\n").unwrap();
    let _server = ServerProcess::start_with(&db, base.trim_start_matches("http://"), &["--tokens-file", &tokens_flag]);
    let asked = finish(asking).await;
    assert_eq!(asked.status.code(), Some(1), "{}", text(&asked.stderr));
    let said = text(&asked.stderr);
    assert!(said.contains("stopped waiting") && said.contains("GATEHOUSE_TOKEN"), "{said}");
    assert!(said.contains("same --session, --loop and --id"), "{said}");
}

#[tokio::test]
async fn answer_reports_late_unreachable_and_usage_errors() {
    let app = TestApp::spawn().await;
    let (session, _, gate) = app.open_asking("Once").await;
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
    let (session, _, gate) = app.open_asking("Listed?").await;

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
    let app = TestApp::start(&db, |args| args.security.tokens_file = Some(tokens)).await;
    let session = format!("abc{}", &uuid()[3..]);
    let asking = gatehouse(&app.base, &["ask", "Ship it?", "--session", &session])
        .env("GATEHOUSE_TOKEN", agent)
        .spawn()
        .unwrap();
    let view = opened_in(&app.bearer(agent), &session).await;
    let gate = gate_id(&view);

    let refused = finish(gatehouse(&app.base, &["answer", &gate, "yes"]).spawn().unwrap()).await;
    assert_eq!(refused.status.code(), Some(1));
    let said = text(&refused.stderr);
    assert!(said.contains("401") && said.contains("set GATEHOUSE_TOKEN"), "{said}");
    let wrong =
        finish(gatehouse(&app.base, &["gates"]).env("GATEHOUSE_TOKEN", "not-a-token-of-this-server").spawn().unwrap())
            .await;
    assert_eq!(wrong.status.code(), Some(1));
    assert!(text(&wrong.stderr).contains("does not accept GATEHOUSE_TOKEN"), "{}", text(&wrong.stderr));
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

#[tokio::test]
async fn ask_says_on_stderr_how_to_answer_and_that_command_works() {
    let app = TestApp::spawn().await;
    let session = uuid();
    let mut asking = gatehouse(&app.base, &["ask", "Ship it?", "--session", &session]).spawn().unwrap();
    let mut stderr = BufReader::new(asking.stderr.take().unwrap());
    let line = announcement(&mut stderr).await;
    let gate = gate_id(&opened_in(&app, &session).await);
    assert!(line.contains(&format!("gate {gate} ")) && line.contains("\"Ship it?\""), "{line}");

    // Run the command the line gives, with an answer in place of `<answer>`.
    let command = line.split("answer it with: ").nth(1).expect("the command").trim();
    let words: Vec<&str> = command.split_whitespace().collect();
    assert_eq!(words, ["gatehouse", "answer", gate.as_str(), "<answer>"], "{line}");
    let answered = finish(gatehouse(&app.base, &["answer", words[2], "shipped"]).spawn().unwrap()).await;
    assert_eq!(answered.status.code(), Some(0), "{}", text(&answered.stderr));
    let asked = finish(asking).await;
    assert_eq!(
        (asked.status.code(), text(&asked.stdout)),
        (Some(0), "shipped\n".to_owned()),
        "stdout: the answer alone"
    );
}

#[tokio::test]
async fn every_id_gates_prints_is_accepted_by_answer() {
    let app = TestApp::spawn().await;
    let session = uuid();
    let open = gate_id(&app.open(&session, &ask(&uuid(), &uuid(), "Copy my id")).await);
    let done = gate_id(&app.open(&session, &ask(&uuid(), &uuid(), "Done already")).await);
    app.answer(&session, &done, "earlier").await.expect(202);

    let listed = finish(gatehouse(&app.base, &["gates", "--all"]).spawn().unwrap()).await;
    assert_eq!(listed.status.code(), Some(0));
    let table = text(&listed.stdout);
    // The first column of each row, exactly as printed.
    let id_on = |question: &str| {
        let row = table.lines().find(|l| l.contains(question)).unwrap_or_else(|| panic!("{question}: {table}"));
        row.split_whitespace().next().unwrap().to_owned()
    };
    let (copied, copied_done) = (id_on("Copy my id"), id_on("Done already"));
    assert!(open.starts_with(&copied) && copied.len() >= 8, "{table}");

    let answered = finish(gatehouse(&app.base, &["answer", &copied, "pasted"]).spawn().unwrap()).await;
    assert_eq!(answered.status.code(), Some(0), "{}", text(&answered.stderr));
    assert_eq!(app.view(&session, &open).await["answer"], "pasted");
    let late = finish(gatehouse(&app.base, &["answer", &copied_done, "again"]).spawn().unwrap()).await;
    assert_eq!(late.status.code(), Some(2), "a resolved gate's short id names it too: {}", text(&late.stderr));
    assert!(text(&late.stderr).contains("\"earlier\""), "{}", text(&late.stderr));

    for (id, why) in [("0000000", "too short"), ("zzzzzzzz", "not hex")] {
        let refused = finish(gatehouse(&app.base, &["answer", id, "x"]).spawn().unwrap()).await;
        assert_eq!(refused.status.code(), Some(1), "{why}");
        assert!(text(&refused.stderr).contains("not a gate id"), "{why}: {}", text(&refused.stderr));
    }
    let unknown = if open.starts_with("00000000") { "ffffffff" } else { "00000000" };
    let missing = finish(gatehouse(&app.base, &["answer", unknown, "x"]).spawn().unwrap()).await;
    assert_eq!(missing.status.code(), Some(1));
    assert!(text(&missing.stderr).contains("no gate id starts with"), "{}", text(&missing.stderr));
}

#[tokio::test]
async fn an_ambiguous_prefix_lists_the_candidates_from_every_page() {
    // Server-minted ids never share 8 digits in a test, so a stand-in server lists two that do,
    // on two pages of `GET /v1/gates`.
    let (first, second) = ("9d3e4f50-6a7b-4c8d-9e0f-1a2b3c4d5e6f", "9d3e4f50-0000-4000-8000-000000000001");
    let view = |id: &str, question: &str| {
        json!({"session_id": "a1b2c3d4-0000-4000-8000-000000000000", "state": "open",
               "gate": {"id": id, "prompt": {"body": question}}})
    };
    let pages = [
        json!({"gates": [view(first, "First?"), view("1d3e4f50-6a7b-4c8d-9e0f-1a2b3c4d5e6f", "Other")],
               "journal_seq": 4, "next_after": "o2"}),
        json!({"gates": [view(second, "Second\u{1b}[2J?")], "journal_seq": 4}),
    ];
    let listing = axum::routing::get(move |query: axum::extract::RawQuery| {
        let page = if query.0.unwrap_or_default().contains("after=o2") { &pages[1] } else { &pages[0] };
        std::future::ready(axum::Json(page.clone()))
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, axum::Router::new().route("/v1/gates", listing)).await });

    let out = finish(gatehouse(&base, &["answer", "9d3e4f50", "yes"]).spawn().unwrap()).await;
    assert_eq!(out.status.code(), Some(1));
    let said = text(&out.stderr);
    assert!(said.contains("2 gates have ids starting with 9d3e4f50"), "{said}");
    assert!(said.contains(first) && said.contains(second) && !said.contains("1d3e4f50"), "{said}");
    assert!(said.contains("Second\\u{1b}[2J?") && !controls_terminal(&said), "{said}");
}

#[tokio::test]
async fn text_from_others_reaches_the_terminal_escaped_and_scripts_get_exact_answers() {
    let app = TestApp::spawn().await;
    let session = uuid();
    // OSC 52 would set the clipboard; U+202E turns the rest of the line around; CSI via C1.
    let question = "Pay\u{1b}]52;c;cHduZWQ=\u{7} \u{202e}ti\u{9b}2J now?";
    let shown = "Pay\\u{1b}]52;c;cHduZWQ=\\u{7} \\u{202e}ti\\u{9b}2J now?";
    let mut watch = gatehouse(&app.base, &["gates", "--watch"]).spawn().unwrap();
    let mut watched = BufReader::new(watch.stdout.take().unwrap());
    let mut header = String::new();
    bounded("the watch header", watched.read_line(&mut header)).await.unwrap();

    let mut asking = gatehouse(&app.base, &["ask", question, "--session", &session]).spawn().unwrap();
    let mut stderr = BufReader::new(asking.stderr.take().unwrap());
    let line = announcement(&mut stderr).await;
    assert!(line.contains(shown) && !controls_terminal(&line), "ask's stderr line: {line:?}");
    let gate = gate_id(&opened_in(&app, &session).await);

    let table = finish(gatehouse(&app.base, &["gates"]).spawn().unwrap()).await;
    let table = text(&table.stdout);
    assert!(table.contains(&shown[..40]) && !controls_terminal(&table), "gates: {table:?}");
    let mut opened = String::new();
    bounded("the watch line", watched.read_line(&mut opened)).await.unwrap();
    assert!(opened.starts_with("opened") && opened.contains(shown) && !controls_terminal(&opened), "{opened:?}");

    let answer = "ok\u{1b}]52;c;eA==\u{7}\u{202e}\ttabbed";
    app.answer(&session, &gate, answer).await.expect(202);
    let mut resolved = String::new();
    bounded("the watch line", watched.read_line(&mut resolved)).await.unwrap();
    assert!(
        resolved.contains("ok\\u{1b}]52;c;eA==\\u{7}\\u{202e}\\ttabbed") && !controls_terminal(&resolved),
        "{resolved:?}"
    );
    watch.kill().await.unwrap();

    let asked = finish(asking).await;
    assert_eq!(asked.status.code(), Some(0));
    assert_eq!(asked.stdout, format!("{answer}\n").into_bytes(), "stdout is a pipe: the exact bytes");
}

#[tokio::test]
async fn on_a_terminal_ask_escapes_the_answer_too() {
    let app = TestApp::spawn().await;
    let session = uuid();
    // util-linux `script` runs ask on a pseudo-terminal and copies what it shows to our pipe.
    let on_terminal = against(
        &app.base,
        "script",
        &["-qec", r#""$GATEHOUSE_BIN" ask "$QUESTION" --session "$SESSION""#, "/dev/null"],
    )
    .env("GATEHOUSE_BIN", env!("CARGO_BIN_EXE_gatehouse"))
    .env("QUESTION", "Which\u{1b}[8m one?")
    .env("SESSION", &session)
    .spawn()
    .unwrap();
    let gate = gate_id(&opened_in(&app, &session).await);
    app.parked_on_gate(&gate, 1).await;
    app.answer(&session, &gate, "two\u{1b}]52;c;eA==\u{7}\u{202e}\nlines").await.expect(202);
    let out = finish(on_terminal).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // The terminal ends its lines with CR LF; every other control character must be escaped.
    let shown = text(&out.stdout).replace("\r\n", "\n");
    assert!(shown.contains("Which\\u{1b}[8m one?"), "{shown:?}");
    assert!(shown.contains("two\\u{1b}]52;c;eA==\\u{7}\\u{202e}\nlines\n"), "newlines stay: {shown:?}");
    assert!(!controls_terminal(&shown), "{shown:?}");
}

#[tokio::test]
async fn every_client_help_names_gatehouse_token() {
    for command in ["ask", "approve", "answer", "gates", "tail", "mcp"] {
        let help = finish(gatehouse("http://127.0.0.1:9", &[command, "--help"]).spawn().unwrap()).await;
        assert_eq!(help.status.code(), Some(0));
        assert!(text(&help.stdout).contains("GATEHOUSE_TOKEN"), "{command} --help: {}", text(&help.stdout));
    }
}

#[tokio::test]
async fn tail_reads_any_valid_event_stream() {
    // A stand-in server sends CRLF and bare-CR line ends, a CR and its LF in separate chunks, a
    // two-line data field, comments and an unknown field: tail must see the two events.
    let chunks: [&'static [u8]; 5] = [
        b": hello\r\nretry: 10\r\nevent: enduring\r\nid: 1\r\ndata: {\"v\":1,\r",
        b"\ndata: \"event\":{\"type\":\"A\"}}\r\n\r",
        b"\nfoo: bar\revent: enduring\rid: 2\rdata:{\"v\":1,\"event\":{\"type\":\"B\"}}\r",
        b"\r",
        b": ping\n\n",
    ];
    let stream = axum::routing::get(move || async move {
        let body = futures_util::StreamExt::then(futures_util::stream::iter(chunks), |chunk| async move {
            // Apart in time, so they tend to arrive as separate reads.
            tokio::time::sleep(Duration::from_millis(20)).await;
            Ok::<_, std::convert::Infallible>(chunk)
        });
        ([("content-type", "text/event-stream")], axum::body::Body::from_stream(body))
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, axum::Router::new().route("/v1/events", stream)).await });

    let mut tail = gatehouse(&base, &["tail"]).spawn().unwrap();
    let mut stdout = BufReader::new(tail.stdout.take().unwrap());
    for expected in [r#"{"journal_seq":1,"event":{"type":"A"}}"#, r#"{"journal_seq":2,"event":{"type":"B"}}"#] {
        let mut line = String::new();
        bounded("a tail line", stdout.read_line(&mut line)).await.unwrap();
        assert_eq!(line.trim_end(), expected);
    }
    tail.kill().await.unwrap();
}

#[test]
fn serve_on_a_busy_port_names_bind_and_gatehouse_bind() {
    let (_dir, db) = temp_db();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let (code, stderr) = ServerProcess::serve_to_exit(&db, &taken.local_addr().unwrap().to_string(), &[]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("--bind") && stderr.contains("GATEHOUSE_BIND"), "{stderr}");
}
