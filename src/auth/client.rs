//! Who a request comes from, as the per-address limits count it: the peer's address, or, when the
//! peer is a `--trusted-proxy`, the client address that proxy names in `X-Forwarded-For`. The
//! header is believed only from trusted peers, so nobody else can pick the address they are
//! counted under.

use std::net::{IpAddr, Ipv4Addr};

use axum::http::HeaderMap;

use crate::common::cidr::Cidr;

/// A client address as the per-address limits count it: IPv4 addresses one by one (an
/// IPv4-mapped IPv6 address as its IPv4 address), IPv6 by /64, the block one subscriber gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ClientKey {
    V4(Ipv4Addr),
    V6Prefix(u64),
}

impl From<IpAddr> for ClientKey {
    fn from(ip: IpAddr) -> Self {
        match ip {
            IpAddr::V4(v4) => Self::V4(v4),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => Self::V4(v4),
                None => Self::V6Prefix((u128::from(v6) >> 64) as u64),
            },
        }
    }
}

/// The `--trusted-proxy` networks.
#[derive(Debug, Clone, Default)]
pub struct TrustedProxies(Vec<Cidr>);

impl TrustedProxies {
    pub fn new(networks: Vec<Cidr>) -> Self {
        Self(networks)
    }

    /// Whether `ip` is one of the trusted proxies.
    pub fn trusts(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        self.0.iter().any(|network| network.contains(ip))
    }

    /// The client's address: the peer's, unless the peer is a trusted proxy; then the last address
    /// of `X-Forwarded-For` that is not itself a trusted proxy (each proxy appends the address it
    /// saw, so everything left of the first untrusted hop may have been written by the client). A
    /// hop that is not an address ends the walk at the last trusted one.
    pub fn client(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        let mut client = peer;
        if !self.trusts(peer) {
            return client;
        }
        let hops = headers
            .get_all("x-forwarded-for")
            .iter()
            .filter_map(|value| value.to_str().ok())
            .flat_map(|value| value.split(','))
            .collect::<Vec<_>>();
        for hop in hops.iter().rev() {
            let Ok(ip) = hop.trim().parse::<IpAddr>() else { break };
            client = ip;
            if !self.trusts(ip) {
                break;
            }
        }
        client
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn forwarded(values: &[&str]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for value in values {
            headers.append("x-forwarded-for", value.parse().unwrap());
        }
        headers
    }

    #[test]
    fn forwarded_addresses_are_believed_only_from_trusted_proxies() {
        let proxies = TrustedProxies::new(vec!["10.0.0.0/8".parse().unwrap()]);
        let proxy: IpAddr = "10.0.0.2".parse().unwrap();
        let stranger: IpAddr = "198.51.100.7".parse().unwrap();
        let headers = forwarded(&["203.0.113.9"]);
        assert_eq!(proxies.client(stranger, &headers), stranger, "a stranger cannot name its address");
        assert_eq!(proxies.client(proxy, &headers), "203.0.113.9".parse::<IpAddr>().unwrap());
        // A client that forges hops of its own is counted under the address the proxy saw.
        let forged = forwarded(&["1.2.3.4, 203.0.113.9", "10.0.0.1"]);
        assert_eq!(proxies.client(proxy, &forged), "203.0.113.9".parse::<IpAddr>().unwrap());
        // Garbage where the proxy's hop should be: the proxy itself is the client.
        assert_eq!(proxies.client(proxy, &forwarded(&["not-an-address"])), proxy);
        assert_eq!(proxies.client(proxy, &HeaderMap::new()), proxy);
        let mapped: IpAddr = "::ffff:10.1.2.3".parse().unwrap();
        assert!(proxies.trusts(mapped), "an IPv4-mapped address is its IPv4 address");
    }

    #[test]
    fn ipv6_addresses_count_by_their_64() {
        let a: IpAddr = "2001:db8:1:2::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:ffff::9".parse().unwrap();
        let c: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(ClientKey::from(a), ClientKey::from(b));
        assert_ne!(ClientKey::from(a), ClientKey::from(c));
        let mapped: IpAddr = "::ffff:192.0.2.1".parse().unwrap();
        assert_eq!(ClientKey::from(mapped), ClientKey::V4("192.0.2.1".parse().unwrap()));
    }
}
