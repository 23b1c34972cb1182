//! The doorbell. The database is the mailbox: after a commit the writer rings the bell, and
//! whoever waits re-reads the rows it cares about. Nothing here carries data that is not already
//! committed, so nothing can be observed before its commit.
//!
//! - `head`: a `watch` of the latest committed journal seq; streams follow it (bursts coalesce).
//! - keyed interests: gate id → `wait` long-polls, (session, loop) → inbox long-polls, so a
//!   commit wakes only who it concerns.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use crate::domain::{GateId, LoopId, SessionId};

/// Something a committed transaction changed, announced after COMMIT returned Ok.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// The journal grew up to this seq.
    Journal(i64),
    /// This gate left `open`.
    Gate(GateId),
    /// This loop's inbox has a new command.
    Inbox(SessionId, LoopId),
}

/// Shared by the writer (which rings) and the HTTP layer (which listens).
#[derive(Debug)]
pub struct Bus {
    head: watch::Sender<i64>,
    gates: Arc<Keyed<GateId>>,
    inboxes: Arc<Keyed<(SessionId, LoopId)>>,
}

impl Bus {
    /// A bus whose head starts at the journal head found at start-up.
    pub fn new(head: i64) -> Self {
        Self { head: watch::Sender::new(head), gates: Arc::default(), inboxes: Arc::default() }
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

    /// Announces what a commit changed. Called by the writer only after COMMIT returned Ok.
    pub fn publish(&self, effects: &[Effect]) {
        for effect in effects {
            match *effect {
                Effect::Journal(seq) => {
                    self.head.send_if_modified(|head| {
                        let advanced = seq > *head;
                        *head = (*head).max(seq);
                        advanced
                    });
                }
                Effect::Gate(gate) => self.gates.notify(&gate),
                Effect::Inbox(session, loop_id) => self.inboxes.notify(&(session, loop_id)),
            }
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_commit_wakes_only_its_own_gate() {
        let bus = Bus::new(0);
        let (a, b) = (GateId::mint(), GateId::mint());
        let mut wa = bus.watch_gate(a);
        let mut wb = bus.watch_gate(b);
        bus.publish(&[Effect::Journal(3), Effect::Gate(a)]);
        tokio::time::timeout(Duration::from_secs(5), wa.changed()).await.unwrap();
        assert!(tokio::time::timeout(Duration::from_millis(50), wb.changed()).await.is_err());
        assert_eq!(*bus.head().borrow(), 3);
        drop((wa, wb));
        assert!(bus.gates.map.lock().unwrap().is_empty(), "interests unregister on drop");
    }
}
