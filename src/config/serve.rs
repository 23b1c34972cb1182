//! `gatehouse serve`'s flags, in one group per part of the server: storage, HTTP and its limits,
//! security, webhooks, logging. Each group has its own help heading and a `settings()` that checks
//! it and turns it into the settings type of the part it belongs to, so each part takes only its
//! own settings. Secret-bearing values redact themselves by type, so `Debug` is derived.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, CommandFactory, FromArgMatches};

use super::{Cli, Command, parse_duration, parse_size};
use crate::auth::{SecuritySettings, TokenLimits};
use crate::common::cidr::Cidr;
use crate::common::public_url::PublicUrl;
use crate::domain::OpenRules;
use crate::http::{ConnectionSettings, HttpSettings, Limits, ReadTimeouts};
use crate::store::postgres::PgSettings;
use crate::store::sqlite::{Durability, SqliteSettings};
use crate::store::{DatabaseUrl, StoreSettings};
use crate::webhook::{DEFAULT_SCHEDULE, WebhookSettings};

/// Flags of `gatehouse serve`.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Address to listen on. Loopback by default; any other address needs --tokens-file (or
    /// --insecure-public-bind).
    #[arg(long, env = "GATEHOUSE_BIND", default_value = "127.0.0.1:8080")]
    pub bind: SocketAddr,

    /// The server's address as others reach it, for answer links (default: http://<bind>).
    #[arg(long, value_name = "URL", env = "GATEHOUSE_PUBLIC_URL")]
    pub public_url: Option<String>,

    #[command(flatten)]
    pub store: StoreArgs,
    #[command(flatten)]
    pub http: HttpArgs,
    #[command(flatten)]
    pub security: SecurityArgs,
    #[command(flatten)]
    pub webhooks: WebhookArgs,
    #[command(flatten)]
    pub log: LogArgs,
}

/// A flag whose value cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{flag} {value:?}: {reason}")]
pub struct FlagError {
    pub flag: &'static str,
    pub value: String,
    pub reason: String,
}

impl FlagError {
    fn new(flag: &'static str, value: &str, reason: impl ToString) -> Self {
        Self { flag, value: value.to_owned(), reason: reason.to_string() }
    }
}

/// Every part's settings, checked.
#[derive(Debug, Clone)]
pub struct ServeSettings {
    pub bind: SocketAddr,
    pub store: StoreSettings,
    pub http: HttpSettings,
    pub security: SecuritySettings,
    pub webhooks: WebhookSettings,
}

impl ServeArgs {
    /// The defaults with another database and address (for tests and embedding). Unlike the
    /// command line, it reads no `GATEHOUSE_*` variables.
    pub fn new(db: impl Into<PathBuf>, bind: SocketAddr) -> Self {
        let defaults = Cli::command().mut_subcommand("serve", |serve| serve.mut_args(|arg| arg.env(None)));
        let matches = defaults.try_get_matches_from(["gatehouse", "serve"]).expect("the defaults parse");
        let Command::Serve(mut serve) = Cli::from_arg_matches(&matches).expect("the defaults parse").command else {
            unreachable!("parsed as serve")
        };
        serve.store.db = db.into();
        serve.bind = bind;
        *serve
    }

    /// Checks every group and makes each part's settings. Files are read later, by the part
    /// that needs them (the tokens file, the webhook secrets), except the database URL's.
    pub fn settings(&self) -> Result<ServeSettings, FlagError> {
        let public_url = self
            .public_url
            .as_deref()
            .map(|url| url.parse::<PublicUrl>().map_err(|e| FlagError::new("--public-url", url, e)))
            .transpose()?;
        Ok(ServeSettings {
            bind: self.bind,
            store: self.store.settings()?,
            http: self.http.settings(),
            security: self.security.settings(public_url.clone())?,
            webhooks: self.webhooks.settings(public_url)?,
        })
    }
}

