//! Reading request headers: plain helpers the guard, the extractors and the edge share.

use axum::http::HeaderMap;
use axum::http::header::AsHeaderName;

/// A header's value as text, when present and visible ASCII.
pub fn header_text(headers: &HeaderMap, name: impl AsHeaderName) -> Option<&str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// `application/json`, case-insensitively, with any parameters (`; charset=utf-8`).
pub fn is_json(content_type: &[u8]) -> bool {
    let Ok(ct) = std::str::from_utf8(content_type) else {
        return false;
    };
    let essence = ct.split(';').next().unwrap_or("").trim();
    essence.eq_ignore_ascii_case("application/json")
}
