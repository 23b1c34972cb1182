//! Who may do what (spec §10): tokens with roles, the page's login cookie, the `Host` and
//! `Origin` checks, per-token limits, the throttle on failed authentication (per client address,
//! `client` says which), and the fail-secure bind. The HTTP guard (`http::guard`)
//! applies it to every route; this module holds the decisions, free of HTTP plumbing.

pub mod client;
pub mod cookie;
pub mod failures;
pub mod limits;
pub mod tokens;

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::http::HeaderMap;

pub use client::{ClientKey, TrustedProxies};
pub use cookie::CookieKey;
pub use failures::FailureLimiter;
pub use limits::{Limiter, StreamSlot, TokenLimits};
pub use tokens::{PRINCIPAL_LINK, PRINCIPAL_WEBHOOK, Role, Token, Tokens, TokensError};

use crate::common::cidr::Cidr;
use crate::common::public_url::PublicUrl;
use crate::common::signature::Secret;

/// Who may call a route: one row of the route × role table of spec §10.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Anyone: health, the page and its assets, the contract, capabilities, login.
    Open,
    /// Anyone holding an answer link: the token in the path is the capability.
    Link,
    /// Tokens of these roles; an agent token only within its session prefix.
    Roles(&'static [Role]),
    /// Answering: responders and admins, or a request signed with the webhook secret (verified
    /// together with the body it covers).
    Answer,
}

impl Access {
    /// Opening and closing gates, reading and acking inboxes.
    pub const AGENT: Self = Self::Roles(&[Role::Agent, Role::Admin]);
    /// Reading one session's gates and journal.
    pub const SESSION_READ: Self = Self::Roles(&[Role::Agent, Role::Responder, Role::Admin]);
    /// Reading across sessions.
    pub const RESPONDER: Self = Self::Roles(&[Role::Responder, Role::Admin]);
    /// Operating the server: webhook deliveries (and metrics, once served).
    pub const ADMIN: Self = Self::Roles(&[Role::Admin]);

    /// The `x-roles` of the route's operation in `openapi.yaml`.
    pub fn names(self) -> Vec<&'static str> {
        match self {
            Self::Open => vec!["open"],
            Self::Link => vec!["link"],
            Self::Roles(roles) => roles.iter().map(|r| r.name()).collect(),
            Self::Answer => vec!["responder", "admin", PRINCIPAL_WEBHOOK],
        }
    }

    /// Whether the route needs a credential at all.
    pub fn guarded(self) -> bool {
        matches!(self, Self::Roles(_) | Self::Answer)
    }

    /// Whether `role` may call the route (agent scope is checked separately).
    pub fn permits(self, role: Role) -> bool {
        match self {
            Self::Open | Self::Link => true,
            Self::Roles(roles) => roles.contains(&role),
            Self::Answer => matches!(role, Role::Responder | Role::Admin),
        }
    }
}

/// Who made a request, once the guard let it through.
#[derive(Debug, Clone)]
pub enum Caller {
    /// Open mode (no tokens file) or an open route: nobody in particular.
    Anyone,
    /// A bearer token, or the login cookie of one.
    Token(Arc<Token>),
    /// No credential, but a webhook signature that the answer's body extractor verifies.
    Signature,
}

impl Caller {
    /// The `source.principal` of answers made by this caller.
    pub fn principal(&self) -> Option<String> {
        match self {
            Self::Anyone => None,
            Self::Token(token) => Some(token.name.clone()),
            Self::Signature => Some(PRINCIPAL_WEBHOOK.into()),
        }
    }
}

/// Why the server refuses to start with these flags.
#[derive(Debug, thiserror::Error)]
pub enum SecurityError {
    #[error(
        "refusing to listen on {0} without --tokens-file: anyone who can reach it could read and answer gates. \
         Give --tokens-file, or --insecure-public-bind if something in front of gatehouse authenticates"
    )]
    PublicBindWithoutTokens(SocketAddr),
    #[error(
        "--public-url is required when binding the unspecified address {0}: answer links and the Host check \
         need the address people use"
    )]
    PublicUrlRequired(SocketAddr),
    #[error(transparent)]
    Tokens(#[from] TokensError),
}