/// Where the gates are kept.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Storage")]
pub struct StoreArgs {
    /// SQLite database file (created if missing). `<db>.lock` beside it keeps a second server away.
    #[arg(long, env = "GATEHOUSE_DB", default_value = "gatehouse.db", conflicts_with_all = ["database_url", "database_url_file"])]
    pub db: PathBuf,

    /// Use PostgreSQL instead of the SQLite file: `postgres://USER:PASSWORD@HOST:PORT/DATABASE`.
    /// Several replicas may share one database. Needs --secret-file. Never logged.
    #[arg(
        long,
        value_name = "URL",
        env = "GATEHOUSE_DATABASE_URL",
        hide_env_values = true,
        conflicts_with = "database_url_file"
    )]
    pub database_url: Option<DatabaseUrl>,

    /// Read the PostgreSQL URL from this file (so the password stays out of the process list).
    #[arg(long, value_name = "PATH", env = "GATEHOUSE_DATABASE_URL_FILE")]
    pub database_url_file: Option<PathBuf>,

    /// The server key (answer links, login cookies), kept out of the database so that a copy of
    /// it cannot answer gates. Created if missing. Default: `<db>.key` beside the database.
    #[arg(long, value_name = "PATH", env = "GATEHOUSE_SECRET_FILE")]
    pub secret_file: Option<PathBuf>,

    /// `full`: an acknowledged answer survives power loss. `normal`: faster, but the last commits
    /// may roll back after power loss or an OS crash (a process crash alone loses nothing).
    #[arg(long, env = "GATEHOUSE_SYNC", value_enum, default_value_t = SyncMode::Full)]
    pub sync: SyncMode,

    /// Test-only storage fault injection: a file naming a fault (`readonly`, `full:N`), read by
    /// the writer before every transaction. Only in builds with the `fault-injection` feature.
    #[cfg(feature = "fault-injection")]
    #[arg(long, env = "GATEHOUSE_FAULT_FILE", hide = true)]
    pub fault_file: Option<PathBuf>,
}

impl StoreArgs {
    /// The SQLite file, or PostgreSQL (`--database-url`, or the URL in `--database-url-file`).
    pub fn settings(&self) -> Result<StoreSettings, FlagError> {
        let url = match (&self.database_url, &self.database_url_file) {
            (Some(url), _) => Some(url.clone()),
            (None, Some(file)) => {
                let path = file.display().to_string();
                let text = std::fs::read_to_string(file)
                    .map_err(|e| FlagError::new("--database-url-file", &path, format!("cannot read it: {e}")))?;
                Some(DatabaseUrl::new(text.trim().to_owned()))
            }
            (None, None) => None,
        };
        Ok(match url {
            Some(url) => StoreSettings::Postgres(PgSettings::new(url, self.secret_file.clone())),
            None => StoreSettings::Sqlite(SqliteSettings {
                path: self.db.clone(),
                durability: self.sync.into(),
                key_file: self.secret_file.clone(),
                before_commit: None,
                writer_metrics: Arc::default(),
                #[cfg(feature = "fault-injection")]
                fault_file: self.fault_file.clone(),
            }),
        })
    }
}

/// How requests, streams and connections are bounded.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "HTTP and limits")]
pub struct HttpArgs {
    /// Largest accepted request body: bytes, or with a KiB/MiB suffix.
    #[arg(long, env = "GATEHOUSE_MAX_BODY", default_value = "1MiB", value_parser = parse_size)]
    pub max_body: usize,

    /// About how many bytes one page of a listing, the journal or an inbox may hold (bytes, or
    /// with a KiB/MiB suffix); a page that reaches it ends early and its cursor goes on from there.
    #[arg(long, env = "GATEHOUSE_MAX_PAGE_BYTES", default_value = "1MiB", value_parser = parse_size)]
    pub max_page_bytes: usize,

    /// Pages one token may have in flight at once (read from the database and not yet sent);
    /// more get `429` (only with tokens).
    #[arg(long, value_name = "N", env = "GATEHOUSE_MAX_PAGE_READS_PER_TOKEN", default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_page_reads_per_token: u32,

