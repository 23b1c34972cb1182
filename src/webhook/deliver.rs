//! Outbound notifications (spec §9): one task per endpoint follows the journal in order and POSTs
//! each event, signed per Standard Webhooks. An endpoint's cursor moves only past an event that
//! was delivered or given up on (dead letter), so a crash never loses a delivery; failures are
//! retried on a schedule with jitter; a 410 disables the endpoint until an operator re-enables it.
//! At shutdown a task finishes the request it is in and records its outcome (the server waits
//! for it up to its shutdown grace), so a restart does not send it again; it starts no new one.
//!
//! Every replica runs a task per endpoint, but only the holder of the endpoint's lease delivers:
//! it renews the lease while it works, and every write of the delivery state names the lease, so
//! a replica that paused past its lease cannot move the cursor once another took over. Takeover
//! re-sends at most the event in flight (same `webhook-id`; receivers de-duplicate by it). On
//! SQLite the one process always holds the lease.

use std::time::Duration;

use serde::Deserialize;
use serde_json::value::RawValue;
use tokio_util::sync::CancellationToken;

use crate::bus::Bus;
use crate::common::backoff::{Backoff, random_up_to};
use crate::common::innermost_cause;
use crate::common::redact::display_url;
use crate::common::signature::{self as sign, Secret};
use crate::domain::{GateId, GateOpened, ServerKey, Timestamp};
use crate::store::{Attempt, JournalRange, Lease, PageLimit, Pending, Store, StoreError};

/// The default retry schedule: about 5 s, 5 min, 30 min, 2 h, 6 h, 12 h and a day.
pub const DEFAULT_SCHEDULE: &[Duration] = &[
    Duration::from_secs(5),
    Duration::from_secs(5 * 60),
    Duration::from_secs(30 * 60),
    Duration::from_secs(2 * 3600),
    Duration::from_secs(6 * 3600),
    Duration::from_secs(12 * 3600),
    Duration::from_secs(24 * 3600),
];

/// What every delivery task shares.
#[derive(Clone)]
pub struct Delivery {
    pub store: Store,
    pub bus: std::sync::Arc<Bus>,
    /// Who this replica is, as the owner of endpoint leases.
    pub replica: String,
    /// How long a lease lasts without renewal (the holder renews it four times as often).
    pub lease: Duration,
    pub http: reqwest::Client,
    /// Waits after the 1st, 2nd, … failed attempt; after the last, the event is a dead letter.
    pub schedule: Vec<Duration>,
    /// Base of answer links (`{public_url}/v1/answers/{token}`).
    pub public_url: String,
    pub key: std::sync::Arc<ServerKey>,
    pub metrics: std::sync::Arc<crate::metrics::Metrics>,
    pub shutdown: CancellationToken,
}

/// The parts of an event a delivery needs.
#[derive(Deserialize)]
struct EventHead {
    #[serde(rename = "type")]
    kind: String,
    event_id: String,
    #[serde(default)]
    gate: Option<GateHead>,
}

#[derive(Deserialize)]
struct GateHead {
    id: GateId,
}

enum Outcome {
    Delivered,
    Gone,
    Failed(String),
}

impl Outcome {
    /// As the metrics count it.
    fn name(&self) -> &'static str {
        match self {
            Self::Delivered => "delivered",
            Self::Gone => "gone",
            Self::Failed(_) => "failed",
        }
    }
}

/// An endpoint while this replica holds its lease: what it knows of the endpoint's state, so
/// that delivering an event costs one read (the event) and one write (its outcome). Nobody else
/// writes an endpoint's state while its lease is held, and a new lease starts from what is stored.
struct Held {
    lease: Lease,
    /// When the lease was last taken or renewed.
    renewed: tokio::time::Instant,
    /// Every event up to here was delivered or dead-lettered.
    cursor: i64,
    disabled: bool,
    /// The pending attempt at the event after `cursor`, once known (`Some(None)`: none).
    pending: Option<(i64, Option<Pending>)>,
}

