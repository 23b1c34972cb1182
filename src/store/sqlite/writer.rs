//! The one writer thread. It owns the only write connection; every journal, gate and inbox write
//! is a job sent to it over a bounded channel and run inside `BEGIN IMMEDIATE`.
//!
//! Group commit (spec §7): jobs that are already queued when a transaction starts run in the same
//! transaction, at most `MAX_BATCH` of them, first come first served, so one fsync covers them all.
//! No transaction waits to gather more: the jobs that queue while one commits make up the next, so
//! batches grow with the load and a lone job is never delayed. Each job runs inside its own
//! SAVEPOINT, so a job that fails on its own terms (a bug, damaged data, a panic) rolls back alone
//! and its neighbours commit. Storage trouble is different: once
//! SQLite rolled the transaction back, or the disk refused a write (full, read-only, I/O), every
//! job of the batch fails with a retryable 503 and none of it commits. Side effects of a job
//! (doorbell, frame ring, keyed wake-ups, timers) are buffered and published only after COMMIT
//! returned Ok, in order, and only then do the replies go out: nothing is observable before it is
//! durable, and no caller hears back before the commit holding its job.

#[cfg(feature = "fault-injection")]
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Duration;

use rusqlite::Connection;
use tokio::sync::{mpsc, oneshot};

use super::cache::GateCache;
use super::checkpointer::Checkpointer;
use crate::bus::{Bus, Effect};
use crate::domain::Timestamp;
use crate::metrics::WriterMetrics;
use crate::store::queue::{self, drain_batch};
use crate::store::{Health, StoreError};

/// How many queued jobs one transaction may take.
const MAX_BATCH: usize = 256;
/// WAL frames after which the checkpointer copies them into the main file (SQLite's own default).
const CHECKPOINT_FRAMES: i32 = 1000;
/// WAL frames after which the writer checkpoints itself, between batches: steady writes gave the
/// checkpointer no moment to copy every frame, so SQLite could not start the WAL over.
const INLINE_CHECKPOINT_FRAMES: i32 = 4 * CHECKPOINT_FRAMES;
/// How often an unhealthy writer probes the database with a tiny real write.
const PROBE_INTERVAL: Duration = Duration::from_secs(1);
/// SQLite's default `max_page_count`, restored when a `full:N` fault is lifted.
#[cfg(feature = "fault-injection")]
const UNLIMITED_PAGES: u64 = 4_294_967_294;

/// A test-only pause just before COMMIT (spec §13, the commit barrier).
pub type BeforeCommit = Arc<dyn Fn(&PendingCommit<'_>) + Send + Sync>;

/// What the test-only pause sees: the batch about to commit and the jobs queued behind it, so a
/// test can hold a transaction open until the jobs it wants batched together are waiting.
pub struct PendingCommit<'a> {
    jobs: usize,
    queue: &'a mpsc::Receiver<Msg>,
}

impl PendingCommit<'_> {
    /// Jobs in the transaction about to commit.
    pub fn jobs(&self) -> usize {
        self.jobs
    }

    /// Jobs queued behind it right now (they will share the next transaction, up to `MAX_BATCH`).
    pub fn queued(&self) -> usize {
        self.queue.len()
    }
}

/// A unit of work for the writer: runs inside the transaction, then learns whether it committed.
pub(super) struct Job(Box<dyn Work>);

/// A job with its result type erased, so jobs of any kind share one queue.
trait Work: Send {
    fn run(self: Box<Self>, conn: &Connection) -> Ran;
    /// Fails the job without running it (its transaction broke first).
    fn fail(self: Box<Self>, err: StoreError);
}

/// What a job left behind: whether it succeeded, what it changed, and how to answer its caller
/// once the fate of the transaction is known.
struct Ran {
    /// Why the job failed, if it did (its caller learns the same error).
    failure: Option<StoreError>,
    effects: Vec<Effect>,
    reply: Box<dyn FnOnce(Result<(), StoreError>) + Send>,
}

