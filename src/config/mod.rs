//! The command line: the subcommands, the flags of the clients (`ask`, `approve`, `form`,
//! `answer`, `gates`, `tail`, `mcp`) and of `bench`, and the parsers they share. `gatehouse serve`'s flags are in `serve`, one
//! group per part of the server; every flag has a `GATEHOUSE_*` environment fallback.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use serde_json::Value;

pub mod serve;

pub use serve::{HttpArgs, LogArgs, LogFormat, SecurityArgs, ServeArgs, StoreArgs, SyncMode, WebhookArgs};

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
    /// Ask a person to approve a tool call and print the input it may run with (blocks until
    /// decided).
    #[command(after_help = client_help!(
        "Opens a permission gate (kind harness.permission) for a call of TOOL_NAME with --input, and
waits for a person to approve it (as it is, or edited when --editable) or deny it. Prints the
input the call may run with alone on stdout, as one line of compact JSON; on stderr, the gate id
and how to decide it.
Exit codes: 0 approved; 4 denied by a person (\"denied\", by whom and why, on stderr); 3 no
decision in time: at --timeout the gate's policy denies the call (without --timeout the server's
does, after its --permission-timeout, 5 minutes by default), and that denial exits 3, not 4;
2 withdrawn; 1 error (a malformed --input too); 130, 143 and 129 after SIGINT, SIGTERM and
SIGHUP (each withdraws the gate first). Approving again with the same --session, --loop and --id
finds the same gate.

Examples:
  gatehouse approve Bash --input '{\"command\":\"git push origin main\"}' --risk high
  gatehouse approve deploy --input \"$(cat call.json)\" --schema deploy.schema.json --editable --timeout 10m
  if input=$(gatehouse approve Bash --input '{\"command\":\"make clean\"}'); then echo \"run $input\"; fi"
    ))]
    Approve(ApproveArgs),
    /// Ask a person to fill in a form and print the values as JSON (blocks until answered).
    #[command(after_help = client_help!(
        "Opens a form gate (kind harness.form) with --body as its message and the fields of --field
(repeat it) or of --schema, and waits for a person to submit, decline or cancel it. Prints the
values alone on stdout, as one line of compact JSON keyed by field name; on stderr, the gate id
and how to answer it.

--field NAME[!]:KIND[:OPTIONS] is one field: NAME is its key in the values (and its label), a
trailing ! makes it required, KIND is one of text, email, url, date, date_time, select,
multi_select, confirm, number, integer; select and multi_select take their options after a
second colon, separated by commas. Quote each --field in single quotes: an interactive shell
reads ! as history. Labels, help texts, defaults, bounds, groups and lists: use --schema FILE,
a JSON file holding either gatehouse's {\"fields\": [...]} or a JSON Schema of an object
(type, properties, required, ...): a top-level \"fields\" array means the former.

Exit codes: 0 submitted; 2 declined or cancelled by a person, or withdrawn (stderr says which);
3 nobody answered in time (at --timeout the server cancels the form by policy); 1 error (the
server's objections to the form, field by field, on stderr); 130, 143 and 129 after SIGINT,
SIGTERM and SIGHUP (each withdraws the gate first). Each run opens a new gate.

Examples:
  gatehouse form --body 'Where to deploy?' --field 'env!:select:prod,staging' --field 'ticket:text'
  gatehouse form --title 'Release' --body 'Confirm the release' --field 'ok!:confirm' --timeout 10m
  gatehouse form --body 'Deploy details' --schema deploy.schema.json
  values=$(gatehouse form --body 'Which?' --field 'env!:select:prod,staging') && echo \"$values\" | jq -r .env"
    ))]
    Form(FormArgs),
    /// Answer an open gate, named by its id or a unique prefix of it (8 characters or more).
    #[command(after_help = client_help!(
        "A question's gate takes the answer's text. A permission gate (`gatehouse approve`, an agent's
