//! The page's login cookie (spec §10): `base64url({"name","exp"}) "." base64url(HMAC)`. The key
//! is derived from the database's own secret, so a login survives restarts; the MAC also covers
//! the token's secret digest, so changing or removing the token ends its logins.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, KeyInit, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

use std::sync::Arc;

use super::tokens::{Token, Tokens};

/// The cookie's name.
pub const NAME: &str = "gatehouse_login";

/// How long a login lasts.
pub const LIFETIME_SECS: u64 = 7 * 86_400;

/// Signs and checks login cookies.
pub struct CookieKey([u8; 32]);

#[derive(Serialize, Deserialize)]
struct Claims {
    name: String,
    exp: u64,
}

impl CookieKey {
    /// Derived from the database's secret (the same one answer links use), with its own label so
    /// the two can never stand in for each other.
    pub fn derive(database_secret: &[u8]) -> Self {
        let mut mac = hmac(database_secret);
        mac.update(b"gatehouse login cookie v1");
        Self(mac.finalize().into_bytes().into())
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
        let mut mac = hmac(&self.0);
        mac.update(token.digest());
        mac.update(payload.as_bytes());
        mac
    }
}

fn hmac(key: &[u8]) -> Hmac<Sha256> {
    Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes keys of any length")
}

/// The value of the login cookie in a `Cookie` header, if any.
pub fn from_header(header: &str) -> Option<&str> {
    header.split(';').map(str::trim).find_map(|pair| pair.strip_prefix(NAME)?.strip_prefix('='))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issue_verify_expire_and_rotate() {
        let tokens =
            Tokens::parse("responder alice alice-secret-0123456789\nadmin root root-secret-0123456789").unwrap();
        let alice = tokens.named("alice").unwrap();
        let key = CookieKey::derive(b"database secret");
        let cookie = key.issue(&alice, 1000);
        let named = |key: &CookieKey, value: &str, tokens: &Tokens, now| {
            key.authenticate(value, tokens, now).map(|token| token.name.clone())
        };
        assert_eq!(named(&key, &cookie, &tokens, 1000 + LIFETIME_SECS - 1).as_deref(), Some("alice"));
        assert_eq!(named(&key, &cookie, &tokens, 1000 + LIFETIME_SECS), None, "expired");
        assert_eq!(named(&CookieKey::derive(b"another database"), &cookie, &tokens, 1000), None, "another key");
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
    fn cookie_header_parsing() {
        assert_eq!(from_header("a=1; gatehouse_login=xyz.abc; b=2"), Some("xyz.abc"));
        assert_eq!(from_header("gatehouse_login_other=1"), None);
        assert_eq!(from_header("a=1"), None);
    }
}
