//! Background tasks that must run as long as the server does: the timer, the webhook deliveries
//! and, on PostgreSQL, the writer and the journal follower. A task that ends before shutdown (it
//! returned, or panicked) is logged by name and turns readiness off, so a load balancer stops
//! sending requests to a replica that can no longer do its job.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures_util::FutureExt;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Spawns and watches the background tasks.
pub struct Supervisor {
    tracker: TaskTracker,
    failed: Arc<AtomicBool>,
    shutdown: CancellationToken,
}

impl Supervisor {
    /// Tasks are expected to end once `shutdown` is cancelled, and only then.
    pub fn new(shutdown: CancellationToken) -> Self {
        Self { tracker: TaskTracker::new(), failed: Arc::default(), shutdown }
    }

    /// Runs `task` under watch.
    pub fn spawn(&self, name: &'static str, task: impl Future<Output = ()> + Send + 'static) {
        let (failed, shutdown) = (Arc::clone(&self.failed), self.shutdown.clone());
        self.tracker.spawn(async move {
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

    /// Waits for every task to end (after shutdown was cancelled).
    pub async fn wait(&self) {
        self.tracker.close();
        self.tracker.wait().await;
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
        tokio::time::timeout(std::time::Duration::from_secs(5), async {
            while supervisor.healthy() {
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("the panic is noticed");
        shutdown.cancel();
        tokio::time::timeout(std::time::Duration::from_secs(5), supervisor.wait()).await.expect("all tasks end");
    }
}
