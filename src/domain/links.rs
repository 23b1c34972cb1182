//! Answer links (spec §9): a gate's link token is `base64url(HMAC-SHA256(link key, gate id))`.
//! It is derived, not random, so a retried webhook delivery carries identical bytes; it reveals
//! nothing about the gate and cannot be forged without the server's key.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use super::ids::GateId;

/// The answer-link token of a gate.
pub fn link_token(key: &[u8], gate: GateId) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes keys of any length");
    mac.update(gate.to_string().as_bytes());
    URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_stable_and_keyed() {
        let gate = GateId::parse("9d3e4f50-6a7b-4c8d-9e0f-1a2b3c4d5e6f").unwrap();
        assert_eq!(link_token(b"key", gate), link_token(b"key", gate));
        assert_ne!(link_token(b"key", gate), link_token(b"other key", gate));
        assert_eq!(link_token(b"key", gate).len(), 43, "256 bits, base64url without padding");
    }
}