struct Typed<T, F> {
    work: F,
    tx: oneshot::Sender<Result<T, StoreError>>,
}

impl<T, F> Work for Typed<T, F>
where
    T: Send + 'static,
    F: FnOnce(&Connection, &mut Vec<Effect>) -> Result<T, StoreError> + Send + 'static,
{
    fn run(self: Box<Self>, conn: &Connection) -> Ran {
        let Self { work, tx } = *self;
        let mut effects = Vec::new();
        let result = work(conn, &mut effects);
        Ran {
            failure: result.as_ref().err().cloned(),
            effects,
            reply: Box::new(move |committed: Result<(), StoreError>| {
                // The caller may have gone away (client disconnect); the work is done anyway.
                let _ = tx.send(committed.and(result));
            }),
        }
    }

    fn fail(self: Box<Self>, err: StoreError) {
        let _ = self.tx.send(Err(err));
    }
}

impl Job {
    /// Wraps a closure; the returned receiver yields its result once the transaction is decided.
    pub(super) fn new<T, F>(work: F) -> (Self, oneshot::Receiver<Result<T, StoreError>>)
    where
        T: Send + 'static,
        F: FnOnce(&Connection, &mut Vec<Effect>) -> Result<T, StoreError> + Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        (Self(Box::new(Typed { work, tx })), rx)
    }
}

/// What the writer's queue carries.
pub(super) type Msg = queue::Msg<Job>;

pub(super) struct Writer {
    pub conn: Connection,
    pub rx: mpsc::Receiver<Msg>,
    pub bus: Arc<Bus>,
    /// Told which gates each commit changed, before the bus and the replies are.
    pub cache: Arc<GateCache>,
    pub health: Arc<Health>,
    pub before_commit: Option<BeforeCommit>,
    pub metrics: Arc<WriterMetrics>,
    #[cfg(feature = "fault-injection")]
    pub fault_file: Option<PathBuf>,
    pub runtime: tokio::runtime::Handle,
    /// Frames in the WAL after the last commit (SQLite's WAL hook tells).
    pub wal_frames: Arc<AtomicI32>,
    /// Checkpoints beside the writer; without one, the writer checkpoints at `CHECKPOINT_FRAMES`.
    pub checkpointer: Option<Checkpointer>,
}

impl Writer {
    /// The thread body: runs until shutdown or until every sender is gone.
    pub fn run(mut self) {
        // If this thread dies unexpectedly, readiness must say so.
        let _watch = DeathWatch(Arc::clone(&self.health));
        // Replaces SQLite's automatic checkpoint, which runs inside the COMMIT that fills the WAL
        // and so holds back the replies of that batch: see `checkpoint`.
        let frames = Arc::clone(&self.wal_frames);
        let hooked = self.conn.wal_hook(Some(move |_: &mut rusqlite::hooks::Wal, pages| {
            frames.store(pages, Ordering::Relaxed);
            Ok(())
        }));
        if let Err(e) = hooked {
            tracing::warn!(error = %e, "cannot watch the WAL; SQLite checkpoints inside COMMIT");
        }
        let ack = loop {
            let msg = if self.health.is_healthy() {
                self.rx.blocking_recv()
            } else {
                match self.runtime.block_on(async { tokio::time::timeout(PROBE_INTERVAL, self.rx.recv()).await }) {
                    Ok(msg) => msg,
                    Err(_elapsed) => {
                        self.probe();
                        continue;
                    }
                }
            };
            match msg {
                Some(Msg::Job(job)) => {
                    let (batch, shutdown) = drain_batch(job, &mut self.rx, MAX_BATCH);
                    self.commit_batch(batch);
                    if let Some(ack) = shutdown {
                        break Some(ack);
                    }
                }
                Some(Msg::Shutdown(ack)) => break Some(ack),
                None => break None,
            }
        };
        self.close(ack);
    }

