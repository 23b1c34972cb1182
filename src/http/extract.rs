//! Our own extractors, so every rejection uses the JSON error envelope and the check order of
//! spec §4.5 holds: path/query 400 → media type 415 → size 413 → JSON 400.
//!
//! Request bodies are read here, under two clocks (`--body-idle-timeout` without a new byte,
//! `--body-timeout` in all; past either, `408 request_timeout` and the connection closes) and
//! under a size limit that depends on who is asking: `--max-body` for a request the guard let
//! through with a token or login cookie (and in open mode), `--max-unauthenticated-body` for one
//! without, whose body is read before anything can vouch for it: a signed answer (its signature
//! covers the body), an answer link, the login.

use std::collections::HashSet;
use std::fmt;

use axum::body::{Body, Bytes};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::HeaderMap;
use axum::http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use axum::http::request::Parts;
use http_body_util::BodyExt;
use serde::de::{self, DeserializeOwned, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};
use tokio::time::Instant;

use crate::auth::Caller;
use crate::common::signature as sign;
use crate::http::error::ApiError;
use crate::http::guard::{ClientAddress, no_inbound_secret, signature_refused, throttled};
use crate::http::headers::{header_text, is_json};
use crate::http::{AppState, Limits};

/// Path parameters; a malformed id is `400 invalid_parameter`.
pub struct Params<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for Params<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|p| Self(p.0))
            .map_err(|rejection| ApiError::InvalidParameter(rejection.body_text()))
    }
}

/// Query parameters; a malformed value is `400 invalid_parameter`.
pub struct QueryParams<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for QueryParams<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|q| Self(q.0))
            .map_err(|rejection| ApiError::InvalidParameter(rejection.body_text()))
    }
}

/// The `Idempotency-Key` header: 1..255 visible ASCII bytes, when present.
pub struct IdempotencyKey(pub Option<String>);

impl<S: Send + Sync> FromRequestParts<S> for IdempotencyKey {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        let Some(value) = parts.headers.get("idempotency-key") else {
            return Ok(Self(None));
        };
        let bytes = value.as_bytes();
        if bytes.is_empty() || bytes.len() > 255 || !bytes.iter().all(|b| (0x21..=0x7e).contains(b)) {
            return Err(ApiError::InvalidParameter("Idempotency-Key must be 1 to 255 visible ASCII characters".into()));
        }
        Ok(Self(Some(String::from_utf8_lossy(bytes).into_owned())))
    }
}

/// A strictly decoded JSON body: `application/json` only, at most `--max-body` bytes, no duplicate
/// keys at any depth, no unknown fields (the types deny them), no trailing data.
pub struct JsonBody<T>(pub T);

/// Like `JsonBody`, but an empty body means `T::default()`.
pub struct OptionalJsonBody<T>(pub T);

/// Like `JsonBody`, and when the request carries a Standard Webhooks signature, verified over the
/// exact bytes received: the second member is then the `webhook-id` of a signed request.
pub struct SignedJsonBody<T>(pub T, pub Option<String>);

impl<T: DeserializeOwned> FromRequest<AppState> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        let (_, bytes) = read_json(req, state).await?;
        Ok(Self(decode(&bytes.ok_or_else(|| ApiError::invalid_body("a JSON body is required"))?)?))
    }
}

impl<T: DeserializeOwned + Default> FromRequest<AppState> for OptionalJsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        let (_, bytes) = read_json(req, state).await?;
        Ok(Self(bytes.map(|b| decode(&b)).transpose()?.unwrap_or_default()))
    }
}

impl<T: DeserializeOwned> FromRequest<AppState> for SignedJsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        let (parts, bytes) = read_json(req, state).await?;
        let bytes = bytes.ok_or_else(|| ApiError::invalid_body("a JSON body is required"))?;
        let signed = parts.headers.contains_key(sign::HEADER_SIGNATURE);
        let signed_by = if signed {
            let client = parts.extensions.get::<ClientAddress>().and_then(|c| c.0);
            Some(throttled(&state.auth, client, || verify_webhook(state, &parts.headers, &bytes))?)
        } else {
            None
        };
        Ok(Self(decode(&bytes)?, signed_by))
    }
}