impl Delivery {
    /// Follows one endpoint until shutdown, while it holds its lease (and idles once the endpoint
    /// is disabled), signing with the endpoint's `secret`.
    pub async fn run(self, url: String, secret: std::sync::Arc<Secret>) {
        let mut head = self.bus.head();
        // Storage trouble: wait at random up to 1 s, 2 s, 4 s, … at most 30 s before looking again.
        let mut trouble = Backoff::new(Duration::from_secs(1), Duration::from_secs(30));
        let mut held: Option<Held> = None;
        loop {
            if self.shutdown.is_cancelled() {
                break;
            }
            match self.step(&url, &secret, &mut head, &mut held).await {
                Ok(true) => trouble.reset(),
                Ok(false) => {
                    // Disabled (a 410): nothing more until an operator re-enables it at a start.
                    self.shutdown.cancelled().await;
                    break;
                }
                Err(e) => {
                    // What this replica knew may be stale now: the next step reads it again.
                    held = None;
                    let delay = trouble.next_delay();
                    tracing::warn!(url = %display_url(&url), error = %e, ?delay, "webhook delivery could not read or record its state; retrying");
                    self.pause(delay).await;
                }
            }
        }
        if let Some(Held { lease, .. }) = held
            && let Err(e) = self.store.outbox().release(url.clone(), lease).await
        {
            tracing::debug!(url = %display_url(&url), error = %e, "could not give the webhook lease up; it runs out by itself");
        }
    }

    /// The endpoint's lease, taken (with the stored state) or renewed once a quarter of it has
    /// passed; `false` while another replica holds it.
    async fn lease(&self, url: &str, held: &mut Option<Held>) -> Result<bool, StoreError> {
        if held.as_ref().is_some_and(|h| h.renewed.elapsed() < self.lease / 4) {
            return Ok(true);
        }
        match self.store.outbox().lease(url.to_owned(), self.replica.clone(), self.lease).await? {
            Some((lease, endpoint)) => {
                match held {
                    // Renewed: what this replica knows is still the truth.
                    Some(h) if h.lease == lease => h.renewed = tokio::time::Instant::now(),
                    _ => {
                        tracing::info!(url = %display_url(url), epoch = lease.epoch, "this replica delivers to the webhook endpoint");
                        *held = Some(Held {
                            lease,
                            renewed: tokio::time::Instant::now(),
                            cursor: endpoint.cursor,
                            disabled: endpoint.disabled,
                            pending: None,
                        });
                    }
                }
                Ok(true)
            }
            None => {
                if held.take().is_some() {
                    tracing::info!(url = %display_url(url), "another replica took the webhook endpoint over");
                }
                Ok(false)
            }
        }
    }

    /// Delivers (or waits for) the next event. `false` when the endpoint is disabled.
    async fn step(
        &self,
        url: &str,
        secret: &Secret,
        head: &mut tokio::sync::watch::Receiver<i64>,
        held: &mut Option<Held>,
    ) -> Result<bool, StoreError> {
        if !self.lease(url, held).await? {
            // Another replica delivers; look again before its lease could run out.
            self.pause(self.lease / 4).await;
            return Ok(true);
        }
        let state = held.as_mut().expect("held after a granted lease");
        if state.disabled {
            tracing::warn!(url = %display_url(url), "webhook endpoint disabled (it answered 410); --webhook-reenable to resume");
            return Ok(false);
        }
        head.borrow_and_update();
        let one = PageLimit { rows: 1, bytes: usize::MAX };
        let (next, _) = self
            .store
            .journal_range(JournalRange { session: None, after: state.cursor, upto: i64::MAX, page: one })
            .await?;
        let Some((seq, event)) = next.into_iter().next() else {
            // Caught up: wait for the next commit, or renew the lease meanwhile.
            tokio::select! {
                _ = head.changed() => {}
                () = tokio::time::sleep(self.lease / 4) => {}
                () = self.shutdown.cancelled() => {}
            }
            return Ok(true);
        };
        let pending = match state.pending {
            Some((known, pending)) if known == seq => pending,
            _ => self.store.outbox().pending(url.to_owned(), seq).await?,
        };
        state.pending = Some((seq, pending));
        if let Some(due) = pending.map(|p| p.next_at)
            && due > Timestamp::now()
        {
            let wait = Duration::from_nanos((due.as_nanos() - Timestamp::now().as_nanos()).max(0) as u64);
            self.pause(wait).await;
            return Ok(true);
        }
        let attempts = pending.map_or(0, |p| p.attempts);
        if self.shutdown.is_cancelled() {
            return Ok(true);
        }
        let lease = state.lease.clone();
        // Not cancelled by shutdown: a request cut off mid-flight may well have reached the
        // receiver, and the next start would send it again. The server waits for it (up to its
        // shutdown grace, then drops this task: the next start sends it again after all).
        let outcome = self.post(url, secret, seq, &event).await;
        self.metrics.webhook_attempt(outcome.name());
        let recorded = match outcome {
            Outcome::Delivered => {
                let recorded = self.store.outbox().record(url.to_owned(), seq, lease, Attempt::Delivered).await?;
                // Past it; the next event has no attempt yet (only this replica records any).
                (state.cursor, state.pending) = (seq, None);
                recorded
            }
            Outcome::Gone => {
                let why = format!("410 Gone at journal seq {seq}");
                if self.store.outbox().disable(url.to_owned(), why, lease).await? {
                    tracing::warn!(url = %display_url(url), "webhook endpoint answered 410 Gone; disabled");
                    return Ok(false);
                }
                false
            }
            Outcome::Failed(error) => {
                let attempts = attempts + 1;
                match self.schedule.get(attempts as usize - 1) {
                    Some(wait) => {
                        let next_at = Timestamp::now().plus_nanos(jitter(*wait).as_nanos() as i64);
                        tracing::info!(url = %display_url(url), journal_seq = seq, attempts, %error, "webhook delivery failed; will retry");
                        state.pending = Some((seq, Some(Pending { attempts, next_at })));
                        let retry = Attempt::Retry { attempts, next_at, error };
                        self.store.outbox().record(url.to_owned(), seq, lease, retry).await?
                    }
                    None => {
                        tracing::warn!(url = %display_url(url), journal_seq = seq, attempts, %error, "webhook delivery failed for good");
                        self.metrics.webhook_dead_letter();
                        (state.cursor, state.pending) = (seq, None);
                        let dead = Attempt::DeadLetter { attempts, error };
                        self.store.outbox().record(url.to_owned(), seq, lease, dead).await?
                    }
                }
            }
        };
        if !recorded {
            // The lease passed to another replica while this one worked: it delivers from its
            // own view of the cursor now (re-sending this event at most), and this one records
            // nothing more.
            tracing::warn!(url = %display_url(url), journal_seq = seq, "lost the webhook lease mid-delivery; another replica goes on");
            *held = None;
        }
        Ok(true)
    }

