//! Standard Webhooks signatures (<https://www.standardwebhooks.com>, v1): the `whsec_` secret,
//! signing an outbound delivery and verifying a signed inbound request.
//!
//! The signed content is `"{webhook-id}.{webhook-timestamp}.{body}"` over the exact body bytes
//! sent or received; never sign or verify a re-serialised body. The `webhook-signature` header is
//! `v1,<base64 HMAC-SHA256>`, possibly several entries separated by spaces (key rotation).

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use base64::Engine as _;
use base64::alphabet;
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig};
use base64::engine::{DecodePaddingMode, general_purpose::STANDARD};
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// Header carrying the message id, stable across retries of one delivery.
pub const HEADER_ID: &str = "webhook-id";
/// Header carrying the send time in unix seconds.
pub const HEADER_TIMESTAMP: &str = "webhook-timestamp";
/// Header carrying one or more space-separated `v1,<base64>` signatures.
pub const HEADER_SIGNATURE: &str = "webhook-signature";

/// How far a timestamp may be from the verifier's clock, either way, in seconds. Bounds how long
/// a captured request can be replayed (the `webhook-id` dedupe covers the window itself).
pub const TOLERANCE_SECS: u64 = 300;

/// The conventional prefix of a displayed secret.
const SECRET_PREFIX: &str = "whsec_";

/// The spec asks for 24 to 64 random bytes; anything shorter is refused at startup rather than
/// quietly used as a weak key. Longer keys work (HMAC hashes them), so there is no upper bound.
pub const MIN_SECRET_BYTES: usize = 24;

/// Secrets are written by people and tools that disagree about trailing `=`, so decoding accepts
/// both; the alphabet is still the standard one (a `-` or `_` is refused).
const LENIENT_BASE64: GeneralPurpose = GeneralPurpose::new(
    &alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// A webhook signing key: the bytes behind `whsec_<base64>`. `Debug` never shows them.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Vec<u8>);

/// Why a secret was refused. Messages never include any part of the secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    #[error("the webhook secret is empty")]
    Empty,
    #[error("the webhook secret is not valid base64 (expected `whsec_` followed by standard base64)")]
    NotBase64,
    #[error("the webhook secret is {0} bytes long; it must be at least {MIN_SECRET_BYTES} random bytes")]
    TooShort(usize),
}

/// Why `Secret::from_file` failed.
#[derive(Debug, thiserror::Error)]
pub enum SecretFileError {
    #[error("cannot read the webhook secret file {}: {source}", path.display())]
    Read { path: PathBuf, source: std::io::Error },
    #[error("the webhook secret file {} is not usable: {source}", path.display())]
    Invalid { path: PathBuf, source: SecretError },
}

impl Secret {
    /// Parses `whsec_<base64>`, or the bare base64 (the prefix is only a convention).
    pub fn parse(text: &str) -> Result<Self, SecretError> {
        let encoded = text.strip_prefix(SECRET_PREFIX).unwrap_or(text);
        if encoded.is_empty() {
            return Err(SecretError::Empty);
        }
        let key = LENIENT_BASE64.decode(encoded).map_err(|_| SecretError::NotBase64)?;
        if key.len() < MIN_SECRET_BYTES {
            return Err(SecretError::TooShort(key.len()));
        }
        Ok(Self(key))
    }

    /// Reads a secret from a file, ignoring surrounding whitespace (editors add a final newline).
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, SecretFileError> {
        let path = path.as_ref();
        let text =
            std::fs::read_to_string(path).map_err(|source| SecretFileError::Read { path: path.to_owned(), source })?;
        Self::parse(text.trim()).map_err(|source| SecretFileError::Invalid { path: path.to_owned(), source })
    }

    /// A MAC already fed with the signed content; callers finalise or verify it.
    fn mac(&self, msg_id: &str, timestamp: u64, body: &[u8]) -> HmacSha256 {
        let mut mac = HmacSha256::new_from_slice(&self.0).expect("HMAC accepts keys of any length");
        mac.update(msg_id.as_bytes());
        mac.update(b".");
        mac.update(timestamp.to_string().as_bytes());
        mac.update(b".");
        mac.update(body);
        mac
    }
}

