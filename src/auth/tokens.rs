//! The tokens file (spec §10): one credential per line, `ROLE NAME SECRET [SESSION_PREFIX]`.
//! Only SHA-256 digests of the secrets are kept, and a presented token is compared against every
//! digest in constant time, so neither the comparison nor the lookup leaks how close a guess was.

use std::collections::HashSet;
use std::fmt;
use std::path::Path;
use std::sync::Arc;

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// What a token may do (the route × role table of spec §10).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// An agent loop: opens, closes and reads gates, reads and acks inboxes, within its sessions.
    Agent,
    /// A person or integration that answers gates, in every session.
    Responder,
    /// Everything, including webhook deliveries.
    Admin,
}

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Self::Agent => "agent",
            Self::Responder => "responder",
            Self::Admin => "admin",
        }
    }

    fn parse(raw: &str) -> Option<Self> {
        [Self::Agent, Self::Responder, Self::Admin].into_iter().find(|role| role.name() == raw)
    }
}

/// The principal of answers made through an answer link.
pub const PRINCIPAL_LINK: &str = "answer-link";
/// The principal of signed webhook answers made without a token.
pub const PRINCIPAL_WEBHOOK: &str = "webhook";
/// Principal names the server itself records; no token may take them.
pub const RESERVED_NAMES: [&str; 2] = [PRINCIPAL_LINK, PRINCIPAL_WEBHOOK];

/// Shortest accepted secret: long enough that guessing is hopeless.
const MIN_SECRET_LEN: usize = 16;

/// One credential, without its secret.
pub struct Token {
    pub role: Role,
    /// Recorded as `source.principal` on its answers, and the key of its rate limits.
    pub name: String,
    /// An agent token only covers sessions whose id starts with this (lower case); `None` covers
    /// all.
    pub session_prefix: Option<String>,
    digest: [u8; 32],
}

impl Token {
    /// Whether the token may act on `session` (always, but for prefixed agent tokens).
    pub fn covers(&self, session: &str) -> bool {
        self.session_prefix.as_deref().is_none_or(|prefix| session.starts_with(prefix))
    }

    /// The digest of the secret: login cookies are bound to it, so changing the secret in the
    /// tokens file ends the logins made with the old one.
    pub fn digest(&self) -> &[u8; 32] {
        &self.digest
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Token").field("role", &self.role).field("name", &self.name).finish_non_exhaustive()
    }
}

/// The credentials of a tokens file.
#[derive(Debug)]
pub struct Tokens {
    tokens: Vec<Arc<Token>>,
}

/// Why a tokens file was refused, with its line.
#[derive(Debug, thiserror::Error)]
pub enum TokensError {
    #[error("cannot read the tokens file {path}: {cause}")]
    Read { path: String, cause: std::io::Error },
    #[error("tokens file line {line}: {message}")]
    Line { line: usize, message: String },
    #[error("the tokens file has no tokens (lines are `ROLE NAME SECRET [SESSION_PREFIX]`)")]
    Empty,
}

impl Tokens {
    pub fn load(path: &Path) -> Result<Self, TokensError> {
        let text = std::fs::read_to_string(path)
            .map_err(|cause| TokensError::Read { path: path.display().to_string(), cause })?;
        Self::parse(&text)
    }

    pub fn parse(text: &str) -> Result<Self, TokensError> {
        let mut tokens = Vec::new();
        let (mut names, mut digests) = (HashSet::new(), HashSet::new());
        for (index, line) in text.lines().enumerate() {
            let line_no = index + 1;
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let token = parse_line(line).map_err(|message| TokensError::Line { line: line_no, message })?;
            if !names.insert(token.name.clone()) {
                let message = "this NAME is already used by an earlier line".to_owned();
                return Err(TokensError::Line { line: line_no, message });
            }
            if !digests.insert(token.digest) {
                return Err(TokensError::Line { line: line_no, message: "this secret is used twice".into() });
            }
            tokens.push(Arc::new(token));
        }
        if tokens.is_empty() {
            return Err(TokensError::Empty);
        }
        Ok(Self { tokens })
    }

    /// The token whose secret is `presented`. Every digest is compared, in constant time.
    pub fn find(&self, presented: &str) -> Option<Arc<Token>> {
        let digest = sha256(presented.as_bytes());
        let mut found = None;
        for token in &self.tokens {
            if bool::from(token.digest.ct_eq(&digest)) {
                found = Some(Arc::clone(token));
            }
        }
        found
    }

