//! The HTTP side of the client subcommands: one small wrapper over reqwest that turns every
//! failure into words a person can act on.

use std::time::Duration;

use reqwest::Method;
use serde::Serialize;
use serde_json::Value;

use super::terminal::{Lines, escape};
use crate::common::innermost_cause;

/// Why a request did not get an answer from the server.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Nothing answered (connection refused, reset, timed out): worth retrying.
    #[error("cannot reach gatehouse at {url}: {cause}")]
    Unreachable { url: String, cause: String },
    /// The server answered with something that is not the API.
    #[error("unexpected answer from gatehouse at {url}: {cause}")]
    Protocol { url: String, cause: String },
}

/// A response: its status and JSON body (`Null` when empty).
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub body: Value,
    /// Whether the request carried `GATEHOUSE_TOKEN`, to say what to do about a 401.
    token_sent: bool,
}

impl Reply {
    pub fn ok(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// The error code of an error body.
    pub fn code(&self) -> &str {
        self.body["error"]["code"].as_str().unwrap_or("")
    }

    /// The server's message, with field details, for a person (messages may quote what someone
    /// sent, so they are escaped for the terminal).
    pub fn message(&self) -> String {
        let text = |value: &Value| escape(value.as_str().unwrap_or(""), Lines::Escape).into_owned();
        let mut message = match text(&self.body["error"]["message"]) {
            message if message.is_empty() => "request failed".to_owned(),
            message => message,
        };
        message.push_str(&format!(" ({} {})", self.status, text(&self.body["error"]["code"])));
        if self.status == 401 {
            message.push_str(&format!("; {}", token_hint(self.token_sent)));
        }
        // One line per field below, `path: message`, where the person can read them.
        for field in self.body["error"]["fields"].as_array().into_iter().flatten() {
            message.push_str(&format!("\n  {}: {}", text(&field["path"]), text(&field["message"])));
        }
        message
    }

    /// Worth retrying: storage trouble or capacity (503).
    pub fn retryable(&self) -> bool {
        self.body["error"]["retryable"].as_bool().unwrap_or(self.status == 503)
    }
}

/// The server's API, at one base URL.
#[derive(Debug, Clone)]
pub struct Api {
    base: String,
    token_sent: bool,
    http: reqwest::Client,
    /// For streams, which have no end and so no overall timeout.
    streaming: reqwest::Client,
}

impl Api {
    /// Every request carries `token` as a bearer credential, when given. Fails only when TLS
    /// cannot load the machine's CA certificates, or the token is not a valid header value.
    pub fn new(base: &str, token: Option<&str>) -> Result<Self, String> {
        let mut headers = reqwest::header::HeaderMap::new();
        if let Some(token) = token {
            let mut value = reqwest::header::HeaderValue::from_str(&format!("Bearer {token}"))
                .map_err(|_| "GATEHOUSE_TOKEN holds characters a header cannot carry".to_owned())?;
            value.set_sensitive(true);
            headers.insert(reqwest::header::AUTHORIZATION, value);
        }
        let builder =
            || reqwest::Client::builder().connect_timeout(Duration::from_secs(5)).default_headers(headers.clone());
        let failed = |e: reqwest::Error| format!("cannot set up HTTP (are CA certificates installed?): {e}");
        // Long-polls hold a request up to 30 s; anything much longer is a dead server.
        let http = builder().timeout(Duration::from_secs(45)).build().map_err(failed)?;
        let streaming = builder().build().map_err(failed)?;
        Ok(Self { base: base.trim_end_matches('/').to_owned(), token_sent: token.is_some(), http, streaming })
    }

    pub async fn get(&self, path: &str) -> Result<Reply, ClientError> {
        self.send(Method::GET, path, None, None).await
    }

    /// A POST of `body` as JSON: a `Value`, or JSON text kept as it is (`RawValue`: the order of
    /// an object's members is part of what a JSON Schema says).
    pub async fn post(
        &self,
        path: &str,
        body: Option<&(impl Serialize + ?Sized)>,
        key: Option<&str>,
    ) -> Result<Reply, ClientError> {
        let body = body.map(serde_json::to_vec).transpose().map_err(|e| ClientError::Protocol {
            url: format!("{}{path}", self.base),
            cause: format!("cannot write the request: {e}"),
        })?;
        self.send(Method::POST, path, body, key).await
    }

    async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
        key: Option<&str>,
    ) -> Result<Reply, ClientError> {
        let url = format!("{}{path}", self.base);
        let mut request = self.http.request(method, &url);
        if let Some(body) = body {
            request = request.header(reqwest::header::CONTENT_TYPE, "application/json").body(body);
        }
        if let Some(key) = key {
            request = request.header("idempotency-key", key);
        }
        let unreachable =
            |e: reqwest::Error| ClientError::Unreachable { url: self.base.clone(), cause: innermost_cause(&e) };
        let response = request.send().await.map_err(unreachable)?;
        let status = response.status().as_u16();
        let bytes = response.bytes().await.map_err(unreachable)?;
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes)
                .map_err(|e| ClientError::Protocol { url: url.clone(), cause: e.to_string() })?
        };
        Ok(Reply { status, body, token_sent: self.token_sent })
    }

    /// Opens an event stream (a GET with `Accept: text/event-stream`).
    pub async fn stream(&self, path: &str) -> Result<reqwest::Response, ClientError> {
        let response = self
            .streaming
            .get(format!("{}{path}", self.base))
            .header("accept", "text/event-stream")
            .send()
            .await
            .map_err(|e| ClientError::Unreachable { url: self.base.clone(), cause: innermost_cause(&e) })?;
        if !response.status().is_success() {
            let status = response.status();
            let mut cause = match response.json::<Value>().await {
                Ok(body) => {
                    format!(
                        "{status}: {}",
                        escape(body["error"]["message"].as_str().unwrap_or("no message"), Lines::Escape)
                    )
                }
                Err(_) => format!("status {status}"),
            };
            if status == reqwest::StatusCode::UNAUTHORIZED {
                cause.push_str(&format!("; {}", token_hint(self.token_sent)));
            }
            return Err(ClientError::Protocol { url: self.base.clone(), cause });
        }
        Ok(response)
    }
}

/// What to do about a 401: the CLI's only credential is `GATEHOUSE_TOKEN`.
fn token_hint(token_sent: bool) -> &'static str {
    if token_sent {
        "the server does not accept GATEHOUSE_TOKEN; set it to a token from the server's tokens file"
    } else {
        "the server wants a token: set GATEHOUSE_TOKEN to one from its tokens file"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_problems_follow_the_message_one_per_line_escaped() {
        let reply = Reply {
            status: 400,
            body: serde_json::json!({"error": {"code": "gate_values_invalid", "message": "the values do not fit the gate",
                "fields": [{"path": "/values/tool_input/command", "message": "5 is not of type \"string\""},
                           {"path": "/values/tool_input/x\u{1b}", "message": "unknown"}]}}),
            token_sent: false,
        };
        assert_eq!(
            reply.message(),
            "the values do not fit the gate (400 gate_values_invalid)\n  /values/tool_input/command: 5 is not of type \
             \"string\"\n  /values/tool_input/x\\u{1b}: unknown"
        );
    }
}
