//! The guard in front of every route: it applies the route's `Access` (spec §10) in the check
//! order `openapi.yaml` documents — the failure throttle 429 → authentication 401 → path 400 → role and session scope 403 →
//! `Host` 403 → the cookie's CSRF rules 403 → the per-token rate limit 429 — and hands the
//! handler its `Caller`. Query, media type, size and body checks follow in the handler's
//! extractors (spec §4.5 puts the query before the 403; openapi says where this differs).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::RequestExt;
use axum::extract::{ConnectInfo, FromRequestParts, RawPathParams, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::connection::Authenticate;
use super::headers::{header_text, is_json};
use crate::auth::{Access, Auth, Caller, Role};
use crate::common::signature as sign;
use crate::domain::{CommandId, GateId, LoopId, SessionId};
use crate::http::error::ApiError;

/// What the guard of one route needs.
#[derive(Clone)]
pub struct GuardState {
    pub auth: Arc<Auth>,
    pub access: Access,
    pub template: RouteTemplate,
}

pub async fn guard(State(guard): State<GuardState>, mut req: Request, next: Next) -> Response {
    let mut response = match check(&guard, &mut req).await {
        Ok(caller) => {
            let principal = caller.principal();
            // A request let through with a token or the login cookie authenticates its connection
            // (see `connection`).
            if let (Caller::Token(_), Some(connection)) = (&caller, req.extensions().get::<Authenticate>()) {
                connection.authenticated();
            }
            req.extensions_mut().insert(caller);
            let mut response = next.run(req).await;
            // For the request log, which runs outside the route and so never sees the caller.
            if let Some(name) = principal {
                response.extensions_mut().insert(Principal(name));
            }
            response
        }
        Err(e) => e.into_response(),
    };
    // Refusals carry it too: the log and the metrics name the route of every response.
    response.extensions_mut().insert(guard.template);
    response
}

/// The name a request was made as (a token's, `answer-link`, `webhook`), on its response.
#[derive(Debug, Clone)]
pub struct Principal(pub String);

/// The path template of the route that answered, on its response.
#[derive(Debug, Clone, Copy)]
pub struct RouteTemplate(pub &'static str);

async fn check(guard: &GuardState, req: &mut Request) -> Result<Caller, ApiError> {
    let GuardState { auth, access, .. } = guard;
    let client =
        req.extensions().get::<ConnectInfo<SocketAddr>>().map(|peer| auth.client_address(peer.ip(), req.headers()));
    req.extensions_mut().insert(ClientAddress(client));
    let (caller, by_cookie) = authenticate(auth, *access, req.headers(), client)?;
    let session = path_session(req).await?;
    if let Caller::Token(token) = &caller {
        if !access.permits(token.role) {
            return Err(ApiError::Forbidden(format!(
                "the {} token {:?} may not use this route",
                token.role.name(),
                token.name
            )));
        }
        if token.role == Role::Agent
            && let Some(session) = session
            && !token.covers(&session.to_string())
        {
            let prefix = token.session_prefix.as_deref().unwrap_or_default();
            return Err(ApiError::Forbidden(format!(
                "the agent token {:?} covers only sessions whose id starts with {prefix:?}",
                token.name
            )));
        }
    }
    let headers = req.headers();
    let host = req.uri().authority().map(|a| a.as_str()).or_else(|| header_text(headers, header::HOST));
    if !auth.security.host_allowed(host) {
        return Err(ApiError::Forbidden(format!(
            "the Host {:?} is not served here (a DNS-rebinding guard): use localhost or 127.0.0.1, or start \
             the server with --allowed-host",
            host.unwrap_or("")
        )));
    }
    let changes_state = !matches!(*req.method(), Method::GET | Method::HEAD);
    if by_cookie && changes_state {
        // A browser sends the cookie with any request to this site; only the page's own script
        // (or a page of a `--cors-origin`) can send JSON with a trusted Origin (spec §10's CSRF
        // rule).
        if !headers.get(header::CONTENT_TYPE).is_some_and(|ct| is_json(ct.as_bytes())) {
            return Err(ApiError::Forbidden("requests authenticated by the login cookie must send JSON".into()));
        }
        if !header_text(headers, header::ORIGIN).is_some_and(|origin| auth.security.origin_trusted(origin, host)) {
            return Err(ApiError::Forbidden(
                "requests authenticated by the login cookie must come from this server's own pages (Origin)".into(),
            ));
        }
    }
    // Only tokens have budgets: a signed answer is limited by its sender's own retry schedule.
    if *req.method() == Method::POST
        && let (Some(limiter), Caller::Token(token)) = (&auth.limiter, &caller)
        && let Err(wait) = limiter.take_post(&token.name)
    {
        return Err(ApiError::RateLimited {
            what: "this token sends too many requests",
            retry_after: whole_seconds(wait),
        });
    }
    Ok(caller)
}

/// The client address of a request (see `auth::client`), set by the guard; `None` without a
/// connection to take it from.
#[derive(Debug, Clone, Copy)]
pub struct ClientAddress(pub Option<IpAddr>);

impl<S: Send + Sync> FromRequestParts<S> for ClientAddress {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(parts.extensions.get::<ClientAddress>().copied().unwrap_or(ClientAddress(None)))
    }
}

/// Verifies a credential under the failure throttle (`auth::failures`): `429` without
/// verifying anything while `client` has spent its failures; a `401` from `verify` counts as
/// one more.
pub fn throttled<T>(
    auth: &Auth,
    client: Option<IpAddr>,
    verify: impl FnOnce() -> Result<T, ApiError>,
) -> Result<T, ApiError> {
    auth.may_try(client).map_err(|wait| ApiError::RateLimited {
        what: "this address failed to authenticate too often",
        retry_after: whole_seconds(wait),
    })?;
    let verified = verify();
    if let Err(ApiError::Unauthorized(_)) = &verified {
        auth.failed(client);
    }
    verified
}

/// A wait in whole seconds, rounded up (`Retry-After`).
fn whole_seconds(wait: std::time::Duration) -> u64 {
    wait.as_secs() + u64::from(wait.subsec_nanos() > 0)
}

/// The caller, and whether it was the login cookie that identified it. Every credential is
/// verified under the failure throttle of the `client` address.
fn authenticate(
    auth: &Auth,
    access: Access,
    headers: &HeaderMap,
    client: Option<IpAddr>,
) -> Result<(Caller, bool), ApiError> {
    let Some(tokens) = auth.security.tokens().filter(|_| access.guarded()) else {
        return Ok((Caller::Anyone, false));
    };
    if let Some(value) = headers.get(header::AUTHORIZATION) {
        let presented = value
            .to_str()
            .ok()
            .and_then(|v| v.split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, token)| token.trim());
        let token = throttled(auth, client, || {
            presented
                .and_then(|token| tokens.find(token))
                .ok_or_else(|| ApiError::Unauthorized("the bearer token is not valid".into()))
        })?;
        return Ok((Caller::Token(token), false));
    }
    let now = crate::domain::Timestamp::now().unix_seconds();
    let mut logins = auth.cookies.values(headers).peekable();
    if logins.peek().is_some() {
        // Of several cookies of this name (a browser sends one per matching path), the one this
        // server issued counts.
        let token = throttled(auth, client, || {
            logins.find_map(|value| auth.cookies.authenticate(value, tokens, now)).ok_or_else(|| {
                ApiError::Unauthorized("the login has expired or is no longer valid; log in again".into())
            })
        })?;
        return Ok((Caller::Token(token), true));
    }
    if access == Access::Answer
        && let Some(signature) = header_text(headers, sign::HEADER_SIGNATURE)
    {
        // Everything but the MAC is checked now, so an unsigned stranger gets its 401 first; the
        // MAC needs the body and is checked by the body extractor.
        auth.inbound_secret.as_ref().ok_or_else(no_inbound_secret)?;
        throttled(auth, client, || {
            sign::check_headers(
                header_text(headers, sign::HEADER_ID).unwrap_or_default(),
                header_text(headers, sign::HEADER_TIMESTAMP).unwrap_or_default(),
                signature,
                now,
            )
            .map_err(signature_refused)
        })?;
        return Ok((Caller::Signature, false));
    }
    Err(ApiError::Unauthorized("this route needs a token: `Authorization: Bearer …`, or log in on the page".into()))
}

