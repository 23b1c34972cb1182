//! The inbox page: plain HTML, CSS and JavaScript modules from `static/`, embedded in the binary
//! so it works from any directory. `/` is the page; `/static/{name}` its other files.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::extract::Params;
use crate::http::error::ApiError;

/// Every embedded file: (name, content type, bytes).
const FILES: &[(&str, &str, &str)] = &[
    ("index.html", "text/html; charset=utf-8", include_str!("../../static/index.html")),
    ("style.css", "text/css; charset=utf-8", include_str!("../../static/style.css")),
    ("app.js", "text/javascript; charset=utf-8", include_str!("../../static/app.js")),
    ("answer.js", "text/javascript; charset=utf-8", include_str!("../../static/answer.js")),
    ("api.js", "text/javascript; charset=utf-8", include_str!("../../static/api.js")),
    ("stream.js", "text/javascript; charset=utf-8", include_str!("../../static/stream.js")),
    ("view.js", "text/javascript; charset=utf-8", include_str!("../../static/view.js")),
    ("permission.js", "text/javascript; charset=utf-8", include_str!("../../static/permission.js")),
    ("form.js", "text/javascript; charset=utf-8", include_str!("../../static/form.js")),
    ("schema.js", "text/javascript; charset=utf-8", include_str!("../../static/schema.js")),
];

/// The page may load only itself: no inline scripts, no third-party anything. Gate text is
/// rendered as text by the page; this is the second line of defence.
pub(super) const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

#[derive(Deserialize)]
pub(super) struct FilePath {
    name: String,
}

pub(super) async fn page() -> Response {
    serve("index.html").expect("the page is embedded")
}

pub(super) async fn file(Params(FilePath { name }): Params<FilePath>) -> Result<Response, ApiError> {
    serve(&name).ok_or(ApiError::NotFound("no such file"))
}

fn serve(name: &str) -> Option<Response> {
    let (_, content_type, body) = FILES.iter().find(|(n, ..)| *n == name)?;
    let mut response = (StatusCode::OK, *body).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    // Always revalidate: a new binary must never run with yesterday's script.
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    Some(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_file_is_served_with_its_type() {
        for (name, content_type, _) in FILES {
            let response = serve(name).unwrap();
            assert_eq!(response.headers()[header::CONTENT_TYPE], *content_type);
        }
        assert!(serve("../Cargo.toml").is_none());
    }
}
