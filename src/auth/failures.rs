//! Failed authentication, throttled per client address. Every credential that fails to verify (a
//! wrong bearer token, a wrong login, a forged or stale login cookie, a bad webhook signature)
//! takes one from its address's budget, `--auth-failures` per minute with a burst of as many.
//! An address that has spent it gets `429 rate_limited` with `Retry-After` for every credential
//! it presents, right or wrong, until the budget refills: a guesser learns nothing more, and
//! nothing is verified for it. Other addresses keep their own budgets, so one guesser never locks
//! anybody else out (behind a proxy, see `--trusted-proxy`).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::ClientKey;

/// Addresses kept at most before the full budgets (those that have recovered) are forgotten.
const PRUNE_ABOVE: usize = 10_000;

/// The failure budgets of client addresses.
pub struct FailureLimiter {
    /// Failures refilled per second; the burst is a minute's worth.
    per_second: f64,
    burst: f64,
    budgets: Mutex<HashMap<ClientKey, Budget>>,
}

#[derive(Clone, Copy)]
struct Budget {
    left: f64,
    at: Instant,
}

impl FailureLimiter {
    /// `per_minute` failures per address (at least 1).
    pub fn new(per_minute: u32) -> Self {
        let burst = f64::from(per_minute.max(1));
        Self { per_second: burst / 60.0, burst, budgets: Mutex::default() }
    }

    /// Before a credential from `ip` is verified: how long it must wait, if its budget is spent.
    pub fn check(&self, ip: IpAddr) -> Result<(), Duration> {
        self.check_at(ClientKey::from(ip), Instant::now())
    }

    /// A credential from `ip` failed to verify.
    pub fn failed(&self, ip: IpAddr) {
        self.failed_at(ClientKey::from(ip), Instant::now());
    }

    fn check_at(&self, key: ClientKey, now: Instant) -> Result<(), Duration> {
        let mut budgets = self.budgets.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(budget) = budgets.get_mut(&key) else { return Ok(()) };
        self.refill(budget, now);
        if budget.left >= 1.0 { Ok(()) } else { Err(Duration::from_secs_f64((1.0 - budget.left) / self.per_second)) }
    }

    fn failed_at(&self, key: ClientKey, now: Instant) {
        let mut budgets = self.budgets.lock().unwrap_or_else(PoisonError::into_inner);
        if budgets.len() >= PRUNE_ABOVE && !budgets.contains_key(&key) {
            // Many addresses failed once: keep only those still short of a whole budget, so
            // the map is bounded by the addresses failing now, not by every address ever seen.
            budgets.retain(|_, budget| {
                self.refill(budget, now);
                budget.left < self.burst
            });
        }
        let budget = budgets.entry(key).or_insert(Budget { left: self.burst, at: now });
        self.refill(budget, now);
        budget.left = (budget.left - 1.0).max(0.0);
    }

    fn refill(&self, budget: &mut Budget, now: Instant) {
        let elapsed = now.saturating_duration_since(budget.at).as_secs_f64();
        budget.left = (budget.left + elapsed * self.per_second).min(self.burst);
        budget.at = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spent_budget_refuses_until_it_refills_and_is_per_address() {
        let limiter = FailureLimiter::new(6);
        let (a, b) = (ClientKey::from("192.0.2.1".parse::<IpAddr>().unwrap()), ClientKey::V4([192, 0, 2, 2].into()));
        let start = Instant::now();
        for _ in 0..6 {
            assert!(limiter.check_at(a, start).is_ok());
            limiter.failed_at(a, start);
        }
        let wait = limiter.check_at(a, start).unwrap_err();
        assert_eq!(wait, Duration::from_secs(10), "6 a minute: one back every 10 s");
        assert!(limiter.check_at(b, start).is_ok(), "another address is not held up");
        assert!(limiter.check_at(a, start + Duration::from_secs(10)).is_ok(), "one try back after the wait");
        limiter.failed_at(a, start + Duration::from_secs(10));
        assert!(limiter.check_at(a, start + Duration::from_secs(10)).is_err());
    }

    #[test]
    fn recovered_addresses_are_forgotten_when_many_failed() {
        let limiter = FailureLimiter::new(60);
        let start = Instant::now();
        for i in 0..PRUNE_ABOVE as u32 {
            limiter.failed_at(ClientKey::V4(i.into()), start);
        }
        limiter.failed_at(ClientKey::V4(u32::MAX.into()), start + Duration::from_secs(2));
        assert_eq!(limiter.budgets.lock().unwrap().len(), 1, "only the address failing now is kept");
    }
}