/// Checks a Standard Webhooks signature with the inbound secret; the `webhook-id` on success.
fn verify_webhook(state: &AppState, headers: &HeaderMap, body: &[u8]) -> Result<String, ApiError> {
    let secret = state.auth.inbound_secret.as_ref().ok_or_else(no_inbound_secret)?;
    let id = header_text(headers, sign::HEADER_ID).unwrap_or_default();
    let timestamp = header_text(headers, sign::HEADER_TIMESTAMP).unwrap_or_default();
    let signature = header_text(headers, sign::HEADER_SIGNATURE).unwrap_or_default();
    let now = crate::domain::Timestamp::now().unix_seconds();
    sign::verify(secret, id, timestamp, signature, body, now).map_err(signature_refused)?;
    // An empty id is refused by `verify`; a long one could not serve as the idempotency key.
    if id.len() > 255 {
        return Err(ApiError::Unauthorized("webhook-id must be 1 to 255 characters".into()));
    }
    Ok(id.to_owned())
}

/// The request's parts and body bytes (`None` for a request without a body), after the media
/// type and size checks.
async fn read_json(req: Request, state: &AppState) -> Result<(Parts, Option<Bytes>), ApiError> {
    let (parts, body) = req.into_parts();
    let max_body = body_limit(&parts, state);
    let declared: Option<u64> =
        parts.headers.get(CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse().ok());
    let labelled_json = match parts.headers.get(CONTENT_TYPE) {
        Some(ct) if is_json(ct.as_bytes()) => true,
        Some(_) => return Err(ApiError::UnsupportedMediaType),
        None => false,
    };
    // An unlabelled body is refused as soon as it is known to exist (415 comes before 413).
    if !labelled_json && declared.is_some_and(|n| n > 0) {
        return Err(ApiError::UnsupportedMediaType);
    }
    if declared.is_some_and(|n| n > max_body as u64) {
        return Err(ApiError::PayloadTooLarge(max_body));
    }
    let expected = declared.map_or(0, |n| n as usize);
    let bytes = read_body(body, max_body, expected, state).await.map_err(|e| match e {
        BodyError::TooLarge if labelled_json => ApiError::PayloadTooLarge(max_body),
        BodyError::TooLarge => ApiError::UnsupportedMediaType,
        BodyError::Stalled => ApiError::RequestTimeout(format!(
            "the request body brought no new byte for {:?}",
            state.limits.body_idle_timeout
        )),
        BodyError::TooSlow => ApiError::RequestTimeout(format!(
            "the request body was not complete {:?} after its head",
            state.limits.body_timeout
        )),
        BodyError::Broken(e) => ApiError::invalid_body(format!("could not read the request body: {e}")),
    })?;
    match (bytes.is_empty(), labelled_json) {
        (true, _) => Ok((parts, None)),
        // A chunked body without a media type.
        (false, false) => Err(ApiError::UnsupportedMediaType),
        (false, true) => Ok((parts, Some(bytes))),
    }
}

/// The largest body this request may send (see the module's documentation).
fn body_limit(parts: &Parts, state: &AppState) -> usize {
    let Limits { max_body, max_unauthenticated_body, .. } = state.limits;
    let by_token = matches!(parts.extensions.get::<Caller>(), Some(Caller::Token(_)));
    // In open mode anyone may send `--max-body` anyway, but a signature is still verified over
    // bytes that were read first.
    let open = state.auth.security.is_open() && !parts.headers.contains_key(sign::HEADER_SIGNATURE);
    if by_token || open { max_body } else { max_unauthenticated_body.min(max_body) }
}

/// Why a body could not be read whole.
enum BodyError {
    /// More than the limit.
    TooLarge,
    /// No new byte for `--body-idle-timeout`.
    Stalled,
    /// Not whole within `--body-timeout`.
    TooSlow,
    /// The connection failed or the framing was broken.
    Broken(axum::Error),
}

