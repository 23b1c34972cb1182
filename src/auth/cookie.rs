//! The page's login cookie (spec §10): `base64url({"name","exp"}) "." base64url(HMAC)`. The key
//! is derived from the database's own secret, so a login survives restarts; the MAC also covers
//! the token's secret digest, so changing or removing the token ends its logins.

use std::sync::Arc;

use axum::http::{HeaderMap, header};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, KeyInit, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

use super::tokens::{Token, Tokens};

/// How every login cookie's name begins; the rest is unique to the server key (see `CookieKey`).
pub const NAME_PREFIX: &str = "gatehouse_login_";

/// How long a login lasts.
pub const LIFETIME_SECS: u64 = 7 * 86_400;

/// Signs and checks login cookies, and names them.
///
/// The name is unique to the server key (so to its database): browsers send a host's cookies
/// to every port of it, and two gatehouse servers on one host must neither read nor overwrite
/// each other's login. Behind an https public URL it is a `__Host-` cookie, which only a secure
/// response of this very host can set, for `Path=/` and no `Domain`: another service on a
/// sibling domain cannot plant one.
pub struct CookieKey {
    key: [u8; 32],
    name: String,
}
#[derive(Serialize, Deserialize)]
struct Claims {
    name: String,
    exp: u64,
}

impl CookieKey {
    /// Derived from the database's secret (the same one answer links use), with its own label so
    /// the two can never stand in for each other. `host_only`: the public URL is https, so the
    /// cookie can be a `__Host-` one.
    pub fn derive(database_secret: &[u8], host_only: bool) -> Self {
        let mut mac = hmac(database_secret);
        mac.update(b"gatehouse login cookie v1");
        let key: [u8; 32] = mac.finalize().into_bytes().into();
        let mut mac = hmac(&key);
        mac.update(b"cookie name");
        let id: String = mac.finalize().into_bytes().iter().take(6).map(|b| format!("{b:02x}")).collect();
        let name = format!("{}{NAME_PREFIX}{id}", if host_only { "__Host-" } else { "" });
        Self { key, name }
    }

    /// The cookie's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The values of this server's login cookie among the `Cookie` headers, in the order sent
    /// (a browser may send several of one name, set for different paths); every other cookie
    /// is ignored.
    pub fn values<'a>(&'a self, headers: &'a HeaderMap) -> impl Iterator<Item = &'a str> + 'a {
        headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .flat_map(|value| value.split(';'))
            .filter_map(|pair| pair.trim().strip_prefix(self.name.as_str())?.strip_prefix('='))
    }

    /// A cookie value naming `token`, valid until `now + LIFETIME_SECS` (Unix seconds).
    pub fn issue(&self, token: &Token, now: u64) -> String {
        let claims = serde_json::to_vec(&Claims { name: token.name.clone(), exp: now + LIFETIME_SECS })
            .expect("claims serialise");
        let payload = URL_SAFE_NO_PAD.encode(claims);
        let tag = URL_SAFE_NO_PAD.encode(self.tag(&payload, token).finalize().into_bytes());
        format!("{payload}.{tag}")
    }

    /// The token a cookie value names, when this key issued it for that token (with its current
    /// secret) and it has not expired at `now`.
    pub fn authenticate(&self, value: &str, tokens: &Tokens, now: u64) -> Option<Arc<Token>> {
        let (payload, tag) = value.split_once('.')?;
        let claims: Claims = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload).ok()?).ok()?;
        let token = tokens.named(&claims.name)?;
        self.tag(payload, &token).verify_slice(&URL_SAFE_NO_PAD.decode(tag).ok()?).ok()?;
        (now < claims.exp).then_some(token)
    }

    fn tag(&self, payload: &str, token: &Token) -> Hmac<Sha256> {
        let mut mac = hmac(&self.key);
        mac.update(token.digest());
        mac.update(payload.as_bytes());
        mac
    }
}

fn hmac(key: &[u8]) -> Hmac<Sha256> {
    Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes keys of any length")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issue_verify_expire_and_rotate() {
        let tokens =
            Tokens::parse("responder alice alice-secret-0123456789\nadmin root root-secret-0123456789").unwrap();
        let alice = tokens.named("alice").unwrap();
        let key = CookieKey::derive(b"database secret", false);
        let cookie = key.issue(&alice, 1000);
        let named = |key: &CookieKey, value: &str, tokens: &Tokens, now| {
            key.authenticate(value, tokens, now).map(|token| token.name.clone())
        };
        assert_eq!(named(&key, &cookie, &tokens, 1000 + LIFETIME_SECS - 1).as_deref(), Some("alice"));
        assert_eq!(named(&key, &cookie, &tokens, 1000 + LIFETIME_SECS), None, "expired");
        assert_eq!(named(&CookieKey::derive(b"another database", false), &cookie, &tokens, 1000), None, "another key");
        let rotated = Tokens::parse("responder alice alice-secret-rotated-0123").unwrap();
        assert_eq!(named(&key, &cookie, &rotated, 1000), None, "a changed secret ends logins");
        let removed = Tokens::parse("admin root root-secret-0123456789").unwrap();
        assert_eq!(named(&key, &cookie, &removed, 1000), None, "a removed token ends logins");
        let (payload, tag) = cookie.split_once('.').unwrap();
        let forged = URL_SAFE_NO_PAD.encode(br#"{"name":"root","exp":99999999999}"#);
        assert_eq!(named(&key, &format!("{forged}.{tag}"), &tokens, 1000), None, "another token's name");
        assert_eq!(named(&key, payload, &tokens, 1000), None);
        assert_eq!(named(&key, "", &tokens, 1000), None);
    }

    #[test]
    fn names_are_unique_to_the_key_and_only_ours_are_read() {
        let key = CookieKey::derive(b"database secret", false);
        let other = CookieKey::derive(b"another database", false);
        assert!(key.name().starts_with(NAME_PREFIX) && key.name().len() == NAME_PREFIX.len() + 12);
        assert_ne!(key.name(), other.name(), "two servers on one host keep their logins apart");
        let secure = CookieKey::derive(b"database secret", true);
        assert_eq!(secure.name(), format!("__Host-{}", key.name()));
        let mut headers = HeaderMap::new();
        let cookies = format!("a=1; {}=theirs; {}=first; {}x=no", other.name(), key.name(), key.name());
        headers.append(header::COOKIE, cookies.parse().unwrap());
        headers.append(header::COOKIE, format!("{}=second", key.name()).parse().unwrap());
        assert_eq!(key.values(&headers).collect::<Vec<_>>(), ["first", "second"]);
        assert_eq!(secure.values(&headers).count(), 0, "a __Host- server reads only its __Host- cookie");
    }
}
