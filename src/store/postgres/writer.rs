//! The writer of one replica: a task that owns one connection and runs every journal-writing job
//! (open, answer, close, expire) in batches, one transaction each, with group commit as on
//! SQLite: the jobs that queue while one transaction commits make up the next.
//!
//! **Order across replicas.** A batch that writes the journal first takes a transaction-scoped
//! advisory lock (the *ordering lock*), then draws its seqs. PostgreSQL makes a transaction visible
//! before it releases its locks, so a batch that draws seqs after another released the lock draws
//! higher ones and becomes visible later: seq order is commit order, across every replica, and a
//! reader resuming after seq N never meets a row committed later below N. Taking the lock first
//! (not just before COMMIT) also makes a re-ask and the open-gate cap race-free across replicas,
//! with the same read-then-write steps as SQLite. The price: journal-writing batches of all
//! replicas run one at a time, as SQLite's writer does within one process.
//!
//! **No savepoints.** PostgreSQL aborts the whole transaction on any error, and savepoints past 64
//! per transaction slow the whole cluster down. A job that fails on its own (a bug, damaged data)
//! rolls its batch back; it fails alone and the others run again in a new transaction. Storage
//! trouble (a lost connection, a read-only or full database) fails the whole batch with a
//! retryable error; after a failed COMMIT the outcome is unknown (retry with the same
//! `Idempotency-Key`).
//!
//! After COMMIT: the replies go out, the local follower is nudged, and other replicas' followers
//! are woken with a NOTIFY sent on its own (NOTIFY inside the transaction would hold PostgreSQL's
//! cluster-wide notify lock across the commit's flush). Nothing reaches the bus from here: the
//! followers read what was committed.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Object, Pool};
use futures_util::FutureExt;
use tokio::sync::{Notify, mpsc, oneshot};

use super::{CHANNEL, LOCK_CLASS, LOCK_ORDER, classify};
use crate::metrics::WriterMetrics;
use crate::store::queue::{self, drain_batch};
use crate::store::{Health, StoreError};

/// How many queued jobs one transaction may take.
const MAX_BATCH: usize = 256;
/// How many write jobs may queue before senders wait.
const QUEUE_DEPTH: usize = 1024;
/// How often an unhealthy writer tries the database again.
const PROBE_INTERVAL: Duration = Duration::from_secs(1);
/// Session settings of the writer's connection: a replica frozen while it holds the ordering lock
/// (a stopped process, a partition) must not stall the others for long.
const SESSION: &str = "SET idle_in_transaction_session_timeout = '10s'; SET lock_timeout = '10s'";

pub(super) type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A test-only pause just before COMMIT, given the number of jobs in the batch (the commit
/// barrier, and the two-writer ordering test).
pub type PgBeforeCommit = Arc<dyn Fn(usize) -> BoxFuture<'static, ()> + Send + Sync>;

/// The connection jobs run on (a pooled client, with its statement cache).
pub(super) type Conn = deadpool_postgres::ClientWrapper;

/// A unit of work: runs inside the writer's transaction, perhaps more than once (when another job
/// of its batch failed, the batch runs again without that one), then learns whether it committed.
/// An `independent` job (an answer's claim: one statement, then a read when it lost) may be sent
/// down the connection together with its independent neighbours, without waiting for theirs to
/// come back (pipelined): PostgreSQL still runs their statements one after another, so each sees
/// what the ones before it wrote, and a lost race reads the winner afterwards.
pub(super) struct Job {
    work: Box<dyn Work>,
    independent: bool,
}

trait Work: Send {
    /// Runs the job, keeping its result for the reply.
    fn run<'a>(&'a mut self, conn: &'a Conn) -> BoxFuture<'a, Result<(), StoreError>>;
    /// Answers the caller once the transaction is decided.
    fn reply(self: Box<Self>, committed: Result<(), StoreError>);
}

struct Typed<T, F> {
    work: F,
    result: Option<Result<T, StoreError>>,
    tx: oneshot::Sender<Result<T, StoreError>>,
}

impl<T, F> Work for Typed<T, F>
where
    T: Send + 'static,
    F: for<'c> Fn(&'c Conn) -> BoxFuture<'c, Result<T, StoreError>> + Send + 'static,
{
    fn run<'a>(&'a mut self, conn: &'a Conn) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            // A panicking job must not take the writer down: it fails alone.
            let result = std::panic::AssertUnwindSafe((self.work)(conn)).catch_unwind().await.unwrap_or_else(|_| {
                tracing::error!("a write job panicked; its batch was rolled back");
                Err(StoreError::Internal("panicked".into()))
            });
            let failure = result.as_ref().err().cloned();
            self.result = Some(result);
            failure.map_or(Ok(()), Err)
        })
    }

    fn reply(self: Box<Self>, committed: Result<(), StoreError>) {
        let result = match (committed, self.result) {
            (Ok(()), Some(result)) => result,
            (Err(e), _) => Err(e),
            (Ok(()), None) => Err(StoreError::Internal("a job was committed without running".into())),
        };
        // The caller may have gone away (client disconnect); the work is done anyway.
        let _ = self.tx.send(result);
    }
}

