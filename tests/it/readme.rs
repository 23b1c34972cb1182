//! The README's curl walk-through is executed as written (against a test server), so the first
//! thing a newcomer tries cannot rot.

use std::process::Command;

use crate::helpers::{TestApp, bounded};

const README: &str = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"));
const DEFAULT_URL_LINE: &str = "GATEHOUSE=http://127.0.0.1:8080";

/// The shell block after the `<!-- walkthrough -->` marker.
fn walkthrough() -> &'static str {
    let after = README.split("<!-- walkthrough -->").nth(1).expect("README has a walkthrough marker");
    let start = after.find("```sh\n").expect("a sh block follows the marker") + "```sh\n".len();
    let len = after[start..].find("```").expect("the block ends");
    &after[start..start + len]
}

#[tokio::test]
async fn the_readme_walkthrough_runs_as_written() {
    let script = walkthrough();
    assert!(script.contains(DEFAULT_URL_LINE), "the walk-through targets the default address");
    for tool in ["curl", "jq"] {
        let found = Command::new("sh").args(["-c", &format!("command -v {tool}")]).output().unwrap().status.success();
        assert!(found, "{tool} is needed (.ci/test installs it)");
    }
    let app = TestApp::spawn().await;
    let script = script.replace(DEFAULT_URL_LINE, &format!("GATEHOUSE={}", app.base));
    // Twice: a newcomer runs it again, and the ids it mints must not collide with the first run's.
    for run in 1..=2 {
        let output = bounded(
            "walk-through",
            tokio::process::Command::new("bash").args(["-euo", "pipefail", "-c", &script]).output(),
        )
        .await
        .expect("run bash");
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "run {run} of the walk-through failed:\n{stdout}\n{stderr}");
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
