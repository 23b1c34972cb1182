//! The command line: `gatehouse serve` and its flags, each with a `GATEHOUSE_*` environment
//! fallback, the client subcommands (`ask`, `answer`, `gates`, `tail`, `mcp`) and `bench`.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};

use crate::store::Durability;

/// The after-help of a client subcommand: its own text, then the environment every client reads
/// (`GATEHOUSE_TOKEN` has no flag, so this is where `--help` shows it).
macro_rules! client_help {
    ($text:literal) => {
        concat!(
            $text,
            "

Environment:
  GATEHOUSE_URL    the server, as --url (default http://127.0.0.1:8080)
  GATEHOUSE_TOKEN  the bearer token, when the server has a tokens file; read from the environment
                   only, so it never shows in the process list"
        )
    };
}

/// gatehouse: an AI agent asks a person a question and gets back exactly one answer.
#[derive(Debug, Parser)]
#[command(name = "gatehouse", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the gate server (on an embedded SQLite file by default, or on PostgreSQL).
    // Boxed: the server has many flags, the client subcommands few.
    Serve(Box<ServeArgs>),
    /// Ask a person a question and print the answer (blocks until answered).
    #[command(after_help = client_help!(
        "Prints the answer alone on stdout; on stderr, the gate id and how to answer it.
Exit codes: 0 answered, 2 withdrawn, 3 timed out without a default, 1 error; 130, 143 and 129
after SIGINT, SIGTERM and SIGHUP (each withdraws the gate first).

Examples:
  gatehouse ask 'Deploy to prod?' --choice yes --choice no
  gatehouse ask 'Which region?' --choice eu --choice us --allow-other --timeout 10m --default eu
  if [ \"$(gatehouse ask 'Deploy?' --choice yes --choice no)\" = yes ]; then ./deploy.sh; fi"
    ))]
    Ask(AskArgs),
    /// Answer an open gate, named by its id or a unique prefix of it (8 characters or more).
    #[command(after_help = client_help!(
        "Examples:
  gatehouse answer 9d3e4f50-6a7b-4c8d-9e0f-1a2b3c4d5e6f yes
  gatehouse answer 9d3e4f50 yes        # the short id `gatehouse gates` shows"
    ))]
    Answer(AnswerArgs),
    /// List gates as a table (open ones unless --all).
    #[command(after_help = client_help!(
        "Examples:\n  gatehouse gates\n  gatehouse gates --all\n  gatehouse gates --watch"
    ))]
    Gates(GatesArgs),
    /// Print journal events as JSON lines, then follow new ones.
    #[command(after_help = client_help!(
        "Examples:\n  gatehouse tail\n  gatehouse tail --after 41 | jq .event.type"
    ))]
    Tail(TailArgs),
    /// Serve the Model Context Protocol over stdio: tools `ask_user` and `approve_tool_call` for
    /// an MCP client's agent, answered through this gatehouse server.
    #[command(after_help = client_help!(
        "Register it with an MCP client, for example (the client starts it and speaks on its stdio):
  {\"mcpServers\": {\"gatehouse\": {\"command\": \"gatehouse\", \"args\": [\"mcp\", \"--session\", \"<uuid>\"],
                                \"env\": {\"GATEHOUSE_URL\": \"http://127.0.0.1:8080\"}}}}

A retried tool call finds its gate again (also across restarts, given --session); a cancelled call
withdraws its gate. A client may name a call with _meta \"gatehouse/call_id\"."
    ))]
    Mcp(McpArgs),
    /// Measure gatehouse side by side with this machine's own ceilings (starts its own servers).
    #[command(after_help = BENCH_HELP)]
    Bench(BenchArgs),
    /// The bare comparison server `bench` starts: axum hello and a tokio-broadcast SSE fan-out.
    #[command(name = "bench-ceiling", hide = true)]
    BenchCeiling(CeilingArgs),
}

const BENCH_HELP: &str = "\
It starts `gatehouse serve` and a bare axum server as child processes on temporary databases
(under $TMPDIR) and loopback ports, drives them from this process, and prints every figure as
the median of its runs with the min-max range, then each target as a ratio from the same run.
Figures below a target are reported, not failed: it exits 0 whenever it measured.

Examples:
  gatehouse bench --smoke                  # seconds: checks that every figure can be measured
  gatehouse bench --quick --json benches/quick.json --svg benches/quick.svg
  gatehouse bench --sync normal            # full sizes and durations, without power-loss durability
  gatehouse bench --quick --database-url postgres://postgres@127.0.0.1:5432/postgres
                                           # and the PostgreSQL figures: one replica, three, the lock";

