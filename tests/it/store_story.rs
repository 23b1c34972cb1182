//! The backend conformance story: one story of the store's operations, told through `Store`'s
//! public API, on every backend at hand: SQLite always, PostgreSQL when
//! `GATEHOUSE_TEST_DATABASE_URL` names a server. Both backends must tell it the same way: open,
//! re-ask, conflict, the open-gate cap, a claim race, idempotent replay, close, expiry, inbox
//! acks, journal paging and a webhook cursor under its lease.

use std::path::Path;
use std::time::Duration;

use futures_util::future::join_all;
use gatehouse::domain::{
    Answer, AnsweredBy, CloseReason, Gate, GateId, GateState, LoopId, OpenGateIn, OpenRules, Question, SessionId,
    Timestamp,
};
use gatehouse::store::postgres::PgSettings;
use gatehouse::store::sqlite::SqliteSettings;
use gatehouse::store::{
    AnswerOutcome, Answering, Attempt, Claim, CloseOutcome, DatabaseUrl, DeliveryStatus, Expiry, Idempotency,
    InboxQuery, JournalRange, ListOrder, ListQuery, OpenOutcome, Opened, PageLimit, Store, StoreSettings,
};
use serde_json::{Value, json};

use crate::database;
use crate::helpers::{bounded, uuid};

