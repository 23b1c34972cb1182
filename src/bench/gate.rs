//! The gate figures, measured only through gatehouse's public HTTP API, the way agent loops and
//! people use it: free-text gates opened by loops, answered with an `Idempotency-Key`, results
//! read from the inbox long-poll and the journal streams.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::json;

use super::BenchError;
use super::load::{self, Http, Request, SseReader};
use crate::http::enduring_frame;

/// Gates per session: well below the server's default `--max-open-gates` of 1000.
const GATES_PER_SESSION: usize = 500;

/// An open gate and its session.
#[derive(Debug, Clone)]
pub struct Gate {
    session: String,
    id: String,
}

fn uuid() -> String {
    uuid::Uuid::new_v4().to_string()
}

fn open_request(session: &str, loop_id: &str, question: &str) -> Request {
    let body = json!({"loop_id": loop_id, "tool_execution_id": uuid(), "question": question});
    Request::post(format!("/v1/sessions/{session}/gates"), &body)
}

fn answer_request(gate: &Gate, text: &str, key: String) -> Request {
    let body = json!({"action": "answer", "values": {"answer": text}});
    Request::post(format!("/v1/sessions/{}/gates/{}", gate.session, gate.id), &body).with_idempotency_key(key)
}

fn opened(reply: &load::Reply, session: &str) -> Result<Gate, BenchError> {
    let view = reply.json(201, "opening a gate")?;
    let id = view["gate"]["id"].as_str().ok_or_else(|| BenchError("an open without a gate id".into()))?;
    Ok(Gate { session: session.to_owned(), id: id.to_owned() })
}

/// Opens `count` gates from `concurrency` connections, a loop per session (unmeasured set-up).
pub async fn open_gates(addr: SocketAddr, count: usize, concurrency: usize) -> Result<Vec<Gate>, BenchError> {
    let askers: Vec<(String, String)> = (0..count.div_ceil(GATES_PER_SESSION)).map(|_| (uuid(), uuid())).collect();
    let requests = (0..count)
        .map(|n| {
            let (session, loop_id) = &askers[n / GATES_PER_SESSION];
            open_request(session, loop_id, &format!("Bench question {n}: go ahead?"))
        })
        .collect();
    let (replies, _) = load::send_all(addr, concurrency, requests).await?;
    replies.iter().enumerate().map(|(n, reply)| opened(reply, &askers[n / GATES_PER_SESSION].0)).collect()
}

/// Answers every gate once from `concurrency` connections; how long it took.
pub async fn answer_all(addr: SocketAddr, gates: &[Gate], concurrency: usize) -> Result<Duration, BenchError> {
    answer_all_over(&[addr], gates, concurrency).await
}

/// Answers every gate once from `concurrency` connections spread over `addrs` (replicas of one
/// database); how long it took.
pub async fn answer_all_over(addrs: &[SocketAddr], gates: &[Gate], concurrency: usize) -> Result<Duration, BenchError> {
    let requests = gates.iter().map(|g| answer_request(g, "yes", format!("bench-{}", g.id))).collect();
    let (replies, took) = load::send_all_over(addrs, concurrency, requests).await?;
    for reply in &replies {
        reply.json(202, "answering a gate")?;
    }
    Ok(took)
}

/// Answers per second with `concurrency` answerers, each gate answered once.
pub async fn answers_per_second(addr: SocketAddr, gates: &[Gate], concurrency: usize) -> Result<f64, BenchError> {
    answers_per_second_over(&[addr], gates, concurrency).await
}

/// Answers per second with `concurrency` answerers spread over `addrs`, each gate answered once.
pub async fn answers_per_second_over(
    addrs: &[SocketAddr],
    gates: &[Gate],
    concurrency: usize,
) -> Result<f64, BenchError> {
    let took = answer_all_over(addrs, gates, concurrency).await?;
    Ok(gates.len() as f64 / took.as_secs_f64())
}

/// The size of a real `GateResolved` frame on the journal streams, so the bare fan-out sends
/// frames of the same size.
pub async fn resolved_frame_bytes(addr: SocketAddr) -> Result<usize, BenchError> {
    let gate = open_gates(addr, 1, 1).await?.remove(0);
    let mut http = Http::connect(addr).await?;
    let accepted = http.send(&answer_request(&gate, "yes", uuid())).await?.json(202, "answering a gate")?;
    let seq = accepted["journal_seq"].as_i64().ok_or_else(|| BenchError("a 202 without journal_seq".into()))?;
    let page = http.send(&Request::get(format!("/v1/journal?from_journal_seq={seq}&limit=1"))).await?;
    let page = page.json(200, "reading the journal")?;
    Ok(enduring_frame(seq, &page["events"][0]["event"].to_string()).len())
}

/// `GET` of one gate: the paths of `count` gates to cycle through.
pub async fn gate_paths(addr: SocketAddr, count: usize) -> Result<Vec<String>, BenchError> {
    let gates = open_gates(addr, count, count).await?;
    Ok(gates.iter().map(|g| format!("/v1/sessions/{}/gates/{}", g.session, g.id)).collect())
}

