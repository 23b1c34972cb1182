//! Which database, and how to open it: the store's own settings, made from the command line's
//! store flags (`config::serve::StoreArgs`).

use std::sync::Arc;

use super::postgres::PgSettings;
use super::sqlite::SqliteSettings;
use crate::metrics::WriterMetrics;

/// Which database, and how to open it.
#[derive(Clone, Debug)]
pub enum StoreSettings {
    Sqlite(SqliteSettings),
    Postgres(PgSettings),
}

impl StoreSettings {
    /// Where the writer records its batches and failures.
    pub fn writer_metrics(&self) -> &Arc<WriterMetrics> {
        match self {
            Self::Sqlite(settings) => &settings.writer_metrics,
            Self::Postgres(settings) => &settings.writer_metrics,
        }
    }

    /// The database in words, for the start-up line: the SQLite file, or "PostgreSQL" (never its
    /// URL, which may hold a password).
    pub fn describe(&self) -> String {
        match self {
            Self::Sqlite(settings) => format!("database {}", settings.path.display()),
            Self::Postgres(_) => "PostgreSQL".to_owned(),
        }
    }
}

/// Where the database is, as the command line names it (never logged: a URL may hold a password).
#[derive(Clone, PartialEq, Eq)]
pub struct DatabaseUrl(String);

impl DatabaseUrl {
    pub fn new(url: String) -> Self {
        Self(url)
    }

    /// The URL itself, for the driver only.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for DatabaseUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DatabaseUrl(<redacted>)")
    }
}

impl std::str::FromStr for DatabaseUrl {
    type Err = std::convert::Infallible;

    /// Any text: the driver checks it when the store opens (its error never quotes the URL).
    fn from_str(url: &str) -> Result<Self, Self::Err> {
        Ok(Self(url.trim().to_owned()))
    }
}
