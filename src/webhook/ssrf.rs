//! The SSRF guard for outbound webhooks (spec §9): which URLs may be delivered to, which
//! addresses a delivery may connect to, and an HTTP client that enforces it.
//!
//! Addresses are checked where the connection is made: the client's DNS resolver drops every
//! address the guard does not permit, so a name that resolves to a public address when the
//! endpoint is configured and to `127.0.0.1` at delivery time (DNS rebinding) still cannot reach
//! loopback. IP-literal hosts never reach a resolver, so `Guard::check` refuses them up front.
//! The allow-list (`--webhook-allow-cidr`) overrides the refusals, for tests on `127.0.0.1`.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use url::Url;

use crate::common::cidr::Cidr;

/// A whole delivery, connection included, must finish within this.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);
/// A receiver that does not accept the connection quickly is treated as down.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A network in the refusal tables, with the word that explains the refusal.
struct Range {
    cidr: Cidr,
    reason: &'static str,
}

const fn v4(a: u8, b: u8, c: u8, d: u8, prefix: u8, reason: &'static str) -> Range {
    Range { cidr: Cidr::new_unchecked(IpAddr::V4(Ipv4Addr::new(a, b, c, d)), prefix), reason }
}

const fn v6(segments: [u16; 8], prefix: u8, reason: &'static str) -> Range {
    let [a, b, c, d, e, f, g, h] = segments;
    Range { cidr: Cidr::new_unchecked(IpAddr::V6(Ipv6Addr::new(a, b, c, d, e, f, g, h)), prefix), reason }
}

/// IPv4 ranges no webhook may reach (IANA special-purpose registry, RFC 6890 and successors).
/// First match gives the reason, so narrower entries come before the ranges that hold them.
const V4_REFUSED: &[Range] = &[
    v4(0, 0, 0, 0, 32, "unspecified"),
    v4(0, 0, 0, 0, 8, "\"this network\""),
    v4(10, 0, 0, 0, 8, "private"),
    v4(100, 64, 0, 0, 10, "shared (CGNAT)"),
    v4(127, 0, 0, 0, 8, "loopback"),
    v4(169, 254, 0, 0, 16, "link-local"),
    v4(172, 16, 0, 0, 12, "private"),
    v4(192, 0, 0, 0, 24, "IETF protocol assignments"),
    v4(192, 0, 2, 0, 24, "documentation"),
    v4(192, 168, 0, 0, 16, "private"),
    v4(198, 18, 0, 0, 15, "benchmarking"),
    v4(198, 51, 100, 0, 24, "documentation"),
    v4(203, 0, 113, 0, 24, "documentation"),
    v4(224, 0, 0, 0, 4, "multicast"),
    v4(255, 255, 255, 255, 32, "broadcast"),
    v4(240, 0, 0, 0, 4, "reserved"),
];

/// IPv6 ranges refused outright. Ranges that embed an IPv4 address (mapped, NAT64, 6to4) are
/// judged by that address instead, in `v6_reason`.
const V6_REFUSED: &[Range] = &[
    v6([0, 0, 0, 0, 0, 0, 0, 0], 128, "unspecified"),
    v6([0, 0, 0, 0, 0, 0, 0, 1], 128, "loopback"),
    // Deprecated (RFC 4291) and never a real destination; how a stack treats it varies.
    v6([0, 0, 0, 0, 0, 0, 0, 0], 96, "IPv4-compatible (deprecated)"),
    v6([0x64, 0xff9b, 1, 0, 0, 0, 0, 0], 48, "local-use NAT64"),
    v6([0x100, 0, 0, 0, 0, 0, 0, 0], 64, "discard-only"),
    v6([0x2001, 0, 0, 0, 0, 0, 0, 0], 32, "Teredo"),
    v6([0x2001, 2, 0, 0, 0, 0, 0, 0], 48, "benchmarking"),
    v6([0x2001, 0xdb8, 0, 0, 0, 0, 0, 0], 32, "documentation"),
    v6([0x3fff, 0, 0, 0, 0, 0, 0, 0], 20, "documentation"),
    v6([0xfc00, 0, 0, 0, 0, 0, 0, 0], 7, "unique local"),
    v6([0xfe80, 0, 0, 0, 0, 0, 0, 0], 10, "link-local"),
    v6([0xfec0, 0, 0, 0, 0, 0, 0, 0], 10, "site-local (deprecated)"),
    v6([0xff00, 0, 0, 0, 0, 0, 0, 0], 8, "multicast"),
];