/// Where the server is (client subcommands).
#[derive(Clone, Args)]
pub struct ClientArgs {
    /// The gatehouse server.
    #[arg(long, env = "GATEHOUSE_URL", default_value = "http://127.0.0.1:8080")]
    pub url: String,
    /// The bearer token, when the server has a tokens file (read from the environment only, so
    /// it never shows in the process list; `client_help!` names it in every client's `--help`).
    #[arg(skip = std::env::var("GATEHOUSE_TOKEN").ok().filter(|t| !t.is_empty()))]
    pub token: Option<String>,
}

/// Flags of `gatehouse ask`.
#[derive(Debug, Clone, Args)]
pub struct AskArgs {
    /// The question.
    pub question: String,
    /// A choice (repeat for more); without any, the answer is free text.
    #[arg(long = "choice", value_name = "C")]
    pub choices: Vec<String>,
    /// Accept free text besides the choices.
    #[arg(long, requires = "choices")]
    pub allow_other: bool,
    /// Session id (default: a fresh one).
    #[arg(long, value_name = "ID")]
    pub session: Option<String>,
    /// Loop id (default: a fresh one).
    #[arg(long = "loop", value_name = "ID")]
    pub loop_id: Option<String>,
    /// Tool execution id; asking again with the same ids finds the same gate (default: fresh).
    #[arg(long = "id", value_name = "ID")]
    pub tool_execution_id: Option<String>,
    /// Stop waiting after this long (e.g. 90s, 10m, 1h30m): answer with --default, or withdraw
    /// the gate and exit 3.
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    pub timeout: Option<Duration>,
    /// The answer given when --timeout passes (recorded by the server as a timeout answer).
    #[arg(long, value_name = "ANSWER", requires = "timeout")]
    pub default: Option<String>,
    /// Print the whole gate view as JSON instead of the answer alone.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub client: ClientArgs,
}

/// Flags of `gatehouse mcp`.
#[derive(Debug, Clone, Args)]
pub struct McpArgs {
    /// The session the questions go into (a UUID; default: a fresh one per run). Give the same
    /// one each run so that a restarted client's retried calls find their questions again.
    #[arg(long, value_name = "ID", env = "GATEHOUSE_SESSION")]
    pub session: Option<String>,
    #[command(flatten)]
    pub client: ClientArgs,
}

/// Flags of `gatehouse answer`.
#[derive(Debug, Clone, Args)]
pub struct AnswerArgs {
    /// The gate to answer: its id, or a unique prefix of it (8 characters or more).
    pub gate_id: String,
    /// The answer.
    pub answer: String,
    #[command(flatten)]
    pub client: ClientArgs,
}

/// Flags of `gatehouse gates`.
#[derive(Debug, Clone, Args)]
pub struct GatesArgs {
    /// Every gate, newest first, not only the open ones.
    #[arg(long)]
    pub all: bool,
    /// Keep printing what happens to gates, live.
    #[arg(long)]
    pub watch: bool,
    #[command(flatten)]
    pub client: ClientArgs,
}

/// Flags of `gatehouse tail`.
#[derive(Debug, Clone, Args)]
pub struct TailArgs {
    /// Start after this journal seq (default: from the beginning).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub after: u64,
    #[command(flatten)]
    pub client: ClientArgs,
}

/// Flags of `gatehouse bench`.
#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    /// The full stream counts and race size, fewer answers and shorter runs: under 3 minutes on 2
    /// cores.
    #[arg(long, conflicts_with = "smoke")]
    pub quick: bool,
    /// Tiny sizes: only checks that every figure can be measured (seconds).
    #[arg(long)]
    pub smoke: bool,
    /// Also write the figures as JSON to this file.
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,
    /// Also draw the targets as an SVG chart to this file.
    #[arg(long, value_name = "PATH")]
    pub svg: Option<PathBuf>,
    /// The durability both gatehouse and the raw SQLite ceiling run with.
    #[arg(long, value_enum, default_value_t = SyncMode::Full)]
    pub sync: SyncMode,
    /// Also measure gatehouse on PostgreSQL (one replica and three), on databases the bench
    /// creates on this server for the run and drops after: the user needs CREATEDB.
    #[arg(long, value_name = "URL")]
    pub database_url: Option<String>,
}

/// Flags of the hidden `gatehouse bench-ceiling`.
#[derive(Debug, Clone, Args)]
pub struct CeilingArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:0")]
    pub bind: SocketAddr,
}

