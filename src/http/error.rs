//! The one error type of the HTTP API and its JSON envelope (spec §4.5):
//! `{"error":{"code","message","retryable", "fields"?, "resolution"?, "gate"?}}`.
//! 5xx bodies never carry internal causes; those are logged instead.

use std::panic::Location;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::value::RawValue;

use crate::domain::{FieldError, GateView};
use crate::store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{0}")]
    InvalidParameter(String),
    #[error("{message}")]
    InvalidBody { message: String, fields: Vec<FieldError> },
    #[error("the action is not among the gate's controls")]
    GateActionInvalid(Vec<FieldError>),
    #[error("the values do not fit the gate")]
    GateValuesInvalid(Vec<FieldError>),
    #[error("gate kind {0:?} is not supported (only harness.ask_user)")]
    GateKindMismatch(String),
    #[error("{0}")]
    Unauthorized(String),
    #[error("{0}")]
    Forbidden(String),
    #[error("gate not found")]
    GateNotFound,
    #[error("{0}")]
    NotFound(&'static str),
    #[error("method not allowed")]
    MethodNotAllowed,
    #[error("the gate is no longer open")]
    GateNotReady(Box<RawValue>),
    /// `gate_not_ready` on an answer link: whoever holds a link may answer, not learn the
    /// answer, so the winner is not named; only whether the gate was `answered` or `closed`.
    #[error("this question was already {0}")]
    LinkUsed(&'static str),
    #[error("this tool execution already opened a gate with different content")]
    GateConflict(Box<GateView>),
    #[error("this Idempotency-Key was already used on this gate with a different answer")]
    IdempotencyConflict,
    #[error("the request body is larger than {0} bytes")]
    PayloadTooLarge(usize),
    #[error("the request body must be application/json")]
    UnsupportedMediaType,
    /// Its request line does not fit in the request head's bound (in bytes); answered by the
    /// connection itself, which then closes (`http::connection`).
    #[error("the request line (its URI) is longer than the {0} bytes a request head may have")]
    UriTooLong(usize),
    /// Its head (request line and header fields) is larger than this many bytes; answered by
    /// the connection itself, which then closes.
    #[error("the request head (its header fields) is larger than {0} bytes")]
    HeadersTooLarge(usize),
    /// The body did not arrive in time; the connection is closed after this answer.
    #[error("{0}")]
    RequestTimeout(String),
    #[error("{what}; retry in {retry_after} s")]
    RateLimited { what: &'static str, retry_after: u64 },
    #[error("{0}; retry later")]
    GateCapacity(&'static str),
    #[error("storage is unavailable; retry (with the same Idempotency-Key for answers)")]
    StorageUnavailable(String),
    #[error("internal error")]
    Internal(String, &'static Location<'static>),
}

/// What a failed request's response carries for the request log (`http::observe`), which logs
/// each error once: its code, and for a 5xx the cause, which the body never shows.
#[derive(Debug, Clone)]
pub struct Failure {
    pub code: &'static str,
    /// The cause of a 5xx, and for `internal` where in the code it was raised.
    pub cause: Option<String>,
}

impl ApiError {
    pub fn code(&self) -> &'static str {
        match self {
            Self::InvalidParameter(_) => "invalid_parameter",
            Self::InvalidBody { .. } => "invalid_body",
            Self::GateActionInvalid(_) => "gate_action_invalid",
            Self::GateValuesInvalid(_) => "gate_values_invalid",
            Self::GateKindMismatch(_) => "gate_kind_mismatch",
            Self::Unauthorized(_) => "unauthorized",
            Self::Forbidden(_) => "forbidden",
            Self::GateNotFound => "gate_not_found",
            Self::NotFound(_) => "not_found",
            Self::MethodNotAllowed => "method_not_allowed",
            Self::GateNotReady(_) | Self::LinkUsed(_) => "gate_not_ready",
            Self::GateConflict(_) => "gate_conflict",
            Self::IdempotencyConflict => "idempotency_conflict",
            Self::PayloadTooLarge(_) => "payload_too_large",
            Self::UnsupportedMediaType => "unsupported_media_type",
            Self::UriTooLong(_) => "uri_too_long",
            Self::HeadersTooLarge(_) => "headers_too_large",
            Self::RequestTimeout(_) => "request_timeout",
            Self::RateLimited { .. } => "rate_limited",
            Self::GateCapacity(_) => "gate_capacity",
            Self::StorageUnavailable(_) => "storage_unavailable",
            Self::Internal(..) => "internal",
        }
    }

    pub fn status(&self) -> StatusCode {
        match self {
            Self::InvalidParameter(_)
            | Self::InvalidBody { .. }
            | Self::GateActionInvalid(_)
            | Self::GateValuesInvalid(_)
            | Self::GateKindMismatch(_) => StatusCode::BAD_REQUEST,
            Self::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            Self::Forbidden(_) => StatusCode::FORBIDDEN,
            Self::GateNotFound | Self::NotFound(_) => StatusCode::NOT_FOUND,
            Self::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Self::RequestTimeout(_) => StatusCode::REQUEST_TIMEOUT,
            Self::GateNotReady(_) | Self::LinkUsed(_) | Self::GateConflict(_) | Self::IdempotencyConflict => {
                StatusCode::CONFLICT
            }
            Self::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            Self::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
            Self::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Self::UriTooLong(_) => StatusCode::URI_TOO_LONG,
            Self::HeadersTooLarge(_) => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            Self::GateCapacity(_) | Self::StorageUnavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            Self::Internal(..) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    pub fn retryable(&self) -> bool {
        matches!(
            self,
            Self::RequestTimeout(_) | Self::RateLimited { .. } | Self::GateCapacity(_) | Self::StorageUnavailable(_)
        )
    }

    /// A malformed body without field details.
    pub fn invalid_body(message: impl Into<String>) -> Self {
        Self::InvalidBody { message: message.into(), fields: Vec::new() }
    }

    /// A bug: `cause` is logged with where this was called (never sent).
    #[track_caller]
    pub fn internal(cause: impl Into<String>) -> Self {
        Self::Internal(cause.into(), Location::caller())
    }
}

impl From<StoreError> for ApiError {
    /// Where the `?` turned a store error into an answer is where it is logged to have started.
    #[track_caller]
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Unavailable(cause) => Self::StorageUnavailable(cause),
            StoreError::Internal(cause) => Self::internal(cause),
        }
    }
}

#[derive(Serialize)]
struct Envelope<'a> {
    error: Body<'a>,
}

#[derive(Serialize)]
struct Body<'a> {
    code: &'static str,
    message: String,
    retryable: bool,
    #[serde(skip_serializing_if = "<[FieldError]>::is_empty")]
    fields: &'a [FieldError],
    #[serde(skip_serializing_if = "Option::is_none")]
    resolution: Option<&'a RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    gate: Option<&'a GateView>,
}

