//! Field-level validation problems, reported in the `fields` member of an error envelope so a
//! client can point at exactly what to fix.

use serde::Serialize;

/// The closed set of field problem codes (spec §4.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FieldCode {
    Required,
    Empty,
    Blank,
    Type,
    NotAChoice,
    TooLong,
    UnknownKey,
    Duplicate,
    OutOfRange,
    /// Breaks a rule of its own: a JSON Schema keyword such as `pattern`, or a rule of the
    /// harness's prepared request.
    Invalid,
}

/// One problem with one member of a request body, addressed by JSON Pointer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FieldError {
    pub path: String,
    pub code: FieldCode,
    pub message: String,
}

impl FieldError {
    pub fn new(path: impl Into<String>, code: FieldCode, message: impl Into<String>) -> Self {
        Self { path: path.into(), code, message: message.into() }
    }
}

/// Escapes one JSON Pointer reference token (RFC 6901): `~` → `~0`, `/` → `~1`.
pub fn pointer_token(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// Checks a text that must not be empty and may hold at most `max_bytes` (only whitespace is
/// fine): an answer, a choice. `None` when it is fine; `what` names it in the message.
pub fn check_length(path: &str, value: &str, max_bytes: usize, what: &str) -> Option<FieldError> {
    if value.is_empty() {
        Some(FieldError::new(path, FieldCode::Empty, format!("{what} must not be empty")))
    } else if value.len() > max_bytes {
        Some(FieldError::new(path, FieldCode::TooLong, format!("{what} must be at most {max_bytes} bytes")))
    } else {
        None
    }
}

/// Checks a required, bounded text member; `None` when it is fine.
pub fn check_text(path: &str, value: &str, max_bytes: usize) -> Option<FieldError> {
    if value.is_empty() {
        Some(FieldError::new(path, FieldCode::Empty, "must not be empty"))
    } else if value.trim().is_empty() {
        Some(FieldError::new(path, FieldCode::Blank, "must not be only whitespace"))
    } else if value.len() > max_bytes {
        Some(FieldError::new(
            path,
            FieldCode::TooLong,
            format!("must be at most {max_bytes} bytes (got {})", value.len()),
        ))
    } else {
        None
    }
}

/// Normalized text in the harness's sense: valid UTF-8 (it is a Rust string), not empty, no
/// leading or trailing whitespace, no NUL; and here also within `max` bytes.
pub fn check_normalized(path: &str, value: &str, max: usize) -> Option<FieldError> {
    if value.is_empty() {
        Some(FieldError::new(path, FieldCode::Empty, "must not be empty"))
    } else if value.trim() != value {
        Some(FieldError::new(path, FieldCode::Blank, "must not begin or end with whitespace"))
    } else if value.contains('\0') {
        Some(FieldError::new(path, FieldCode::Invalid, "must not contain NUL"))
    } else if value.len() > max {
        Some(FieldError::new(path, FieldCode::TooLong, format!("must be at most {max} bytes (got {})", value.len())))
    } else {
        None
    }
}