impl Job {
    /// Wraps a job; the receiver yields its result once its transaction is decided.
    fn new<T, F>(work: F, independent: bool) -> (Self, oneshot::Receiver<Result<T, StoreError>>)
    where
        T: Send + 'static,
        F: for<'c> Fn(&'c Conn) -> BoxFuture<'c, Result<T, StoreError>> + Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        (Self { work: Box::new(Typed { work, result: None, tx }), independent }, rx)
    }

    fn fail(self, e: StoreError) {
        self.work.reply(Err(e));
    }
}

/// What the writer's queue carries.
pub(super) type Msg = queue::Msg<Job>;

/// The handle requests send jobs through.
#[derive(Clone)]
pub(super) struct WriterHandle {
    jobs: mpsc::Sender<Msg>,
}

impl WriterHandle {
    /// Runs `work` in the writer's next transaction and waits until that transaction is decided.
    pub async fn write<T, F>(&self, work: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: for<'c> Fn(&'c Conn) -> BoxFuture<'c, Result<T, StoreError>> + Send + 'static,
    {
        self.send(Job::new(work, false)).await
    }

    /// Like `write`, for an independent job (see `Job`), which may be pipelined with others.
    pub async fn write_independent<T, F>(&self, work: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: for<'c> Fn(&'c Conn) -> BoxFuture<'c, Result<T, StoreError>> + Send + 'static,
    {
        self.send(Job::new(work, true)).await
    }

    async fn send<T>(&self, (job, reply): (Job, oneshot::Receiver<Result<T, StoreError>>)) -> Result<T, StoreError> {
        self.jobs.send(Msg::Job(job)).await.map_err(|_| StoreError::Unavailable("the writer has stopped".into()))?;
        reply.await.map_err(|_| StoreError::Internal("a write job ended without a reply".into()))?
    }

    /// Jobs waiting for the writer.
    pub fn queue_depth(&self) -> usize {
        self.jobs.max_capacity() - self.jobs.capacity()
    }

    /// Drains the queue and stops the writer.
    pub async fn shutdown(&self) {
        let (ack, done) = oneshot::channel();
        if self.jobs.send(Msg::Shutdown(ack)).await.is_ok() {
            let _ = done.await;
        }
    }
}

pub(super) struct Writer {
    pool: Pool,
    conn: Option<Object>,
    rx: mpsc::Receiver<Msg>,
    health: Arc<Health>,
    /// Wakes this replica's follower after a commit.
    committed: Arc<Notify>,
    before_commit: Option<PgBeforeCommit>,
    /// Off only in the ordering test's negative control.
    order_lock: bool,
    metrics: Arc<WriterMetrics>,
}

impl Writer {
    pub fn new(
        pool: Pool,
        health: Arc<Health>,
        committed: Arc<Notify>,
        before_commit: Option<PgBeforeCommit>,
        order_lock: bool,
        metrics: Arc<WriterMetrics>,
    ) -> (Self, WriterHandle) {
        let (jobs, rx) = mpsc::channel(QUEUE_DEPTH);
        let writer = Self { pool, conn: None, rx, health, committed, before_commit, order_lock, metrics };
        (writer, WriterHandle { jobs })
    }

    /// The task: runs until shutdown, or until every handle is gone.
    pub async fn run(mut self) {
        let ack = loop {
            let msg = if self.health.is_healthy() {
                self.rx.recv().await
            } else {
                match tokio::time::timeout(PROBE_INTERVAL, self.rx.recv()).await {
                    Ok(msg) => msg,
                    Err(_elapsed) => {
                        self.probe().await;
                        continue;
                    }
                }
            };
            match msg {
                Some(Msg::Job(job)) => {
                    let (batch, shutdown) = drain_batch(job, &mut self.rx, MAX_BATCH);
                    self.commit_batch(batch).await;
                    if let Some(ack) = shutdown {
                        break Some(ack);
                    }
                }
                Some(Msg::Shutdown(ack)) => break Some(ack),
                None => break None,
            }
        };
        let rest = queue::close(&mut self.rx);
        if !rest.is_empty() {
            self.commit_batch(rest).await;
        }
        tracing::info!("writer stopped");
        if let Some(ack) = ack {
            let _ = ack.send(());
        }
    }

    /// The writer's connection, (re)connecting when it has none or lost it.
    async fn connection(&mut self) -> Result<&Object, StoreError> {
        if self.conn.as_ref().is_some_and(|c| c.is_closed()) {
            self.conn = None;
        }
        if self.conn.is_none() {
            let conn = self.pool.get().await.map_err(super::pool_error)?;
            conn.batch_execute(SESSION).await.map_err(classify)?;
            self.conn = Some(conn);
        }
        Ok(self.conn.as_ref().expect("connected above"))
    }