const NAT64: Range = v6([0x64, 0xff9b, 0, 0, 0, 0, 0, 0], 96, "NAT64");
const SIX_TO_FOUR: Range = v6([0x2002, 0, 0, 0, 0, 0, 0, 0], 16, "6to4");
/// All global unicast IPv6 is allocated from here; anything else left over is not a destination.
const GLOBAL_UNICAST: Range = v6([0x2000, 0, 0, 0, 0, 0, 0, 0], 3, "global unicast");

/// Why `ip` is refused (a word such as `loopback`), or `None` when it is a public address.
pub fn forbidden_reason(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(a) => v4_reason(a),
        IpAddr::V6(a) => v6_reason(a),
    }
}

/// Whether no webhook may reach `ip` (before any allow-list): private, loopback, link-local,
/// CGNAT, multicast, broadcast, documentation, benchmarking, reserved, unique local,
/// unspecified, and IPv6 forms that embed such an IPv4 address.
pub fn is_forbidden(ip: IpAddr) -> bool {
    forbidden_reason(ip).is_some()
}

fn lookup(table: &[Range], ip: IpAddr) -> Option<&'static str> {
    table.iter().find(|r| r.cidr.contains(ip)).map(|r| r.reason)
}

fn v4_reason(ip: Ipv4Addr) -> Option<&'static str> {
    lookup(V4_REFUSED, IpAddr::V4(ip))
}

fn v6_reason(ip: Ipv6Addr) -> Option<&'static str> {
    // These forms reach the embedded IPv4 host (a dual-stack socket, a NAT64 gateway, a 6to4
    // relay), so they are exactly as dangerous as it is: `::ffff:127.0.0.1` is loopback.
    if let Some(embedded) = ip.to_ipv4_mapped() {
        return v4_reason(embedded);
    }
    let bits = ip.to_bits();
    if NAT64.cidr.contains(IpAddr::V6(ip)) {
        return v4_reason(Ipv4Addr::from_bits(bits as u32));
    }
    if SIX_TO_FOUR.cidr.contains(IpAddr::V6(ip)) {
        return v4_reason(Ipv4Addr::from_bits((bits >> 80) as u32));
    }
    if let Some(reason) = lookup(V6_REFUSED, IpAddr::V6(ip)) {
        return Some(reason);
    }
    if !GLOBAL_UNICAST.cidr.contains(IpAddr::V6(ip)) {
        return Some("reserved");
    }
    None
}

/// Why a webhook URL or address was refused.
#[derive(Debug, thiserror::Error)]
pub enum SsrfError {
    #[error("not a valid URL: {0}")]
    BadUrl(url::ParseError),
    #[error("webhook URLs must be http or https, not `{0}`")]
    Scheme(String),
    #[error("webhook URLs must not carry a user name or password")]
    UserInfo,
    #[error("the webhook URL has no host")]
    MissingHost,
    #[error("webhooks may not reach {ip} ({reason}); allow it with --webhook-allow-cidr")]
    Forbidden { ip: IpAddr, reason: &'static str },
    #[error("cannot resolve {host}: {source}")]
    Lookup { host: String, source: std::io::Error },
    #[error(
        "{host} resolves to no address webhooks may reach (refused: {}); allow one with --webhook-allow-cidr",
        list(refused)
    )]
    NoPermittedAddress { host: String, refused: Vec<IpAddr> },
}

