//! Recently read gates, kept in memory so that reading one again (a page polling it, the lookup
//! that starts every answer) does not go to SQLite: a cached GET skips the read transaction, its
//! file locks and the row decoding, about a quarter of the request's CPU.
//!
//! Exact, because this process is the database's only writer (the lock file) and the writer tells
//! the cache what it changed: after every commit, before anyone hears of it (replies, the bus),
//! it forgets each gate that left `open`, the only change a stored gate ever sees (the resolution
//! joined to it is an immutable journal row). A reader that missed fills the cache with what it
//! read only if no commit forgot anything since its miss, so a read from a snapshot older than a
//! commit can never land after that commit's forgetting.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::domain::GateId;
use crate::store::model::GateRecord;

/// Gates kept at most. At the cap the cache starts over: the gates people are looking at come
/// back at their next read, and a burst of reads of distinct gates cannot grow it without bound.
const CAPACITY: usize = 4096;

#[derive(Debug, Default)]
pub struct GateCache {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    gates: HashMap<GateId, GateRecord>,
    /// Counts the commits that forgot something; a fill from before the latest is refused.
    generation: u64,
}

/// A miss, and when it happened: what `fill` needs to know whether its read is still current.
#[derive(Debug, Clone, Copy)]
pub struct Miss(u64);

impl GateCache {
    /// The cached gate, or the miss to `fill` after reading it from the database.
    pub fn get(&self, gate: GateId) -> Result<GateRecord, Miss> {
        let inner = self.inner.lock().expect("gate cache");
        inner.gates.get(&gate).cloned().ok_or(Miss(inner.generation))
    }

    /// Keeps what a reader found after `miss`, unless a commit has forgotten gates since.
    pub fn fill(&self, Miss(generation): Miss, record: &GateRecord) {
        let mut inner = self.inner.lock().expect("gate cache");
        if inner.generation != generation {
            return;
        }
        if inner.gates.len() >= CAPACITY {
            inner.gates.clear();
        }
        inner.gates.insert(record.view.gate_id, record.clone());
    }

    /// Called by the writer after a commit that changed these gates.
    pub fn forget(&self, gates: impl IntoIterator<Item = GateId>) {
        let mut gates = gates.into_iter().peekable();
        if gates.peek().is_none() {
            return;
        }
        let mut inner = self.inner.lock().expect("gate cache");
        inner.generation += 1;
        for gate in gates {
            inner.gates.remove(&gate);
        }
    }

    /// Forgets everything: after a failed commit, whose outcome SQLite may not have told exactly.
    pub fn clear(&self) {
        let mut inner = self.inner.lock().expect("gate cache");
        inner.generation += 1;
        inner.gates.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{GateState, GateView, LoopId, SessionId, Timestamp};

    fn record(gate: GateId, state: GateState) -> GateRecord {
        GateRecord {
            view: GateView {
                gate_id: gate,
                session_id: SessionId::from_uuid(uuid::Uuid::new_v4()).unwrap(),
                loop_id: LoopId::from_uuid(uuid::Uuid::new_v4()).ok(),
                state,
                gate: serde_json::value::RawValue::from_string("{}".into()).unwrap(),
                opened_seq: 1,
                opened_at: Timestamp::now(),
                deadline: None,
                resolved_seq: None,
                resolution: None,
                answer: None,
                decision: None,
            },
            idempotency: None,
            secret: None,
        }
    }

    #[test]
    fn a_filled_gate_is_served_until_forgotten() {
        let cache = GateCache::default();
        let gate = GateId::mint();
        let miss = cache.get(gate).unwrap_err();
        cache.fill(miss, &record(gate, GateState::Open));
        assert_eq!(cache.get(gate).unwrap().view.state, GateState::Open);
        cache.forget([gate]);
        let miss = cache.get(gate).expect_err("forgotten");
        cache.fill(miss, &record(gate, GateState::Resolved));
        assert_eq!(cache.get(gate).unwrap().view.state, GateState::Resolved);
    }

    #[test]
    fn a_read_from_before_a_commit_is_not_kept() {
        let cache = GateCache::default();
        let (gate, other) = (GateId::mint(), GateId::mint());
        // A reader misses and reads the open gate; meanwhile a commit resolves it (or any gate).
        let miss = cache.get(gate).unwrap_err();
        cache.forget([other]);
        cache.fill(miss, &record(gate, GateState::Open));
        assert!(cache.get(gate).is_err(), "a fill that raced a commit must not be kept");
        // Nothing forgotten: a commit that changed no gate leaves fills alone.
        let miss = cache.get(gate).unwrap_err();
        cache.forget([]);
        cache.fill(miss, &record(gate, GateState::Open));
        assert!(cache.get(gate).is_ok());
        // A failed commit forgets everything.
        let miss = cache.get(other).unwrap_err();
        cache.clear();
        cache.fill(miss, &record(other, GateState::Open));
        assert!(cache.get(gate).is_err() && cache.get(other).is_err());
    }

    #[test]
    fn the_cache_starts_over_at_its_capacity() {
        let cache = GateCache::default();
        let gates: Vec<GateId> = (0..=CAPACITY).map(|_| GateId::mint()).collect();
        for &gate in &gates {
            let miss = cache.get(gate).unwrap_err();
            cache.fill(miss, &record(gate, GateState::Open));
        }
        assert!(cache.get(gates[0]).is_err());
        assert!(cache.get(gates[CAPACITY]).is_ok());
        assert!(cache.inner.lock().unwrap().gates.len() <= CAPACITY);
    }
}