/// Flags of `gatehouse serve`.
#[derive(Clone, Args)]
pub struct ServeArgs {
    /// Address to listen on. Loopback by default; any other address needs --tokens-file (or
    /// --insecure-public-bind).
    #[arg(long, env = "GATEHOUSE_BIND", default_value = "127.0.0.1:8080")]
    pub bind: SocketAddr,

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
    pub database_url: Option<String>,

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

    /// Open gates one session may hold; more get `503 gate_capacity`.
    #[arg(long, env = "GATEHOUSE_MAX_OPEN_GATES", default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_open_gates: u32,

    /// Send every journal event to this URL (repeatable), signed per Standard Webhooks.
    #[arg(long = "webhook-url", value_name = "URL", env = "GATEHOUSE_WEBHOOK_URL")]
    pub webhook_urls: Vec<String>,

    /// The Standard Webhooks secret (`whsec_…`) that signs notifications: a file for every
    /// endpoint, or `URL=PATH` for one `--webhook-url` of its own (repeatable). It never verifies
    /// answers (that is --inbound-secret-file), so a receiver of notifications cannot answer.
    #[arg(long = "webhook-secret-file", value_name = "[URL=]PATH", env = "GATEHOUSE_WEBHOOK_SECRET_FILE")]
    pub webhook_secret_files: Vec<String>,

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
    pub webhook_allow_cidrs: Vec<String>,

    /// Waits between delivery attempts, comma-separated (default about 5s,5m,30m,2h,6h,12h,1d);
    /// after the last, an event is a dead letter.
    #[arg(long, value_name = "DURS", env = "GATEHOUSE_WEBHOOK_RETRY_SCHEDULE", value_delimiter = ',', value_parser = parse_duration)]
    pub webhook_retry_schedule: Vec<Duration>,

    /// How long a replica holds a webhook endpoint without renewing (with several replicas, one
    /// delivers to each endpoint; another takes over after this long if it dies).
    #[arg(long, value_name = "DUR", env = "GATEHOUSE_WEBHOOK_LEASE", default_value = "45s", value_parser = parse_duration, hide = true)]
    pub webhook_lease: Duration,

    /// Re-enable an endpoint that was disabled by a 410 answer (repeatable).
    #[arg(long = "webhook-reenable", value_name = "URL", env = "GATEHOUSE_WEBHOOK_REENABLE")]
    pub webhook_reenable: Vec<String>,

    /// The server's address as others reach it, for answer links (default: http://<bind>).
    #[arg(long, value_name = "URL", env = "GATEHOUSE_PUBLIC_URL")]
    pub public_url: Option<String>,

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

    /// Also serve `GET /metrics` without a token on this address: a port (then on 127.0.0.1) or
    /// ADDRESS:PORT. On the main address /metrics needs an admin token.
    #[arg(long, value_name = "[ADDR:]PORT", env = "GATEHOUSE_METRICS_BIND", value_parser = parse_metrics_bind)]
    pub metrics_bind: Option<SocketAddr>,

    /// How the log is written: `text` for people, or `json`, one object per line with its fields
    /// (every request: request_id, route, status, latency_ms, principal), for log collectors.
    #[arg(long, value_enum, env = "GATEHOUSE_LOG_FORMAT", default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Test-only storage fault injection: a file naming a fault (`readonly`, `full:N`), read by
    /// the writer before every transaction. Only in builds with the `fault-injection` feature.
    #[cfg(feature = "fault-injection")]
    #[arg(long, env = "GATEHOUSE_FAULT_FILE", hide = true)]
    pub fault_file: Option<PathBuf>,
}

impl fmt::Debug for ClientArgs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let token = self.token.as_ref().map(|_| "<redacted>");
        f.debug_struct("ClientArgs").field("url", &self.url).field("token", &token).finish()
    }
}