/// The security settings of a server, read from its flags (before anything else starts).
pub struct Security {
    /// `None`: open mode, every route open, no principals, no per-token limits.
    tokens: Option<Tokens>,
    /// Hostnames the `Host` header may name, on loopback binds (DNS-rebinding defence).
    hosts: Option<Vec<String>>,
    /// `--cors-origin`s, as `scheme://host[:port]`.
    cors_origins: Vec<String>,
    /// The origin of `--public-url`.
    public_origin: Option<String>,
    /// Login cookies carry `Secure` (and a `__Host-` name) when the public URL is https.
    secure_cookie: bool,
    limits: TokenLimits,
    /// `--trusted-proxy`: whose `X-Forwarded-For` names the client.
    proxies: TrustedProxies,
    /// `--auth-failures`: failed authentications per client address and minute.
    auth_failures: u32,
    /// `--insecure-public-bind`: a non-loopback address without tokens was asked for.
    insecure_public_bind: bool,
}

/// The security flags, checked (`config::SecurityArgs::settings`).
#[derive(Debug, Clone)]
pub struct SecuritySettings {
    pub tokens_file: Option<PathBuf>,
    /// `--insecure-public-bind`.
    pub insecure_public_bind: bool,
    /// `--allowed-host`s.
    pub allowed_hosts: Vec<String>,
    /// `--cors-origin`s, as `scheme://host[:port]`.
    pub cors_origins: Vec<String>,
    pub public_url: Option<PublicUrl>,
    /// `--rate-limit`, `--max-streams-per-token`.
    pub limits: TokenLimits,
    /// `--auth-failures`.
    pub auth_failures: u32,
    /// `--trusted-proxy`.
    pub trusted_proxies: Vec<Cidr>,
}

impl Security {
    /// Reads the tokens file and checks the bind against it (fail-secure).
    pub fn load(settings: &SecuritySettings, bind: SocketAddr) -> Result<Self, SecurityError> {
        let tokens = settings.tokens_file.as_deref().map(Tokens::load).transpose()?;
        check_exposure(bind, tokens.is_some(), settings.insecure_public_bind, settings.public_url.is_some())?;
        let public = settings.public_url.as_ref();
        let hosts = bind.ip().is_loopback().then(|| {
            let mut hosts: Vec<String> = ["localhost", "127.0.0.1", "[::1]"].map(String::from).to_vec();
            hosts.extend(public.map(|url| url.host().to_owned()));
            // A port given with a host is dropped: the Host check ignores ports.
            hosts.extend(settings.allowed_hosts.iter().filter_map(|h| host_of_authority(h)));
            hosts
        });
        Ok(Self {
            tokens,
            hosts,
            cors_origins: settings.cors_origins.clone(),
            public_origin: public.map(|url| url.origin().to_owned()),
            secure_cookie: public.is_some_and(PublicUrl::is_https),
            limits: settings.limits,
            proxies: TrustedProxies::new(settings.trusted_proxies.clone()),
            auth_failures: settings.auth_failures,
            insecure_public_bind: settings.insecure_public_bind,
        })
    }

    /// The fail-secure bind again, on the address actually served (the flag's may be port 0).
    pub fn check_exposure(&self, address: SocketAddr) -> Result<(), SecurityError> {
        check_exposure(address, self.tokens.is_some(), self.insecure_public_bind, self.public_origin.is_some())
    }

    /// The `--trusted-proxy` networks.
    pub fn trusted_proxies(&self) -> &TrustedProxies {
        &self.proxies
    }

    /// Open mode: no tokens file.
    pub fn is_open(&self) -> bool {
        self.tokens.is_none()
    }

    /// The tokens, when configured.
    pub fn tokens(&self) -> Option<&Tokens> {
        self.tokens.as_ref()
    }

    /// Whether a `Host` header value may be served (always, on non-loopback binds).
    pub fn host_allowed(&self, host: Option<&str>) -> bool {
        let Some(allowed) = &self.hosts else {
            return true;
        };
        host.and_then(host_of_authority).is_some_and(|name| allowed.contains(&name))
    }

    /// The origins that may call the API from a browser (`--cors-origin`).
    pub fn cors_origins(&self) -> &[String] {
        &self.cors_origins
    }

    /// Whether an `Origin` is the server itself (the request's own `Host` or the public URL) or
    /// a `--cors-origin`.
    pub fn origin_trusted(&self, origin: &str, host: Option<&str>) -> bool {
        let origin = origin.to_ascii_lowercase();
        let same = host.is_some_and(|host| {
            let host = host.to_ascii_lowercase();
            origin == format!("http://{host}") || origin == format!("https://{host}")
        });
        same || self.public_origin.as_ref() == Some(&origin) || self.cors_origins.contains(&origin)
    }