fn list(ips: &[IpAddr]) -> String {
    ips.iter().map(IpAddr::to_string).collect::<Vec<_>>().join(", ")
}

/// The scheme of a webhook URL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    Http,
    Https,
}

/// The host of a webhook URL: a name (checked when resolved) or an IP literal (checked now).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Host {
    Domain(String),
    Ip(IpAddr),
}

/// A webhook URL that passed `check_url`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The normalised URL (delivery sends to the configured string, which `reqwest` parses with
    /// this same `url` crate, and the resolver checks every address it connects to anyway).
    pub url: Url,
    pub scheme: Scheme,
    pub host: Host,
    /// The explicit port, or 80/443 by scheme.
    pub port: u16,
}

/// Checks the shape of a webhook URL: http or https, no user name or password, a host.
///
/// Parsing uses the `url` crate, the same parser reqwest uses, so every spelling of an IP
/// address it understands (`http://2130706433/` is `127.0.0.1`) comes back as `Host::Ip` and
/// cannot slip past `Guard::check_literal` as a "name".
pub fn check_url(url: &str) -> Result<Target, SsrfError> {
    let url = Url::parse(url).map_err(|e| match e {
        url::ParseError::EmptyHost => SsrfError::MissingHost,
        e => SsrfError::BadUrl(e),
    })?;
    let scheme = match url.scheme() {
        "http" => Scheme::Http,
        "https" => Scheme::Https,
        other => return Err(SsrfError::Scheme(other.to_owned())),
    };
    // Credentials in a URL end up in logs and the delivery table; they have no place here.
    if !url.username().is_empty() || url.password().is_some() {
        return Err(SsrfError::UserInfo);
    }
    let host = match url.host() {
        Some(url::Host::Domain(name)) if !name.is_empty() => Host::Domain(name.to_owned()),
        Some(url::Host::Ipv4(a)) => Host::Ip(IpAddr::V4(a)),
        Some(url::Host::Ipv6(a)) => Host::Ip(IpAddr::V6(a)),
        Some(url::Host::Domain(_)) | None => return Err(SsrfError::MissingHost),
    };
    let port = url.port().unwrap_or(match scheme {
        Scheme::Http => 80,
        Scheme::Https => 443,
    });
    Ok(Target { url, scheme, host, port })
}

/// Decides which addresses webhooks may reach: anything not forbidden, plus the allow-list.
/// Also the DNS resolver of the delivery client (see `client`).
#[derive(Debug, Clone, Default)]
pub struct Guard {
    allow: Vec<Cidr>,
}

impl Guard {
    /// A guard that also permits every address in `allow` (`--webhook-allow-cidr`).
    pub fn new(allow: Vec<Cidr>) -> Self {
        Self { allow }
    }

    /// Whether a delivery may connect to `ip`.
    pub fn permits(&self, ip: IpAddr) -> bool {
        self.refusal(ip).is_none()
    }

    /// Why `ip` is refused, or `None` when it is permitted.
    fn refusal(&self, ip: IpAddr) -> Option<&'static str> {
        // `::ffff:127.0.0.1` is 127.0.0.1 on the wire, so an IPv4 allow entry covers it too.
        let canonical = ip.to_canonical();
        if self.allow.iter().any(|c| c.contains(ip) || c.contains(canonical)) {
            return None;
        }
        forbidden_reason(ip)
    }

    /// Refuses an IP-literal host the guard does not permit; names pass (the resolver checks
    /// their addresses at connect time). Needed because literals never reach the resolver.
    pub fn check_literal(&self, host: &Host) -> Result<(), SsrfError> {
        match host {
            Host::Domain(_) => Ok(()),
            Host::Ip(ip) => match self.refusal(*ip) {
                None => Ok(()),
                Some(reason) => Err(SsrfError::Forbidden { ip: *ip, reason }),
            },
        }
    }

    /// `check_url` then `check_literal`: everything that can be known before connecting. Run it
    /// on every URL handed to the client from `client`.
    pub fn check(&self, url: &str) -> Result<Target, SsrfError> {
        let target = check_url(url)?;
        self.check_literal(&target.host)?;
        Ok(target)
    }
}