    /// How often streams send a `: ping` comment (e.g. 15s, 500ms).
    #[arg(long, env = "GATEHOUSE_HEARTBEAT", default_value = "15s", value_parser = parse_duration)]
    pub heartbeat: Duration,

    /// Close a connection whose client has accepted no data for this long (it resumes with its
    /// cursor).
    #[arg(long, env = "GATEHOUSE_STREAM_STALL", default_value = "60s", value_parser = parse_duration)]
    pub stream_stall: Duration,

    /// Most streams open at once (default 10000, or what the open-file limit holds: no more than
    /// the connections a lowered default --max-connections leaves); more get `503 gate_capacity`.
    #[arg(long, env = "GATEHOUSE_MAX_STREAMS", value_parser = clap::value_parser!(u32).range(1..=10_000_000))]
    pub max_streams: Option<u32>,

    /// Most connections open at once, streams included (default 16384, or what the open-file
    /// limit holds); past it a new connection is closed at once. Each takes a file descriptor:
    /// the open-file limit must hold this many plus 256. Left unset, it is lowered to fit a
    /// lower limit, with a warning; set, a limit that cannot hold it refuses to start.
    #[arg(long, env = "GATEHOUSE_MAX_CONNECTIONS", value_parser = clap::value_parser!(u32).range(1..=10_000_000))]
    pub max_connections: Option<u32>,

    /// Most connections one client address (an IPv6 /64) may hold before they authenticate: until
    /// a request passes with a token or login cookie (without a tokens file, until a request head
    /// arrives whole). Past it, that address's new connections are closed at once.
    #[arg(long, env = "GATEHOUSE_MAX_UNAUTHENTICATED_PER_ADDRESS", default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=10_000_000))]
    pub max_unauthenticated_per_address: u32,

    /// Close a connection whose request head has not arrived whole this long after its first
    /// byte (after the connection opened, for its first request).
    #[arg(long, env = "GATEHOUSE_HEADER_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub header_timeout: Duration,

    /// Close a kept-alive connection that sends nothing for this long between requests.
    #[arg(long, env = "GATEHOUSE_KEEP_ALIVE_TIMEOUT", default_value = "60s", value_parser = parse_duration)]
    pub keep_alive_timeout: Duration,

    /// `408 request_timeout` (and the connection closed) when a request body brings no new byte
    /// for this long.
    #[arg(long, env = "GATEHOUSE_BODY_IDLE_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub body_idle_timeout: Duration,

    /// `408 request_timeout` (and the connection closed) when a request body has not arrived
    /// whole this long after its head.
    #[arg(long, env = "GATEHOUSE_BODY_TIMEOUT", default_value = "60s", value_parser = parse_duration)]
    pub body_timeout: Duration,

    /// Largest body of a request made without a token or login cookie, read before anything can
    /// vouch for it: signed answers (their signature covers the body), answer links and, with a
    /// tokens file, the login. Bytes, or with a KiB/MiB suffix.
    #[arg(long, env = "GATEHOUSE_MAX_UNAUTHENTICATED_BODY", default_value = "64KiB", value_parser = parse_size)]
    pub max_unauthenticated_body: usize,

    /// The longest `response_policy.timeout` a gate may ask for.
    #[arg(long, env = "GATEHOUSE_MAX_TIMEOUT", default_value = "7d", value_parser = parse_duration)]
    pub max_timeout: Duration,

    /// How long a permission gate waits for a decision when its request sets no policy; then it is
    /// denied (the harness default, 5 minutes).
    #[arg(long, env = "GATEHOUSE_PERMISSION_TIMEOUT", default_value = "5m", value_parser = parse_duration)]
    pub permission_timeout: Duration,

    /// Open gates one session may hold; more get `503 gate_capacity`.
    #[arg(long, env = "GATEHOUSE_MAX_OPEN_GATES", default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_open_gates: u32,

    /// Also serve `GET /metrics` without a token on this address: a port (then on 127.0.0.1) or
    /// ADDRESS:PORT. On the main address /metrics needs an admin token.
    #[arg(long, value_name = "[ADDR:]PORT", env = "GATEHOUSE_METRICS_BIND", value_parser = parse_metrics_bind)]
    pub metrics_bind: Option<SocketAddr>,
}