    /// Runs a batch in one transaction; a job that fails on its own is taken out and the rest run
    /// again.
    async fn commit_batch(&mut self, mut jobs: Vec<Job>) {
        while !jobs.is_empty() {
            let started = std::time::Instant::now();
            match self.attempt(&mut jobs).await {
                Attempt::Committed => {
                    self.health.set(true);
                    self.metrics.committed(jobs.len(), started.elapsed());
                    for job in jobs.drain(..) {
                        job.work.reply(Ok(()));
                    }
                    self.announce().await;
                    return;
                }
                Attempt::JobFailed(index, e) => {
                    tracing::warn!(error = %e, "a write job failed; its batch runs again without it");
                    jobs.remove(index).fail(e);
                }
                Attempt::StorageFailed(cause) => {
                    tracing::error!(%cause, jobs = jobs.len(), "write transaction failed");
                    self.metrics.storage_error();
                    // The connection may be broken: the next batch takes a fresh one.
                    self.conn = None;
                    self.health.set(false);
                    let e = StoreError::Unavailable(cause);
                    for job in jobs.drain(..) {
                        job.fail(e.clone());
                    }
                    return;
                }
            }
        }
    }

    async fn attempt(&mut self, jobs: &mut [Job]) -> Attempt {
        let order_lock = self.order_lock;
        let before_commit = self.before_commit.clone();
        let conn = match self.connection().await {
            Ok(conn) => conn,
            Err(e) => return Attempt::StorageFailed(e.to_string()),
        };
        if let Err(e) = conn.batch_execute("BEGIN").await {
            return Attempt::StorageFailed(format!("BEGIN failed: {e}"));
        }
        if order_lock && let Err(e) = lock_order(conn).await {
            let _ = conn.batch_execute("ROLLBACK").await;
            return Attempt::StorageFailed(format!("the ordering lock was not granted: {e}"));
        }
        let mut start = 0;
        while start < jobs.len() {
            // A run of independent jobs goes down the connection at once; any other job alone.
            let end = if jobs[start].independent {
                start + jobs[start..].iter().take_while(|job| job.independent).count()
            } else {
                start + 1
            };
            let results =
                futures_util::future::join_all(jobs[start..end].iter_mut().map(|job| job.work.run(conn))).await;
            if let Some(failed) = first_failure(start, results) {
                let _ = conn.batch_execute("ROLLBACK").await;
                return failed;
            }
            start = end;
        }
        if let Some(pause) = before_commit {
            pause(jobs.len()).await;
        }
        match conn.batch_execute("COMMIT").await {
            Ok(()) => Attempt::Committed,
            // The outcome is unknown to the callers: they retry with the same Idempotency-Key.
            Err(e) => Attempt::StorageFailed(format!("COMMIT failed (outcome unknown): {e}")),
        }
    }

    /// Wakes this replica's follower at once, and the others' with a NOTIFY (if it is lost, they
    /// find the rows within their poll interval).
    async fn announce(&mut self) {
        self.committed.notify_one();
        if let Some(conn) = &self.conn
            && let Err(e) = notify(conn).await
        {
            tracing::debug!(error = %e, "NOTIFY after a commit failed; other replicas poll");
        }
    }

    /// A tiny real statement, to find out whether storage recovered.
    async fn probe(&mut self) {
        let probed = match self.connection().await {
            Ok(conn) => conn.batch_execute("SELECT 1").await.map_err(classify),
            Err(e) => Err(e),
        };
        match probed {
            Ok(()) => self.health.set(true),
            Err(e) => {
                self.conn = None;
                tracing::warn!(error = %e, "storage probe failed");
            }
        }
    }
}

/// What failed first among the results of jobs `start..`: storage trouble fails the batch; else
/// the first job that failed on its own (the jobs pipelined after it fail only because the
/// transaction was aborted: they run again without it).
fn first_failure(start: usize, results: Vec<Result<(), StoreError>>) -> Option<Attempt> {
    let mut failed = None;
    for (offset, result) in results.into_iter().enumerate() {
        match result {
            Ok(()) => {}
            Err(StoreError::Unavailable(cause)) => return Some(Attempt::StorageFailed(cause)),
            Err(internal) => {
                failed.get_or_insert(Attempt::JobFailed(start + offset, internal));
            }
        }
    }
    failed
}

/// Takes the ordering lock (statements prepared once per connection, like every other).
async fn lock_order(conn: &Conn) -> Result<(), tokio_postgres::Error> {
    let stmt = conn.prepare_cached("SELECT pg_advisory_xact_lock($1, $2)").await?;
    conn.execute(&stmt, &[&LOCK_CLASS, &LOCK_ORDER]).await.map(drop)
}

/// Wakes the other replicas' followers.
async fn notify(conn: &Conn) -> Result<(), tokio_postgres::Error> {
    let stmt = conn.prepare_cached("SELECT pg_notify($1, '')").await?;
    conn.execute(&stmt, &[&CHANNEL]).await.map(drop)
}

enum Attempt {
    Committed,
    /// This job failed on its own terms; the transaction was rolled back.
    JobFailed(usize, StoreError),
    /// The transaction itself failed; nothing of it committed (or, after COMMIT, unknown).
    StorageFailed(String),
}