impl Resolve for Guard {
    fn resolve(&self, name: Name) -> Resolving {
        let guard = self.clone();
        let host = name.as_str().to_owned();
        Box::pin(async move {
            // Port 0: reqwest puts the URL's port on whatever addresses come back.
            let found = tokio::net::lookup_host((host.as_str(), 0))
                .await
                .map_err(|source| SsrfError::Lookup { host: host.clone(), source })?;
            let (permitted, refused): (Vec<SocketAddr>, Vec<SocketAddr>) = found.partition(|a| guard.permits(a.ip()));
            if permitted.is_empty() {
                return Err(SsrfError::NoPermittedAddress {
                    host,
                    refused: refused.iter().map(SocketAddr::ip).collect(),
                }
                .into());
            }
            if !refused.is_empty() {
                tracing::debug!(%host, refused = %list(&refused.iter().map(SocketAddr::ip).collect::<Vec<_>>()), "dropped addresses webhooks may not reach");
            }
            let addrs: Addrs = Box::new(permitted.into_iter());
            Ok(addrs)
        })
    }
}

/// The delivery client: resolves through `guard` (dropping refused addresses at connect time),
/// uses no proxy (a proxy would resolve the name itself, past the guard), follows no redirect
/// (a 3xx counts as a failed delivery, and following one would skip `Guard::check`), and gives up
/// after `REQUEST_TIMEOUT`. IP-literal URLs bypass the resolver: pass every URL through
/// `Guard::check` first.
/// Fails only when the TLS backend cannot load the machine's CA certificates (the options are
/// fixed), e.g. in a container without `ca-certificates`.
pub fn client(guard: Guard) -> Result<reqwest::Client, reqwest::Error> {
    reqwest::Client::builder()
        .dns_resolver(guard)
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(REQUEST_TIMEOUT)
        .connect_timeout(CONNECT_TIMEOUT)
        .build()
}

#[cfg(test)]
mod tests {
    use std::str::FromStr;

    use super::*;
    use crate::common::cidr::testing::{cidr, ip};

    #[test]
    fn refuses_every_forbidden_range() {
        let refused = [
            ("0.0.0.0", "unspecified"),
            ("0.1.2.3", "\"this network\""),
            ("10.0.0.1", "private"),
            ("10.255.255.255", "private"),
            ("100.64.0.1", "shared (CGNAT)"),
            ("100.127.255.254", "shared (CGNAT)"),
            ("127.0.0.1", "loopback"),
            ("127.255.0.9", "loopback"),
            ("169.254.169.254", "link-local"),
            ("172.16.0.1", "private"),
            ("172.31.255.255", "private"),
            ("192.0.0.8", "IETF protocol assignments"),
            ("192.0.2.10", "documentation"),
            ("192.168.1.1", "private"),
            ("198.18.0.1", "benchmarking"),
            ("198.19.255.255", "benchmarking"),
            ("198.51.100.7", "documentation"),
            ("203.0.113.200", "documentation"),
            ("224.0.0.1", "multicast"),
            ("239.255.255.250", "multicast"),
            ("240.0.0.1", "reserved"),
            ("255.255.255.255", "broadcast"),
            ("::", "unspecified"),
            ("::1", "loopback"),
            ("::127.0.0.1", "IPv4-compatible (deprecated)"),
            ("::8.8.8.8", "IPv4-compatible (deprecated)"),
            ("fe80::1", "link-local"),
            ("febf:ffff::1", "link-local"),
            ("fec0::1", "site-local (deprecated)"),
            ("fc00::1", "unique local"),
            ("fd12:3456:789a::1", "unique local"),
            ("ff02::1", "multicast"),
            ("2001:db8::1", "documentation"),
            ("3fff::1", "documentation"),
            ("2001:0:4136:e378::1", "Teredo"),
            ("2001:2::1", "benchmarking"),
            ("64:ff9b:1::1", "local-use NAT64"),
            ("100::1", "discard-only"),
            ("4000::1", "reserved"),
            // Forms that embed an IPv4 address are as bad as the address they embed.
            ("::ffff:127.0.0.1", "loopback"),
            ("::ffff:10.1.2.3", "private"),
            ("::ffff:169.254.169.254", "link-local"),
            ("::ffff:0.0.0.0", "unspecified"),
            ("64:ff9b::127.0.0.1", "loopback"),
            ("64:ff9b::192.168.0.1", "private"),
            ("2002:7f00:1::", "loopback"),
            ("2002:c0a8:101::1", "private"),
            ("2002:a9fe:a9fe::", "link-local"),
        ];
        let guard = Guard::default();
        for (text, reason) in refused {
            assert_eq!(forbidden_reason(ip(text)), Some(reason), "{text}");
            assert!(is_forbidden(ip(text)), "{text}");
            assert!(!guard.permits(ip(text)), "{text}");
        }
    }

