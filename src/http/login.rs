//! The page's login (spec §10): `POST /v1/login {"token"}` trades a token for an `HttpOnly;
//! SameSite=Strict` cookie naming it, so the page's script never holds the secret;
//! `POST /v1/logout` tells the browser to forget it.

use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::AppState;
use super::extract::JsonBody;
use super::guard::{ClientAddress, throttled};
use crate::auth::{Role, cookie};
use crate::http::error::ApiError;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct LoginIn {
    token: String,
}

/// 204 with the cookie; 401 for a token that is not in the tokens file (throttled per client
/// address like every failed credential), 403 for an agent token, which has no use for the page.
/// Without a tokens file everything is open: 204 and no cookie.
pub(super) async fn login(
    State(state): State<AppState>,
    ClientAddress(client): ClientAddress,
    JsonBody(body): JsonBody<LoginIn>,
) -> Result<Response, ApiError> {
    let Some(tokens) = state.auth.security.tokens() else {
        return Ok(StatusCode::NO_CONTENT.into_response());
    };
    let token = throttled(&state.auth, client, || {
        tokens.find(&body.token).ok_or_else(|| ApiError::Unauthorized("the token is not valid".into()))
    })?;
    if token.role == Role::Agent {
        return Err(ApiError::Forbidden(format!(
            "the agent token {:?} may not log in: the page is for responders and admins",
            token.name
        )));
    }
    let now = crate::domain::Timestamp::now().unix_seconds();
    let value = format!(
        "{}={}; {}",
        state.auth.cookies.name(),
        state.auth.cookies.issue(&token, now),
        state.auth.security.cookie_attributes(cookie::LIFETIME_SECS)
    );
    tracing::info!(principal = %token.name, "logged in on the page");
    Ok(with_cookie(value))
}

/// 204, and the cookie expired, whoever asks: a login cookie is a signed claim, not a session the
/// server holds, so there is nothing else to end (changing the token's secret ends every login
/// made with it).
pub(super) async fn logout(State(state): State<AppState>) -> Response {
    with_cookie(format!("{}=; {}", state.auth.cookies.name(), state.auth.security.cookie_attributes(0)))
}

fn with_cookie(set_cookie: String) -> Response {
    let mut response = StatusCode::NO_CONTENT.into_response();
    response.headers_mut().insert(header::SET_COOKIE, HeaderValue::from_str(&set_cookie).expect("cookie is ASCII"));
    response
}
