//! Exponential backoff with full jitter, one shape for every retry loop: the CLI waiting for the
//! server, webhook delivery and the timer waiting for storage. Also the one source of random
//! delays (`random_up_to`) the crate uses.

use std::time::Duration;

/// Delays drawn at random from zero up to a ceiling that doubles from `first` up to `cap`.
///
/// Full jitter (rather than the bare doubling): clients that failed together, say every `ask`
/// of a restarted server, spread their retries over the whole window instead of all coming back
/// at the same instant, again and again.
#[derive(Debug, Clone)]
pub struct Backoff {
    first: Duration,
    cap: Duration,
    ceiling: Duration,
}

impl Backoff {
    pub fn new(first: Duration, cap: Duration) -> Self {
        Self { first, cap, ceiling: first.min(cap) }
    }

    /// The delay before the next try, at random in `[0, ceiling]`; the ceiling then doubles (up
    /// to the cap).
    pub fn next_delay(&mut self) -> Duration {
        let ceiling = self.advance();
        random_up_to(ceiling)
    }

    /// Sleeps for the next delay.
    pub async fn wait(&mut self) {
        tokio::time::sleep(self.next_delay()).await;
    }

    /// Starts again from the first ceiling (after a success).
    pub fn reset(&mut self) {
        self.ceiling = self.first.min(self.cap);
    }

    /// The ceiling of this try, doubling the next one's.
    fn advance(&mut self) -> Duration {
        let ceiling = self.ceiling;
        self.ceiling = self.ceiling.saturating_mul(2).min(self.cap);
        ceiling
    }
}

/// A duration drawn uniformly from `[0, max]` (to the microsecond).
pub fn random_up_to(max: Duration) -> Duration {
    // A v4 UUID is 122 random bits from the OS generator: no extra crate for a few bits of noise.
    const STEPS: u128 = 1 << 20;
    let step = uuid::Uuid::new_v4().as_u128() % (STEPS + 1);
    max.mul_f64(step as f64 / STEPS as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ceilings_double_to_the_cap_and_reset() {
        let mut backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(30));
        let ceilings: Vec<u64> = (0..7).map(|_| backoff.advance().as_secs()).collect();
        assert_eq!(ceilings, [1, 2, 4, 8, 16, 30, 30]);
        backoff.reset();
        assert_eq!(backoff.advance(), Duration::from_secs(1));
    }

    #[test]
    fn delays_stay_within_their_ceilings() {
        let mut backoff = Backoff::new(Duration::from_millis(250), Duration::from_secs(5));
        let mut ceiling = Duration::from_millis(250);
        for _ in 0..50 {
            let delay = backoff.next_delay();
            assert!(delay <= ceiling, "{delay:?} over {ceiling:?}");
            ceiling = (ceiling * 2).min(Duration::from_secs(5));
        }
        let mut capped_below_first = Backoff::new(Duration::from_secs(10), Duration::from_secs(1));
        assert!(capped_below_first.next_delay() <= Duration::from_secs(1), "the cap bounds even the first");
    }

    #[test]
    fn delays_are_spread_over_the_window() {
        // Full jitter: delays use the whole window, not a narrow band around the ceiling. 200
        // draws all landing in one half has probability 2^-199.
        let max = Duration::from_secs(8);
        let draws: Vec<Duration> = (0..200).map(|_| random_up_to(max)).collect();
        assert!(draws.iter().all(|d| *d <= max));
        assert!(draws.iter().any(|d| *d < max / 2), "some delays in the lower half");
        assert!(draws.iter().any(|d| *d > max / 2), "some delays in the upper half");
        assert_eq!(random_up_to(Duration::ZERO), Duration::ZERO);
    }
}
