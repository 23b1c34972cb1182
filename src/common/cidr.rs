//! IP networks (`10.0.0.0/8`, `::1/128`), as flags name them: the webhook SSRF guard's allow list
//! (`--webhook-allow-cidr`) and the reverse proxies whose `X-Forwarded-For` is trusted
//! (`--trusted-proxy`).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// An IP network such as `10.0.0.0/8` or `::1/128`; a bare address means that one address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cidr {
    network: IpAddr,
    prefix: u8,
}

/// Why a CIDR was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CidrError {
    #[error("`{0}` is not an IP address")]
    BadAddress(String),
    #[error("`{0}` is not a prefix length (a number of bits after the `/`)")]
    BadPrefix(String),
    #[error("a prefix of /{prefix} is longer than the {max} bits of the address")]
    PrefixTooLong { prefix: u32, max: u32 },
    /// Refused rather than silently truncated: `10.0.0.1/8` is more likely a typo for
    /// `10.0.0.1/32` than a request to allow all of `10.0.0.0/8`.
    #[error("`{given}` has address bits set beyond its prefix; the network is `{network}`")]
    HostBitsSet { given: String, network: Cidr },
}

impl Cidr {
    /// A network whose bits beyond the prefix are known to be zero: for constant tables (their
    /// entries are checked by the tests of the module that holds them).
    pub const fn new_unchecked(network: IpAddr, prefix: u8) -> Self {
        Self { network, prefix }
    }

    /// A network from its address and prefix length; bits beyond the prefix must be zero.
    pub fn new(network: IpAddr, prefix: u8) -> Result<Self, CidrError> {
        let max = max_prefix(network);
        if u32::from(prefix) > max {
            return Err(CidrError::PrefixTooLong { prefix: prefix.into(), max });
        }
        let cidr = Self { network, prefix };
        let masked = cidr.masked(network);
        if masked != network {
            return Err(CidrError::HostBitsSet {
                given: format!("{network}/{prefix}"),
                network: Self { network: masked, prefix },
            });
        }
        Ok(cidr)
    }

    /// The network address (all bits beyond the prefix zero).
    pub fn network(&self) -> IpAddr {
        self.network
    }

    /// The prefix length in bits.
    pub fn prefix(&self) -> u8 {
        self.prefix
    }

    /// Whether `ip` is inside this network. Families never match each other: an IPv4-mapped
    /// IPv6 address is not inside an IPv4 network here (the SSRF guard handles that).
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.network, ip) {
            (IpAddr::V4(_), IpAddr::V4(_)) | (IpAddr::V6(_), IpAddr::V6(_)) => self.masked(ip) == self.network,
            _ => false,
        }
    }

    /// `ip` with the bits beyond this prefix cleared (`ip` has the network's family).
    fn masked(&self, ip: IpAddr) -> IpAddr {
        match ip {
            IpAddr::V4(a) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(self.prefix)).unwrap_or(0);
                IpAddr::V4(Ipv4Addr::from_bits(a.to_bits() & mask))
            }
            IpAddr::V6(a) => {
                let mask = u128::MAX.checked_shl(128 - u32::from(self.prefix)).unwrap_or(0);
                IpAddr::V6(Ipv6Addr::from_bits(a.to_bits() & mask))
            }
        }
    }
}

fn max_prefix(ip: IpAddr) -> u32 {
    match ip {
        IpAddr::V4(_) => 32,
        IpAddr::V6(_) => 128,
    }
}

impl FromStr for Cidr {
    type Err = CidrError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let (address, prefix) = match text.split_once('/') {
            Some((address, prefix)) => (address, Some(prefix)),
            None => (text, None),
        };
        let network: IpAddr = address.parse().map_err(|_| CidrError::BadAddress(address.to_owned()))?;
        let max = max_prefix(network);
        let prefix = match prefix {
            None => max,
            // Digits only: `u32::from_str` would also take `+8`.
            Some(p) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => {
                p.parse::<u32>().map_err(|_| CidrError::BadPrefix(p.to_owned()))?
            }
            Some(p) => return Err(CidrError::BadPrefix(p.to_owned())),
        };
        if prefix > max {
            return Err(CidrError::PrefixTooLong { prefix, max });
        }
        // In range, so it fits: max is at most 128.
        Self::new(network, prefix as u8)
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

/// What the tests of the modules that use networks parse their addresses and networks with.
#[cfg(test)]
pub(crate) mod testing {
    use super::Cidr;
    use std::net::IpAddr;

    pub(crate) fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    pub(crate) fn cidr(text: &str) -> Cidr {
        text.parse().unwrap()
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{cidr, ip};
    use super::*;

    #[test]
    fn parses_cidrs() {
        let c = cidr("10.0.0.0/8");
        assert_eq!((c.network(), c.prefix()), (ip("10.0.0.0"), 8));
        assert_eq!(cidr("127.0.0.1/32").to_string(), "127.0.0.1/32");
        assert_eq!(cidr("::1/128").to_string(), "::1/128");
        assert_eq!(cidr("127.0.0.1"), cidr("127.0.0.1/32"));
        assert_eq!(cidr("::1"), cidr("::1/128"));
        assert_eq!(cidr("0.0.0.0/0").prefix(), 0);
        assert_eq!(cidr("::/0").prefix(), 0);
    }

    #[test]
    fn refuses_bad_cidrs_with_clear_errors() {
        let err = |t: &str| t.parse::<Cidr>().unwrap_err();
        assert_eq!(err("banana/8"), CidrError::BadAddress("banana".into()));
        assert_eq!(err(""), CidrError::BadAddress("".into()));
        assert_eq!(err("10.0.0.0/"), CidrError::BadPrefix("".into()));
        assert_eq!(err("10.0.0.0/+8"), CidrError::BadPrefix("+8".into()));
        assert_eq!(err("10.0.0.0/8/8"), CidrError::BadPrefix("8/8".into()));
        assert_eq!(err("10.0.0.0/33"), CidrError::PrefixTooLong { prefix: 33, max: 32 });
        assert_eq!(err("::/129"), CidrError::PrefixTooLong { prefix: 129, max: 128 });
        assert!(matches!(err("10.0.0.0/99999999999"), CidrError::BadPrefix(_)));
        let host_bits = err("10.0.0.1/8");
        assert_eq!(
            host_bits.to_string(),
            "`10.0.0.1/8` has address bits set beyond its prefix; the network is `10.0.0.0/8`"
        );
    }

    #[test]
    fn cidr_containment() {
        let net = cidr("172.16.0.0/12");
        assert!(net.contains(ip("172.16.0.0")));
        assert!(net.contains(ip("172.31.255.255")));
        assert!(!net.contains(ip("172.32.0.0")));
        assert!(!net.contains(ip("::ffff:172.16.0.1")), "families never mix");
        assert!(cidr("0.0.0.0/0").contains(ip("8.8.8.8")));
        assert!(!cidr("0.0.0.0/0").contains(ip("::1")));
        assert!(cidr("::/0").contains(ip("2001:db8::1")));
        assert!(cidr("fe80::/10").contains(ip("febf::1")));
        assert!(!cidr("fe80::/10").contains(ip("fec0::1")));
        assert!(cidr("::1/128").contains(ip("::1")));
        assert!(!cidr("::1/128").contains(ip("::2")));
    }
}
