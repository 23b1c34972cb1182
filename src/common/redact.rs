//! What of a secret-bearing value logs, metrics and errors may show.

/// A URL as logs and metrics show it: scheme, host, port and path, never the query string or
/// user info (they may hold a receiver's key or a password).
pub fn display_url(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(parsed) => {
            let port = parsed.port().map(|p| format!(":{p}")).unwrap_or_default();
            format!("{}://{}{port}{}", parsed.scheme(), parsed.host_str().unwrap_or(""), parsed.path())
        }
        Err(_) => "(not a URL)".into(),
    }
}
