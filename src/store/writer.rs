//! The one writer thread. It owns the only write connection; every journal, gate and inbox write
//! is a job sent to it over a bounded channel and run inside `BEGIN IMMEDIATE`.
//!
//! Jobs that are already queued when a transaction starts run in the same transaction (group
//! commit), each inside its own SAVEPOINT so a failing job rolls back alone. Side effects of a job
//! (doorbell, keyed wake-ups) are buffered and published only after COMMIT returned Ok, in order,
//! and only then do the replies go out: nothing is observable before it is durable.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rusqlite::Connection;
use tokio::sync::{mpsc, oneshot};

use super::StoreError;
use crate::bus::{Bus, Effect};
use crate::domain::Timestamp;

/// How many queued jobs one transaction may take.
const MAX_BATCH: usize = 256;
/// How often an unhealthy writer probes the database with a tiny real write.
const PROBE_INTERVAL: Duration = Duration::from_secs(1);

/// A test-only pause just before COMMIT (spec §13, the commit barrier).
pub type BeforeCommit = Arc<dyn Fn() + Send + Sync>;

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
    ok: bool,
    /// The job failed on storage trouble (not on a broken invariant): the writer is unhealthy.
    storage_failed: bool,
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
            ok: result.is_ok(),
            storage_failed: matches!(result, Err(StoreError::Unavailable(_))),
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

pub(super) enum Msg {
    Job(Job),
    /// Drain what is queued, checkpoint, close, then acknowledge.
    Shutdown(oneshot::Sender<()>),
}

/// Shared view of the writer's health, for `/readyz`.
#[derive(Debug)]
pub struct Health(AtomicBool);

impl Default for Health {
    /// Healthy until a write fails.
    fn default() -> Self {
        Self(AtomicBool::new(true))
    }
}

impl Health {
    pub fn is_healthy(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    fn set(&self, healthy: bool) {
        if self.0.swap(healthy, Ordering::Relaxed) != healthy {
            if healthy {
                tracing::info!("storage healthy again");
            } else {
                tracing::error!("storage unhealthy; writes fail with 503 until a probe write succeeds");
            }
        }
    }
}

pub(super) struct Writer {
    pub conn: Connection,
    pub rx: mpsc::Receiver<Msg>,
    pub bus: Arc<Bus>,
    pub health: Arc<Health>,
    pub before_commit: Option<BeforeCommit>,
    pub runtime: tokio::runtime::Handle,
}

impl Writer {
    /// The thread body: runs until shutdown or until every sender is gone.
    pub fn run(mut self) {
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
                    let mut batch = vec![job];
                    let mut shutdown = None;
                    while batch.len() < MAX_BATCH {
                        match self.rx.try_recv() {
                            Ok(Msg::Job(job)) => batch.push(job),
                            Ok(Msg::Shutdown(ack)) => {
                                shutdown = Some(ack);
                                break;
                            }
                            Err(_) => break,
                        }
                    }
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
        if let Err(e) = self.conn.execute_batch("BEGIN IMMEDIATE") {
            return self.fail(Vec::new(), batch, e);
        }
        let mut done: Vec<Ran> = Vec::with_capacity(batch.len());
        let mut jobs = batch.into_iter();
        while let Some(Job(job)) = jobs.next() {
            if let Err(e) = self.conn.execute_batch("SAVEPOINT job") {
                return self.fail(done, std::iter::once(Job(job)).chain(jobs).collect(), e);
            }
            let mut ran = job.run(&self.conn);
            if self.conn.is_autocommit() {
                // SQLite rolled back the whole transaction (e.g. SQLITE_FULL): every job of the
                // batch is lost, this one included. Never run SAVEPOINT outside BEGIN IMMEDIATE.
                done.push(ran);
                let e = rusqlite::Error::SqliteFailure(
                    rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_ABORT),
                    Some("transaction rolled back by SQLite".into()),
                );
                return self.fail(done, jobs.collect(), e);
            }
            let end = if ran.ok { "RELEASE job" } else { "ROLLBACK TO job; RELEASE job" };
            if let Err(e) = self.conn.execute_batch(end) {
                done.push(ran);
                return self.fail(done, jobs.collect(), e);
            }
            if !ran.ok {
                ran.effects.clear();
            }
            done.push(ran);
        }
        if let Some(pause) = &self.before_commit {
            pause();
        }
        match self.conn.execute_batch("COMMIT") {
            Ok(()) => {
                self.health.set(!done.iter().any(|r| r.storage_failed));
                let effects: Vec<Effect> = done.iter_mut().flat_map(|r| r.effects.drain(..)).collect();
                self.bus.publish(effects);
                for ran in done {
                    (ran.reply)(Ok(()));
                }
            }
            // The outcome is unknown to the callers: they retry with the same Idempotency-Key.
            Err(e) => self.fail(done, Vec::new(), e),
        }
    }

    /// The transaction itself failed: roll back, and fail every job of the batch, those that ran
    /// (whatever they returned) and those that never got to run.
    fn fail(&mut self, ran: Vec<Ran>, not_run: Vec<Job>, e: rusqlite::Error) {
        if !self.conn.is_autocommit() {
            let _ = self.conn.execute_batch("ROLLBACK");
        }
        tracing::error!(error = %e, jobs = ran.len() + not_run.len(), "write transaction failed");
        let err = StoreError::from(e);
        if matches!(err, StoreError::Unavailable(_)) {
            self.health.set(false);
        }
        for r in ran {
            (r.reply)(Err(err.clone()));
        }
        for Job(job) in not_run {
            job.fail(err.clone());
        }
    }

    /// A tiny real write, to find out whether storage recovered.
    fn probe(&mut self) {
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
        self.rx.close();
        let mut rest = Vec::new();
        while let Ok(msg) = self.rx.try_recv() {
            match msg {
                Msg::Job(job) => rest.push(job),
                Msg::Shutdown(other) => {
                    let _ = other.send(());
                }
            }
        }
        if !rest.is_empty() {
            self.commit_batch(rest);
        }
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
