//! Answer links (spec §9): a gate's link token is `base64url(HMAC-SHA256(server key, gate id))`.
//! It is derived, not random, so a retried webhook delivery carries identical bytes; it reveals
//! nothing about the gate and cannot be forged without the server's key. The database never holds
//! a token, only its keyed digest (for the lookup), and never the key: a copy of the database
//! alone cannot answer a gate.

use aws_lc_rs::aead::{AES_256_GCM, Aad, NONCE_LEN, Nonce, RandomizedNonceKey};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use super::ids::GateId;

/// The server's secret: answer-link tokens and their digests, and the login cookie key, are
/// derived from it. It lives outside the database (a key file), so reading the database is not
/// enough to answer a gate or forge a login.
#[derive(Clone)]
pub struct ServerKey(Vec<u8>);

impl std::fmt::Debug for ServerKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ServerKey(<redacted>)")
    }
}

impl ServerKey {
    /// The shortest key accepted, in bytes.
    pub const MIN_LEN: usize = 32;

    /// A key of at least `MIN_LEN` bytes.
    pub fn new(bytes: Vec<u8>) -> Option<Self> {
        (bytes.len() >= Self::MIN_LEN).then_some(Self(bytes))
    }

    /// A fresh random key (64 hex digits, as key files hold it).
    pub fn generate() -> Self {
        Self(format!("{}{}", uuid::Uuid::new_v4().simple(), uuid::Uuid::new_v4().simple()).into_bytes())
    }

    /// The key's bytes, for writing its file.
    pub fn expose(&self) -> &[u8] {
        &self.0
    }

    /// A key for one purpose (`label`), so derived keys can never stand in for each other.
    pub fn derive(&self, label: &str) -> [u8; 32] {
        let mut mac = hmac(&self.0);
        mac.update(label.as_bytes());
        mac.finalize().into_bytes().into()
    }

    /// The answer-link token of a gate.
    pub fn link_token(&self, gate: GateId) -> String {
        let mut mac = hmac(&self.0);
        mac.update(gate.to_string().as_bytes());
        URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes())
    }

    /// Seals a gate's secret (an open-URL gate's URL) for the database: AES-256-GCM under a key
    /// derived for this purpose, a random nonce before the ciphertext, the gate id as associated
    /// data (a sealed secret moved to another gate does not open).
    pub fn seal(&self, gate: GateId, secret: &str) -> Vec<u8> {
        let key = self.sealing_key();
        let mut sealed = secret.as_bytes().to_vec();
        let nonce = key
            .seal_in_place_append_tag(Aad::from(gate.to_string()), &mut sealed)
            .expect("AES-GCM seals any text this size");
        [nonce.as_ref().as_slice(), &sealed].concat()
    }

    /// Opens what `seal` sealed for this gate; `None` if it was sealed under another key or for
    /// another gate, or altered.
    pub fn unseal(&self, gate: GateId, sealed: &[u8]) -> Option<String> {
        let (nonce, ciphertext) = sealed.split_at_checked(NONCE_LEN)?;
        let nonce = Nonce::try_assume_unique_for_key(nonce).ok()?;
        let mut text = ciphertext.to_vec();
        let plain = self.sealing_key().open_in_place(nonce, Aad::from(gate.to_string()), &mut text).ok()?;
        String::from_utf8(plain.to_vec()).ok()
    }

    fn sealing_key(&self) -> RandomizedNonceKey {
        RandomizedNonceKey::new(&AES_256_GCM, &self.derive("gatehouse gate secret v1")).expect("a 32-byte key")
    }

    /// What the database stores of a link token, and looks a presented token up by: a keyed
    /// digest, so neither the token nor a way to make one is in the database.
    pub fn link_digest(&self, token: &str) -> [u8; 32] {
        let mut mac = hmac(&self.derive("gatehouse answer-link digest v1"));
        mac.update(token.as_bytes());
        mac.finalize().into_bytes().into()
    }
}

fn hmac(key: &[u8]) -> Hmac<Sha256> {
    Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes keys of any length")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(text: &str) -> ServerKey {
        ServerKey::new(text.repeat(32).into_bytes()).unwrap()
    }

    #[test]
    fn a_sealed_secret_opens_only_for_its_gate_and_key() {
        let (gate, other) = (GateId::mint(), GateId::mint());
        let sealed = key("a").seal(gate, "https://x.test/device?code=1");
        assert!(!String::from_utf8_lossy(&sealed).contains("x.test"));
        assert_eq!(key("a").unseal(gate, &sealed).as_deref(), Some("https://x.test/device?code=1"));
        assert_eq!(key("a").unseal(other, &sealed), None);
        assert_eq!(key("b").unseal(gate, &sealed), None);
        assert_ne!(key("a").seal(gate, "same"), key("a").seal(gate, "same"), "a fresh nonce each time");
    }

    #[test]
    fn tokens_are_stable_and_keyed() {
        let gate = GateId::parse("9d3e4f50-6a7b-4c8d-9e0f-1a2b3c4d5e6f").unwrap();
        assert_eq!(key("a").link_token(gate), key("a").link_token(gate));
        assert_ne!(key("a").link_token(gate), key("b").link_token(gate));
        assert_eq!(key("a").link_token(gate).len(), 43, "256 bits, base64url without padding");
    }

    #[test]
    fn digests_are_keyed_and_differ_from_the_token() {
        let gate = GateId::mint();
        let token = key("a").link_token(gate);
        assert_eq!(key("a").link_digest(&token), key("a").link_digest(&token));
        assert_ne!(key("a").link_digest(&token), key("b").link_digest(&token));
        assert_ne!(&key("a").link_digest(&token)[..], token.as_bytes());
    }

    #[test]
    fn short_keys_are_refused_and_debug_hides_the_key() {
        assert!(ServerKey::new(vec![7; 31]).is_none());
        assert!(!format!("{:?}", key("secret")).contains("secret"));
        assert_eq!(ServerKey::generate().expose().len(), 64);
    }
}
