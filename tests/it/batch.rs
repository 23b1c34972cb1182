//! Group commit through the real server (spec §7). A transaction is held just before its COMMIT
//! while the requests of a test queue up behind it, so they share the next transaction: a job
//! refused inside that batch leaves its neighbours committed, and a storage error in the middle
//! of it fails every job of the batch with 503 and commits none of them.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gatehouse::store::sqlite::{BeforeCommit, PendingCommit};
use serde_json::{Value, json};
use tokio::task::JoinHandle;

use crate::database::sqlite_only;
use crate::helpers::{Client, NET_TIMEOUT, Resp, TestApp, answer, ask, bounded, eventually, gate_id, temp_db, uuid};

/// Holds one transaction before its COMMIT until released, and records every batch size.
#[derive(Default)]
struct Hold {
    /// The next transaction to reach COMMIT is held.
    armed: AtomicBool,
    holding: AtomicBool,
    released: AtomicBool,
    /// Jobs queued behind the held transaction, as last seen by the writer.
    queued: AtomicUsize,
    /// The number of jobs of every transaction that reached COMMIT, in order.
    batches: Mutex<Vec<usize>>,
}

impl Hold {
    fn hook(self: &Arc<Self>) -> BeforeCommit {
        let hold = Arc::clone(self);
        Arc::new(move |commit: &PendingCommit<'_>| {
            hold.batches.lock().unwrap().push(commit.jobs());
            if !hold.armed.swap(false, SeqCst) {
                return;
            }
            hold.holding.store(true, SeqCst);
            // Bounded, so a broken test cannot wedge the writer forever.
            let deadline = Instant::now() + NET_TIMEOUT;
            while !hold.released.load(SeqCst) && Instant::now() < deadline {
                hold.queued.store(commit.queued(), SeqCst);
                std::thread::sleep(Duration::from_millis(1));
            }
        })
    }

    /// Sends `request` and waits until its transaction is held before COMMIT.
    async fn hold(&self, request: impl Future<Output = Resp> + Send + 'static) -> JoinHandle<Resp> {
        self.armed.store(true, SeqCst);
        let held = tokio::spawn(request);
        eventually("the first transaction is held", async || self.holding.load(SeqCst)).await;
        held
    }

    /// Sends `request` and waits until its job is queued behind the held transaction, so jobs
    /// queue in the order they are sent.
    async fn queue(&self, request: impl Future<Output = Resp> + Send + 'static) -> JoinHandle<Resp> {
        let before = self.queued.load(SeqCst);
        let sent = tokio::spawn(request);
        eventually("the job is queued", async || self.queued.load(SeqCst) > before).await;
        sent
    }

    fn release(&self) {
        self.released.store(true, SeqCst);
    }
}

/// Every response, in the order the requests were queued.
async fn responses(sent: Vec<JoinHandle<Resp>>) -> Vec<Resp> {
    let mut got = Vec::new();
    for request in sent {
        got.push(bounded("a batched request", request).await.expect("request task"));
    }
    got
}

fn answer_with_key(
    client: &Client,
    session: &str,
    gate: &str,
    text: &str,
    key: &str,
) -> impl Future<Output = Resp> + use<> {
    let (client, path, key, body) =
        (client.clone(), format!("/v1/sessions/{session}/gates/{gate}"), key.to_owned(), answer(text));
    async move { client.post_with(&path, &[("idempotency-key", &key)], &body).await }
}

fn open(client: &Client, session: &str, body: &Value) -> impl Future<Output = Resp> + use<> {
    let (client, path, body) = (client.clone(), format!("/v1/sessions/{session}/gates"), body.clone());
    async move { client.post(&path, &body).await }
}

fn resolutions(journal: &[Value]) -> usize {
    journal.iter().filter(|e| e["event"]["type"] == "GateResolved").count()
}

