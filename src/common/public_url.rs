//! `--public-url`: the server's address as people and receivers reach it. Parsed once; the
//! security checks take its origin, answer links its text.

use std::fmt;
use std::str::FromStr;

/// An http or https URL with a host.
#[derive(Clone, PartialEq, Eq)]
pub struct PublicUrl {
    /// As given, without a trailing `/`: the base of answer links.
    base: String,
    /// `scheme://host[:port]`, lower case.
    origin: String,
    host: String,
}

impl PublicUrl {
    /// The base of answer links (`{base}/v1/answers/{token}`).
    pub fn base(&self) -> &str {
        &self.base
    }

    /// `scheme://host[:port]`, lower case, as browsers send `Origin`.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// The hostname, lower case.
    pub fn host(&self) -> &str {
        &self.host
    }

    pub fn is_https(&self) -> bool {
        self.origin.starts_with("https://")
    }
}

impl FromStr for PublicUrl {
    type Err = String;

    fn from_str(raw: &str) -> Result<Self, Self::Err> {
        let parsed = url::Url::parse(raw).map_err(|e| e.to_string())?;
        let host = match (parsed.scheme(), parsed.host_str()) {
            ("http" | "https", Some(host)) => host.to_ascii_lowercase(),
            _ => return Err("must be an http or https URL with a host".into()),
        };
        let origin = parsed.origin().ascii_serialization();
        Ok(Self { base: raw.trim_end_matches('/').to_owned(), origin, host })
    }
}

impl fmt::Debug for PublicUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.base)
    }
}