impl fmt::Debug for ServeArgs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServeArgs")
            .field("bind", &self.bind)
            .field("db", &self.db)
            .field("database_url", &self.database_url.as_ref().map(|_| "<redacted>"))
            .field("database_url_file", &self.database_url_file)
            .field("secret_file", &self.secret_file)
            .field("sync", &self.sync)
            .field("max_body", &self.max_body)
            .field("max_page_bytes", &self.max_page_bytes)
            .field("max_page_reads_per_token", &self.max_page_reads_per_token)
            .field("heartbeat", &self.heartbeat)
            .field("stream_stall", &self.stream_stall)
            .field("max_streams", &self.max_streams)
            .field("max_connections", &self.max_connections)
            .field("max_unauthenticated_per_address", &self.max_unauthenticated_per_address)
            .field("header_timeout", &self.header_timeout)
            .field("keep_alive_timeout", &self.keep_alive_timeout)
            .field("body_idle_timeout", &self.body_idle_timeout)
            .field("body_timeout", &self.body_timeout)
            .field("max_unauthenticated_body", &self.max_unauthenticated_body)
            .field("max_timeout", &self.max_timeout)
            .field("max_open_gates", &self.max_open_gates)
            .field("webhook_urls", &self.webhook_urls)
            .field("public_url", &self.public_url)
            .field("tokens_file", &self.tokens_file)
            .field("insecure_public_bind", &self.insecure_public_bind)
            .field("allowed_hosts", &self.allowed_hosts)
            .field("cors_origins", &self.cors_origins)
            .field("rate_limit", &self.rate_limit)
            .field("max_streams_per_token", &self.max_streams_per_token)
            .field("metrics_bind", &self.metrics_bind)
            .field("log_format", &self.log_format)
            .field("auth_failures", &self.auth_failures)
            .field("trusted_proxies", &self.trusted_proxies)
            .finish_non_exhaustive()
    }
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
        serve.db = db.into();
        serve.bind = bind;
        *serve
    }
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

/// `1048576`, `512KiB`, `1MiB` (K and M are read as KiB and MiB).
fn parse_size(raw: &str) -> Result<usize, String> {
    let raw = raw.trim();
    let split = raw.find(|c: char| !c.is_ascii_digit()).unwrap_or(raw.len());
    let (digits, unit) = raw.split_at(split);
    let n: usize = digits.parse().map_err(|_| format!("{raw:?} is not a size like 1048576 or 1MiB"))?;
    let factor = match unit.trim() {
        "" | "B" => 1,
        "K" | "KiB" | "k" | "kB" | "KB" => 1024,
        "M" | "MiB" | "MB" => 1024 * 1024,
        other => return Err(format!("unknown size unit {other:?} (use KiB or MiB)")),
    };
    match n.checked_mul(factor) {
        Some(0) | None => Err(format!("{raw:?} is not a usable size")),
        Some(size) => Ok(size),
    }
}

/// `<int>(ms|s|m|h|d)`, combinable (`1m30s`); a bare integer is seconds.
pub fn parse_duration(raw: &str) -> Result<Duration, String> {
    let raw = raw.trim();
    let bad = || format!("{raw:?} is not a duration like 15s, 500ms or 1m30s");
    let mut total = Duration::ZERO;
    let mut rest = raw;
    if let Ok(seconds) = raw.parse::<u64>() {
        total = Duration::from_secs(seconds);
        rest = "";
    }
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
        let n: u64 = rest[..digits].parse().map_err(|_| bad())?;
        let unit_len = rest[digits..].find(|c: char| c.is_ascii_digit()).unwrap_or(rest.len() - digits);
        let unit = &rest[digits..digits + unit_len];
        let part = match unit {
            "ms" => Duration::from_millis(n),
            "s" => Duration::from_secs(n),
            "m" => Duration::from_secs(n.checked_mul(60).ok_or_else(bad)?),
            "h" => Duration::from_secs(n.checked_mul(3600).ok_or_else(bad)?),
            "d" => Duration::from_secs(n.checked_mul(86_400).ok_or_else(bad)?),
            _ => return Err(bad()),
        };
        total = total.checked_add(part).ok_or_else(bad)?;
        rest = &rest[digits + unit_len..];
    }
    // A year bounds every use (deadline arithmetic must not overflow).
    const LONGEST: Duration = Duration::from_secs(366 * 86_400);
    match total {
        t if t.is_zero() => Err(format!("{raw:?} must be longer than zero")),
        t if t > LONGEST => Err(format!("{raw:?} is longer than a year")),
        t => Ok(t),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("15s"), Ok(Duration::from_secs(15)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("2"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("1d"), Ok(Duration::from_secs(86_400)));
        for bad in ["", "0", "0s", "s", "5x", "1.5s", "-1s", "400d"] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("1MiB"), Ok(1 << 20));
        assert_eq!(parse_size("512KiB"), Ok(512 << 10));
        assert_eq!(parse_size("1000"), Ok(1000));
        assert!(parse_size("0").is_err());
        assert!(parse_size("1GiB").is_err());
        assert!(parse_size("lots").is_err());
    }
}