    /// One attempt: the exact bytes are rebuilt from the stored event, so a retry is identical.
    async fn post(&self, url: &str, secret: &Secret, seq: i64, event: &str) -> Outcome {
        let Ok(head) = serde_json::from_str::<EventHead>(event) else {
            return Outcome::Failed("the stored event is not readable".into());
        };
        let body = self.body(seq, event, &head);
        let timestamp = Timestamp::now().unix_seconds();
        let signature = sign::sign(secret, &head.event_id, timestamp, body.as_bytes());
        let sent = self
            .http
            .post(url)
            .header("content-type", "application/json")
            .header(sign::HEADER_ID, &head.event_id)
            .header(sign::HEADER_TIMESTAMP, timestamp.to_string())
            .header(sign::HEADER_SIGNATURE, signature)
            .body(body)
            .send()
            .await;
        match sent {
            Ok(response) if response.status().is_success() => Outcome::Delivered,
            Ok(response) if response.status().as_u16() == 410 => Outcome::Gone,
            Ok(response) => Outcome::Failed(format!("HTTP {}", response.status().as_u16())),
            Err(e) => Outcome::Failed(innermost_cause(&e)),
        }
    }

    /// `{"v":1,"journal_seq":N,"event":{…}}`, plus `answer_url` for a `GateOpened`.
    fn body(&self, seq: i64, event: &str, head: &EventHead) -> String {
        let event: &RawValue = serde_json::from_str(event).expect("read above");
        match head.gate.as_ref().filter(|_| head.kind == GateOpened::TYPE) {
            Some(gate) => {
                let token = self.key.link_token(gate.id);
                let answer_url = format!("{}/v1/answers/{token}", self.public_url);
                format!(
                    "{{\"v\":1,\"journal_seq\":{seq},\"event\":{},\"answer_url\":{}}}",
                    event.get(),
                    serde_json::to_string(&answer_url).expect("strings serialise")
                )
            }
            None => format!("{{\"v\":1,\"journal_seq\":{seq},\"event\":{}}}", event.get()),
        }
    }

    async fn pause(&self, wait: Duration) {
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = self.shutdown.cancelled() => {}
        }
    }
}

/// ±20 %, so endpoints that failed together do not retry together. Unlike a `Backoff`, a
/// scheduled retry keeps close to the wait the operator configured.
fn jitter(wait: Duration) -> Duration {
    wait.mul_f64(0.8) + random_up_to(wait.mul_f64(0.4))
}
