//! The doorbell. The database is the mailbox: after a commit the writer rings the bell, and
//! whoever waits re-reads the rows it cares about. Nothing here carries data that is not already
//! committed, so nothing can be observed before its commit.
//!
//! - `head`: a `watch` of the latest committed journal seq; streams follow it (bursts coalesce).
//! - `ring`: the last committed journal frames, serialised once (by the `FrameFn` the bus was made
//!   with: the bus does not know the wire format) and shared by every stream whose cursor is inside
//!   it; streams further behind read the database instead.
//! - keyed interests: gate id → `wait` long-polls, (session, loop) → inbox long-polls, so a
//!   commit wakes only who it concerns.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use tokio::sync::{mpsc, watch};

use crate::domain::{GateId, LoopId, SessionId, Timestamp};

/// How many committed frames the ring keeps at most…
pub const RING_CAPACITY: usize = 4096;
/// …and how many bytes of them: big events must not let the ring pin unbounded memory.
pub const RING_BYTES: usize = 32 * 1024 * 1024;

/// Turns one committed journal event (its seq and stored JSON) into the bytes a stream sends.
pub type FrameFn = fn(i64, &str) -> Bytes;

/// The stored event itself, no wire format around it: the frames of a bus that feeds no SSE
/// stream (a store opened by a test or a benchmark).
pub fn plain_frame(_seq: i64, event: &str) -> Bytes {
    Bytes::copy_from_slice(event.as_bytes())
}

/// Something a committed transaction changed, announced after COMMIT returned Ok.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// One event was appended to the journal.
    Journal { seq: i64, session: SessionId, event: String },
    /// This gate left `open`.
    Gate(GateId),
    /// This gate's policy answers at this instant.
    Deadline(GateId, Timestamp),
    /// This loop's inbox has a new command.
    Inbox(SessionId, LoopId),
}

/// Shared by the writer (which rings) and the HTTP layer (which listens).
#[derive(Debug)]
pub struct Bus {
    head: watch::Sender<i64>,
    frame: FrameFn,
    ring: Ring,
    /// Deadline changes for the timer task, which takes the receiver once.
    deadlines: mpsc::UnboundedSender<DeadlineChange>,
    deadline_feed: Mutex<Option<mpsc::UnboundedReceiver<DeadlineChange>>>,
    gates: Arc<Keyed<GateId>>,
    inboxes: Arc<Keyed<(SessionId, LoopId)>>,
}

impl Default for Bus {
    /// A bus with plain frames (`plain_frame`).
    fn default() -> Self {
        Self::new(plain_frame)
    }
}

impl Bus {
    /// A bus that makes its frames with `frame`. Its head is set by the store that opens on it
    /// (`start_at`), before anything is published.
    pub fn new(frame: FrameFn) -> Self {
        let (deadlines, feed) = mpsc::unbounded_channel();
        Self {
            head: watch::Sender::new(0),
            frame,
            ring: Ring::new(0, RING_CAPACITY, RING_BYTES),
            deadlines,
            deadline_feed: Mutex::new(Some(feed)),
            gates: Arc::default(),
            inboxes: Arc::default(),
        }
    }

    /// Starts the head (and the ring) at the journal head the store found when it opened: called
    /// once, before the first commit is published and before anyone follows the head.
    pub(crate) fn start_at(&self, head: i64) {
        self.head.send_replace(head);
        self.ring.start_at(head);
    }

    /// Committed frames with `cursor < seq <= upto` (of one session, or all), at most `max`, and
    /// the cursor to continue from; `None` when the ring no longer holds every frame after
    /// `cursor` (read the database instead).
    pub fn frames_after(
        &self,
        cursor: i64,
        upto: i64,
        session: Option<SessionId>,
        max: usize,
    ) -> Option<(Vec<Frame>, i64)> {
        self.ring.after(cursor, upto, session, max)
    }

