//! The checkpointer: a thread with a connection of its own that copies the WAL back into the main
//! file when the writer asks, so no commit waits for a checkpoint. SQLite's automatic checkpoint
//! runs inside the COMMIT that fills the WAL, and the writer checkpointing between batches held up
//! the batch after it: several milliseconds for 4 MB, in which answers waited.
//!
//! A checkpoint beside the writer can only copy the frames that exist when it starts; SQLite
//! reuses the WAL from its start only once every frame is copied, which steady writes may never
//! allow. So the writer still checkpoints itself when the WAL grows well past the threshold
//! (`Writer::checkpoint`): the WAL stays bounded, and under a light load, where latency matters,
//! the checkpointer alone keeps it short.

use std::path::Path;
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::thread::JoinHandle;

use rusqlite::Connection;

use super::{Durability, schema};

/// How many checkpoints one request may run to copy every frame.
const CATCH_UP_PASSES: usize = 4;

/// The handle the writer keeps. Dropping it stops the thread, after the checkpoint in progress.
pub(super) struct Checkpointer {
    wake: Option<SyncSender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Checkpointer {
    /// Opens its connection and starts its thread.
    pub fn start(path: &Path, durability: Durability) -> std::io::Result<Self> {
        let conn = schema::open_checkpointer(path, durability).map_err(std::io::Error::other)?;
        // One pending request is enough: asks that come while one waits add nothing.
        let (wake, asked) = mpsc::sync_channel::<()>(1);
        let thread = std::thread::Builder::new().name("gatehouse-checkpoint".into()).spawn(move || {
            while asked.recv().is_ok() {
                catch_up(&conn);
            }
        })?;
        Ok(Self { wake: Some(wake), thread: Some(thread) })
    }

    /// Asks for a checkpoint; never waits.
    pub fn request(&self) {
        if let Some(wake) = &self.wake {
            match wake.try_send(()) {
                Ok(()) | Err(TrySendError::Full(())) => {}
                Err(TrySendError::Disconnected(())) => tracing::warn!("the checkpointer has stopped"),
            }
        }
    }
}

/// Copies the WAL into the main file, then again what was committed meanwhile, and so on (a few
/// times at most): SQLite starts the WAL over only once every frame is copied, and the frames of
/// the commits made during a checkpoint are few, so the next pass is short.
fn catch_up(conn: &Connection) {
    for _ in 0..CATCH_UP_PASSES {
        // (busy, frames in the WAL, frames copied): busy when the writer is checkpointing itself.
        let pass = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
            Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?, r.get::<_, i64>(2)?))
        });
        match pass {
            Ok((0, frames, copied)) if copied < frames => {}
            Ok(_) => return,
            Err(e) => return tracing::warn!(error = %e, "WAL checkpoint failed; the next request tries again"),
        }
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        drop(self.wake.take());
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            tracing::error!("the checkpointer panicked");
        }
    }
}
