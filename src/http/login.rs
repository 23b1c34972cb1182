//! The page's login (spec §10): `POST /v1/login {"token"}` trades a token for an `HttpOnly;
//! SameSite=Strict` cookie naming it, so the page's script never holds the secret.

use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::extract::JsonBody;
use super::{AppState, Route};
use crate::auth::{Access, cookie};
use crate::error::ApiError;

pub(super) fn routes() -> Vec<Route> {
    vec![Route::post(Access::Open, "/v1/login", login)]
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LoginIn {
    token: String,
}

/// 204 with the cookie; 401 for a token that is not in the tokens file. Without a tokens file
/// everything is open: 204 and no cookie.
async fn login(State(state): State<AppState>, JsonBody(body): JsonBody<LoginIn>) -> Result<Response, ApiError> {
    let Some(tokens) = state.auth.security.tokens() else {
        return Ok(StatusCode::NO_CONTENT.into_response());
    };
    let token = tokens.find(&body.token).ok_or_else(|| ApiError::Unauthorized("the token is not valid".into()))?;
    let now = crate::domain::Timestamp::now().unix_seconds();
    let value = format!(
        "{}={}; {}",
        cookie::NAME,
        state.auth.cookies.issue(&token, now),
        state.auth.security.cookie_attributes()
    );
    tracing::info!(principal = %token.name, "logged in on the page");
    let mut response = StatusCode::NO_CONTENT.into_response();
    response.headers_mut().insert(header::SET_COOKIE, HeaderValue::from_str(&value).expect("cookie is ASCII"));
    Ok(response)
}