impl FromStr for Secret {
    type Err = SecretError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Self::parse(text)
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

/// Signs one delivery: returns the `webhook-signature` value `v1,<base64 HMAC-SHA256>` over
/// `"{msg_id}.{timestamp}.{body}"`. `body` must be the exact bytes that will be sent.
pub fn sign(secret: &Secret, msg_id: &str, timestamp: u64, body: &[u8]) -> String {
    let tag = secret.mac(msg_id, timestamp, body).finalize().into_bytes();
    format!("v1,{}", STANDARD.encode(tag))
}

/// Why a signed request was refused. All of them mean `401 unauthorized` to the sender.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    #[error("the {0} header is missing")]
    MissingHeader(&'static str),
    #[error("the webhook-timestamp header is not a whole number of unix seconds")]
    BadTimestamp,
    #[error("the webhook timestamp is {0} s old, more than the {TOLERANCE_SECS} s allowed")]
    Expired(u64),
    #[error("the webhook timestamp is {0} s in the future, more than the {TOLERANCE_SECS} s allowed")]
    FromTheFuture(u64),
    #[error("the webhook-signature header has no v1 signature")]
    NoSupportedSignature,
    #[error("no webhook signature matches the body")]
    BadSignature,
}

/// The checks of a signed request that need no body: the three headers are present and the
/// timestamp is within the tolerance of `now_unix`. Returns the timestamp.
pub fn check_headers(
    msg_id: &str,
    timestamp_header: &str,
    signature_header: &str,
    now_unix: u64,
) -> Result<u64, VerifyError> {
    if msg_id.is_empty() {
        return Err(VerifyError::MissingHeader(HEADER_ID));
    }
    let timestamp_header = timestamp_header.trim();
    if timestamp_header.is_empty() {
        return Err(VerifyError::MissingHeader(HEADER_TIMESTAMP));
    }
    if signature_header.trim().is_empty() {
        return Err(VerifyError::MissingHeader(HEADER_SIGNATURE));
    }
    // Digits only: `u64::from_str` would also take a `+`, which no sender produces.
    if !timestamp_header.bytes().all(|b| b.is_ascii_digit()) {
        return Err(VerifyError::BadTimestamp);
    }
    let timestamp: u64 = timestamp_header.parse().map_err(|_| VerifyError::BadTimestamp)?;
    let skew = now_unix.abs_diff(timestamp);
    if skew > TOLERANCE_SECS {
        return Err(if timestamp < now_unix { VerifyError::Expired(skew) } else { VerifyError::FromTheFuture(skew) });
    }
    Ok(timestamp)
}

/// Verifies a signed request against `now_unix` (unix seconds).
///
/// The headers are passed as received; an absent header is passed as `""` and reported as
/// missing. The timestamp is checked before the signature, so a stale replay is refused even when
/// its signature is genuine. Entries of other versions than `v1` are ignored, as the spec asks, so
/// a sender may add new schemes without breaking this verifier.
pub fn verify(
    secret: &Secret,
    msg_id: &str,
    timestamp_header: &str,
    signature_header: &str,
    body: &[u8],
    now_unix: u64,
) -> Result<(), VerifyError> {
    let timestamp = check_headers(msg_id, timestamp_header, signature_header, now_unix)?;

    // The body is hashed once; each candidate only clones the MAC state.
    let mac = secret.mac(msg_id, timestamp, body);
    let mut saw_v1 = false;
    for entry in signature_header.split_ascii_whitespace() {
        let Some(("v1", encoded)) = entry.split_once(',') else {
            continue;
        };
        saw_v1 = true;
        // A malformed entry may sit beside a good one (rotation), so it is skipped, not fatal.
        let Ok(candidate) = LENIENT_BASE64.decode(encoded) else {
            continue;
        };
        // `verify_slice` compares in constant time, so timing reveals nothing about the tag.
        if mac.clone().verify_slice(&candidate).is_ok() {
            return Ok(());
        }
    }
    Err(if saw_v1 { VerifyError::BadSignature } else { VerifyError::NoSupportedSignature })
}

#[cfg(test)]
mod tests {
    use super::*;

    // The published vector (svix `rust/src/webhooks.rs` `test_sign`, cross-checked in Python).
    const SECRET: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";
    const ID: &str = "msg_27UH4WbU6Z5A5EzD8u03UvzRbpk";
    const TS: u64 = 1_649_367_553;
    const BODY: &[u8] = br#"{"email":"test@example.com","username":"test_user"}"#;
    const SIGNATURE: &str = "v1,tZ1I4/hDygAJgO5TYxiSd6Sd0kDW6hPenDe+bTa3Kkw=";

    fn secret() -> Secret {
        Secret::parse(SECRET).unwrap()
    }

    fn check(signature: &str, body: &[u8], now: u64) -> Result<(), VerifyError> {
        verify(&secret(), ID, &TS.to_string(), signature, body, now)
    }

    #[test]
    fn signs_the_known_answer_vector() {
        assert_eq!(sign(&secret(), ID, TS, BODY), SIGNATURE);
    }

    #[test]
    fn verifies_the_known_answer_vector_at_its_time_and_within_tolerance() {
        assert_eq!(check(SIGNATURE, BODY, TS), Ok(()));
        assert_eq!(check(SIGNATURE, BODY, TS + 300), Ok(()));
        assert_eq!(check(SIGNATURE, BODY, TS - 300), Ok(()));
    }

    #[test]
    fn refuses_a_flipped_body_byte() {
        let mut body = BODY.to_vec();
        body[5] ^= 1;
        assert_eq!(check(SIGNATURE, &body, TS), Err(VerifyError::BadSignature));
    }

    #[test]
    fn refuses_a_flipped_signature_byte() {
        let mut tag = STANDARD.decode(&SIGNATURE[3..]).unwrap();
        tag[0] ^= 0x80;
        let forged = format!("v1,{}", STANDARD.encode(tag));
        assert_eq!(check(&forged, BODY, TS), Err(VerifyError::BadSignature));
    }

