//! Stuck clients (issue 10): 100 streams that never read cannot stop answers, cannot grow the
//! server's memory past a documented bound, and are closed after `--stream-stall`, after which
//! each resumes cleanly from its own cursor.

use std::time::Duration;

use futures_util::future::join_all;

use crate::helpers::{EventStream, ServerProcess, StuckClient, ask, bounded, gate_id, temp_db, uuid};

const STUCK: usize = 100;
const GATES: usize = 100;
/// The documented bound (README "Reliability"): 100 stuck streams add at most this much RSS.
const RSS_BOUND: u64 = 32 * 1024 * 1024;

#[tokio::test]
async fn a_hundred_streams_that_never_read_cannot_stop_answers_or_grow_memory() {
    let (dir, db) = temp_db();
    let server = ServerProcess::start_with(&db, "127.0.0.1:0", &["--stream-stall", "2s"]);
    let before = server.rss_bytes();
    let stuck = join_all((0..STUCK).map(|_| StuckClient::connect(&server.base, "/v1/events?after=0"))).await;

    // Big questions: every stuck client's window fills long before the last event.
    let session = uuid();
    let question = "s".repeat(4000);
    let mut answered = 0;
    for _ in 0..GATES {
        let gate = gate_id(&server.open(&session, &ask(&uuid(), &uuid(), &question)).await);
        server.answer(&session, &gate, "through").await.expect(202);
        answered += 1;
    }
    let head = 2 * GATES as i64;
    let grown = server.rss_bytes().saturating_sub(before);
    eprintln!(
        "stuck clients: {STUCK} streams never read; {answered} gates answered; RSS grew by {:.1} MiB (bound {} MiB)",
        grown as f64 / (1 << 20) as f64,
        RSS_BOUND >> 20
    );
    assert!(grown < RSS_BOUND, "RSS grew by {grown} bytes with {STUCK} stuck streams");

    // Past the stall limit each stuck connection is closed: it drains what the kernel buffered,
    // then ends. Each then resumes from its own last complete event and gets the rest, in order.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mut cuts = Vec::new();
    for client in stuck {
        let got = client.drain().await;
        let cut = got.last().copied().unwrap_or(0);
        assert_eq!(got, (1..=cut).collect::<Vec<_>>(), "a stuck stream got a gapless prefix");
        assert!(cut < head, "the client stalled before the end");
        cuts.push(cut);
    }
    for cut in cuts.iter().copied().step_by(10) {
        let mut resumed = EventStream::connect(&server, "/v1/events", &[("last-event-id", &cut.to_string())]).await;
        let rest: Vec<i64> = resumed.enduring_until(head).await.iter().map(|(seq, _)| *seq).collect();
        assert_eq!(rest, (cut + 1..=head).collect::<Vec<_>>());
    }
    bounded("the server still answers", server.get("/readyz")).await.expect(200);
    drop(server);
    drop(dir);
}