    /// Runs a batch of jobs in one `BEGIN IMMEDIATE` transaction.
    fn commit_batch(&mut self, batch: Vec<Job>) {
        #[cfg(feature = "fault-injection")]
        self.apply_faults();
        let started = std::time::Instant::now();
        if !self.conn.is_autocommit() {
            // A ROLLBACK failed earlier; without this every BEGIN would fail from now on.
            if let Err(e) = self.conn.execute_batch("ROLLBACK") {
                return self.fail(Vec::new(), batch, format!("cannot end a broken transaction: {e}"));
            }
        }
        if let Err(e) = self.control("BEGIN IMMEDIATE") {
            return self.fail(Vec::new(), batch, format!("BEGIN IMMEDIATE failed: {e}"));
        }
        let mut done: Vec<Ran> = Vec::with_capacity(batch.len());
        let mut jobs = batch.into_iter();
        while let Some(Job(job)) = jobs.next() {
            if let Err(e) = self.control("SAVEPOINT job") {
                let rest = std::iter::once(Job(job)).chain(jobs).collect();
                return self.fail(done, rest, format!("SAVEPOINT failed: {e}"));
            }
            // A panicking job must not take the writer down with it: it fails alone (its caller
            // sees its reply dropped) and the batch goes on.
            let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job.run(&self.conn)));
            let mut ran = ran.unwrap_or_else(|_| {
                tracing::error!("a write job panicked; it was rolled back");
                Ran {
                    failure: Some(StoreError::Internal("panicked".into())),
                    effects: Vec::new(),
                    reply: Box::new(drop),
                }
            });
            if self.conn.is_autocommit() {
                // SQLite rolled back the whole transaction (e.g. SQLITE_FULL): every job of the
                // batch is lost, this one included. Never run SAVEPOINT outside BEGIN IMMEDIATE.
                let cause = match &ran.failure {
                    Some(e) => e.to_string(),
                    None => "SQLite rolled the transaction back".to_owned(),
                };
                done.push(ran);
                return self.fail(done, jobs.collect(), cause);
            }
            if let Some(StoreError::Unavailable(cause)) = &ran.failure {
                // The disk refused a write but SQLite kept the transaction: still, nothing of this
                // batch may commit on storage that just failed, and every caller must hear the
                // same retryable outcome (they retry with their Idempotency-Key).
                let cause = cause.clone();
                done.push(ran);
                return self.fail(done, jobs.collect(), cause);
            }
            let ended = match ran.failure {
                None => self.control("RELEASE job"),
                Some(_) => self.control("ROLLBACK TO job").and_then(|()| self.control("RELEASE job")),
            };
            if let Err(e) = ended {
                done.push(ran);
                return self.fail(done, jobs.collect(), format!("ending the job's savepoint failed: {e}"));
            }
            if ran.failure.is_some() {
                ran.effects.clear();
            }
            done.push(ran);
        }
        if let Some(pause) = &self.before_commit {
            pause(&PendingCommit { jobs: done.len(), queue: &self.rx });
        }
        match self.control("COMMIT") {
            Ok(()) => {
                self.health.set(true);
                self.metrics.committed(done.len(), started.elapsed());
                let effects: Vec<Effect> = done.iter_mut().flat_map(|r| r.effects.drain(..)).collect();
                self.cache.forget(effects.iter().filter_map(|effect| match effect {
                    Effect::Gate(gate) => Some(*gate),
                    _ => None,
                }));
                self.bus.publish(effects);
                for ran in done {
                    (ran.reply)(Ok(()));
                }
                self.checkpoint();
            }
            // The outcome is unknown to the callers: they retry with the same Idempotency-Key.
            Err(e) => self.fail(done, Vec::new(), format!("COMMIT failed: {e}")),
        }
    }

    /// Once the WAL holds `CHECKPOINT_FRAMES`, asks the checkpointer to copy it back into the main
    /// file, after every batch until SQLite starts the WAL over (a pass copies only what is new).
    /// The writer copies the WAL itself, between batches as SQLite's automatic checkpoint would
    /// but after the replies, when the checkpointer left it a short tail (see `checkpointer`), past
    /// `INLINE_CHECKPOINT_FRAMES`, or without a checkpointer. PASSIVE: it never waits for readers
    /// or for the checkpointer; what they still need is copied later.
    fn checkpoint(&self) {
        let frames = self.wal_frames.load(Ordering::Relaxed);
        // Taken at every batch, so a tail left before the WAL started over is dropped, not copied.
        let tail = self.checkpointer.as_ref().is_some_and(Checkpointer::take_tail);
        if frames < CHECKPOINT_FRAMES {
            return;
        }
        if let Some(checkpointer) = &self.checkpointer
            && frames < INLINE_CHECKPOINT_FRAMES
            && !tail
        {
            return checkpointer.request();
        }
        if let Err(e) = self.conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())) {
            tracing::warn!(error = %e, "WAL checkpoint failed; the next batch tries again");
        }
    }

    /// Runs one transaction-control statement, prepared once and cached: every job runs two.
    fn control(&self, sql: &str) -> rusqlite::Result<()> {
        self.conn.prepare_cached(sql)?.execute([]).map(drop)
    }

    /// The transaction itself failed: roll back, mark storage unhealthy, and fail every job of
    /// the batch with 503, those that ran (whatever they returned) and those that never got to.
    fn fail(&mut self, ran: Vec<Ran>, not_run: Vec<Job>, cause: String) {
        if !self.conn.is_autocommit()
            && let Err(e) = self.conn.execute_batch("ROLLBACK")
        {
            tracing::error!(error = %e, "ROLLBACK failed; the next batch retries it");
        }
        tracing::error!(%cause, jobs = ran.len() + not_run.len(), "write transaction failed");
        self.cache.clear();
        self.metrics.storage_error();
        self.health.set(false);
        let err = StoreError::Unavailable(cause);
        for r in ran {
            (r.reply)(Err(err.clone()));
        }
        for Job(job) in not_run {
            job.fail(err.clone());
        }
    }

    /// Test-only fault injection (spec §7): the file names a fault, read before every batch and
    /// probe. `readonly` → `PRAGMA query_only`; `full:N` → `PRAGMA max_page_count = N`; anything
    /// else (or no file) → no fault.
    #[cfg(feature = "fault-injection")]
    fn apply_faults(&self) {
        let Some(path) = &self.fault_file else { return };
        let spec = std::fs::read_to_string(path).unwrap_or_default();
        let spec = spec.trim();
        let read_only = spec == "readonly";
        let max_pages = spec.strip_prefix("full:").and_then(|n| n.parse::<u64>().ok()).unwrap_or(UNLIMITED_PAGES);
        let applied = self
            .conn
            .execute_batch(&format!("PRAGMA query_only = {}", i32::from(read_only)))
            .and_then(|()| self.conn.query_row(&format!("PRAGMA max_page_count = {max_pages}"), [], |_| Ok(())));
        if let Err(e) = applied {
            tracing::warn!(error = %e, "could not apply the fault file");
        }
    }

    /// A tiny real write, to find out whether storage recovered.
    fn probe(&mut self) {
        #[cfg(feature = "fault-injection")]
        self.apply_faults();
        if !self.conn.is_autocommit() {
            let _ = self.conn.execute_batch("ROLLBACK");
        }
        let now = Timestamp::now().as_nanos().to_string();
        let probed = self.conn.execute_batch("BEGIN IMMEDIATE").and_then(|()| {
            let wrote = self
                .conn
                .execute("INSERT INTO meta (key, value) VALUES ('writer_probe', ?1) ON CONFLICT (key) DO UPDATE SET value = excluded.value", [now])
                .and_then(|_| self.conn.execute_batch("COMMIT"));
            if wrote.is_err() && !self.conn.is_autocommit() {
                let _ = self.conn.execute_batch("ROLLBACK");
            }
            wrote
        });
        match probed {
            Ok(()) => self.health.set(true),
            Err(e) => tracing::warn!(error = %e, "storage probe failed"),
        }
    }

    /// Drains queued jobs, checkpoints the WAL into the main file and closes the connection.
    fn close(mut self, ack: Option<oneshot::Sender<()>>) {
        let rest = queue::close(&mut self.rx);
        if !rest.is_empty() {
            self.commit_batch(rest);
        }
        // Its checkpoint in progress ends first: the last one, below, must copy every frame.
        drop(self.checkpointer.take());
        if let Err(e) = self.conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)") {
            tracing::warn!(error = %e, "final checkpoint failed");
        }
        if let Err((_, e)) = self.conn.close() {
            tracing::warn!(error = %e, "closing the database failed");
        }
        tracing::info!("writer stopped; database closed");
        if let Some(ack) = ack {
            let _ = ack.send(());
        }
    }
}