impl ApiError {
    /// The JSON envelope of this error, as its response body.
    pub fn envelope(&self) -> Vec<u8> {
        let fields = match self {
            Self::InvalidBody { fields, .. } | Self::GateActionInvalid(fields) | Self::GateValuesInvalid(fields) => {
                fields.as_slice()
            }
            _ => &[],
        };
        let body = Envelope {
            error: Body {
                code: self.code(),
                message: self.to_string(),
                retryable: self.retryable(),
                fields,
                resolution: match self {
                    Self::GateNotReady(resolution) => Some(resolution),
                    _ => None,
                },
                gate: match self {
                    Self::GateConflict(view) => Some(view),
                    _ => None,
                },
            },
        };
        serde_json::to_vec(&body).expect("error envelopes serialise")
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let json = self.envelope();
        let mut response = (self.status(), json).into_response();
        let cause = match &self {
            Self::Internal(cause, at) => Some(format!("{cause} (at {at})")),
            Self::StorageUnavailable(cause) => Some(cause.clone()),
            _ => None,
        };
        response.extensions_mut().insert(Failure { code: self.code(), cause });
        response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        match self {
            Self::RateLimited { retry_after, .. } => {
                response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(retry_after));
            }
            // The rest of the body may still be on its way: the connection cannot carry another
            // request.
            Self::RequestTimeout(_) => {
                response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            _ => {}
        }
        response
    }
}
