//! Wall-clock instants as integer nanoseconds since the Unix epoch (how they are stored), rendered
//! as RFC 3339 UTC with nine fractional digits (how they travel). Rendering is a pure function of
//! the integer, so a gate view's `opened_at` always equals its `GateOpened.created_at`.

use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Serialize, Serializer};

const NANOS_PER_SEC: i64 = 1_000_000_000;
const SECS_PER_DAY: i64 = 86_400;

/// An instant in integer nanoseconds since 1970-01-01T00:00:00Z.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(i64);

impl Timestamp {
    pub fn now() -> Self {
        let since = SystemTime::now().duration_since(UNIX_EPOCH).expect("the system clock is set after 1970");
        Self(i64::try_from(since.as_nanos()).expect("the system clock is set before 2262"))
    }

    pub fn from_nanos(nanos: i64) -> Self {
        Self(nanos)
    }

    /// Whole seconds since the Unix epoch (0 before it).
    pub fn unix_seconds(self) -> u64 {
        u64::try_from(self.0 / 1_000_000_000).unwrap_or(0)
    }

    pub fn as_nanos(self) -> i64 {
        self.0
    }

    /// Parses the server's own rendering, `YYYY-MM-DDTHH:MM:SS.nnnnnnnnnZ` (RFC 3339 UTC; fewer
    /// fractional digits, or none, read as such).
    pub fn parse(s: &str) -> Option<Self> {
        let num = |range: std::ops::Range<usize>| s.get(range)?.parse::<i64>().ok();
        let (y, mo, d, h, mi, se) = (num(0..4)?, num(5..7)?, num(8..10)?, num(11..13)?, num(14..16)?, num(17..19)?);
        let fraction = s.get(20..).unwrap_or("").trim_end_matches('Z');
        let digits = &fraction[..fraction.len().min(9)];
        let nanos =
            if digits.is_empty() { 0 } else { digits.parse::<i64>().ok()? * 10_i64.pow(9 - digits.len() as u32) };
        // Days from civil (Howard Hinnant), the inverse of `civil_from_days`.
        let y = if mo <= 2 { y - 1 } else { y };
        let era = y.div_euclid(400);
        let yoe = y - era * 400;
        let doy = (153 * (if mo > 2 { mo - 3 } else { mo + 9 }) + 2) / 5 + d - 1;
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
        let days = era * 146_097 + doe - 719_468;
        Some(Self(((days * SECS_PER_DAY + h * 3600 + mi * 60 + se) * NANOS_PER_SEC) + nanos))
    }

    /// `self + nanos`, saturating (deadlines are bounded long before this matters).
    pub fn plus_nanos(self, nanos: i64) -> Self {
        Self(self.0.saturating_add(nanos))
    }
}

/// Proleptic Gregorian date of a day count since the epoch (Howard Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secs = self.0.div_euclid(NANOS_PER_SEC);
        let nanos = self.0.rem_euclid(NANOS_PER_SEC);
        let (year, month, day) = civil_from_days(secs.div_euclid(SECS_PER_DAY));
        let sod = secs.rem_euclid(SECS_PER_DAY);
        write!(f, "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{nanos:09}Z", sod / 3600, sod / 60 % 60, sod % 60)
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_what_it_renders() {
        for nanos in [0, -1, 951_782_400 * NANOS_PER_SEC, 1_796_040_000 * NANOS_PER_SEC + 123_456_789] {
            assert_eq!(Timestamp::parse(&Timestamp(nanos).to_string()), Some(Timestamp(nanos)), "{nanos}");
        }
        assert_eq!(Timestamp::parse("1970-01-01T00:00:01.5Z"), Some(Timestamp(1_500_000_000)));
        assert_eq!(Timestamp::parse("1970-01-01T00:00:01Z"), Some(Timestamp(NANOS_PER_SEC)));
        assert_eq!(Timestamp::parse("yesterday"), None);
    }

    #[test]
    fn renders_rfc3339_with_nanoseconds() {
        assert_eq!(Timestamp(0).to_string(), "1970-01-01T00:00:00.000000000Z");
        // 2026-11-30T12:00:00.123456789Z
        let t = Timestamp(1_796_040_000 * NANOS_PER_SEC + 123_456_789);
        assert_eq!(t.to_string(), "2026-11-30T12:00:00.123456789Z");
        // A leap day.
        let t = Timestamp(951_782_400 * NANOS_PER_SEC);
        assert_eq!(t.to_string(), "2000-02-29T00:00:00.000000000Z");
    }
}
