//! Deadlines (spec §8): one task (per replica) holds every armed deadline in a heap and, when
//! gates fall due, answers them with their policy's template through the writer (the same claim
//! as a person's, so the first commit wins, and a deadline fires once however many replicas try).
//! Deadlines are armed only after the open commits and dropped after the resolution commits (both
//! arrive as `DeadlineChange`s from the bus, which on PostgreSQL carries every replica's commits);
//! a claim that fails on storage trouble is retried with backoff, never dropped.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::bus::{Bus, DeadlineChange};
use crate::common::backoff::Backoff;
use crate::domain::{GateId, Timestamp};
use crate::metrics::Metrics;
use crate::store::{Expiry, Store, StoreError};

/// How many due gates one writer job answers.
const BATCH: usize = 256;
/// Retry delays after a failed claim: at random up to 1 s, 2 s, 4 s, … at most 30 s.
const FIRST_RETRY: Duration = Duration::from_secs(1);
const LAST_RETRY: Duration = Duration::from_secs(30);
/// How soon a gate that was busy elsewhere (or not yet due by the database's clock) is tried again.
const BUSY: Duration = Duration::from_secs(1);
/// The longest the timer sleeps without looking at the wall clock again.
const WALL_CHECK: Duration = Duration::from_secs(30);

/// How many deadlines are armed right now (a counter tests read through `TestHooks::armed`).
#[derive(Debug, Default)]
pub struct Armed(AtomicUsize);

impl Armed {
    pub fn get(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }
}

/// Resolves every overdue gate through the writer, then returns the timer task for the rest (to
/// run under supervision). Called before the listener serves its first request.
pub async fn start(
    store: &Store,
    bus: &Bus,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
) -> Result<(Arc<Armed>, impl Future<Output = ()> + Send + 'static), StoreError> {
    let feed = bus.take_deadline_feed().expect("one timer task per bus");
    let mut timer = Timer {
        store: store.clone(),
        metrics,
        heap: BinaryHeap::new(),
        armed: HashMap::new(),
        retries: HashMap::new(),
        count: Arc::default(),
    };
    for (gate, at) in store.deadlines().await? {
        timer.arm(gate, at);
    }
    let overdue = timer.due(Timestamp::now());
    if !overdue.is_empty() {
        tracing::info!(gates = overdue.len(), "answering gates whose deadline passed while the server was down");
        timer.fire(overdue).await;
    }
    let count = Arc::clone(&timer.count);
    Ok((count, timer.run(feed, shutdown)))
}

struct Timer {
    store: Store,
    metrics: Arc<Metrics>,
    /// (deadline, gate); entries whose gate is no longer armed at that deadline are stale.
    heap: BinaryHeap<Reverse<(Timestamp, GateId)>>,
    armed: HashMap<GateId, Timestamp>,
    /// Failed claims so far, per gate, for the backoff.
    retries: HashMap<GateId, Backoff>,
    count: Arc<Armed>,
}

impl Timer {
    async fn run(mut self, mut feed: mpsc::UnboundedReceiver<DeadlineChange>, shutdown: CancellationToken) {
        loop {
            let next = self.next_deadline();
            tokio::select! {
                change = feed.recv() => match change {
                    Some(DeadlineChange::Armed(gate, at)) => self.arm(gate, at),
                    Some(DeadlineChange::Settled(gate)) => self.disarm(gate),
                    None => return,
                },
                () = sleep_until_wall(next), if next.is_some() => {
                    let due = self.due(Timestamp::now());
                    self.fire(due).await;
                }
                () = shutdown.cancelled() => return,
            }
        }
    }

    fn arm(&mut self, gate: GateId, at: Timestamp) {
        self.armed.insert(gate, at);
        self.heap.push(Reverse((at, gate)));
        self.count.0.store(self.armed.len(), Ordering::Relaxed);
    }