/// Marks storage unhealthy when the writer thread unwinds.
struct DeathWatch(Arc<Health>);

impl Drop for DeathWatch {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.set(false);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::domain::GateId;
    use crate::store::sqlite::{Durability, schema};

    /// Runs `jobs` as one batch: they are all queued before the writer starts, so its first
    /// transaction takes every one. Returns the database, closed and checkpointed.
    fn run_one_batch(jobs: Vec<Job>, bus: &Arc<Bus>) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("writer.db");
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        let (tx, rx) = mpsc::channel(jobs.len());
        for job in jobs {
            assert!(tx.try_send(Msg::Job(job)).is_ok(), "room for every job");
        }
        // No sender left: after the batch the writer sees the end of its queue and closes.
        drop(tx);
        let writer = Writer {
            conn: schema::open_writer(&path, Durability::Normal, &dir.path().join("writer.key")).unwrap().0,
            rx,
            bus: Arc::clone(bus),
            cache: Arc::default(),
            health: Arc::default(),
            before_commit: None,
            metrics: Arc::default(),
            #[cfg(feature = "fault-injection")]
            fault_file: None,
            runtime: runtime.handle().clone(),
            wal_frames: Arc::default(),
            checkpointer: None,
        };
        writer.run();
        (dir, path)
    }

    /// A job that stores `key` in `meta` and announces `gate`, then ends as `outcome` says.
    fn insert(
        key: &str,
        gate: GateId,
        outcome: Result<(), StoreError>,
    ) -> (Job, oneshot::Receiver<Result<(), StoreError>>) {
        let key = key.to_owned();
        Job::new(move |conn, effects| {
            conn.execute("INSERT INTO meta (key, value) VALUES (?1, 'v')", [&key])?;
            effects.push(Effect::Gate(gate));
            outcome
        })
    }

    fn stored_keys(path: &std::path::Path) -> Vec<String> {
        let conn = rusqlite::Connection::open(path).unwrap();
        let mut keys: Vec<String> = conn
            .prepare("SELECT key FROM meta WHERE key LIKE 'job-%' ORDER BY key")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        keys.sort();
        keys
    }

    #[test]
    fn a_job_that_fails_rolls_back_alone_and_its_neighbours_commit() {
        let bus = Arc::new(Bus::new(crate::bus::test_frame));
        let gates = [GateId::mint(), GateId::mint(), GateId::mint()];
        let mut woken: Vec<_> = gates.iter().map(|g| bus.watch_gate(*g)).collect();
        let (a, a_reply) = insert("job-a", gates[0], Ok(()));
        let (b, b_reply) = insert("job-b", gates[1], Err(StoreError::Internal("refused after writing".into())));
        let (c, c_reply) = insert("job-c", gates[2], Ok(()));
        let (_dir, path) = run_one_batch(vec![a, b, c], &bus);

        assert!(matches!(a_reply.blocking_recv().unwrap(), Ok(())));
        assert!(matches!(b_reply.blocking_recv().unwrap(), Err(StoreError::Internal(_))));
        assert!(matches!(c_reply.blocking_recv().unwrap(), Ok(())));
        assert_eq!(stored_keys(&path), ["job-a", "job-c"], "the failed job's write was rolled back");
        // Only the committed jobs' effects were published.
        let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        runtime.block_on(async {
            let within = Duration::from_secs(5);
            tokio::time::timeout(within, woken[0].changed()).await.expect("job a announced");
            tokio::time::timeout(within, woken[2].changed()).await.expect("job c announced");
            let b = tokio::time::timeout(Duration::from_millis(50), woken[1].changed()).await;
            assert!(b.is_err(), "a failed job announces nothing");
        });
    }

    /// A batch of three jobs whose middle one hits `fault`: every job fails with a retryable
    /// error and nothing of the batch commits.
    fn storage_fault_mid_batch(fault: fn(&Connection) -> rusqlite::Result<()>) {
        let bus = Arc::new(Bus::new(crate::bus::test_frame));
        let (a, a_reply) = insert("job-a", GateId::mint(), Ok(()));
        let (faulty, faulty_reply) = Job::new(move |conn, _| {
            conn.execute("INSERT INTO meta (key, value) VALUES ('job-b', 'v')", [])?;
            Ok(fault(conn)?)
        });
        let (c, c_reply) = insert("job-c", GateId::mint(), Ok(()));
        let (_dir, path) = run_one_batch(vec![a, faulty, c], &bus);

        for (name, reply) in [("before", a_reply), ("failing", faulty_reply), ("after", c_reply)] {
            let got = reply.blocking_recv().unwrap();
            assert!(matches!(got, Err(StoreError::Unavailable(_))), "the {name} job: {got:?}");
        }
        assert!(stored_keys(&path).is_empty(), "nothing of the batch committed");
        assert_eq!(*bus.head().borrow(), 0);
    }

    #[test]
    fn a_full_disk_mid_batch_fails_every_job_and_commits_none() {
        // SQLite answers SQLITE_FULL by rolling the whole transaction back.
        storage_fault_mid_batch(|conn| {
            let pages: i64 = conn.query_row("PRAGMA page_count", [], |r| r.get(0))?;
            conn.query_row(&format!("PRAGMA max_page_count = {pages}"), [], |_| Ok(()))?;
            conn.execute("INSERT INTO meta (key, value) VALUES ('job-big', ?1)", ["x".repeat(64 * 1024)])?;
            Ok(())
        });
    }

    #[test]
    fn a_refused_write_mid_batch_fails_every_job_and_commits_none() {
        // SQLITE_READONLY leaves the transaction open: the writer must roll it back itself.
        storage_fault_mid_batch(|conn| {
            conn.execute_batch("PRAGMA query_only = 1")?;
            conn.execute("INSERT INTO meta (key, value) VALUES ('job-refused', 'v')", [])?;
            Ok(())
        });
    }

    #[test]
    fn a_panicking_job_fails_alone() {
        let bus = Arc::new(Bus::new(crate::bus::test_frame));
        let (a, a_reply) = insert("job-a", GateId::mint(), Ok(()));
        let (boom, boom_reply) = Job::new(|conn, _| -> Result<(), StoreError> {
            conn.execute("INSERT INTO meta (key, value) VALUES ('job-boom', 'v')", [])?;
            panic!("a bug in a job");
        });
        let (c, c_reply) = insert("job-c", GateId::mint(), Ok(()));
        let (_dir, path) = run_one_batch(vec![a, boom, c], &bus);

        assert!(matches!(a_reply.blocking_recv().unwrap(), Ok(())));
        assert!(boom_reply.blocking_recv().is_err(), "the panicked job's caller sees no reply");
        assert!(matches!(c_reply.blocking_recv().unwrap(), Ok(())));
        assert_eq!(stored_keys(&path), ["job-a", "job-c"]);
    }
}