    #[test]
    fn permits_public_addresses() {
        let permitted = [
            "1.1.1.1",
            "8.8.8.8",
            "9.255.255.255",
            "11.0.0.0",
            "100.63.255.255",
            "100.128.0.0",
            "172.15.255.255",
            "172.32.0.0",
            "192.0.3.1",
            "192.169.0.1",
            "198.17.255.255",
            "198.20.0.0",
            "223.255.255.255",
            "2606:4700:4700::1111",
            "2a00:1450:4001:80b::200e",
            "2001:4860:4860::8888",
            "::ffff:8.8.8.8",
            "64:ff9b::8.8.8.8",
            "2002:808:808::1",
        ];
        let guard = Guard::default();
        for text in permitted {
            assert_eq!(forbidden_reason(ip(text)), None, "{text}");
            assert!(guard.permits(ip(text)), "{text}");
        }
    }

    #[test]
    fn the_allow_list_overrides_refusals_and_covers_mapped_forms() {
        let guard = Guard::new(vec![cidr("127.0.0.1/32"), cidr("fd00::/8")]);
        assert!(guard.permits(ip("127.0.0.1")));
        assert!(guard.permits(ip("::ffff:127.0.0.1")));
        assert!(guard.permits(ip("fd00::5")));
        assert!(!guard.permits(ip("127.0.0.2")));
        assert!(!guard.permits(ip("::1")));
        assert!(!guard.permits(ip("10.0.0.1")));
        assert!(guard.permits(ip("8.8.8.8")));
    }

    #[test]
    fn checks_url_shape() {
        let t = check_url("https://hooks.example.com/in?x=1").unwrap();
        assert_eq!(t.scheme, Scheme::Https);
        assert_eq!(t.host, Host::Domain("hooks.example.com".into()));
        assert_eq!(t.port, 443);
        let t = check_url("http://example.com:8080").unwrap();
        assert_eq!((t.scheme, t.port), (Scheme::Http, 8080));
        assert_eq!(t.url.as_str(), "http://example.com:8080/");
        let t = check_url("http://[::1]:9000/x").unwrap();
        assert_eq!(t.host, Host::Ip(ip("::1")));

        assert!(matches!(check_url("ftp://example.com/"), Err(SsrfError::Scheme(s)) if s == "ftp"));
        assert!(matches!(check_url("file:///etc/passwd"), Err(SsrfError::Scheme(_))));
        assert!(matches!(check_url("http://user:pw@example.com/"), Err(SsrfError::UserInfo)));
        assert!(matches!(check_url("http://user@example.com/"), Err(SsrfError::UserInfo)));
        assert!(matches!(check_url("http://:pw@example.com/"), Err(SsrfError::UserInfo)));
        assert!(matches!(check_url("http://"), Err(SsrfError::MissingHost)));
        assert!(matches!(check_url("http://:8080/"), Err(SsrfError::MissingHost)));
        assert!(matches!(check_url("example.com/hook"), Err(SsrfError::BadUrl(_))));
        assert!(matches!(check_url("http://exa mple.com/"), Err(SsrfError::BadUrl(_))));
    }