/// An open store with its background tasks running; stops them on `close`.
pub struct Open {
    pub store: Store,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Open {
    /// Opens the store `settings` name and runs its background tasks (the PostgreSQL writer and
    /// follower) for as long as it is open.
    pub async fn start(settings: StoreSettings) -> Self {
        let Opened { store, background, .. } =
            bounded("the store opens", Store::open(settings, Default::default())).await.expect("open");
        let tasks = background.into_iter().map(|task| tokio::spawn(task.task)).collect();
        Self { store, tasks }
    }

    pub async fn close(self) {
        bounded("the store closes", self.store.shutdown()).await;
        for task in self.tasks {
            let _ = bounded("a background task ends", task).await;
        }
    }
}

/// The settings of every backend at hand, for a database standing for `dir/name`.
pub fn backends(dir: &Path, name: &str) -> Vec<(&'static str, StoreSettings)> {
    let path = dir.join(name);
    let mut backends = vec![(
        "sqlite",
        StoreSettings::Sqlite(SqliteSettings {
            path: path.clone(),
            durability: Default::default(),
            key_file: None,
            before_commit: None,
            writer_metrics: Default::default(),
            #[cfg(feature = "fault-injection")]
            fault_file: None,
        }),
    )];
    if let Some((url, key)) = database::postgres_for(&path) {
        backends.push(("postgres", StoreSettings::Postgres(PgSettings::new(DatabaseUrl::new(url), Some(key)))));
    }
    backends
}

/// A question as an agent would send it.
fn ask(loop_id: LoopId, tool: &str, body: Value) -> Question {
    let mut body = body;
    body["loop_id"] = json!(loop_id.to_string());
    body["tool_execution_id"] = json!(tool);
    serde_json::from_value::<OpenGateIn>(body)
        .expect("an open body")
        .validate(OpenRules::default())
        .expect("a valid question")
}

fn question(text: &str) -> Value {
    json!({"question": text})
}

fn answer_of(gate: &Gate, text: &str) -> Answer {
    let values = json!({"answer": text});
    Answer::check(gate, Some("answer"), values.as_object()).expect("a valid answer")
}

fn created(outcome: OpenOutcome) -> gatehouse::domain::GateView {
    match outcome {
        OpenOutcome::Created(view) => view,
        other => panic!("expected a new gate, got {other:?}"),
    }
}

fn gate_of(view: &gatehouse::domain::GateView) -> Gate {
    serde_json::from_str(view.gate.get()).expect("the envelope")
}

/// The answering target of `view`'s gate, in `session` (another one, to knock on the wrong door).
fn target(view: &gatehouse::domain::GateView, session: SessionId) -> Answering {
    Answering { session, gate_id: view.gate_id, loop_id: view.loop_id, gate: gate_of(view) }
}

fn person() -> AnsweredBy {
    AnsweredBy::Person { principal: Some("story".into()) }
}

/// An answer claim by a person.
fn claim(target: Answering, answer: Answer, key: Option<Idempotency>) -> Claim {
    Claim { target, answer, key, by: person() }
}

/// The first page of one loop's inbox.
fn first_page(session: SessionId, loop_id: LoopId, include_acked: bool) -> InboxQuery {
    InboxQuery { session, loop_id, after: 0, page: page(100), include_acked }
}

fn page(rows: usize) -> PageLimit {
    PageLimit { rows, bytes: 1 << 20 }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_backend_tells_the_same_story() {
    let dir = tempfile::tempdir().unwrap();
    for (backend, settings) in backends(dir.path(), "story.db") {
        eprintln!("the store story on {backend}");
        let open = Open::start(settings).await;
        story(&open.store).await;
        open.close().await;
    }
}

async fn story(store: &Store) {
    let session = SessionId::parse(&uuid()).unwrap();
    let loop_id = LoopId::parse(&uuid()).unwrap();
    let tool = uuid();

    // Open, and a re-ask of the same question finds the same gate; another question is a conflict.
    let view = created(store.open_gate(session, ask(loop_id, &tool, question("Deploy?")), 3).await.unwrap());
    assert_eq!(view.state, GateState::Open);
    match store.open_gate(session, ask(loop_id, &tool, question("Deploy?")), 3).await.unwrap() {
        OpenOutcome::Existing(again) => assert_eq!(again.gate_id, view.gate_id),
        other => panic!("a re-ask finds its gate: {other:?}"),
    }
    match store.open_gate(session, ask(loop_id, &tool, question("Something else?")), 3).await.unwrap() {
        OpenOutcome::Conflict(existing) => assert_eq!(existing.gate_id, view.gate_id),
        other => panic!("another question for the same tool execution conflicts: {other:?}"),
    }
    let stored = store.gate(view.gate_id).await.unwrap().expect("stored");
    assert_eq!(stored.view.opened_seq, view.opened_seq, "what open returned is what is stored");
    assert_eq!(stored.view.gate.get(), view.gate.get());

    // The cap: 3 open gates per session; a re-ask at the cap still finds its gate.
    let second = created(store.open_gate(session, ask(loop_id, &uuid(), question("Two?")), 3).await.unwrap());
    let third = created(store.open_gate(session, ask(loop_id, &uuid(), question("Three?")), 3).await.unwrap());
    assert!(matches!(
        store.open_gate(session, ask(loop_id, &uuid(), question("Four?")), 3).await.unwrap(),
        OpenOutcome::Capacity
    ));
    assert!(matches!(
        store.open_gate(session, ask(loop_id, &tool, question("Deploy?")), 3).await.unwrap(),
        OpenOutcome::Existing(_)
    ));

    // A race of 16 answers: one claim, the others see the winner; the winner's key replays.
    let gate = gate_of(&view);
    let racers = (0..16).map(|n| {
        let key = Idempotency { key: format!("racer-{n}"), fingerprint: Some(answer_of(&gate, "yes").fingerprint()) };
        store.answer_gate(claim(target(&view, session), answer_of(&gate, "yes"), Some(key)))
    });
    let outcomes = join_all(racers).await;
    let winners: Vec<usize> = outcomes
        .iter()
        .enumerate()
        .filter(|(_, o)| matches!(o, Ok(AnswerOutcome::Accepted { .. })))
        .map(|(n, _)| n)
        .collect();
    assert_eq!(winners.len(), 1, "one claim wins: {outcomes:?}");
    let winner = winners[0];
    let Ok(AnswerOutcome::Accepted { journal_seq }) = outcomes[winner] else { unreachable!() };
    for (n, outcome) in outcomes.iter().enumerate().filter(|(n, _)| *n != winner) {
        assert!(matches!(outcome, Ok(AnswerOutcome::NotReady { .. })), "racer {n}: {outcome:?}");
    }
    let replay_key =
        Idempotency { key: format!("racer-{winner}"), fingerprint: Some(answer_of(&gate, "yes").fingerprint()) };
    let replayed = store.answer_gate(claim(target(&view, session), answer_of(&gate, "yes"), Some(replay_key))).await;
    assert!(matches!(replayed, Ok(AnswerOutcome::Accepted { journal_seq: seq }) if seq == journal_seq), "{replayed:?}");
    let conflicting =
        Idempotency { key: format!("racer-{winner}"), fingerprint: Some(answer_of(&gate, "no").fingerprint()) };
    let refused = store.answer_gate(claim(target(&view, session), answer_of(&gate, "no"), Some(conflicting))).await;
    assert!(matches!(refused, Ok(AnswerOutcome::IdempotencyConflict)), "{refused:?}");
    let elsewhere = SessionId::parse(&uuid()).unwrap();
    let stranger = store.answer_gate(claim(target(&view, elsewhere), answer_of(&gate, "yes"), None)).await;
    assert!(matches!(stranger, Ok(AnswerOutcome::NotFound)), "a gate of another session: {stranger:?}");

    // Exactly one command, in the gate's own loop; acked, it leaves the default view.
    let inbox = store.inbox(first_page(session, loop_id, false)).await.unwrap();
    assert_eq!(inbox.len(), 1);
    let command: Value = serde_json::from_str(inbox[0].command.get()).unwrap();
    assert_eq!(
        (command["gate_id"].as_str(), command["answer"].as_str()),
        (Some(&*view.gate_id.to_string()), Some("yes"))
    );
    let command_id = gatehouse::domain::CommandId::parse(command["command_id"].as_str().unwrap()).unwrap();
    assert!(store.ack_command(session, loop_id, command_id).await.unwrap());
    assert!(store.ack_command(session, loop_id, command_id).await.unwrap(), "acks are idempotent");
    assert!(!store.ack_command(session, LoopId::parse(&uuid()).unwrap(), command_id).await.unwrap());
    assert!(store.inbox(first_page(session, loop_id, false)).await.unwrap().is_empty());
    assert_eq!(store.inbox(first_page(session, loop_id, true)).await.unwrap().len(), 1);

    // Close: a withdrawn gate has no command; closing again sees the resolution.
    match store.close_gate(session, second.gate_id, CloseReason::Abandoned).await.unwrap() {
        CloseOutcome::Closed(closed) => {
            assert_eq!(closed.state, GateState::Closed);
            let stored = store.gate(second.gate_id).await.unwrap().unwrap().view;
            assert_eq!(stored.resolved_seq, closed.resolved_seq, "what close returned is what is stored");
            assert_eq!(stored.resolution.map(|r| r.get().to_owned()), closed.resolution.map(|r| r.get().to_owned()));
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        store.close_gate(session, second.gate_id, CloseReason::OwnerClosed).await.unwrap(),
        CloseOutcome::NotReady { .. }
    ));
    assert!(store.inbox(first_page(session, loop_id, true)).await.unwrap().len() == 1, "a close sends no command");

    // Expiry: a due gate with a `respond` policy is answered once; a gate already resolved is moot.
    let policy = json!({"question": "Soon?", "response_policy":
        {"timeout": 1_000_000, "on_timeout": "respond", "response": {"action": "answer", "values": {"answer": "later"}}}});
    let due = created(store.open_gate(session, ask(loop_id, &uuid(), policy), 10).await.unwrap());
    assert!(store.deadlines().await.unwrap().iter().any(|(gate, _)| *gate == due.gate_id));
    tokio::time::sleep(Duration::from_millis(20)).await;
    let expiries = store.expire_gates(vec![due.gate_id, view.gate_id]).await.unwrap();
    assert!(matches!(expiries[0], Expiry::Answered(_)), "{expiries:?}");
    assert_eq!(expiries[1], Expiry::Moot);
    assert_eq!(store.expire_gates(vec![due.gate_id]).await.unwrap(), [Expiry::Moot], "a deadline fires once");
    assert!(!store.deadlines().await.unwrap().iter().any(|(gate, _)| *gate == due.gate_id));

    // Listing: one snapshot with the head; pages by rows and a cursor.
    let listing = store
        .list_gates(ListQuery {
            session: Some(session),
            states: vec![],
            kind: None,
            order: ListOrder::Opened,
            page: page(2),
            after: None,
        })
        .await
        .unwrap();
    assert_eq!(listing.gates.len(), 2);
    assert!(listing.more);
    assert_eq!(listing.gates[0].gate_id, view.gate_id);
    let (_, head) = store.journal_bounds().await.unwrap();
    assert_eq!(listing.journal_seq, head);
    let open_only = store
        .list_gates(ListQuery {
            session: Some(session),
            states: vec![GateState::Open],
            kind: None,
            order: ListOrder::Opened,
            page: page(10),
            after: None,
        })
        .await
        .unwrap();
    assert_eq!(open_only.gates.iter().map(|g| g.gate_id).collect::<Vec<_>>(), [third.gate_id]);

    // Journal paging: seqs strictly increase, pages join up, the last says done.
    let mut seqs = Vec::new();
    let mut from = 0;
    loop {
        let journal = store.journal(Some(session), from, page(3)).await.unwrap();
        seqs.extend(journal.events.iter().map(|e| e.journal_seq));
        if journal.done {
            break;
        }
        from = journal.next_journal_seq;
    }
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "strictly increasing: {seqs:?}");
    // 4 gates × 2 opening events, 1 answer, 1 close, 1 expiry.
    assert_eq!(seqs.len(), 11);
    let (range, more) = store
        .journal_range(JournalRange { session: None, after: seqs[0], upto: seqs[4], page: page(2) })
        .await
        .unwrap();
    assert_eq!(range.iter().map(|(seq, _)| *seq).collect::<Vec<_>>(), seqs[1..3]);
    assert!(more, "stopped by the page, not the bound");

    // Webhook cursor: a new endpoint starts at the head; under its lease it moves forward only.
    let url = format!("https://story.example/{}", uuid());
    let endpoints = store.outbox().register(vec![url.clone()], vec![]).await.unwrap();
    assert_eq!(endpoints[0].cursor, head);
    let (lease, endpoint) =
        store.outbox().lease(url.clone(), "story".into(), Duration::from_secs(30)).await.unwrap().expect("granted");
    assert_eq!(endpoint.cursor, head);
    let retry = Attempt::Retry { attempts: 1, next_at: Timestamp::now(), error: "HTTP 503".into() };
    assert!(store.outbox().record(url.clone(), head + 1, lease.clone(), retry).await.unwrap());
    assert_eq!(store.outbox().pending(url.clone(), head + 1).await.unwrap().map(|p| p.attempts), Some(1));
    assert!(store.outbox().record(url.clone(), head + 1, lease.clone(), Attempt::Delivered).await.unwrap());
    assert!(store.outbox().pending(url.clone(), head + 1).await.unwrap().is_none());
    assert!(
        store.outbox().record(url.clone(), head, lease.clone(), Attempt::Delivered).await.unwrap(),
        "an older seq is a no-op"
    );
    let (_, now) = store.outbox().lease(url.clone(), "story".into(), Duration::from_secs(30)).await.unwrap().unwrap();
    assert_eq!(now.cursor, head + 1, "the cursor never goes back");
    let dead = Attempt::DeadLetter { attempts: 3, error: "gone".into() };
    assert!(store.outbox().record(url.clone(), head + 2, lease, dead).await.unwrap());
    let failed = store.outbox().deliveries(DeliveryStatus::Failed, None, 10).await.unwrap();
    assert!(failed.iter().any(|d| d.url == url && d.journal_seq == head + 2));

    // Answer links: the digest finds the gate, nothing else does.
    let token = store.server_key().link_token(third.gate_id);
    assert_eq!(store.gate_by_link(token).await.unwrap().map(|r| r.view.gate_id), Some(third.gate_id));
    assert!(store.gate_by_link("not-a-token".into()).await.unwrap().is_none());
    assert!(store.gate(GateId::mint()).await.unwrap().is_none());
    assert!(store.is_healthy());
}

/// The PostgreSQL database standing for `name` in a new directory (which lives as long as the
/// returned `TempDir`): its URL and key file. `None`, the test skipped, without a PostgreSQL server.
fn fresh_postgres(name: &str) -> Option<(tempfile::TempDir, String, std::path::PathBuf)> {
    let dir = tempfile::tempdir().unwrap();
    let Some((url, key)) = database::postgres_for(&dir.path().join(name)) else {
        eprintln!("skipped: GATEHOUSE_TEST_DATABASE_URL names no PostgreSQL server");
        return None;
    };
    Some((dir, url, key))
}

#[tokio::test]
async fn a_postgresql_database_with_a_newer_schema_is_refused() {
    let Some((_dir, url, key)) = fresh_postgres("newer.db") else {
        return;
    };
    let settings = || StoreSettings::Postgres(PgSettings::new(DatabaseUrl::new(url.clone()), Some(key.clone())));
    Open::start(settings()).await.close().await;
    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(connection);
    client.batch_execute("INSERT INTO gatehouse_schema (version) VALUES (999)").await.unwrap();
    let refused = Store::open(settings(), Default::default()).await.err().expect("refused");
    let message = refused.to_string();
    assert!(message.contains("schema version 999, newer than this gatehouse supports"), "{message}");
    assert!(!message.contains(&url), "the URL (it may hold a password) is not in the message");
}

#[tokio::test]
async fn the_database_url_never_reaches_the_log() {
    let Some((dir, url, key)) = fresh_postgres("logged.db") else {
        return;
    };
    // The test cluster trusts its users, so any password connects; this one must show nowhere.
    const PASSWORD: &str = "never-logged-Pa55word";
    let mut with_password = url::Url::parse(&url).unwrap();
    with_password.set_password(Some(PASSWORD)).unwrap();
    let url_file = dir.path().join("database.url");
    std::fs::write(&url_file, with_password.as_str()).unwrap();
    let args = [
        "--bind".to_owned(),
        "127.0.0.1:0".to_owned(),
        "--database-url-file".to_owned(),
        url_file.display().to_string(),
        "--secret-file".to_owned(),
        key.display().to_string(),
    ];
    let server = crate::helpers::ServerProcess::serve(&args, &[("RUST_LOG", "trace")]);
    let session = uuid();
    server.open(&session, &crate::helpers::ask(&uuid(), &uuid(), "Logged?")).await;
    let log = server.log_lines().join("\n");
    assert!(log.contains("listening on"), "the log was read");
    assert!(!log.contains(PASSWORD), "the database password reached the log");
    // Nor does a refused URL echo it back.
    let bad = format!("--database-url=postgres://user:{PASSWORD}@127.0.0.1:1/none?connect_timeout=bogus");
    let (code, stderr) = crate::helpers::ServerProcess::run_to_exit(&["serve".as_ref(), bad.as_ref()]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(!stderr.contains(PASSWORD), "a refused URL is not echoed: {stderr}");
}
