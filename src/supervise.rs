//! Background tasks that must run as long as the server does: the timer, the webhook deliveries
//! and, on PostgreSQL, the writer and the journal follower. A task that ends before shutdown (it
//! returned, or panicked) is logged by name and turns readiness off, so a load balancer stops
//! sending requests to a replica that can no longer do its job.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::FutureExt;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// Spawns and watches the background tasks.
pub struct Supervisor {
    tasks: Mutex<JoinSet<()>>,
    failed: Arc<AtomicBool>,
    shutdown: CancellationToken,
}

impl Supervisor {
    /// Tasks are expected to end once `shutdown` is cancelled, and only then.
    pub fn new(shutdown: CancellationToken) -> Self {
        Self { tasks: Mutex::default(), failed: Arc::default(), shutdown }
    }

    /// Runs `task` under watch.
    pub fn spawn(&self, name: &'static str, task: impl Future<Output = ()> + Send + 'static) {
        let (failed, shutdown) = (Arc::clone(&self.failed), self.shutdown.clone());
        self.tasks.lock().expect("tasks").spawn(async move {
            let ended = std::panic::AssertUnwindSafe(task).catch_unwind().await;
            if shutdown.is_cancelled() {
                return;
            }
            match ended {
                Ok(()) => tracing::error!(task = name, "a background task stopped; /readyz now answers 503"),
                Err(_) => tracing::error!(task = name, "a background task panicked; /readyz now answers 503"),
            }
            failed.store(true, Ordering::Relaxed);
        });
    }

    /// Whether every task is still running.
    pub fn healthy(&self) -> bool {
        !self.failed.load(Ordering::Relaxed)
    }

    /// Waits for every task to end (after shutdown was cancelled); with a `grace`, cancels those
    /// still running after it, and says so. `false` when some had to be cancelled.
    pub async fn wait(&self, grace: Option<Duration>) -> bool {
        let mut tasks = std::mem::take(&mut *self.tasks.lock().expect("tasks"));
        let all = async { while tasks.join_next().await.is_some() {} };
        match grace {
            None => {
                all.await;
                true
            }
            Some(grace) => {
                let ended = tokio::time::timeout(grace, all).await.is_ok();
                if !ended {
                    tasks.abort_all();
                    while tasks.join_next().await.is_some() {}
                }
                ended
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_task_that_ends_early_turns_readiness_off_and_shutdown_does_not() {
        let shutdown = CancellationToken::new();
        let supervisor = Supervisor::new(shutdown.clone());
        let until = shutdown.clone();
        supervisor.spawn("lasting", async move { until.cancelled().await });
        assert!(supervisor.healthy());
        supervisor.spawn("failing", async { panic!("a bug") });
        tokio::time::timeout(Duration::from_secs(5), async {
            while supervisor.healthy() {
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("the panic is noticed");
        shutdown.cancel();
        assert!(tokio::time::timeout(Duration::from_secs(5), supervisor.wait(None)).await.expect("all tasks end"));
    }

    #[tokio::test]
    async fn tasks_past_the_grace_are_cancelled() {
        let shutdown = CancellationToken::new();
        let supervisor = Supervisor::new(shutdown.clone());
        supervisor.spawn("stubborn", std::future::pending());
        shutdown.cancel();
        assert!(!supervisor.wait(Some(Duration::from_millis(10))).await, "cut off after the grace");
    }
}
