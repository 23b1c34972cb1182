//! The JSON pages of rows (gate listings, journal pages, inbox pages) and what bounds the memory
//! they hold. A page is capped in rows and in bytes (`Limits::page`), and its body is built whole
//! and held until the client has read it: a client that asks for many pages and reads none would
//! have the server hold them all. So every page body holds a *page read* of its token until it
//! has been handed to the connection, and one token holds at most `--max-page-reads-per-token` of
//! them at once; past that, `429 rate_limited`. Open mode (loopback, no tokens) counts nobody.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use crate::auth::Caller;
use crate::http::error::ApiError;

/// Bodies go out in pieces of this size, so a page read ends once the connection has taken
/// (nearly) the whole page, rather than as soon as hyper holds all of it in its buffer.
const PIECE: usize = 64 * 1024;

/// How many page reads each token has in flight.
pub struct PageReads {
    per_token: u32,
    held: Mutex<HashMap<String, u32>>,
}

/// One token's page read, held by a page body until it is sent (or dropped with its
/// connection); nothing when no token is counted.
pub struct PageRead(Option<(Arc<PageReads>, String)>);

impl PageReads {
    pub fn new(per_token: u32) -> Arc<Self> {
        Arc::new(Self { per_token, held: Mutex::default() })
    }

    /// A page read for the caller, or `429` when its token has its maximum in flight.
    pub fn take(self: &Arc<Self>, caller: &Caller) -> Result<PageRead, ApiError> {
        let Caller::Token(token) = caller else { return Ok(PageRead(None)) };
        let mut held = self.held.lock().expect("page reads");
        let count = held.entry(token.name.clone()).or_insert(0);
        if *count >= self.per_token {
            return Err(ApiError::RateLimited {
                what: "this token has too many pages in flight; read them first",
                retry_after: 1,
            });
        }
        *count += 1;
        Ok(PageRead(Some((Arc::clone(self), token.name.clone()))))
    }

    /// Page reads in flight for the token `name` (for tests).
    pub fn held(&self, name: &str) -> u32 {
        self.held.lock().expect("page reads").get(name).copied().unwrap_or(0)
    }
}

impl Drop for PageRead {
    fn drop(&mut self) {
        let Some((reads, name)) = self.0.take() else { return };
        let mut held = reads.held.lock().expect("page reads");
        if let Some(count) = held.get_mut(&name) {
            *count -= 1;
            if *count == 0 {
                held.remove(&name);
            }
        }
    }
}

/// A `200` JSON page whose body holds `read` until it is sent.
pub fn page<T: Serialize>(body: &T, read: PageRead) -> Response {
    let bytes = match serde_json::to_vec(body) {
        Ok(bytes) => Bytes::from(bytes),
        Err(e) => return ApiError::internal(format!("a page did not serialise: {e}")).into_response(),
    };
    let length = bytes.len();
    let pieces = futures_util::stream::unfold((bytes, Some(read)), |(mut rest, read)| async move {
        if rest.is_empty() {
            drop(read);
            return None;
        }
        let piece = rest.split_to(rest.len().min(PIECE));
        Some((Ok::<_, std::convert::Infallible>(piece), (rest, read)))
    });
    let mut response = (StatusCode::OK, Body::from_stream(pieces)).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(length));
    response
}