/// Reads a whole body of at most `limit` bytes (`expected` of them declared, at most `limit`),
/// under the body timeouts.
async fn read_body(mut body: Body, limit: usize, expected: usize, state: &AppState) -> Result<Bytes, BodyError> {
    let Limits { body_idle_timeout, body_timeout, .. } = state.limits;
    let deadline = Instant::now() + body_timeout;
    let mut first: Option<Bytes> = None;
    let mut joined: Vec<u8> = Vec::new();
    loop {
        let idle_until = Instant::now() + body_idle_timeout;
        let frame = match tokio::time::timeout_at(idle_until.min(deadline), body.frame()).await {
            Ok(Some(frame)) => frame.map_err(BodyError::Broken)?,
            Ok(None) => break,
            Err(_) if idle_until < deadline => return Err(BodyError::Stalled),
            Err(_) => return Err(BodyError::TooSlow),
        };
        let Ok(data) = frame.into_data() else { continue };
        let total = first.as_ref().map_or(0, Bytes::len) + joined.len() + data.len();
        if total > limit {
            return Err(BodyError::TooLarge);
        }
        // Most bodies are one frame, taken as is; only a second frame makes a copy, sized for the
        // declared length at once (growing by doubling would hold up to twice the body).
        match first.take() {
            None if joined.is_empty() => first = Some(data),
            None => joined.extend_from_slice(&data),
            Some(head) => {
                joined.reserve_exact(expected.max(total));
                joined.extend_from_slice(&head);
                joined.extend_from_slice(&data);
            }
        }
    }
    Ok(first.unwrap_or_else(|| Bytes::from(joined)))
}

/// Strict decoding in two passes: first a walk that refuses duplicate keys anywhere, then the
/// typed decode (which refuses unknown fields and trailing data).
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice::<NoDuplicateKeys>(bytes)
        .map_err(|e| ApiError::invalid_body(format!("malformed JSON: {e}")))?;
    serde_json::from_slice(bytes).map_err(|e| ApiError::invalid_body(format!("invalid request body: {e}")))
}

/// Accepts any JSON value in which no object repeats a key.
struct NoDuplicateKeys;

impl<'de> Deserialize<'de> for NoDuplicateKeys {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(NoDuplicateKeys)
    }
}

impl<'de> Visitor<'de> for NoDuplicateKeys {
    type Value = NoDuplicateKeys;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<Self, E> {
        Ok(self)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Self, E> {
        Ok(self)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Self, E> {
        Ok(self)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Self, E> {
        Ok(self)
    }
    fn visit_str<E>(self, _: &str) -> Result<Self, E> {
        Ok(self)
    }
    fn visit_unit<E>(self) -> Result<Self, E> {
        Ok(self)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self, A::Error> {
        while seq.next_element::<NoDuplicateKeys>()?.is_some() {}
        Ok(self)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self, A::Error> {
        let mut seen = HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            map.next_value::<NoDuplicateKeys>()?;
            if !seen.insert(key.clone()) {
                return Err(de::Error::custom(format_args!("duplicate key {key:?}")));
            }
        }
        Ok(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duplicate_keys_are_refused_at_any_depth() {
        let nested = br#"{"action":"answer","values":{"answer":"a","answer":"b"}}"#;
        assert!(decode::<serde_json::Value>(nested).is_err());
        let top = br#"{"a":1,"a":1}"#;
        assert!(decode::<serde_json::Value>(top).is_err());
        let in_array = br#"[{"x":[{"k":1,"k":2}]}]"#;
        assert!(decode::<serde_json::Value>(in_array).is_err());
        assert!(decode::<serde_json::Value>(br#"{"a":{"a":1},"b":[{"a":1},{"a":2}]}"#).is_ok());
    }

    #[test]
    fn trailing_data_is_refused() {
        assert!(decode::<serde_json::Value>(br#"{"a":1} {"a":2}"#).is_err());
    }

    #[test]
    fn json_media_types() {
        assert!(is_json(b"application/json"));
        assert!(is_json(b"Application/JSON; charset=utf-8"));
        assert!(!is_json(b"text/plain"));
        assert!(!is_json(b"application/jsonx"));
    }
}