    #[test]
    fn refuses_ip_literals_in_every_spelling_unless_allowed() {
        let guard = Guard::default();
        for url in [
            "http://127.0.0.1:8080/",
            "http://2130706433/",
            "http://0x7f.1/",
            "http://[::1]/",
            "http://[::ffff:127.0.0.1]/",
            "http://[::ffff:7f00:1]/",
            "http://169.254.169.254/latest/meta-data/",
            "http://0/",
        ] {
            assert!(matches!(guard.check(url), Err(SsrfError::Forbidden { .. })), "{url}");
        }
        let err = guard.check("http://10.0.0.1/").unwrap_err();
        assert_eq!(err.to_string(), "webhooks may not reach 10.0.0.1 (private); allow it with --webhook-allow-cidr");
        assert!(guard.check("http://8.8.8.8/").is_ok());
        assert!(guard.check("http://localhost/").is_ok(), "names are checked when resolved");

        let allowed = Guard::new(vec![cidr("127.0.0.1/32")]);
        assert!(allowed.check("http://127.0.0.1:8080/").is_ok());
        assert!(allowed.check("http://[::ffff:127.0.0.1]/").is_ok());
        assert!(allowed.check("http://127.0.0.2/").is_err());
    }

    async fn resolve(guard: &Guard, host: &str) -> Result<Vec<SocketAddr>, String> {
        let name = Name::from_str(host).unwrap();
        match guard.resolve(name).await {
            Ok(addrs) => Ok(addrs.collect()),
            Err(e) => Err(e.to_string()),
        }
    }

    // Resolving `localhost` reads the hosts file; no packet leaves the machine.
    #[tokio::test]
    async fn the_resolver_drops_loopback_for_localhost_unless_allowed() {
        let err = resolve(&Guard::default(), "localhost").await.unwrap_err();
        assert!(err.starts_with("localhost resolves to no address webhooks may reach"), "{err}");

        let all_loopback = Guard::new(vec![cidr("127.0.0.0/8"), cidr("::1/128")]);
        let addrs = resolve(&all_loopback, "localhost").await.unwrap();
        assert!(!addrs.is_empty());
        assert!(addrs.iter().all(|a| a.ip().is_loopback()), "{addrs:?}");

        // Only the allowed address survives; `::1`, if the hosts file has it, is dropped.
        let v4_only = Guard::new(vec![cidr("127.0.0.1/32")]);
        let addrs = resolve(&v4_only, "localhost").await.unwrap();
        assert!(!addrs.is_empty());
        assert!(addrs.iter().all(|a| a.ip() == ip("127.0.0.1")), "{addrs:?}");
    }

    // The client really resolves through the guard: a request to `localhost` fails before any
    // connection, which the test's own listener would otherwise see.
    #[tokio::test]
    async fn the_client_resolves_through_the_guard() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let url = format!("http://localhost:{port}/");
        let sent = tokio::time::timeout(Duration::from_secs(10), client(Guard::default()).unwrap().get(&url).send())
            .await
            .expect("refusal is immediate");
        let err = sent.unwrap_err();
        let mut chain = String::new();
        let mut source: Option<&dyn std::error::Error> = Some(&err);
        while let Some(e) = source {
            chain.push_str(&format!("{e}; "));
            source = e.source();
        }
        assert!(chain.contains("resolves to no address webhooks may reach"), "{chain}");
        let accepted = tokio::time::timeout(Duration::from_millis(100), listener.accept()).await;
        assert!(accepted.is_err(), "nothing may connect");
    }
}