    #[test]
    fn refuses_another_secret() {
        let other = Secret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        assert_eq!(verify(&other, ID, &TS.to_string(), SIGNATURE, BODY, TS), Err(VerifyError::BadSignature));
    }

    #[test]
    fn refuses_another_id_or_timestamp_than_signed() {
        let s = secret();
        let ts = TS.to_string();
        assert_eq!(verify(&s, "msg_other", &ts, SIGNATURE, BODY, TS), Err(VerifyError::BadSignature));
        let later = (TS + 1).to_string();
        assert_eq!(verify(&s, ID, &later, SIGNATURE, BODY, TS), Err(VerifyError::BadSignature));
    }

    #[test]
    fn refuses_a_timestamp_301_seconds_off_either_way() {
        assert_eq!(check(SIGNATURE, BODY, TS + 301), Err(VerifyError::Expired(301)));
        assert_eq!(check(SIGNATURE, BODY, TS - 301), Err(VerifyError::FromTheFuture(301)));
    }

    #[test]
    fn accepts_the_right_signature_among_several() {
        let header = format!("v1,Zm9vYmFyYmF6 v2,whatever v1a,nope {SIGNATURE}");
        assert_eq!(check(&header, BODY, TS), Ok(()));
        // Malformed neighbours and extra spaces are skipped, not fatal.
        let header = format!("  v1,!!notbase64!!   {SIGNATURE} ");
        assert_eq!(check(&header, BODY, TS), Ok(()));
    }

    #[test]
    fn refuses_when_no_v1_signature_is_present() {
        let header = format!("v2,{}", &SIGNATURE[3..]);
        assert_eq!(check(&header, BODY, TS), Err(VerifyError::NoSupportedSignature));
        assert_eq!(check("garbage", BODY, TS), Err(VerifyError::NoSupportedSignature));
    }

    #[test]
    fn reports_missing_headers_and_bad_timestamps() {
        let s = secret();
        let ts = TS.to_string();
        let missing = |h| Err(VerifyError::MissingHeader(h));
        assert_eq!(verify(&s, "", &ts, SIGNATURE, BODY, TS), missing(HEADER_ID));
        assert_eq!(verify(&s, ID, " ", SIGNATURE, BODY, TS), missing(HEADER_TIMESTAMP));
        assert_eq!(verify(&s, ID, &ts, "", BODY, TS), missing(HEADER_SIGNATURE));
        for bad in ["+1649367553", "-1", "1649367553.0", "abc", "99999999999999999999"] {
            assert_eq!(verify(&s, ID, bad, SIGNATURE, BODY, TS), Err(VerifyError::BadTimestamp), "{bad}");
        }
    }

    #[test]
    fn extreme_clocks_do_not_overflow() {
        assert_eq!(check(SIGNATURE, BODY, 0), Err(VerifyError::FromTheFuture(TS)));
        assert!(matches!(check(SIGNATURE, BODY, u64::MAX), Err(VerifyError::Expired(_))));
    }

    #[test]
    fn parses_secrets_with_or_without_prefix_and_padding() {
        let bare = Secret::parse("C2FVsBQIhrscChlQIMV+b5sSYspob7oD").unwrap();
        assert_eq!(bare, secret());
        // 25 bytes: padded and unpadded spellings decode to the same key.
        let padded = Secret::parse("whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGA==").unwrap();
        let unpadded = Secret::parse("whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGA").unwrap();
        assert_eq!(padded, unpadded);
    }

    #[test]
    fn refuses_empty_garbage_and_short_secrets() {
        assert_eq!(Secret::parse(""), Err(SecretError::Empty));
        assert_eq!(Secret::parse("whsec_"), Err(SecretError::Empty));
        assert_eq!(Secret::parse("whsec_not base64!"), Err(SecretError::NotBase64));
        // The URL-safe alphabet is not the spec's.
        assert_eq!(Secret::parse("whsec_C2FVsBQIhrscChlQIMV-b5sSYspob7oD"), Err(SecretError::NotBase64));
        assert_eq!(Secret::parse("whsec_dGVzdA=="), Err(SecretError::TooShort(4)));
    }

    #[test]
    fn debug_hides_the_key() {
        let shown = format!("{:?}", secret());
        assert_eq!(shown, "Secret(<redacted>)");
    }

    #[test]
    fn reads_a_secret_file_and_explains_failures() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secret");
        std::fs::write(&path, format!("  {SECRET}\n")).unwrap();
        assert_eq!(Secret::from_file(&path).unwrap(), secret());

        std::fs::write(&path, "\n").unwrap();
        let err = Secret::from_file(&path).unwrap_err();
        assert!(matches!(err, SecretFileError::Invalid { source: SecretError::Empty, .. }));
        assert!(err.to_string().contains("is not usable: the webhook secret is empty"), "{err}");

        let missing = dir.path().join("absent");
        let err = Secret::from_file(&missing).unwrap_err();
        assert!(matches!(err, SecretFileError::Read { .. }));
        assert!(err.to_string().starts_with("cannot read the webhook secret file"), "{err}");
    }
}