    /// The latest committed journal seq, and a way to wait for the next.
    pub fn head(&self) -> watch::Receiver<i64> {
        self.head.subscribe()
    }

    /// Interest in one gate leaving `open`. Register before reading the gate, then wait.
    pub fn watch_gate(&self, gate: GateId) -> Interest<GateId> {
        Keyed::subscribe(&self.gates, gate)
    }

    /// Interest in new commands for one loop. Register before reading the inbox, then wait.
    pub fn watch_inbox(&self, session: SessionId, loop_id: LoopId) -> Interest<(SessionId, LoopId)> {
        Keyed::subscribe(&self.inboxes, (session, loop_id))
    }

    /// The feed of deadline changes, for the one timer task (`None` once taken).
    pub fn take_deadline_feed(&self) -> Option<mpsc::UnboundedReceiver<DeadlineChange>> {
        self.deadline_feed.lock().expect("bus lock").take()
    }

    /// How many are waiting for this gate right now (tests use it to know a long-poll is parked).
    pub fn gate_interest(&self, gate: GateId) -> usize {
        self.gates.interest(&gate)
    }

    /// How many are waiting for this loop's inbox right now.
    pub fn inbox_interest(&self, session: SessionId, loop_id: LoopId) -> usize {
        self.inboxes.interest(&(session, loop_id))
    }

    /// Announces what a commit changed. Called by the writer only after COMMIT returned Ok. The
    /// commit's frames enter the ring (under one lock) before the head moves past them (once, to
    /// the last), so a stream that sees the new head finds every frame up to it; then the keyed
    /// wake-ups go out, in order.
    pub fn publish(&self, effects: Vec<Effect>) {
        let mut frames = Vec::new();
        let mut others = Vec::new();
        for effect in effects {
            match effect {
                Effect::Journal { seq, session, event } => {
                    frames.push(Frame { seq, session, bytes: (self.frame)(seq, &event) });
                }
                other => others.push(other),
            }
        }
        if let Some(last) = frames.last().map(|f| f.seq) {
            self.ring.extend(frames);
            self.head.send_if_modified(|head| {
                let advanced = last > *head;
                *head = (*head).max(last);
                advanced
            });
        }
        for effect in others {
            match effect {
                Effect::Journal { .. } => unreachable!("journal effects were taken above"),
                Effect::Gate(gate) => {
                    self.gates.notify(&gate);
                    // A closed channel means no timer runs (yet): nothing to disarm.
                    let _ = self.deadlines.send(DeadlineChange::Settled(gate));
                }
                Effect::Deadline(gate, at) => {
                    let _ = self.deadlines.send(DeadlineChange::Armed(gate, at));
                }
                Effect::Inbox(session, loop_id) => self.inboxes.notify(&(session, loop_id)),
            }
        }
    }
}

/// What the timer task learns from commits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeadlineChange {
    /// A gate whose policy answers at this instant was opened.
    Armed(GateId, Timestamp),
    /// A gate left `open` (its deadline, if any, is moot).
    Settled(GateId),
}

/// One journal event as an SSE frame, ready for the socket.
#[derive(Debug, Clone)]
pub struct Frame {
    pub seq: i64,
    pub session: SessionId,
    pub bytes: Bytes,
}

/// The last committed frames, oldest first. Every frame with `seq > floor` is in it.
#[derive(Debug)]
struct Ring {
    inner: Mutex<RingInner>,
}

#[derive(Debug)]
struct RingInner {
    frames: VecDeque<Frame>,
    /// The highest seq not (or no longer) held; the journal head at start-up.
    floor: i64,
    capacity: usize,
    /// Bytes held, and the most it may hold.
    bytes: usize,
    max_bytes: usize,
}

impl Ring {
    fn new(floor: i64, capacity: usize, max_bytes: usize) -> Self {
        Self {
            inner: Mutex::new(RingInner {
                frames: VecDeque::with_capacity(capacity),
                floor,
                capacity,
                bytes: 0,
                max_bytes,
            }),
        }
    }

