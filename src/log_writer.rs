//! The server's log writer. A server writes a line per request; handing each line to a log thread
//! over a channel woke that thread for every line (futex calls, `sched_yield` while it spun, and
//! one `write` per line: about three system calls per request). Here lines gather in one buffer
//! and the log thread, once woken by the first line, gathers for `GATHER` before it writes them
//! all at once. So a request pays for formatting its line and copying it under a lock; lines
//! reach stderr at most `GATHER` late; a reader that falls behind delays no request until
//! `max_queued` bytes wait (then writers wait too: no line is ever dropped). Lines still gathering
//! when the process is SIGKILLed are lost.

use std::io::{self, Write};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use tracing_subscriber::fmt::MakeWriter;

/// How long the log thread gathers lines once one arrived.
const GATHER: Duration = Duration::from_millis(10);
/// A gathering this big is written at once.
const WRITE_AT: usize = 256 * 1024;
/// How many bytes may wait before writers wait for the log thread (the server's default).
pub const MAX_QUEUED: usize = 16 * 1024 * 1024;

/// The lines waiting to be written, and what the log thread is doing.
#[derive(Default)]
struct Queue {
    bytes: Vec<u8>,
    /// The log thread waits for a first line (and must be woken for it).
    idle: bool,
    closed: bool,
}

struct Shared {
    queue: Mutex<Queue>,
    /// Wakes the log thread: a first line, a full gathering, or the end.
    wake: Condvar,
    /// Wakes writers waiting for room.
    room: Condvar,
    max_queued: usize,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        // A panic while holding the lock leaves whole lines behind: keep logging.
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The `MakeWriter` for the subscriber: every line it is given joins the queue.
#[derive(Clone)]
pub struct BatchedLog(Arc<Shared>);

/// Ends the log thread once every queued line is written (on drop).
pub struct Flush {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

/// Starts the log thread writing to `out`.
pub fn start<W: Write + Send + 'static>(out: W, max_queued: usize) -> io::Result<(BatchedLog, Flush)> {
    let shared = Arc::new(Shared {
        queue: Mutex::new(Queue { idle: true, ..Queue::default() }),
        wake: Condvar::new(),
        room: Condvar::new(),
        max_queued,
    });
    let thread = {
        let shared = Arc::clone(&shared);
        std::thread::Builder::new().name("gatehouse-log".into()).spawn(move || write_out(&shared, out))?
    };
    Ok((BatchedLog(Arc::clone(&shared)), Flush { shared, thread: Some(thread) }))
}

/// The log thread: waits for a first line, gathers, writes everything queued, again until closed.
fn write_out<W: Write>(shared: &Shared, mut out: W) {
    let mut batch = Vec::new();
    loop {
        let mut queue = shared.lock();
        while queue.bytes.is_empty() && !queue.closed {
            queue.idle = true;
            queue = shared.wake.wait(queue).unwrap_or_else(PoisonError::into_inner);
        }
        queue.idle = false;
        if !queue.closed && queue.bytes.len() < WRITE_AT {
            queue = shared.wake.wait_timeout(queue, GATHER).unwrap_or_else(PoisonError::into_inner).0;
        }
        std::mem::swap(&mut batch, &mut queue.bytes);
        let closed = queue.closed;
        drop(queue);
        shared.room.notify_all();
        // Nowhere to report a failing stderr: the lines are dropped, the server goes on.
        let _ = out.write_all(&batch).and_then(|()| out.flush());
        batch.clear();
        if closed && shared.lock().bytes.is_empty() {
            return;
        }
    }
}

impl<'a> MakeWriter<'a> for BatchedLog {
    type Writer = LineWriter<'a>;

    fn make_writer(&'a self) -> Self::Writer {
        LineWriter(&self.0)
    }
}

/// What the subscriber writes one line through.
pub struct LineWriter<'a>(&'a Shared);

impl Write for LineWriter<'_> {
    /// The subscriber hands over one whole line per call.
    fn write(&mut self, line: &[u8]) -> io::Result<usize> {
        let shared = self.0;
        let mut queue = shared.lock();
        while !queue.bytes.is_empty() && queue.bytes.len() + line.len() > shared.max_queued && !queue.closed {
            queue = shared.room.wait(queue).unwrap_or_else(PoisonError::into_inner);
        }
        let before = queue.bytes.len();
        queue.bytes.extend_from_slice(line);
        if queue.idle || (before < WRITE_AT && queue.bytes.len() >= WRITE_AT) {
            queue.idle = false;
            shared.wake.notify_one();
        }
        Ok(line.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for Flush {
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.wake.notify_one();
        self.shared.room.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `Write` whose bytes the test can read, and that can be made to stall.
    #[derive(Clone, Default)]
    struct Sink {
        bytes: Arc<Mutex<Vec<u8>>>,
        stall: Arc<Mutex<()>>,
    }

    impl Write for Sink {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            drop(self.stall.lock().unwrap());
            self.bytes.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn line(log: &BatchedLog, n: usize) {
        log.make_writer().write_all(format!("line {n}\n").as_bytes()).unwrap();
    }

    fn text(sink: &Sink) -> String {
        String::from_utf8(sink.bytes.lock().unwrap().clone()).unwrap()
    }

    #[test]
    fn every_line_is_written_in_order_and_a_lone_line_soon() {
        let sink = Sink::default();
        let (log, flush) = start(sink.clone(), MAX_QUEUED).unwrap();
        line(&log, 0);
        // The thread, idle, was woken by the line and writes it after its gathering.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while text(&sink).is_empty() {
            assert!(std::time::Instant::now() < deadline, "a lone line was never written");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(text(&sink), "line 0\n");
        let writers: Vec<_> = (0..4)
            .map(|w| {
                let log = log.clone();
                std::thread::spawn(move || (0..1000).for_each(|n| line(&log, 1 + w * 1000 + n)))
            })
            .collect();
        writers.into_iter().for_each(|w| w.join().unwrap());
        drop(flush);
        let written = text(&sink);
        assert_eq!(written.lines().count(), 4001);
        for w in 0..4 {
            // Each writer's lines keep their order.
            let mine: Vec<usize> = written
                .lines()
                .filter_map(|l| l.strip_prefix("line ")?.parse().ok())
                .filter(|n| (1 + w * 1000..1 + (w + 1) * 1000).contains(n))
                .collect();
            assert_eq!(mine, (1 + w * 1000..1 + (w + 1) * 1000).collect::<Vec<_>>());
        }
    }

    #[test]
    fn a_stalled_reader_makes_writers_wait_and_loses_nothing() {
        let sink = Sink::default();
        let stalled = sink.stall.lock().unwrap();
        // Room for about ten lines: the eleventh writer waits until the reader moves again.
        let (log, flush) = start(sink.clone(), 80).unwrap();
        let writer = {
            let log = log.clone();
            std::thread::spawn(move || (0..100).for_each(|n| line(&log, n)))
        };
        std::thread::sleep(Duration::from_millis(100));
        assert!(!writer.is_finished(), "a writer went on past a full queue");
        drop(stalled);
        writer.join().unwrap();
        drop(flush);
        let expected: String = (0..100).map(|n| format!("line {n}\n")).collect();
        assert_eq!(text(&sink), expected);
    }
}