/// How long a latency sample waits before it answers: the long-poll parks meanwhile, as an
/// agent's waits before anyone answers, and the disk has been left alone about that long since
/// the open's commit (the minimal claim latency ceiling pauses as long between its commits).
pub const ANSWER_PAUSE: Duration = Duration::from_millis(2);

/// Milliseconds from sending an answer until the asking loop's inbox long-poll returns it, one
/// gate at a time. The long-poll is sent first, as a waiting agent's would be.
pub async fn answer_to_agent_ms(addr: SocketAddr, samples: usize) -> Result<Vec<f64>, BenchError> {
    answer_to_agent_across_ms([addr; 3], samples).await
}

/// `answer_to_agent_ms` across servers: each gate opened on the first, its loop long-polling on
/// the second, the person answering on the third (replicas of one database).
pub async fn answer_to_agent_across_ms(
    [opener, waiter, answerer]: [SocketAddr; 3],
    samples: usize,
) -> Result<Vec<f64>, BenchError> {
    let (session, loop_id) = (uuid(), uuid());
    let mut opening = Http::connect(opener).await?;
    let (mut agent, mut person) = (Http::connect(waiter).await?, Http::connect(answerer).await?);
    let mut cursor = 0;
    let mut latencies = Vec::with_capacity(samples);
    for n in 0..samples {
        let gate = opened(&opening.send(&open_request(&session, &loop_id, "Latency?")).await?, &session)?;
        let poll = Request::get(format!("/v1/sessions/{session}/loops/{loop_id}/commands?wait=30&after={cursor}"));
        let answer = answer_request(&gate, "yes", format!("latency-{n}"));
        let polled = async {
            let reply = agent.send(&poll).await;
            (reply, Instant::now())
        };
        let answered = async {
            tokio::time::sleep(ANSWER_PAUSE).await;
            let sent = Instant::now();
            (person.send(&answer).await, sent)
        };
        let ((polled, received), (answered, sent)) = tokio::join!(polled, answered);
        answered?.json(202, "answering a gate")?;
        let page = polled?.json(200, "the inbox long-poll")?;
        cursor = page["next_after"].as_i64().ok_or_else(|| BenchError("an inbox page without next_after".into()))?;
        if page["commands"].as_array().is_none_or(Vec::is_empty) {
            return Err(BenchError("the inbox long-poll returned no command".into()));
        }
        latencies.push(received.duration_since(sent).as_secs_f64() * 1000.0);
    }
    Ok(latencies)
}

/// Milliseconds from sending an open until its `GateOpened` frame arrives on the session's
/// journal stream, one gate at a time.
pub async fn open_to_sse_ms(addr: SocketAddr, samples: usize) -> Result<Vec<f64>, BenchError> {
    let (session, loop_id) = (uuid(), uuid());
    let mut stream = SseReader::connect(addr, &format!("/v1/sessions/{session}/events"), false).await?;
    let mut http = Http::connect(addr).await?;
    let mut latencies = Vec::with_capacity(samples);
    for n in 0..samples {
        let open = open_request(&session, &loop_id, "Visible?");
        let sent = Instant::now();
        // Each open journals two events: GateOpened, then UserInputRequested.
        let seen = async { stream.until_frames(2 * n + 1).await.map(|()| Instant::now()) };
        let (opened, seen) = tokio::join!(http.send(&open), seen);
        opened?.json(201, "opening a gate")?;
        latencies.push(seen?.duration_since(sent).as_secs_f64() * 1000.0);
        stream.until_frames(2 * n + 2).await?;
    }
    Ok(latencies)
}

/// How many of `racers` simultaneous answers to one gate, each with its own key and text, win;
/// every other must be told `409 gate_not_ready`.
pub async fn race_winners(addr: SocketAddr, racers: usize) -> Result<f64, BenchError> {
    let gate = open_gates(addr, 1, 1).await?.remove(0);
    let requests = (0..racers).map(|n| answer_request(&gate, &format!("racer {n}"), format!("race-{n}"))).collect();
    let statuses = load::race(addr, requests).await?;
    if let Some(other) = statuses.iter().find(|s| !matches!(s, 202 | 409)) {
        return Err(BenchError(format!("a racer got {other}, neither 202 nor 409")));
    }
    Ok(statuses.iter().filter(|s| **s == 202).count() as f64)
}

/// The median and 99th percentile (nearest rank) of latency samples.
pub fn percentiles(samples: &[f64]) -> (f64, f64) {
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = |p: f64| sorted[((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1];
    (rank(0.50), rank(0.99))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let samples: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentiles(&samples), (50.0, 99.0));
        assert_eq!(percentiles(&[7.0]), (7.0, 7.0));
        assert_eq!(percentiles(&[3.0, 1.0, 2.0]), (2.0, 3.0));
    }
}
