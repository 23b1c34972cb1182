//! The commit barrier (spec §13): with the writer paused just before COMMIT, nothing the answer
//! produces is observable (no 202, no wake-up, no inbox row, no SSE frame); after release,
//! everything is, at the seq the 202 names. On either backend (each has its own hook).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use gatehouse::store::sqlite::PendingCommit;

use crate::helpers::{EventStream, NET_TIMEOUT, TestApp, bounded};

/// Pauses the writer before COMMIT while armed, until released.
struct Barrier {
    armed: AtomicBool,
    reached: Mutex<mpsc::Sender<()>>,
    release: Mutex<mpsc::Receiver<()>>,
}

impl Barrier {
    /// Called by the writer (SQLite's thread, or a blocking task for PostgreSQL's).
    fn pause(&self) {
        if self.armed.swap(false, Ordering::SeqCst) {
            self.reached.lock().unwrap().send(()).unwrap();
            // Bounded, so a broken test cannot wedge the writer forever.
            let _ = self.release.lock().unwrap().recv_timeout(NET_TIMEOUT);
        }
    }
}

#[tokio::test]
async fn nothing_is_observable_before_commit() {
    let (reached_tx, reached_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel();
    let barrier = Arc::new(Barrier {
        armed: AtomicBool::new(false),
        reached: Mutex::new(reached_tx),
        release: Mutex::new(release_rx),
    });
    let (sqlite, postgres) = (Arc::clone(&barrier), Arc::clone(&barrier));
    let hooks = gatehouse::Hooks {
        before_commit: Some(Arc::new(move |_: &PendingCommit<'_>| sqlite.pause())),
        pg_before_commit: Some(Arc::new(move |_jobs| {
            let barrier = Arc::clone(&postgres);
            Box::pin(async move {
                let _ = tokio::task::spawn_blocking(move || barrier.pause()).await;
            })
        })),
    };
    let app = TestApp::spawn_hooked(hooks, |_| {}).await;
    let (session, loop_id, gate) = app.open_asking("Barrier?").await;
    let head_before = app.journal().await.len();

    let waiter = app.spawn_get(format!("/v1/sessions/{session}/gates/{gate}/wait?timeout=60"));
    let inbox_poll = app.spawn_get(format!("/v1/sessions/{session}/loops/{loop_id}/commands?wait=60"));

    app.parked_on_gate(&gate, 1).await;
    app.parked_on_inbox(&session, &loop_id, 1).await;
    let mut stream = EventStream::connect(&app, &format!("/v1/sessions/{session}/events"), &[]).await;
    assert!(stream.next().await.retry.is_some());

    barrier.armed.store(true, Ordering::SeqCst);
    let answering = {
        let client = app.client.clone();
        let (session, gate) = (session.clone(), gate.clone());
        tokio::spawn(async move { client.answer(&session, &gate, "after the barrier").await })
    };
    bounded("writer reaches the barrier", tokio::task::spawn_blocking(move || reached_rx.recv_timeout(NET_TIMEOUT)))
        .await
        .unwrap()
        .expect("the answer's transaction reached COMMIT");

    // Paused before COMMIT: readers see the last committed state, and nobody was woken.
    assert_eq!(app.view(&session, &gate).await["state"], "open");
    assert!(app.inbox(&session, &loop_id).await.is_empty());
    assert_eq!(app.journal().await.len(), head_before);
    match stream.next_within(Duration::from_millis(300)).await {
        Err(_elapsed) => {}
        Ok(frame) => panic!("no frame before commit, got {frame:?}"),
    }
    assert!(!waiter.is_finished(), "no waiter wakes before commit");
    assert!(!inbox_poll.is_finished(), "no inbox delivery before commit");
    assert!(!answering.is_finished(), "no 202 before commit");

    release_tx.send(()).unwrap();
    let accepted = bounded("202", answering).await.unwrap().expect(202).json();
    let resolved = bounded("waiter", waiter).await.unwrap().expect(200).json();
    assert_eq!(resolved["state"], "resolved");
    assert_eq!(resolved["resolved_seq"], accepted["journal_seq"]);
    let page = bounded("inbox poll", inbox_poll).await.unwrap().expect(200).json();
    assert_eq!(page["commands"][0]["command"]["answer"], "after the barrier");
    let journal = app.journal().await;
    assert_eq!(journal.last().unwrap()["journal_seq"], accepted["journal_seq"]);
    let (seq, event) = stream.next_enduring().await;
    assert_eq!(event["type"], "GateResolved");
    assert_eq!(seq, accepted["journal_seq"].as_i64().unwrap(), "the frame's id is the 202's journal_seq");
}