    /// Starts an empty ring at `floor` (before anything is appended).
    fn start_at(&self, floor: i64) {
        let mut ring = self.inner.lock().expect("ring lock");
        debug_assert!(ring.frames.is_empty(), "the ring starts before the first commit");
        ring.floor = floor;
    }

    /// Appends frames in seq order, evicting the oldest past the count or byte budget.
    fn extend(&self, frames: impl IntoIterator<Item = Frame>) {
        let mut ring = self.inner.lock().expect("ring lock");
        for frame in frames {
            ring.bytes += frame.bytes.len();
            ring.frames.push_back(frame);
        }
        while ring.frames.len() > ring.capacity || (ring.bytes > ring.max_bytes && ring.frames.len() > 1) {
            let evicted = ring.frames.pop_front().expect("not empty");
            ring.bytes -= evicted.bytes.len();
            ring.floor = evicted.seq;
        }
    }

    fn after(&self, cursor: i64, upto: i64, session: Option<SessionId>, max: usize) -> Option<(Vec<Frame>, i64)> {
        let ring = self.inner.lock().expect("ring lock");
        if cursor < ring.floor {
            return None;
        }
        let start = ring.frames.partition_point(|f| f.seq <= cursor);
        let mut out = Vec::new();
        for frame in ring.frames.range(start..).take_while(|f| f.seq <= upto) {
            if session.is_none_or(|s| s == frame.session) {
                if out.len() == max {
                    // Full: continue right after the last frame handed out.
                    let next = out.last().map_or(cursor, |f: &Frame| f.seq);
                    return Some((out, next));
                }
                out.push(frame.clone());
            }
        }
        Some((out, upto))
    }
}

/// Per-key version counters; an entry lives while someone is interested in it.
#[derive(Debug)]
struct Keyed<K> {
    map: Mutex<HashMap<K, watch::Sender<u64>>>,
}

impl<K> Default for Keyed<K> {
    fn default() -> Self {
        Self { map: Mutex::new(HashMap::new()) }
    }
}

impl<K: Hash + Eq + Clone> Keyed<K> {
    fn subscribe(this: &Arc<Self>, key: K) -> Interest<K> {
        let mut map = this.map.lock().expect("bus lock");
        let rx = map.entry(key.clone()).or_insert_with(|| watch::Sender::new(0)).subscribe();
        Interest { rx: Some(rx), key, owner: Arc::clone(this) }
    }

    fn interest(&self, key: &K) -> usize {
        self.map.lock().expect("bus lock").get(key).map_or(0, |tx| tx.receiver_count())
    }

    fn notify(&self, key: &K) {
        if let Some(tx) = self.map.lock().expect("bus lock").get(key) {
            tx.send_modify(|version| *version += 1);
        }
    }
}

/// A registered interest in one key; dropping it unregisters.
#[derive(Debug)]
pub struct Interest<K: Hash + Eq + Clone> {
    rx: Option<watch::Receiver<u64>>,
    key: K,
    owner: Arc<Keyed<K>>,
}

impl<K: Hash + Eq + Clone> Interest<K> {
    /// Resolves at the first notification after registration (or after the previous call).
    pub async fn changed(&mut self) {
        let rx = self.rx.as_mut().expect("present until drop");
        // The sender lives in the map as long as this receiver does, so this cannot fail.
        let _ = rx.changed().await;
    }
}

impl<K: Hash + Eq + Clone> Drop for Interest<K> {
    fn drop(&mut self) {
        let mut map = self.owner.map.lock().expect("bus lock");
        drop(self.rx.take());
        // Under the lock no one can subscribe in between, so an entry without receivers is dead.
        if map.get(&self.key).is_some_and(|tx| tx.receiver_count() == 0) {
            map.remove(&self.key);
        }
    }
}

