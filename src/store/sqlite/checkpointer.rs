//! The checkpointer: a thread with a connection of its own that copies the WAL back into the main
//! file when the writer asks, so no commit waits for a checkpoint. SQLite's automatic checkpoint
//! runs inside the COMMIT that fills the WAL, and the writer checkpointing between batches held up
//! the batch after it: several milliseconds for 4 MB, in which answers waited.
//!
//! A checkpoint beside the writer can only copy the frames that exist when it starts; SQLite
//! reuses the WAL from its start only once every frame is copied, which commits a millisecond
//! apart never allow: the writer kept asking, and the checkpointer kept copying a few frames at a
//! time, each pass two more fsyncs in the disk's queue before the commits' own (answer → agent
//! took a millisecond longer at the median). So when its passes leave only a short tail, the
//! checkpointer hands that tail to the writer (`take_tail`), which copies it between two batches,
//! where no commit can come in between, and the next commit starts the WAL over. The writer also
//! checkpoints itself when the WAL grows well past the threshold (`Writer::checkpoint`).

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::thread::JoinHandle;

use rusqlite::Connection;

use super::{Durability, schema};

/// How many checkpoints one request may run to copy every frame.
const CATCH_UP_PASSES: usize = 4;
/// Frames left uncopied that the writer copies itself (`take_tail`): up to about 800 KiB, a
/// millisecond or so between two batches.
const TAIL_FRAMES: i64 = 200;

/// The handle the writer keeps. Dropping it stops the thread, after the checkpoint in progress.
pub(super) struct Checkpointer {
    wake: Option<SyncSender<()>>,
    /// Set when the last request's passes left a short tail for the writer to copy.
    tail: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Checkpointer {
    /// Opens its connection and starts its thread.
    pub fn start(path: &Path, durability: Durability) -> std::io::Result<Self> {
        let conn = schema::open_checkpointer(path, durability).map_err(std::io::Error::other)?;
        // One pending request is enough: asks that come while one waits add nothing.
        let (wake, asked) = mpsc::sync_channel::<()>(1);
        let tail = Arc::new(AtomicBool::new(false));
        let left = Arc::clone(&tail);
        let thread = std::thread::Builder::new().name("gatehouse-checkpoint".into()).spawn(move || {
            while asked.recv().is_ok() {
                if catch_up(&conn).is_some_and(|uncopied| uncopied <= TAIL_FRAMES) {
                    left.store(true, Ordering::Release);
                }
            }
        })?;
        Ok(Self { wake: Some(wake), tail, thread: Some(thread) })
    }

    /// Whether the checkpointer left a short tail of the WAL for the writer to copy (once).
    pub fn take_tail(&self) -> bool {
        self.tail.swap(false, Ordering::Acquire)
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
/// the commits made during a checkpoint are few, so the next pass is short. Returns how many
/// frames the last pass left uncopied, when some were (none: the next commit starts over).
fn catch_up(conn: &Connection) -> Option<i64> {
    let mut uncopied = None;
    for _ in 0..CATCH_UP_PASSES {
        // (busy, frames in the WAL, frames copied): busy when the writer is checkpointing itself.
        let pass = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
            Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?, r.get::<_, i64>(2)?))
        });
        match pass {
            Ok((0, frames, copied)) if copied < frames => uncopied = Some(frames - copied),
            Ok(_) => return None,
            Err(e) => {
                tracing::warn!(error = %e, "WAL checkpoint failed; the next request tries again");
                return None;
            }
        }
    }
    uncopied
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

#[cfg(test)]
mod tests {
    use super::*;

    /// One commit of `rows` rows of nearly a page each: about as many WAL frames.
    fn write_pages(conn: &Connection, rows: usize) {
        conn.execute_batch("BEGIN").unwrap();
        for _ in 0..rows {
            conn.execute("INSERT INTO meta (key, value) VALUES (hex(randomblob(16)), printf('%.3900c', 'x'))", [])
                .unwrap();
        }
        conn.execute_batch("COMMIT").unwrap();
    }

    #[test]
    fn catching_up_tells_how_much_a_reader_left_uncopied() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("checkpoint.db");
        let (writer, _) = schema::open_writer(&path, Durability::Normal, &dir.path().join("key")).unwrap();
        writer.execute_batch("PRAGMA wal_autocheckpoint = 0").unwrap();
        let checkpointer = schema::open_checkpointer(&path, Durability::Normal).unwrap();
        write_pages(&writer, 300);
        assert_eq!(catch_up(&checkpointer), None, "nothing pins the WAL: every frame is copied");

        // A reader's snapshot pins what it reads; what was committed after it cannot be copied.
        let reader = schema::open_reader(&path).unwrap();
        reader.execute_batch("BEGIN").unwrap();
        reader.query_row("SELECT count(*) FROM meta", [], |r| r.get::<_, i64>(0)).unwrap();
        write_pages(&writer, 50);
        let left = catch_up(&checkpointer).expect("frames left uncopied");
        assert!((50..=TAIL_FRAMES).contains(&left), "{left} frames left: a tail for the writer");
        write_pages(&writer, 300);
        let left = catch_up(&checkpointer).expect("frames left uncopied");
        assert!(left > TAIL_FRAMES, "{left} frames left: too many to hand over");
        reader.execute_batch("COMMIT").unwrap();
        assert_eq!(catch_up(&checkpointer), None);
    }
}
