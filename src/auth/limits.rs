//! Per-token abuse limits (spec §10), on only when tokens are configured: a token bucket for
//! POSTs and a count of open streams. Over either, `429 rate_limited` with `Retry-After`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// POSTs per second and streams per token.
#[derive(Debug, Clone, Copy)]
pub struct TokenLimits {
    /// Sustained POSTs per second; a burst of as many again is allowed.
    pub posts_per_second: u32,
    /// Streams one token may hold open at once.
    pub streams: u32,
}

/// The limits' state, keyed by token name.
pub struct Limiter {
    limits: TokenLimits,
    buckets: Mutex<HashMap<String, Bucket>>,
    streams: Mutex<HashMap<String, u32>>,
}

struct Bucket {
    tokens: f64,
    at: Instant,
}

/// Holds one of a token's stream slots, or nothing when no per-token limit applies; dropping it
/// frees the slot.
pub struct StreamSlot(Option<(Arc<Limiter>, String)>);

impl StreamSlot {
    /// The slot of a stream that no per-token limit counts.
    pub fn unlimited() -> Self {
        Self(None)
    }
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        let Some((limiter, name)) = self.0.take() else { return };
        let mut streams = limiter.streams.lock().expect("stream counts");
        if let Some(count) = streams.get_mut(&name) {
            *count -= 1;
            if *count == 0 {
                streams.remove(&name);
            }
        }
    }
}

impl Limiter {
    pub fn new(limits: TokenLimits) -> Arc<Self> {
        Arc::new(Self { limits, buckets: Mutex::default(), streams: Mutex::default() })
    }

    /// Takes one POST from `name`'s bucket, or says how long until one is free.
    pub fn take_post(&self, name: &str) -> Result<(), Duration> {
        self.take_post_at(name, Instant::now())
    }

    fn take_post_at(&self, name: &str, now: Instant) -> Result<(), Duration> {
        let rate = f64::from(self.limits.posts_per_second);
        let capacity = 2.0 * rate;
        let mut buckets = self.buckets.lock().expect("rate buckets");
        let bucket = buckets.entry(name.to_owned()).or_insert(Bucket { tokens: capacity, at: now });
        bucket.tokens = (bucket.tokens + now.duration_since(bucket.at).as_secs_f64() * rate).min(capacity);
        bucket.at = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - bucket.tokens) / rate))
        }
    }

    /// One more stream for `name`, unless it holds its maximum.
    pub fn open_stream(self: &Arc<Self>, name: &str) -> Option<StreamSlot> {
        let mut streams = self.streams.lock().expect("stream counts");
        let count = streams.entry(name.to_owned()).or_insert(0);
        if *count >= self.limits.streams {
            return None;
        }
        *count += 1;
        Some(StreamSlot(Some((Arc::clone(self), name.to_owned()))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_refill_at_the_rate_and_are_per_token() {
        let limiter = Limiter::new(TokenLimits { posts_per_second: 2, streams: 1 });
        let start = Instant::now();
        for _ in 0..4 {
            assert!(limiter.take_post_at("a", start).is_ok(), "a burst of twice the rate");
        }
        let wait = limiter.take_post_at("a", start).unwrap_err();
        assert_eq!(wait, Duration::from_millis(500));
        assert!(limiter.take_post_at("b", start).is_ok(), "another token has its own bucket");
        assert!(limiter.take_post_at("a", start + Duration::from_millis(500)).is_ok());
        assert!(limiter.take_post_at("a", start + Duration::from_millis(500)).is_err());
    }

    #[test]
    fn stream_slots_are_counted_and_freed() {
        let limiter = Limiter::new(TokenLimits { posts_per_second: 1, streams: 2 });
        let one = limiter.open_stream("a").unwrap();
        let _two = limiter.open_stream("a").unwrap();
        assert!(limiter.open_stream("a").is_none());
        assert!(limiter.open_stream("b").is_some());
        drop(one);
        assert!(limiter.open_stream("a").is_some());
    }
}