/// Checks the ids in the path (a malformed one is a 400 before any 403) and returns the
/// session, if the route has one.
async fn path_session(req: &mut Request) -> Result<Option<SessionId>, ApiError> {
    let params = req
        .extract_parts::<RawPathParams>()
        .await
        .map_err(|e| ApiError::InvalidParameter(format!("the path is not valid: {}", e.body_text())))?;
    let mut session = None;
    for (name, value) in &params {
        let bad = |_| ApiError::InvalidParameter(format!("{name} {value:?} is not a UUID"));
        match name {
            "session_id" => session = Some(SessionId::parse(value).map_err(bad)?),
            "gate_id" => _ = GateId::parse(value).map_err(bad)?,
            "loop_id" => _ = LoopId::parse(value).map_err(bad)?,
            "command_id" => _ = CommandId::parse(value).map_err(bad)?,
            _ => {}
        }
    }
    Ok(session)
}

/// The caller the guard let through (`Anyone` for a route without a guard).
impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(parts.extensions.get::<Caller>().cloned().unwrap_or(Caller::Anyone))
    }
}

/// The 401 of a signed answer to a server without `--inbound-secret-file`.
pub fn no_inbound_secret() -> ApiError {
    ApiError::Unauthorized("signed answers need the server's --inbound-secret-file".into())
}

/// The 401 of a signature that does not verify.
pub fn signature_refused(e: sign::VerifyError) -> ApiError {
    ApiError::Unauthorized(format!("the webhook signature does not verify: {e}"))
}
