//! The README is checked against the real thing, so what a newcomer reads first cannot rot: its
//! curl walk-through is executed as written (against a test server), and its flag table under
//! "Running the server" is compared with the flags `gatehouse serve --help` shows, both ways,
//! defaults and environment names included.

use std::process::Command;

use clap::CommandFactory;
use gatehouse::config::Cli;

use crate::helpers::{TestApp, bounded};

const README: &str = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"));
const DEFAULT_URL_LINE: &str = "GATEHOUSE=http://127.0.0.1:8080";

/// The shell block after the `<!-- {marker} -->` marker.
fn walkthrough(marker: &str) -> &'static str {
    let after = README.split(&format!("<!-- {marker} -->")).nth(1).expect("README has the walkthrough marker");
    let start = after.find("```sh\n").expect("a sh block follows the marker") + "```sh\n".len();
    let len = after[start..].find("```").expect("the block ends");
    &after[start..start + len]
}

/// Runs the shell block after `<!-- {marker} -->` with bash against `app` (instead of the
/// default address it names), and returns what it printed; it must succeed.
async fn run_walkthrough(marker: &str, app: &TestApp) -> String {
    let script = walkthrough(marker);
    assert!(script.contains(DEFAULT_URL_LINE), "the {marker} targets the default address");
    for tool in ["curl", "jq"] {
        let found = Command::new("sh").args(["-c", &format!("command -v {tool}")]).output().unwrap().status.success();
        assert!(found, "{tool} is needed (.ci/test installs it)");
    }
    let script = script.replace(DEFAULT_URL_LINE, &format!("GATEHOUSE={}", app.base));
    let output =
        bounded(marker, tokio::process::Command::new("bash").args(["-euo", "pipefail", "-c", &script]).output())
            .await
            .expect("run bash");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "the {marker} failed:\n{stdout}\n{stderr}");
    stdout
}

#[tokio::test]
async fn the_readme_walkthrough_runs_as_written() {
    let app = TestApp::spawn().await;
    // Twice: a newcomer runs it again, and the ids it mints must not collide with the first run's.
    for run in 1..=2 {
        let stdout = run_walkthrough("walkthrough", &app).await;
        assert!(stdout.contains("ack: 204"), "run {run}: the ack answered 204:\n{stdout}");
    }

    // What the walk-through claims happened, checked through the API: two gates in two sessions,
    // each answered, each command delivered to its loop and acked.
    let gates = app.get("/v1/gates").await.expect(200).json();
    let views = gates["gates"].as_array().expect("gates");
    assert_eq!(views.len(), 2, "each run opened its own gate: {gates}");
    assert_ne!(views[0]["session_id"], views[1]["session_id"], "each run minted its own ids");
    for view in views {
        assert_eq!(view["state"], "resolved");
        assert_eq!(view["answer"], "postgres");
        let (session, loop_id) = (view["session_id"].as_str().unwrap(), view["loop_id"].as_str().unwrap());
        assert!(app.inbox(session, loop_id).await.is_empty(), "the walk-through acked its command");
        let all = app
            .get(&format!("/v1/sessions/{session}/loops/{loop_id}/commands?include_acked=true"))
            .await
            .expect(200)
            .json();
        assert_eq!(all["commands"][0]["command"]["answer"], "postgres");
    }
}

#[tokio::test]
async fn the_readme_approval_walkthrough_runs_as_written() {
    let app = TestApp::spawn().await;
    let stdout = run_walkthrough("walkthrough-approval", &app).await;
    // What it prints is what it says: the refused edit's field, then the command and decision.
    for line in [
        r#""path":"/values/tool_input/command""#,
        r#"{"type":"ApproveToolCall","tool_input":{"command":"./deploy.sh --env staging"},"edited":true}"#,
        r#"{"effect":"approve","edited":true,"tool_input":{"command":"./deploy.sh --env staging"}}"#,
    ] {
        assert!(stdout.contains(line), "{line} not in:\n{stdout}");
    }
    let gates = app.get("/v1/gates?kind=harness.permission").await.expect(200).json();
    assert_eq!(gates["gates"][0]["decision"]["tool_input"]["command"], "./deploy.sh --env staging");
}

#[tokio::test]
async fn the_readme_form_walkthrough_runs_as_written() {
    let app = TestApp::spawn().await;
    let stdout = run_walkthrough("walkthrough-form", &app).await;
    for line in [
        r#"["/values/env","/values/hosts/0/replicas"]"#,
        r#"{"action":"accept","values":{"env":"staging","hosts":[{"name":"a1","replicas":2}],"window":"2026-12-24"}}"#,
    ] {
        assert!(stdout.contains(line), "{line} not in:\n{stdout}");
    }
}

