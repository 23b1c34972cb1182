//! The follower of one replica: the only thing that feeds its bus. It reads the journal rows
//! committed after the last one it published, from every replica alike, and publishes them in
//! seq order: frames into the ring and the head forward, and the wake-ups the rows imply (a
//! resolution wakes its gate's long-polls and disarms its deadline; one that enqueued a command
//! wakes that loop's inbox waiters; an opened gate with a policy deadline arms the timer).
//!
//! It reads when woken: by a NOTIFY from any replica's writer (a dedicated `LISTEN` connection),
//! by this replica's own writer right after a commit, and every second regardless, since a NOTIFY
//! sent while the listener was reconnecting is lost. Because seq order is commit order, a read of
//! `seq > head` returns every row up to the newest visible one: there are no gaps to wait for.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use deadpool_postgres::Pool;
use futures_util::StreamExt;
use tokio::sync::Notify;
use tokio_postgres::{AsyncMessage, NoTls};
use tokio_util::sync::CancellationToken;

use super::{CHANNEL, classify, uuid_column};
use crate::bus::{Bus, Effect};
use crate::common::backoff::Backoff;
use crate::domain::{GateId, SessionId, Timestamp};
use crate::store::StoreError;
use crate::store::model::stored_loop;

/// Rows read per query.
const BATCH: i64 = 1024;
/// The longest a commit of another replica waits to be seen when its NOTIFY was lost.
const POLL: Duration = Duration::from_secs(1);

pub(super) struct Follower {
    pub pool: Pool,
    pub listen: tokio_postgres::Config,
    pub bus: Arc<Bus>,
    /// The newest seq published.
    pub head: i64,
    /// Rung by this replica's writer after a commit, and by the listener on a NOTIFY.
    pub wake: Arc<Notify>,
    /// Whether the last read worked (part of readiness).
    pub reading: Arc<AtomicBool>,
    pub shutdown: CancellationToken,
}

impl Follower {
    /// Runs until shutdown.
    pub async fn run(mut self) {
        let listener = tokio::spawn(listen(self.listen.clone(), Arc::clone(&self.wake), self.shutdown.clone()));
        let mut trouble = Backoff::new(Duration::from_millis(100), Duration::from_secs(5));
        loop {
            match self.catch_up().await {
                Ok(()) => {
                    trouble.reset();
                    if !self.reading.swap(true, Ordering::Relaxed) {
                        tracing::info!("the journal follower reads again");
                    }
                }
                // Shutting down closes the pool under a read: not a failure.
                Err(_) if self.shutdown.is_cancelled() => break,
                Err(e) => {
                    if self.reading.swap(false, Ordering::Relaxed) {
                        tracing::error!(error = %e, "the journal follower cannot read the journal; retrying");
                    }
                    tokio::select! {
                        () = tokio::time::sleep(trouble.next_delay()) => continue,
                        () = self.shutdown.cancelled() => break,
                    }
                }
            }
            tokio::select! {
                () = self.wake.notified() => {}
                () = tokio::time::sleep(POLL) => {}
                () = self.shutdown.cancelled() => break,
            }
        }
        listener.abort();
    }

    /// Publishes every row committed after `head`, in order.
    async fn catch_up(&mut self) -> Result<(), StoreError> {
        let conn = self.pool.get().await.map_err(super::pool_error)?;
        let stmt = conn
            .prepare_cached(
                "SELECT seq, session_id, gate_id, type, loop_id, respond_at, event FROM journal
                 WHERE seq > $1 ORDER BY seq LIMIT $2",
            )
            .await
            .map_err(classify)?;
        loop {
            let rows = conn.query(&stmt, &[&self.head, &BATCH]).await.map_err(classify)?;
            let Some(last) = rows.last().map(|r| r.get::<_, i64>(0)) else { return Ok(()) };
            let mut effects = Vec::with_capacity(rows.len() * 2);
            for row in &rows {
                let seq: i64 = row.get(0);
                let session = uuid_column(row, 1, SessionId::from_uuid)?;
                let kind: &str = row.get(3);
                effects.push(Effect::Journal { seq, session, event: row.get(6) });
                let gate = row.get::<_, Option<uuid::Uuid>>(2).map(GateId::from_uuid).transpose();
                let gate = gate.map_err(|e| StoreError::Internal(format!("stored gate id: {e}")))?;
                match (kind, gate) {
                    ("GateResolved", Some(gate)) => {
                        effects.push(Effect::Gate(gate));
                        // A host-owned gate has no loop to wake (and names none).
                        if let Some(raw) = row.get::<_, Option<uuid::Uuid>>(4)
                            && let Some(loop_id) =
                                stored_loop(raw).map_err(|e| StoreError::Internal(format!("stored loop id: {e}")))?
                        {
                            effects.push(Effect::Inbox(session, loop_id));
                        }
                    }
                    ("GateOpened", Some(gate)) => {
                        if let Some(at) = row.get::<_, Option<i64>>(5) {
                            effects.push(Effect::Deadline(gate, Timestamp::from_nanos(at)));
                        }
                    }
                    _ => {}
                }
            }
            self.bus.publish(effects);
            self.head = last;
            if (rows.len() as i64) < BATCH {
                return Ok(());
            }
        }
    }
}

/// Keeps a `LISTEN` connection open and rings `wake` on every notification; reconnects (and
/// rings once, to catch up on what it missed) when the connection is lost.
async fn listen(config: tokio_postgres::Config, wake: Arc<Notify>, shutdown: CancellationToken) {
    let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(5));
    loop {
        let listened = tokio::select! {
            listened = listen_once(&config, &wake, &mut backoff) => listened,
            () = shutdown.cancelled() => return,
        };
        if let Err(e) = listened {
            tracing::warn!(error = %crate::common::innermost_cause(&e), "the journal listener lost its connection; reconnecting");
        }
        tokio::select! {
            () = tokio::time::sleep(backoff.next_delay()) => {}
            () = shutdown.cancelled() => return,
        }
    }
}

async fn listen_once(
    config: &tokio_postgres::Config,
    wake: &Arc<Notify>,
    backoff: &mut Backoff,
) -> Result<(), tokio_postgres::Error> {
    let (client, mut connection) = config.connect(NoTls).await?;
    let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
    let statement = format!("LISTEN {CHANNEL}");
    {
        let listening = client.batch_execute(&statement);
        tokio::pin!(listening);
        // The connection only makes progress while its messages are polled, LISTEN included.
        loop {
            tokio::select! {
                done = &mut listening => {
                    done?;
                    break;
                }
                message = messages.next() => match message {
                    Some(Ok(_)) => {}
                    Some(Err(e)) => return Err(e),
                    None => return Ok(()),
                },
            }
        }
    }
    backoff.reset();
    // Whatever was committed while nobody listened.
    wake.notify_one();
    while let Some(message) = messages.next().await {
        if let AsyncMessage::Notification(_) = message? {
            wake.notify_one();
        }
    }
    // Kept until here: dropping the client would end the session.
    drop(client);
    Ok(())
}
