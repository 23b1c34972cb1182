//! The budget of unauthenticated connections per client address (`--max-unauthenticated-per-address`):
//! the accept loop takes a slot for each new connection, and the connection gives it back when
//! one of its requests authenticates, or when it closes.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use crate::auth::ClientKey;

/// Unauthenticated connections per client address. Only addresses that hold one are in the
/// map, so it is never larger than the number of open connections.
pub struct AddressBudget {
    cap: usize,
    held: Mutex<HashMap<ClientKey, usize>>,
}

impl AddressBudget {
    pub fn new(cap: usize) -> Self {
        Self { cap, held: Mutex::default() }
    }

    fn held(&self) -> std::sync::MutexGuard<'_, HashMap<ClientKey, usize>> {
        // Every update is a single step on a counter: nothing is left half-done by a panic.
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A place for one more unauthenticated connection from `ip`, if the address has one left.
    pub(super) fn admit(self: &Arc<Self>, ip: IpAddr) -> Option<AddressSlot> {
        let key = ClientKey::from(ip);
        let mut held = self.held();
        let count = held.entry(key).or_insert(0);
        if *count >= self.cap {
            return None;
        }
        *count += 1;
        Some(AddressSlot { budget: Arc::clone(self), key, held: AtomicBool::new(true) })
    }

    /// A slot that holds no place in the budget (a trusted proxy's connection).
    pub(super) fn exempt(self: &Arc<Self>, ip: IpAddr) -> AddressSlot {
        AddressSlot { budget: Arc::clone(self), key: ClientKey::from(ip), held: AtomicBool::new(false) }
    }
}

/// One connection's place in its address's budget, given back when the connection
/// authenticates or closes, whichever comes first.
pub struct AddressSlot {
    budget: Arc<AddressBudget>,
    key: ClientKey,
    held: AtomicBool,
}

impl AddressSlot {
    pub(super) fn release(&self) {
        if !self.held.swap(false, Ordering::AcqRel) {
            return;
        }
        let mut held = self.budget.held();
        if let Entry::Occupied(mut count) = held.entry(self.key) {
            *count.get_mut() -= 1;
            if *count.get() == 0 {
                count.remove();
            }
        }
    }
}

impl Drop for AddressSlot {
    fn drop(&mut self) {
        self.release();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_is_per_address_and_slots_come_back_once() {
        let budget = Arc::new(AddressBudget::new(2));
        let a: IpAddr = "127.0.0.1".parse().unwrap();
        let b: IpAddr = "127.0.0.2".parse().unwrap();
        let first = budget.admit(a).unwrap();
        let second = budget.admit(a).unwrap();
        assert!(budget.admit(a).is_none(), "the third from one address is refused");
        assert!(budget.admit(b).is_some(), "another address has its own budget");
        first.release();
        first.release();
        let third = budget.admit(a).unwrap();
        assert!(budget.admit(a).is_none(), "a slot given back twice counts once");
        drop((second, third));
        assert!(budget.held().is_empty(), "an address without connections leaves the map");
    }
}