    fn disarm(&mut self, gate: GateId) {
        if self.armed.remove(&gate).is_some() {
            self.retries.remove(&gate);
            self.count.0.store(self.armed.len(), Ordering::Relaxed);
        }
        // Answered gates leave their heap entries behind; drop them before they pile up (a
        // deadline may be days away).
        if self.heap.len() > 2 * self.armed.len() + 64 {
            let armed = &self.armed;
            self.heap.retain(|Reverse((at, gate))| armed.get(gate) == Some(at));
        }
    }

    /// The soonest live deadline (stale heap entries are dropped on the way).
    fn next_deadline(&mut self) -> Option<Timestamp> {
        while let Some(Reverse((at, gate))) = self.heap.peek().copied() {
            if self.armed.get(&gate) == Some(&at) {
                return Some(at);
            }
            self.heap.pop();
        }
        None
    }

    /// Takes the gates due at `now` off the heap (they stay armed until their claim commits).
    fn due(&mut self, now: Timestamp) -> Vec<GateId> {
        let mut due = Vec::new();
        while let Some(at) = self.next_deadline().filter(|at| *at <= now) {
            let Reverse((_, gate)) = self.heap.pop().expect("peeked");
            due.push(gate);
            debug_assert!(self.armed.get(&gate) == Some(&at));
        }
        due
    }

    /// Answers due gates in batches. A gate whose claim committed (or was moot) is disarmed; one
    /// that failed (its whole batch on storage trouble, or itself alone) is re-armed later.
    async fn fire(&mut self, due: Vec<GateId>) {
        for batch in due.chunks(BATCH) {
            match self.store.expire_gates(batch.to_vec()).await {
                Ok(outcomes) => {
                    for (gate, outcome) in batch.iter().zip(outcomes) {
                        self.metrics.timer_fired(outcome.name());
                        if matches!(outcome, Expiry::Answered(_)) {
                            self.metrics.gate_resolved("policy_response");
                        }
                        match outcome {
                            Expiry::Answered(seq) => {
                                tracing::info!(gate_id = %gate, journal_seq = seq, "answered by its timeout policy");
                                self.disarm(*gate);
                            }
                            Expiry::Moot => self.disarm(*gate),
                            // Not due by the database's clock yet, or another replica is
                            // claiming it: look again in a second (the claim decides anyway).
                            Expiry::Busy => self.arm(*gate, Timestamp::now().plus_nanos(BUSY.as_nanos() as i64)),
                            Expiry::Failed(cause) => self.retry(*gate, &cause),
                        }
                    }
                }
                Err(e) => batch.iter().for_each(|gate| {
                    self.metrics.timer_fired("failed");
                    self.retry(*gate, &e.to_string());
                }),
            }
        }
    }

    /// Re-arms a gate whose timeout answer failed: at random up to 1 s, 2 s, 4 s, … at most 30 s
    /// later.
    fn retry(&mut self, gate: GateId, cause: &str) {
        let delay = self.retries.entry(gate).or_insert_with(|| Backoff::new(FIRST_RETRY, LAST_RETRY)).next_delay();
        tracing::warn!(gate_id = %gate, %cause, ?delay, "a timeout answer failed; retrying");
        self.arm(gate, Timestamp::now().plus_nanos(delay.as_nanos() as i64));
    }
}

/// Sleeps until a wall-clock instant (deadlines are wall clock, stored as nanoseconds), in steps
/// of at most `WALL_CHECK`: the monotonic clock tokio sleeps on stops while the host is
/// suspended and ignores clock steps, so the wall clock is looked at again now and then.
async fn sleep_until_wall(at: Option<Timestamp>) {
    let Some(at) = at else { return std::future::pending().await };
    let wait = Duration::from_nanos(at.as_nanos().saturating_sub(Timestamp::now().as_nanos()).max(0) as u64);
    tokio::time::sleep_until(Instant::now() + wait.min(WALL_CHECK)).await;
}