tool call) takes approve, deny, or approve-always when the gate offers it; --input approves an
edited input (editable gates only; it must fit the gate's schema), --reason tells the agent why
it was denied. A form (`gatehouse form`) takes --values, a JSON object of its fields' values
(checked against them: each mismatch is printed as `path: message` and the gate stays open),
--decline or --cancel. An open-URL gate takes --done once the page's task is done, --decline or
--cancel.

Examples:
  gatehouse answer 9d3e4f50-6a7b-4c8d-9e0f-1a2b3c4d5e6f yes
  gatehouse answer 9d3e4f50 yes        # the short id `gatehouse gates` shows
  gatehouse answer 7572f04a approve
  gatehouse answer 7572f04a approve --input '{\"command\":\"git push origin feature\"}'
  gatehouse answer 7572f04a deny --reason 'not on main'
  gatehouse answer 3b0c9e12 --values '{\"env\":\"prod\",\"ticket\":\"OPS-42\"}'
  gatehouse answer 3b0c9e12 --decline
  gatehouse answer 51d07a3f --done"
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
    /// Serve the Model Context Protocol over stdio: tools `ask_user`, `ask_form`,
    /// `approve_tool_call` and `permission_prompt` for an MCP client's agent, answered through
    /// this gatehouse server.
    #[command(after_help = client_help!(
        "Register it with an MCP client, for example (the client starts it and speaks on its stdio):
  {\"mcpServers\": {\"gatehouse\": {\"command\": \"gatehouse\", \"args\": [\"mcp\", \"--session\", \"<uuid>\"],
                                \"env\": {\"GATEHOUSE_URL\": \"http://127.0.0.1:8080\"}}}}

With that file as gatehouse-mcp.json, Claude Code asks through gatehouse before its tool calls:
  claude -p '…' --mcp-config gatehouse-mcp.json --permission-prompt-tool mcp__gatehouse__permission_prompt

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
    #[command(flatten)]
    pub ids: GateIds,
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

/// The ids that name the gate `ask` or `approve` opens: the same ids again find the same gate.
#[derive(Debug, Clone, Args)]
pub struct GateIds {
    /// Session id (default: a fresh one).
    #[arg(long, value_name = "ID")]
    pub session: Option<String>,
    /// Loop id (default: a fresh one).
    #[arg(long = "loop", value_name = "ID")]
    pub loop_id: Option<String>,
    /// Tool execution id; asking again with the same ids finds the same gate (default: fresh).
    #[arg(long = "id", value_name = "ID")]
    pub tool_execution_id: Option<String>,
}

/// Flags of `gatehouse approve`.
#[derive(Debug, Clone, Args)]
pub struct ApproveArgs {
    /// The tool the call is for, as the person sees it (`Bash`, `deploy`, …).
    pub tool_name: String,
    /// The call's arguments: a JSON object.
    #[arg(long, value_name = "JSON", value_parser = parse_json_object)]
    pub input: Value,
    /// A file with the JSON Schema of the input: an edit must fit it.
    #[arg(long, value_name = "FILE")]
    pub schema: Option<PathBuf>,
    /// Let the person edit the input before approving it.
    #[arg(long)]
    pub editable: bool,
    /// How risky the call is, as the person is shown.
    #[arg(long, value_name = "R", value_parser = ["low", "medium", "high", "critical"])]
    pub risk: Option<String>,
    /// What the call does, in a line (the gate shows it first; default: the tool's name).
    #[arg(long, value_name = "TEXT")]
    pub summary: Option<String>,
    /// A capability the call needs, in words (repeat for more).
    #[arg(long = "requirement", value_name = "TEXT")]
    pub requirements: Vec<String>,
    /// Deny the call if nobody decides within this long (e.g. 90s, 10m), and exit 3 (default: the
    /// server's --permission-timeout).
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    pub timeout: Option<Duration>,
    #[command(flatten)]
    pub ids: GateIds,
    #[command(flatten)]
    pub client: ClientArgs,
}

/// Flags of `gatehouse form`.
#[derive(Debug, Clone, Args)]
#[command(group = clap::ArgGroup::new("form_fields").required(true).args(["fields", "schema"]))]
pub struct FormArgs {
    /// The message the person reads above the fields: what is needed, and why.
    #[arg(long, value_name = "TEXT")]
    pub body: String,
    /// The form's title (default: the server's, "Input requested").
    #[arg(long, value_name = "TEXT")]
    pub title: Option<String>,
    /// A field, as NAME[!]:KIND[:OPTIONS] (repeat for more, in order; ! makes it required),
    /// e.g. 'env!:select:prod,staging', 'ticket:text', 'ok:confirm'.
    #[arg(long = "field", value_name = "SPEC", value_parser = parse_field)]
    pub fields: Vec<Value>,
    /// A file with the form: gatehouse's {"fields": [...]}, or a JSON Schema of an object.
    #[arg(long, value_name = "FILE")]
    pub schema: Option<PathBuf>,
    /// Cancel the form if nobody answers within this long (e.g. 90s, 10m), and exit 3.
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    pub timeout: Option<Duration>,
    /// The session the form opens in (default: a fresh one).
    #[arg(long, value_name = "ID")]
    pub session: Option<String>,
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
    /// The answer; for a permission gate: approve, deny, or approve-always when it offers that
    /// (forms and open-URL gates take the flags below instead).
    #[arg(conflicts_with = "reply")]
    pub answer: Option<String>,
    /// Deny with this reason, which the agent is told (permission gates).
    #[arg(long, value_name = "TEXT", conflicts_with = "reply")]
    pub reason: Option<String>,
    /// Approve this input in place of the one asked for: a JSON object (editable permission gates).
    #[arg(long, value_name = "JSON", value_parser = parse_json_object, conflicts_with = "reply")]
    pub input: Option<Value>,
    /// Submit a form with these values: a JSON object keyed by field name (forms).
    #[arg(long, value_name = "JSON", value_parser = parse_json_object, group = "reply")]
    pub values: Option<Value>,
    /// Decline: the person will not give what is asked (forms and open-URL gates).
    #[arg(long, group = "reply")]
    pub decline: bool,
    /// Cancel: dismiss the request without an answer (forms and open-URL gates).
    #[arg(long, group = "reply")]
    pub cancel: bool,
    /// Done: the task the page asked for is done (open-URL gates).
    #[arg(long, group = "reply")]
    pub done: bool,
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

impl fmt::Debug for ClientArgs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let token = self.token.as_ref().map(|_| "<redacted>");
        f.debug_struct("ClientArgs").field("url", &self.url).field("token", &token).finish()
    }
}

/// `1048576`, `512KiB`, `1MiB` (K and M are read as KiB and MiB).
pub(crate) fn parse_size(raw: &str) -> Result<usize, String> {
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

/// A JSON object, such as a tool call's input.
pub fn parse_json_object(raw: &str) -> Result<Value, String> {
    match serde_json::from_str::<Value>(raw) {
        Ok(object @ Value::Object(_)) => Ok(object),
        Ok(_) => Err("must be a JSON object, like {\"command\":\"ls\"}".to_owned()),
        Err(e) => Err(format!("not JSON ({e}); give a JSON object, like {{\"command\":\"ls\"}}")),
    }
}

/// The kinds of field a `--field` may have (groups and lists need `--schema`).
const FIELD_KINDS: [&str; 10] =
    ["text", "email", "url", "date", "date_time", "select", "multi_select", "confirm", "number", "integer"];

/// One form field, `NAME[!]:KIND[:OPTIONS]`, as the API's field object: `ticket:text`,
/// `env!:select:prod,staging` (required, with two options).
pub fn parse_field(raw: &str) -> Result<Value, String> {
    let mut parts = raw.splitn(3, ':');
    let (name, kind, options) = (parts.next().unwrap_or(""), parts.next(), parts.next());
    let Some(kind) = kind else {
        return Err("give NAME:KIND, like ticket:text or 'env!:select:prod,staging'".to_owned());
    };
    let (name, required) = match name.strip_suffix('!') {
        Some(name) => (name, true),
        None => (name, false),
    };
    if name.is_empty() {
        return Err("the field has no name: give NAME:KIND, like ticket:text".to_owned());
    }
    let kind = kind.replace('-', "_");
    if !FIELD_KINDS.contains(&kind.as_str()) {
        let hint = if matches!(kind.as_str(), "group" | "list") { " (groups and lists: use --schema)" } else { "" };
        return Err(format!("unknown kind {kind:?}{hint}; the kinds are {}", FIELD_KINDS.join(", ")));
    }
    let mut field = serde_json::json!({"name": name, "kind": kind});
    if required {
        field["required"] = Value::Bool(true);
    }
    let choosing = matches!(kind.as_str(), "select" | "multi_select");
    match options {
        Some(options) if choosing => {
            let values: Vec<&str> = options.split(',').collect();
            if values.iter().any(|v| v.is_empty()) {
                return Err(format!("an empty option in {options:?}: separate the options with single commas"));
            }
            field["options"] = values.iter().map(|v| serde_json::json!({"value": v, "label": v})).collect();
        }
        None if choosing => return Err(format!("a {kind} needs its options: {name}:{kind}:A,B")),
        Some(_) => return Err(format!("only select and multi_select take options, not {kind}")),
        None => {}
    }
    Ok(field)
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
    fn json_objects() {
        assert_eq!(parse_json_object(r#"{"command": "ls"}"#), Ok(serde_json::json!({"command": "ls"})));
        for bad in ["", "[1]", "\"ls\"", "null", "{\"a\":", "ls"] {
            assert!(parse_json_object(bad).unwrap_err().contains("JSON object"), "{bad:?}");
        }
    }

    #[test]
    fn fields() {
        use serde_json::json;
        assert_eq!(parse_field("ticket:text"), Ok(json!({"name": "ticket", "kind": "text"})));
        assert_eq!(
            parse_field("env!:select:prod,staging"),
            Ok(json!({"name": "env", "kind": "select", "required": true,
                      "options": [{"value": "prod", "label": "prod"}, {"value": "staging", "label": "staging"}]}))
        );
        assert_eq!(parse_field("when:date-time"), Ok(json!({"name": "when", "kind": "date_time"})));
        assert_eq!(
            parse_field("link:multi_select:https://a.example,b"),
            Ok(json!({"name": "link", "kind": "multi_select",
                      "options": [{"value": "https://a.example", "label": "https://a.example"},
                                  {"value": "b", "label": "b"}]})),
            "an option may hold colons"
        );
        for (bad, why) in [
            ("ticket", "NAME:KIND"),
            ("!:text", "no name"),
            (":text", "no name"),
            ("x:string", "the kinds are"),
            ("rows:list", "--schema"),
            ("env:select", "needs its options"),
            ("env:select:a,,b", "empty option"),
            ("ok:confirm:yes", "only select"),
        ] {
            let message = parse_field(bad).unwrap_err();
            assert!(message.contains(why), "{bad:?}: {message}");
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