    /// The attributes of the login cookie, for a cookie that lasts `max_age` seconds (0 ends it).
    pub fn cookie_attributes(&self, max_age: u64) -> String {
        let secure = if self.secure_cookie { "; Secure" } else { "" };
        format!("Path=/; HttpOnly; SameSite=Strict; Max-Age={max_age}{secure}")
    }
}

/// Security at run time: the settings, the login cookie key (from the server key), the
/// per-token limits' state and the failure budgets of client addresses.
pub struct Auth {
    pub security: Security,
    pub cookies: CookieKey,
    pub limiter: Option<Arc<Limiter>>,
    pub failures: FailureLimiter,
    /// Verifies signed answers (`--inbound-secret-file`); never the secret that signs
    /// notifications, so their receivers cannot answer gates.
    pub inbound_secret: Option<Arc<Secret>>,
}

impl Auth {
    pub fn new(security: Security, database_secret: &[u8], inbound_secret: Option<Arc<Secret>>) -> Self {
        // Per-token limits only with tokens (spec §10).
        let limiter = security.tokens.as_ref().map(|_| Limiter::new(security.limits));
        let cookies = CookieKey::derive(database_secret, security.secure_cookie);
        let failures = FailureLimiter::new(security.auth_failures);
        Self { security, cookies, limiter, failures, inbound_secret }
    }

    /// The client address of a request from `peer` (see `client`).
    pub fn client_address(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        self.security.proxies.client(peer, headers)
    }

    /// Before a credential from `client` is verified: how long it must wait while its address
    /// has spent its failures (`None`: no address known, as in a test's in-memory router).
    pub fn may_try(&self, client: Option<IpAddr>) -> Result<(), Duration> {
        client.map_or(Ok(()), |ip| self.failures.check(ip))
    }

    /// A credential from `client` did not verify.
    pub fn failed(&self, client: Option<IpAddr>) {
        if let Some(ip) = client {
            self.failures.failed(ip);
        }
    }

    /// One more stream for the caller: `None` when its token holds its maximum. Open mode and
    /// callers without a token are not counted per token.
    pub fn stream_slot(&self, caller: &Caller) -> Option<StreamSlot> {
        match (&self.limiter, caller) {
            (Some(limiter), Caller::Token(token)) => limiter.open_stream(&token.name),
            _ => Some(StreamSlot::unlimited()),
        }
    }
}

/// The fail-secure bind (spec §10): a non-loopback address needs tokens or the explicit opt-in,
/// and an unspecified one a public URL. Checked on the flags before anything starts, and again on
/// the listener actually served.
fn check_exposure(
    address: SocketAddr,
    has_tokens: bool,
    insecure_public_bind: bool,
    has_public_url: bool,
) -> Result<(), SecurityError> {
    let ip = address.ip();
    if !ip.is_loopback() && !has_tokens && !insecure_public_bind {
        return Err(SecurityError::PublicBindWithoutTokens(address));
    }
    if ip.is_unspecified() && !has_public_url {
        return Err(SecurityError::PublicUrlRequired(address));
    }
    Ok(())
}

/// The hostname of a `Host` header value, port dropped (`[::1]:8080` → `[::1]`).
fn host_of_authority(authority: &str) -> Option<String> {
    let authority = authority.trim().to_ascii_lowercase();
    let name = if authority.starts_with('[') {
        let end = authority.find(']')?;
        authority[..=end].to_owned()
    } else {
        authority.split(':').next()?.to_owned()
    };
    (!name.is_empty()).then_some(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_names_drop_the_port() {
        assert_eq!(host_of_authority("127.0.0.1:8080").as_deref(), Some("127.0.0.1"));
        assert_eq!(host_of_authority("LocalHost").as_deref(), Some("localhost"));
        assert_eq!(host_of_authority("[::1]:80").as_deref(), Some("[::1]"));
        assert_eq!(host_of_authority(":80"), None);
    }

    #[test]
    fn the_route_table_roles() {
        assert!(Access::AGENT.permits(Role::Agent) && !Access::AGENT.permits(Role::Responder));
        assert!(Access::Answer.permits(Role::Responder) && !Access::Answer.permits(Role::Agent));
        assert!(!Access::ADMIN.permits(Role::Responder));
        assert_eq!(Access::Answer.names(), ["responder", "admin", "webhook"]);
        assert!(!Access::Link.guarded() && Access::SESSION_READ.guarded());
    }
}
