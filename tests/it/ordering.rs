//! Journal order across replicas, proven deterministically with two writers (two stores on one
//! PostgreSQL database, as two replicas are). Writer A draws its seqs and stops just before
//! COMMIT; writer B commits meanwhile. With the ordering lock, B waits for A, so a reader that
//! resumes after the highest seq it saw never skips a row. Without it (the negative control), B
//! commits higher seqs first, the reader moves past them, and A's rows appear below its cursor:
//! skipped for good. The control must find the skip, or the test proves nothing.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use gatehouse::domain::{OpenGateIn, OpenRules, Question, SessionId};
use gatehouse::store::postgres::PgSettings;
use gatehouse::store::{DatabaseUrl, JournalRange, OpenOutcome, PageLimit, Store, StoreSettings};
use serde_json::json;
use tokio::sync::{Semaphore, mpsc};

use crate::database;
use crate::helpers::{bounded, eventually, uuid};
use crate::store_story::Open;

/// Stops writer A before COMMIT once, while armed, until released.
struct Pause {
    armed: AtomicBool,
    release: Semaphore,
}

fn ask() -> Question {
    let body = json!({"loop_id": uuid(), "tool_execution_id": uuid(), "question": "In order?"});
    serde_json::from_value::<OpenGateIn>(body).unwrap().validate(OpenRules::default()).unwrap()
}

async fn open(store: &Store, session: SessionId) -> i64 {
    match store.open_gate(session, ask(), 1000).await.expect("open") {
        OpenOutcome::Created(view) => view.opened_seq,
        other => panic!("{other:?}"),
    }
}

/// A reader as a stream follows the journal: it asks for `seq > cursor` and moves its cursor to
/// the highest seq it got.
struct Reader {
    cursor: i64,
    seen: BTreeSet<i64>,
}

impl Reader {
    async fn read(&mut self, store: &Store) {
        let everything = PageLimit { rows: 10_000, bytes: usize::MAX };
        let (rows, _) = store
            .journal_range(JournalRange { session: None, after: self.cursor, upto: i64::MAX, page: everything })
            .await
            .expect("read");
        for (seq, _) in rows {
            self.seen.insert(seq);
            self.cursor = self.cursor.max(seq);
        }
    }
}

/// Whether some session waits for an advisory lock right now (writer B, for the ordering lock).
async fn waits_for_the_lock(url: &str) -> bool {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.expect("connect");
    tokio::spawn(connection);
    let waiting: i64 = client
        .query_one("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted", &[])
        .await
        .expect("pg_locks")
        .get(0);
    waiting > 0
}

/// Runs the two-writer scenario with the ordering lock on or off, and returns what the reader
/// saw, and every seq the journal holds at the end.
async fn two_writers(order_lock: bool) -> Option<(BTreeSet<i64>, BTreeSet<i64>, Vec<i64>)> {
    let dir = tempfile::tempdir().unwrap();
    let (url, key) = database::postgres_for(&dir.path().join("ordering.db"))?;
    let pause = Arc::new(Pause { armed: AtomicBool::new(false), release: Semaphore::new(0) });
    let (reached_tx, mut reached) = mpsc::unbounded_channel();
    let hook = Arc::clone(&pause);
    let settings = |before_commit| {
        StoreSettings::Postgres(PgSettings {
            before_commit,
            order_lock,
            ..PgSettings::new(DatabaseUrl::new(url.clone()), Some(key.clone()))
        })
    };
    let a = Open::start(settings(Some(Arc::new(move |_jobs| {
        let (hook, reached) = (Arc::clone(&hook), reached_tx.clone());
        Box::pin(async move {
            if hook.armed.swap(false, Ordering::SeqCst) {
                let _ = reached.send(());
                // Bounded, so a broken test cannot wedge the writer forever.
                let _ = tokio::time::timeout(crate::helpers::NET_TIMEOUT, hook.release.acquire()).await;
            }
        }) as std::pin::Pin<Box<dyn Future<Output = ()> + Send>>
    }))))
    .await;
    let b = Open::start(settings(None)).await;
    let session = SessionId::parse(&uuid()).unwrap();
    open(&a.store, session).await;
    let mut reader = Reader { cursor: 0, seen: BTreeSet::new() };
    reader.read(&b.store).await;

    // A draws its seqs and stops before COMMIT.
    pause.armed.store(true, Ordering::SeqCst);
    let paused = tokio::spawn({
        let store = a.store.clone();
        async move { open(&store, session).await }
    });
    bounded("A reaches COMMIT", reached.recv()).await.expect("the hook ran");
    // B writes meanwhile.
    let racing = tokio::spawn({
        let store = b.store.clone();
        async move { open(&store, session).await }
    });
    if order_lock {
        // B waits for A's lock, and nothing of either is visible.
        eventually("B waits for the ordering lock", async || waits_for_the_lock(&url).await).await;
        let before = reader.seen.clone();
        reader.read(&b.store).await;
        assert_eq!(reader.seen, before, "nothing of A or B is visible while A holds the lock");
        assert!(!racing.is_finished(), "B cannot commit before A");
    } else {
        // B commits first, with higher seqs; the reader moves past them.
        bounded("B commits", async {
            while !racing.is_finished() {
                tokio::task::yield_now().await
            }
        })
        .await;
        reader.read(&b.store).await;
    }
    pause.release.add_permits(1);
    let a_seq = bounded("A commits", paused).await.unwrap();
    let b_seq = bounded("B commits", racing).await.unwrap();
    reader.read(&b.store).await;
    if order_lock {
        assert!(a_seq < b_seq, "A drew its seqs first and committed first: {a_seq} < {b_seq}");
    }
    let (_, head) = b.store.journal_bounds().await.unwrap();
    let everything = PageLimit { rows: 10_000, bytes: usize::MAX };
    let (rows, _) =
        b.store.journal_range(JournalRange { session: None, after: 0, upto: head, page: everything }).await.unwrap();
    let journal: BTreeSet<i64> = rows.iter().map(|(seq, _)| *seq).collect();
    a.close().await;
    b.close().await;
    Some((reader.seen, journal, vec![a_seq, b_seq]))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_ordering_lock_a_reader_never_skips_a_row() {
    let Some((seen, journal, seqs)) = two_writers(true).await else {
        eprintln!("skipped: GATEHOUSE_TEST_DATABASE_URL names no PostgreSQL server");
        return;
    };
    eprintln!("with the lock: A opened at {}, B at {}; the reader saw {seen:?}", seqs[0], seqs[1]);
    assert_eq!(seen, journal, "every committed row, none skipped");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_ordering_lock_a_reader_skips_a_row_the_negative_control() {
    let Some((seen, journal, seqs)) = two_writers(false).await else {
        eprintln!("skipped: GATEHOUSE_TEST_DATABASE_URL names no PostgreSQL server");
        return;
    };
    let skipped: Vec<i64> = journal.difference(&seen).copied().collect();
    eprintln!("without the lock: A opened at {}, B at {}; skipped for good: {skipped:?}", seqs[0], seqs[1]);
    assert!(seqs[0] < seqs[1], "A drew lower seqs, and B committed them first");
    assert!(skipped.contains(&seqs[0]), "the reader skipped A's rows, committed below its cursor");
}