/// One flag of `serve` as `--help` shows it.
struct Flag {
    /// `--bind`.
    long: String,
    /// Its default, when it takes a value and has exactly one (a switch's implicit `false` is no
    /// default a reader needs; a flag whose default is worked out at start has none in clap).
    default: Option<String>,
    /// Its environment fallback.
    env: Option<String>,
}

/// Every flag `gatehouse serve --help` lists: hidden ones (test-only, or for tests that kill
/// replicas) are left out, and so are `--help` and `--version`, which clap adds by itself.
fn serve_flags() -> Vec<Flag> {
    let cli = Cli::command();
    let serve = cli.find_subcommand("serve").expect("gatehouse has a serve subcommand");
    serve
        .get_arguments()
        .filter(|arg| !arg.is_hide_set())
        .filter_map(|arg| {
            let long = arg.get_long()?;
            if matches!(long, "help" | "version") {
                return None;
            }
            let defaults = arg.get_default_values();
            let default = (arg.get_action().takes_values() && defaults.len() == 1)
                .then(|| defaults[0].to_string_lossy().into_owned());
            let env = arg.get_env().map(|env| env.to_string_lossy().into_owned());
            Some(Flag { long: format!("--{long}"), default, env })
        })
        .collect()
}

/// The cells of one Markdown table row, split at every `|` that is not escaped (`--sync
/// full\|normal` is one cell).
fn cells(row: &str) -> Vec<String> {
    let mut cells = vec![String::new()];
    let mut chars = row.trim().chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'|') => cells.last_mut().unwrap().push(chars.next().unwrap()),
            '|' => cells.push(String::new()),
            c => cells.last_mut().unwrap().push(c),
        }
    }
    // A row starts and ends with `|`: drop the empty cells outside them.
    cells.remove(0);
    cells.pop();
    cells.into_iter().map(|cell| cell.trim().to_owned()).collect()
}

/// The `--long` flags a cell names (`--webhook-url`, `--webhook-secret-file`, …).
fn named_flags(cell: &str) -> Vec<String> {
    cell.match_indices("--")
        .filter_map(|(at, _)| {
            let name: String = cell[at + 2..]
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-')
                .collect();
            name.starts_with(|c: char| c.is_ascii_lowercase()).then(|| format!("--{name}"))
        })
        .collect()
}

/// The flag table's body rows: the first table after the "Running the server" heading, without
/// its header and separator rows.
fn flag_table() -> Vec<Vec<String>> {
    let section = README.split("\n## Running the server\n").nth(1).expect("README has a Running the server section");
    let rows: Vec<Vec<String>> = section
        .lines()
        .skip_while(|line| !line.starts_with('|'))
        .take_while(|line| line.starts_with('|'))
        .skip(2)
        .map(cells)
        .collect();
    assert!(!rows.is_empty(), "the Running the server section has its flag table");
    rows
}

#[test]
fn the_readme_flag_table_matches_serve_help() {
    let flags = serve_flags();
    let table = flag_table();
    let in_table: Vec<String> = table.iter().flat_map(|row| named_flags(&row[0])).collect();

    // Both ways: a flag added without a row is undocumented, and a row left behind after a flag
    // was renamed or removed sends readers to a flag that no longer exists.
    let missing: Vec<&str> = flags
        .iter()
        .map(|flag| flag.long.as_str())
        .filter(|long| !in_table.iter().any(|named| named.as_str() == *long))
        .collect();
    assert!(missing.is_empty(), "serve --help has flags the README's table does not name: {missing:?}");
    let unknown: Vec<&String> =
        in_table.iter().filter(|named| !flags.iter().any(|flag| flag.long == **named)).collect();
    assert!(unknown.is_empty(), "the README's table names flags serve --help does not have: {unknown:?}");

    // A row of one flag states its default, and it must be the one clap applies. Rows that lump
    // several flags together describe them in prose, and a default worked out at start (none in
    // clap) is the README's to explain.
    for row in &table {
        let named = named_flags(&row[0]);
        let [flag] = named.as_slice() else { continue };
        let flag = flags.iter().find(|known| known.long == *flag).expect("checked above");
        if let Some(default) = &flag.default {
            let documented = row.get(1).map(String::as_str).unwrap_or("");
            assert!(
                documented.contains(&format!("`{default}`")),
                "the README's default for {} is {documented:?}, but serve --help says `{default}`",
                flag.long
            );
        }
    }

    // The README promises every flag a `GATEHOUSE_*` fallback named after it.
    for flag in &flags {
        let expected = format!("GATEHOUSE_{}", flag.long.trim_start_matches("--").to_uppercase().replace('-', "_"));
        assert_eq!(flag.env.as_deref(), Some(expected.as_str()), "the environment fallback of {}", flag.long);
    }
}