#[tokio::test]
async fn a_job_refused_inside_a_batch_leaves_its_neighbours_committed() {
    let hold = Arc::new(Hold::default());
    if sqlite_only("the writer's batches and their savepoints") {
        return;
    }
    let hooks = gatehouse::Hooks { before_commit: Some(hold.hook()), ..Default::default() };
    let app = TestApp::spawn_hooked(hooks, |_| {}).await;
    let (session, loop_id) = (uuid(), uuid());
    let tools = [uuid(), uuid(), uuid()];
    let mut gates = Vec::new();
    for (i, tool) in tools.iter().enumerate() {
        gates.push(gate_id(&app.open(&session, &ask(&loop_id, tool, &format!("Batch {i}?"))).await));
    }

    let holder = hold.hold(open(&app, &session, &ask(&loop_id, &uuid(), "Holder?"))).await;
    let batch = vec![
        hold.queue(answer_with_key(&app, &session, &gates[0], "first", "k0")).await,
        hold.queue(answer_with_key(&app, &session, &gates[1], "second", "k1")).await,
        // Open when its request was checked, answered by the job just before it in the batch.
        hold.queue(answer_with_key(&app, &session, &gates[1], "too late", "k1-late")).await,
        // The same tool execution asking something else.
        hold.queue(open(&app, &session, &ask(&loop_id, &tools[2], "Another question?"))).await,
        hold.queue(answer_with_key(&app, &session, &gates[2], "third", "k2")).await,
    ];
    hold.release();
    bounded("the held request", holder).await.unwrap().expect(201);
    let got = responses(batch).await;
    assert_eq!(hold.batches.lock().unwrap().last(), Some(&5), "the five jobs shared one transaction");

    got[0].clone().expect(202);
    got[1].clone().expect(202);
    let lost = got[2].clone().expect_error(409, "gate_not_ready");
    assert_eq!(lost["error"]["resolution"]["gate_id"], gates[1].as_str(), "the loser sees the winner");
    got[3].clone().expect_error(409, "gate_conflict");
    got[4].clone().expect(202);

    let answers: Vec<Value> =
        app.inbox(&session, &loop_id).await.iter().map(|c| c["command"]["answer"].clone()).collect();
    assert_eq!(answers, [json!("first"), json!("second"), json!("third")]);
    assert_eq!(app.view(&session, &gates[1]).await["answer"], "second");
    assert_eq!(resolutions(&app.journal().await), 3);
}

#[tokio::test]
async fn a_storage_error_inside_a_batch_fails_every_job_with_503_and_commits_none() {
    if sqlite_only("the fault file") {
        return;
    }
    let hold = Arc::new(Hold::default());
    let (dir, db) = temp_db();
    let fault = dir.path().join("fault");
    let hooks = gatehouse::Hooks { before_commit: Some(hold.hook()), ..Default::default() };
    let app = TestApp::start_hooked(&db, hooks, |args| args.store.fault_file = Some(fault.clone())).await;
    let (session, loop_id) = (uuid(), uuid());
    let gates = [
        gate_id(&app.open(&session, &ask(&loop_id, &uuid(), "Small one?")).await),
        gate_id(&app.open(&session, &ask(&loop_id, &uuid(), "Small two?")).await),
    ];
    // About 110 KiB of gate: far more than the pages the database may still grow by below.
    let mut big = ask(&loop_id, &uuid(), &"q".repeat(4000));
    big["choices"] = (0..64).map(|i| format!("{i:02}{}", "c".repeat(248))).collect();
    let journal_before = app.journal().await;

    let holder = hold.hold(open(&app, &session, &ask(&loop_id, &uuid(), "Holder?"))).await;
    // From the next transaction on, the database may grow by 16 pages: room for the small
    // answer queued first, none for the big gate queued after it.
    let pages: i64 = rusqlite::Connection::open(&db).unwrap().query_row("PRAGMA page_count", [], |r| r.get(0)).unwrap();
    std::fs::write(&fault, format!("full:{}", pages + 16)).unwrap();
    let batch = vec![
        hold.queue(answer_with_key(&app, &session, &gates[0], "one", "a0")).await,
        hold.queue(open(&app, &session, &big)).await,
        hold.queue(answer_with_key(&app, &session, &gates[1], "two", "a1")).await,
    ];
    hold.release();
    bounded("the held request", holder).await.unwrap().expect(201);
    for (i, resp) in responses(batch).await.into_iter().enumerate() {
        let body = resp.expect_error(503, "storage_unavailable");
        assert_eq!(body["error"]["retryable"], true, "job {i}");
    }

    std::fs::write(&fault, "").unwrap();
    eventually("storage is healthy again", async || app.get("/readyz").await.status == 200).await;
    // None of the batch is visible: the one new event is the holder's open.
    let journal = app.journal().await;
    assert_eq!(journal.len(), journal_before.len() + 2, "only the holder's GateOpened and UserInputRequested");
    assert_eq!(resolutions(&journal), 0);
    for gate in &gates {
        assert_eq!(app.view(&session, gate).await["state"], "open");
    }
    assert!(app.inbox(&session, &loop_id).await.is_empty());

    // The callers retry with the same keys, and it all goes through.
    answer_with_key(&app, &session, &gates[0], "one", "a0").await.expect(202);
    open(&app, &session, &big).await.expect(201);
    answer_with_key(&app, &session, &gates[1], "two", "a1").await.expect(202);
    assert_eq!(app.inbox(&session, &loop_id).await.len(), 2);
    app.stop().await;
    drop(dir);
}