impl HttpArgs {
    pub fn settings(&self) -> HttpSettings {
        HttpSettings {
            limits: Limits {
                max_body: self.max_body,
                max_unauthenticated_body: self.max_unauthenticated_body,
                body_idle_timeout: self.body_idle_timeout,
                body_timeout: self.body_timeout,
                heartbeat: self.heartbeat,
                open_rules: OpenRules {
                    max_timeout: nanos(self.max_timeout),
                    permission_timeout: nanos(self.permission_timeout),
                },
                max_open_gates: self.max_open_gates as usize,
                max_page_bytes: self.max_page_bytes,
            },
            max_streams: self.max_streams,
            max_page_reads_per_token: self.max_page_reads_per_token,
            connections: ConnectionSettings {
                max_connections: self.max_connections,
                max_unauthenticated_per_address: self.max_unauthenticated_per_address,
                read_timeouts: ReadTimeouts { header: self.header_timeout, keep_alive: self.keep_alive_timeout },
                stream_stall: self.stream_stall,
            },
            metrics_bind: self.metrics_bind,
        }
    }
}

fn nanos(duration: Duration) -> i64 {
    i64::try_from(duration.as_nanos()).unwrap_or(i64::MAX)
}

/// Who may call the server, from where, and how often.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Security")]
pub struct SecurityArgs {
    /// Credentials, one per line: `ROLE NAME SECRET [SESSION_PREFIX]` (roles agent, responder,
    /// admin; `#` starts a comment). Without it everything is open, which only loopback allows.
    #[arg(long, value_name = "PATH", env = "GATEHOUSE_TOKENS_FILE")]
    pub tokens_file: Option<PathBuf>,

    /// Listen on a non-loopback address without --tokens-file (when a proxy in front
    /// authenticates).
    #[arg(long, env = "GATEHOUSE_INSECURE_PUBLIC_BIND")]
    pub insecure_public_bind: bool,

    /// Another hostname the Host header may name on a loopback bind (repeatable); localhost,
    /// 127.0.0.1, [::1] and the --public-url host always may.
    #[arg(long = "allowed-host", value_name = "HOST", env = "GATEHOUSE_ALLOWED_HOST", value_delimiter = ',')]
    pub allowed_hosts: Vec<String>,

    /// Let pages of this origin call the API from a browser (repeatable), e.g.
    /// https://ops.example.com. Never a wildcard.
    #[arg(long = "cors-origin", value_name = "ORIGIN", env = "GATEHOUSE_CORS_ORIGIN", value_delimiter = ',')]
    pub cors_origins: Vec<String>,

    /// POSTs per second one token may make, with bursts of twice as many (only with tokens).
    #[arg(long, value_name = "N", env = "GATEHOUSE_RATE_LIMIT", default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..))]
    pub rate_limit: u32,

    /// Failed authentications (wrong tokens, logins, cookies or signatures) one client address
    /// may make per minute, in a burst or spread out; past it, that address gets `429` with
    /// `Retry-After` for every credential until its budget refills. Other addresses are not held up.
    #[arg(long, value_name = "N", env = "GATEHOUSE_AUTH_FAILURES", default_value_t = 30, value_parser = clap::value_parser!(u32).range(1..))]
    pub auth_failures: u32,

    /// A reverse proxy in front of gatehouse (repeatable, a CIDR like 10.0.0.0/8 or an address):
    /// for its connections the client address of per-address limits is the one it appends to
    /// `X-Forwarded-For`, and its connections are not counted by --max-unauthenticated-per-address.
    /// From anyone else `X-Forwarded-For` is ignored.
    #[arg(long = "trusted-proxy", value_name = "CIDR", env = "GATEHOUSE_TRUSTED_PROXY", value_delimiter = ',')]
    pub trusted_proxies: Vec<String>,