/// A frame for the bus's own tests: the seq and the event, nothing of any wire format.
#[cfg(test)]
pub(crate) fn test_frame(seq: i64, event: &str) -> Bytes {
    Bytes::from(format!("{seq} {event}\n"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_commit_wakes_only_its_own_gate() {
        let bus = Bus::new(test_frame);
        let (a, b) = (GateId::mint(), GateId::mint());
        let mut wa = bus.watch_gate(a);
        let mut wb = bus.watch_gate(b);
        let session = SessionId::parse("11111111-1111-4111-8111-111111111111").unwrap();
        bus.publish(vec![Effect::Journal { seq: 3, session, event: "{}".into() }, Effect::Gate(a)]);
        tokio::time::timeout(Duration::from_secs(5), wa.changed()).await.unwrap();
        assert!(tokio::time::timeout(Duration::from_millis(50), wb.changed()).await.is_err());
        assert_eq!(*bus.head().borrow(), 3);
        drop((wa, wb));
        assert!(bus.gates.map.lock().unwrap().is_empty(), "interests unregister on drop");
    }
}

#[cfg(test)]
mod ring_tests {
    use super::*;

    fn session(n: u8) -> SessionId {
        SessionId::parse(&format!("{n:08}-1111-4111-8111-111111111111")).unwrap()
    }

    fn ring_with(seqs: impl IntoIterator<Item = i64>, floor: i64, capacity: usize) -> Ring {
        let ring = Ring::new(floor, capacity, usize::MAX);
        for seq in seqs {
            ring.extend([Frame { seq, session: session((seq % 2) as u8 + 1), bytes: test_frame(seq, "{}") }]);
        }
        ring
    }

    fn seqs(got: Option<(Vec<Frame>, i64)>) -> (Vec<i64>, i64) {
        let (frames, next) = got.expect("covered");
        (frames.iter().map(|f| f.seq).collect(), next)
    }

    #[test]
    fn serves_frames_after_a_cursor_up_to_a_bound() {
        let ring = ring_with(11..=20, 10, 16);
        assert_eq!(seqs(ring.after(10, 20, None, 100)), ((11..=20).collect(), 20));
        assert_eq!(seqs(ring.after(15, 18, None, 100)), (vec![16, 17, 18], 18));
        assert_eq!(seqs(ring.after(10, 20, None, 3)), (vec![11, 12, 13], 13));
        assert_eq!(seqs(ring.after(20, 20, None, 3)), (vec![], 20));
        // A session filter skips other sessions' frames but still moves the cursor to the bound.
        assert_eq!(seqs(ring.after(10, 20, Some(session(1)), 100)), (vec![12, 14, 16, 18, 20], 20));
    }

    #[test]
    fn a_cursor_older_than_the_ring_is_not_covered() {
        let ring = ring_with(1..=10, 0, 4);
        assert!(ring.after(5, 10, None, 100).is_none(), "6 was evicted");
        assert_eq!(seqs(ring.after(6, 10, None, 100)), (vec![7, 8, 9, 10], 10));
        let fresh = ring_with([], 42, 4);
        assert!(fresh.after(41, 42, None, 100).is_none(), "history before start-up is in the database");
    }

    #[test]
    fn the_ring_is_bounded_in_bytes_too() {
        let frame = |seq| Frame { seq, session: session(1), bytes: test_frame(seq, &"x".repeat(1000)) };
        let size = frame(1).bytes.len();
        let ring = Ring::new(0, 100, 3 * size + 5);
        for seq in 1..=10 {
            ring.extend([frame(seq)]);
        }
        assert!(ring.after(6, 10, None, 100).is_none(), "7 was evicted to stay within the budget");
        assert_eq!(seqs(ring.after(7, 10, None, 100)), (vec![8, 9, 10], 10));
        assert_eq!(frame(1).bytes.len(), size, "exactly sized");
    }
}
