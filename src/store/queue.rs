//! The queue in front of a backend's writer, and how the writer takes a batch from it: both
//! backends group commit the same way, whatever a job is.

use tokio::sync::{mpsc, oneshot};

/// What a writer's queue carries.
pub(super) enum Msg<J> {
    Job(J),
    /// Finish what is queued, then acknowledge.
    Shutdown(oneshot::Sender<()>),
}

/// The batch that starts with `first`: the jobs already queued behind it, up to `max` in all,
/// and the shutdown request if one came (it ends the batch: what follows it is not taken).
pub(super) fn drain_batch<J>(
    first: J,
    rx: &mut mpsc::Receiver<Msg<J>>,
    max: usize,
) -> (Vec<J>, Option<oneshot::Sender<()>>) {
    let mut batch = vec![first];
    while batch.len() < max {
        match rx.try_recv() {
            Ok(Msg::Job(job)) => batch.push(job),
            Ok(Msg::Shutdown(ack)) => return (batch, Some(ack)),
            Err(_) => break,
        }
    }
    (batch, None)
}

/// Closes the queue and takes what is still in it: the jobs, to commit last, while any other
/// shutdown request is acknowledged at once.
pub(super) fn close<J>(rx: &mut mpsc::Receiver<Msg<J>>) -> Vec<J> {
    rx.close();
    let mut rest = Vec::new();
    while let Ok(msg) = rx.try_recv() {
        match msg {
            Msg::Job(job) => rest.push(job),
            Msg::Shutdown(other) => {
                let _ = other.send(());
            }
        }
    }
    rest
}