    /// Streams one token may hold open at once (only with tokens); --max-streams bounds all.
    #[arg(long, value_name = "N", env = "GATEHOUSE_MAX_STREAMS_PER_TOKEN", default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_streams_per_token: u32,
}

impl SecurityArgs {
    pub fn settings(&self, public_url: Option<PublicUrl>) -> Result<SecuritySettings, FlagError> {
        let origin = |url: &String| {
            let parsed = url.parse::<PublicUrl>().map_err(|e| FlagError::new("--cors-origin", url, e))?;
            Ok(parsed.origin().to_owned())
        };
        let cors_origins = self.cors_origins.iter().map(origin).collect::<Result<_, _>>()?;
        Ok(SecuritySettings {
            tokens_file: self.tokens_file.clone(),
            insecure_public_bind: self.insecure_public_bind,
            allowed_hosts: self.allowed_hosts.clone(),
            cors_origins,
            public_url,
            limits: TokenLimits {
                posts_per_second: self.rate_limit.max(1),
                streams: self.max_streams_per_token.max(1),
            },
            auth_failures: self.auth_failures,
            trusted_proxies: parse_cidrs("--trusted-proxy", &self.trusted_proxies)?,
        })
    }
}

/// Notifications out, signed answers in.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Webhooks")]
pub struct WebhookArgs {
    /// Send every journal event to this URL (repeatable), signed per Standard Webhooks.
    #[arg(long = "webhook-url", value_name = "URL", env = "GATEHOUSE_WEBHOOK_URL")]
    pub urls: Vec<String>,

    /// The Standard Webhooks secret (`whsec_…`) that signs notifications: a file for every
    /// endpoint, or `URL=PATH` for one `--webhook-url` of its own (repeatable). It never verifies
    /// answers (that is --inbound-secret-file), so a receiver of notifications cannot answer.
    #[arg(long = "webhook-secret-file", value_name = "[URL=]PATH", env = "GATEHOUSE_WEBHOOK_SECRET_FILE")]
    pub secret_files: Vec<String>,

    /// The Standard Webhooks secret (`whsec_…`) that verifies signed answers on the answer route
    /// (a bot answering as the principal `webhook`). Without it, signed answers are refused.
    #[arg(long, value_name = "PATH", env = "GATEHOUSE_INBOUND_SECRET_FILE")]
    pub inbound_secret_file: Option<PathBuf>,

    /// Let webhooks reach these otherwise forbidden addresses (repeatable), e.g. 127.0.0.1/32.
    #[arg(
        long = "webhook-allow-cidr",
        value_name = "CIDR",
        env = "GATEHOUSE_WEBHOOK_ALLOW_CIDR",
        value_delimiter = ','
    )]
    pub allow_cidrs: Vec<String>,

    /// Waits between delivery attempts, comma-separated (default about 5s,5m,30m,2h,6h,12h,1d);
    /// after the last, an event is a dead letter.
    #[arg(long = "webhook-retry-schedule", value_name = "DURS", env = "GATEHOUSE_WEBHOOK_RETRY_SCHEDULE", value_delimiter = ',', value_parser = parse_duration)]
    pub retry_schedule: Vec<Duration>,

    /// How long a replica holds a webhook endpoint without renewing (with several replicas, one
    /// delivers to each endpoint; another takes over after this long if it dies).
    #[arg(long = "webhook-lease", value_name = "DUR", env = "GATEHOUSE_WEBHOOK_LEASE", default_value = "45s", value_parser = parse_duration, hide = true)]
    pub lease: Duration,

    /// Re-enable an endpoint that was disabled by a 410 answer (repeatable).
    #[arg(long = "webhook-reenable", value_name = "URL", env = "GATEHOUSE_WEBHOOK_REENABLE")]
    pub reenable: Vec<String>,
}