    /// The token called `name` (for login cookies, which carry the name).
    pub fn named(&self, name: &str) -> Option<Arc<Token>> {
        self.tokens.iter().find(|t| t.name == name).cloned()
    }

    /// The secrets are gone; the count is what logs may say.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }
}

/// One line. Messages never quote a field: in a line with its fields out of order, any of them
/// may be the secret.
fn parse_line(line: &str) -> Result<Token, String> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    let (role, name, secret, prefix) = match fields[..] {
        [role, name, secret] => (role, name, secret, None),
        [role, name, secret, prefix] => (role, name, secret, Some(prefix)),
        _ => return Err(format!("expected `ROLE NAME SECRET [SESSION_PREFIX]`, found {} fields", fields.len())),
    };
    let role = Role::parse(role).ok_or("the ROLE (first field) must be agent, responder or admin")?;
    if RESERVED_NAMES.contains(&name) {
        return Err(format!("the NAME {name:?} is reserved for the server's own principals"));
    }
    if name.len() > 64 || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b)) {
        return Err("the NAME (second field) must be 1 to 64 letters, digits, '.', '_' or '-'".into());
    }
    if secret.len() < MIN_SECRET_LEN {
        return Err(format!("the SECRET (third field) is shorter than {MIN_SECRET_LEN} characters"));
    }
    let session_prefix = match prefix {
        None => None,
        Some(_) if role != Role::Agent => return Err("only agent tokens take a session prefix".into()),
        Some(prefix) if prefix.len() <= 36 && prefix.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-') => {
            Some(prefix.to_ascii_lowercase())
        }
        Some(_) => return Err("the SESSION_PREFIX (fourth field) is not the start of a UUID".into()),
    };
    Ok(Token { role, name: name.to_owned(), session_prefix, digest: sha256(secret.as_bytes()) })
}

fn sha256(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "\
# role name secret [prefix]
agent   bot      agent-secret-0123456789  AB12
responder alice  alice-secret-0123456789

admin   root     admin-secret-0123456789
";

    #[test]
    fn lines_comments_and_lookup() {
        let tokens = Tokens::parse(FILE).unwrap();
        assert_eq!(tokens.len(), 3);
        let bot = tokens.find("agent-secret-0123456789").unwrap();
        assert_eq!((bot.role, bot.name.as_str(), bot.session_prefix.as_deref()), (Role::Agent, "bot", Some("ab12")));
        assert!(bot.covers("ab12cdef-0000-4000-8000-000000000000"));
        assert!(!bot.covers("cd12cdef-0000-4000-8000-000000000000"));
        assert!(tokens.find("alice-secret-0123456789").unwrap().covers("anything"));
        assert!(tokens.find("alice-secret-012345678").is_none());
        assert!(tokens.find("").is_none());
        assert_eq!(tokens.named("root").unwrap().role, Role::Admin);
    }

    #[test]
    fn refusals_name_the_line() {
        for (text, needle) in [
            ("", "no tokens"),
            ("# only a comment\n", "no tokens"),
            ("boss x secret-0123456789abc", "ROLE"),
            ("admin webhook secret-0123456789abc", "reserved"),
            ("admin answer-link secret-0123456789abc", "reserved"),
            ("admin root short", "shorter"),
            ("admin root", "found 2 fields"),
            ("responder r secret-0123456789abc ab", "only agent"),
            ("agent a secret-0123456789abc zz", "not the start of a UUID"),
            ("admin a/b secret-0123456789abc", "letters"),
            // Fields out of order: the secret must not be echoed.
            ("admin secret-0123456789abc root", "shorter"),
            ("secret-0123456789abc admin root", "ROLE"),
            ("admin a secret-0123456789abc\nadmin a secret-0123456789abd", "line 2: this NAME"),
            ("admin a secret-0123456789abc\nadmin b secret-0123456789abc", "line 2: this secret"),
        ] {
            let message = Tokens::parse(text).unwrap_err().to_string();
            assert!(message.contains(needle), "{text:?}: {message}");
            assert!(!message.contains("secret-0123456789abc"), "a secret was echoed: {message}");
        }
    }
}