impl WebhookArgs {
    pub fn settings(&self, public_url: Option<PublicUrl>) -> Result<WebhookSettings, FlagError> {
        Ok(WebhookSettings {
            urls: self.urls.clone(),
            secret_files: self.secret_files.clone(),
            inbound_secret_file: self.inbound_secret_file.clone(),
            allow: parse_cidrs("--webhook-allow-cidr", &self.allow_cidrs)?,
            schedule: if self.retry_schedule.is_empty() {
                DEFAULT_SCHEDULE.to_vec()
            } else {
                self.retry_schedule.clone()
            },
            lease: self.lease,
            reenable: self.reenable.clone(),
            public_url,
        })
    }
}

/// What the server's log looks like.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Logging")]
pub struct LogArgs {
    /// How the log is written: `text` for people, or `json`, one object per line with its fields
    /// (every request: request_id, route, status, latency_ms, principal), for log collectors.
    #[arg(long, value_enum, env = "GATEHOUSE_LOG_FORMAT", default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

fn parse_cidrs(flag: &'static str, values: &[String]) -> Result<Vec<Cidr>, FlagError> {
    values.iter().map(|value| value.parse::<Cidr>().map_err(|e| FlagError::new(flag, value, e))).collect()
}

/// `--log-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// `9091` (on 127.0.0.1) or `ADDRESS:PORT`.
fn parse_metrics_bind(raw: &str) -> Result<SocketAddr, String> {
    match raw.trim().parse::<u16>() {
        Ok(port) => Ok(SocketAddr::from(([127, 0, 0, 1], port))),
        Err(_) => raw.trim().parse().map_err(|_| format!("{raw:?} is not a port or ADDRESS:PORT")),
    }
}

/// `--sync`: how hard a commit waits for the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SyncMode {
    Full,
    Normal,
}

impl SyncMode {
    /// The flag's value, as `--sync` takes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Full => "full",
            Self::Normal => "normal",
        }
    }
}

impl From<SyncMode> for Durability {
    fn from(mode: SyncMode) -> Self {
        match mode {
            SyncMode::Full => Durability::Full,
            SyncMode::Normal => Durability::Normal,
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    /// The one secret a flag carries (a password in the PostgreSQL URL) never reaches `Debug`,
    /// of the flags or of the settings made from them; nor does a client's token.
    #[test]
    fn debug_output_holds_no_secret() {
        const PASSWORD: &str = "hunter2-not-for-logs";
        let url = format!("postgres://gatehouse:{PASSWORD}@127.0.0.1:5432/gates");
        let cli = Cli::try_parse_from(["gatehouse", "serve", "--database-url", &url, "--secret-file", "k"])
            .expect("the flags parse");
        let Command::Serve(args) = &cli.command else { panic!("parsed as serve") };
        let settings = args.settings().expect("valid settings");
        assert!(matches!(settings.store, StoreSettings::Postgres(_)), "the URL chose PostgreSQL");
        for shown in [format!("{cli:?}"), format!("{args:?}"), format!("{settings:?}")] {
            assert!(!shown.contains(PASSWORD), "a secret reached Debug: {shown}");
            assert!(shown.contains("redacted"), "the URL is shown redacted: {shown}");
        }
        let client = super::super::ClientArgs { url: "http://127.0.0.1:8080".into(), token: Some(PASSWORD.into()) };
        assert!(!format!("{client:?}").contains(PASSWORD));
    }

    #[test]
    fn flags_are_checked_into_settings() {
        let mut args = ServeArgs::new("gatehouse.db", "127.0.0.1:0".parse().unwrap());
        args.public_url = Some("https://Gates.Example.com/".into());
        args.security.trusted_proxies = vec!["10.0.0.0/8".into()];
        let settings = args.settings().expect("valid");
        let public = settings.security.public_url.expect("public URL");
        assert_eq!((public.origin(), public.base()), ("https://gates.example.com", "https://Gates.Example.com"));
        assert_eq!(settings.security.trusted_proxies[0].prefix(), 8);
        args.security.trusted_proxies = vec!["10.0.0.1/8".into()];
        assert_eq!(args.settings().unwrap_err().flag, "--trusted-proxy");
        args.security.trusted_proxies.clear();
        args.public_url = Some("ftp://gates.example.com".into());
        assert_eq!(args.settings().unwrap_err().flag, "--public-url");
    }
}
