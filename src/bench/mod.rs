//! `gatehouse bench`: the gate path's numbers side by side with this machine's own ceilings, all
//! measured in one run, so every target is a ratio that means something on any machine.
//!
//! - `servers`: the servers under test as child processes of this binary: `gatehouse serve` on
//!   a temporary database, and `gatehouse bench-ceiling`, the bare comparison server.
//! - `load`: the in-process HTTP/SSE load generator.
//! - `ceilings`: what the machine can do at best: raw SQLite claims (one transaction each) and
//!   the bare server (axum hello, tokio-broadcast SSE).
//! - `gate`: the gate figures, through gatehouse's public API only.
//! - `postgres`: with `--database-url`, the same API on PostgreSQL: one replica, three, answers
//!   across replicas, and the price of the ordering lock.
//! - `report`: the table, the JSON and the SVG chart.
//!
//! Each figure is measured once per run, runs alternating between a ceiling and its gate figure
//! where they pair, so a noisy neighbour hits both alike; the report shows medians and ranges.

mod ceilings;
mod gate;
mod load;
mod postgres;
mod report;
mod servers;

pub use ceilings::serve_ceiling;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::config::{BenchArgs, SyncMode};
use load::{Fanout, Http, Request};
use report::{Figure, Report};
use servers::{Database, Server};

/// Why a bench run could not measure.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BenchError(String);

macro_rules! bench_error_from {
    ($($source:ty),*) => {$(
        impl From<$source> for BenchError {
            fn from(e: $source) -> Self {
                Self(e.to_string())
            }
        }
    )*};
}
bench_error_from!(
    std::io::Error,
    hyper::Error,
    serde_json::Error,
    tokio::task::JoinError,
    crate::store::StoreError,
    crate::store::OpenError
);

/// Bounds one network step: a stuck server fails the bench instead of hanging it.
async fn bounded<T>(
    what: &str,
    limit: Duration,
    step: impl Future<Output = Result<T, BenchError>>,
) -> Result<T, BenchError> {
    tokio::time::timeout(limit, step).await.map_err(|_| BenchError(format!("{what}: no answer within {limit:?}")))?
}

/// How big and how long each measurement is.
#[derive(Debug)]
struct Plan {
    mode: &'static str,
    runs: usize,
    /// How long each closed-loop throughput run lasts (hello, GET gate).
    duration: Duration,
    /// Connections of the throughput figures; answerers of the answer figures.
    concurrency: usize,
    /// Gates answered per run (answers/s, and each half of the stuck-clients ratio).
    answers: usize,
    /// Answers per run of the raw SQLite ceiling.
    sqlite_answers: usize,
    /// Latency samples per run.
    latency_samples: usize,
    fanout_streams: usize,
    /// Frames sent to every fan-out stream per run.
    fanout_frames: usize,
    idle_streams: usize,
    stuck_streams: usize,
    /// Bytes of events sent to the stuck streams before their half is measured, enough to fill
    /// every buffer between the server and a client that does not read (kernel send buffer,
    /// hyper's write buffer, the stream's queue), so they are stuck, not merely slow to start.
    stuck_backlog: usize,
    racers: usize,
}

impl Plan {
    fn new(args: &BenchArgs) -> Self {
        let full = Self {
            mode: "full",
            runs: 5,
            duration: Duration::from_secs(10),
            concurrency: 64,
            answers: 20_000,
            sqlite_answers: 10_000,
            latency_samples: 1000,
            fanout_streams: 1000,
            fanout_frames: 400,
            idle_streams: 5000,
            stuck_streams: 100,
            stuck_backlog: 2 << 20,
            racers: 1000,
        };
        if args.smoke {
            // Every figure, at sizes a debug build measures in seconds.
            Self {
                mode: "smoke",
                runs: 3,
                duration: Duration::from_millis(300),
                concurrency: 8,
                answers: 40,
                sqlite_answers: 40,
                latency_samples: 10,
                fanout_streams: 20,
                fanout_frames: 10,
                idle_streams: 20,
                stuck_streams: 10,
                stuck_backlog: 16 << 10,
                racers: 20,
            }
        } else if args.quick {
            // The full stream counts and race, with fewer answers and samples and shorter runs.
            Self {
                mode: "quick",
                runs: 3,
                duration: Duration::from_secs(2),
                answers: 6000,
                sqlite_answers: 2000,
                latency_samples: 500,
                fanout_frames: 500,
                ..full
            }
        } else {
            full
        }
    }

    /// Streams gatehouse must allow at once (`--max-streams`), with room for warm-up streams.
    fn max_streams(&self) -> usize {
        self.idle_streams + self.fanout_streams + self.stuck_streams + 2 * WARM_STREAMS
    }

    /// Connections gatehouse must allow at once (`--max-connections`): every stream, the racers,
    /// the answerers, and room for the probes between them.
    fn max_connections(&self) -> usize {
        self.max_streams() + self.racers + self.concurrency + 128
    }

    fn sizes(&self, frame_bytes: usize) -> serde_json::Value {
        json!({
            "runs": self.runs, "throughput_run_ms": self.duration.as_millis() as u64,
            "concurrency": self.concurrency, "answers_per_run": self.answers,
            "sqlite_answers_per_run": self.sqlite_answers, "latency_samples_per_run": self.latency_samples,
            "fanout_streams": self.fanout_streams, "fanout_frames_per_run": self.fanout_frames,
            "frame_bytes": frame_bytes, "idle_streams": self.idle_streams,
            "stuck_streams": self.stuck_streams, "stuck_backlog_bytes": self.stuck_backlog, "racers": self.racers,
            "cpus": std::thread::available_parallelism().map_or(0, |n| n.get()),
        })
    }
}

/// Every figure, in the order the report shows them, with its unit.
const FIGURES: &[(&str, &str)] = &[
    (
        "ceilings.sqlite_min_claim_event_txn_per_s",
        "claims/s at the disk's limit: a minimal claim + one 100-byte event, one transaction each",
    ),
    (
        "ceilings.sqlite_gate_claim_txn_per_s",
        "answers/s, gatehouse's own claim, each its own BEGIN IMMEDIATE … COMMIT, no HTTP",
    ),
    (
        "ceilings.sqlite_min_claim_event_txn_ms.p50",
        "ms, one minimal claim + event transaction at a time, 2 ms after the last: the disk's part of an answer",
    ),
    ("ceilings.sqlite_min_claim_event_txn_ms.p99", "ms, the same, 99th percentile"),
    ("ceilings.http_hello_req_per_s", "requests/s, axum hello"),
    ("ceilings.sse_raw_fanout_deliveries_per_s", "frames/s into bare tokio-broadcast streams"),
    ("ceilings.sse_raw_idle_bytes_per_conn", "bytes of server RSS per idle bare stream"),
    ("gate.answers_per_s_c64", "answers/s, concurrent answerers on distinct gates"),
    ("gate.answer_to_agent_ms.p50", "ms, answer sent → the loop's inbox long-poll returns it"),
    ("gate.answer_to_agent_ms.p99", "ms, the same, 99th percentile"),
    ("gate.open_to_sse_ms.p50", "ms, open sent → GateOpened on the session's stream"),
    ("gate.open_to_sse_ms.p99", "ms, the same, 99th percentile"),
    ("gate.gate_get_req_per_s", "requests/s, GET one gate"),
    ("gate.sse_fanout_1000_deliveries_per_s", "frames/s into /v1/events streams, answers → journal → streams"),
    ("gate.sse_idle_bytes_per_conn", "bytes of server RSS per idle /v1/events stream"),
    ("gate.stuck_clients_answer_ratio", "answers/s with never-reading streams attached ÷ without"),
    ("gate.race_1000_winners", "202s among simultaneous answers to one gate (the rest 409)"),
    ("postgres.answers_per_s_c64_1_replica", "answers/s, one replica on PostgreSQL"),
    ("postgres.answers_per_s_c64_3_replicas", "answers/s, answerers spread over three replicas of one database"),
    ("postgres.answer_to_agent_ms_across_replicas.p50", "ms, opened on A, long-polled on B, answered on C"),
    ("postgres.answer_to_agent_ms_across_replicas.p99", "ms, the same, 99th percentile"),
    ("postgres.claims_per_s_3_writers_ordered", "claims/s through the store, three writers, ordering lock"),
    ("postgres.claims_per_s_3_writers_unordered", "claims/s, the same without the lock (not commit-ordered)"),
];

/// Samples per figure, as runs come in.
#[derive(Default)]
struct Samples(HashMap<&'static str, Vec<f64>>);

impl Samples {
    fn add(&mut self, path: &'static str, value: f64) {
        debug_assert!(FIGURES.iter().any(|(p, _)| *p == path), "unknown figure {path}");
        eprintln!("  {path}: {value:.3}");
        self.0.entry(path).or_default().push(value);
    }

    fn into_figures(mut self) -> Vec<Figure> {
        FIGURES.iter().filter_map(|&(path, unit)| Some(Figure { path, unit, samples: self.0.remove(path)? })).collect()
    }
}

/// Streams opened (and left open) before an RSS baseline, so one-off growth of the runtime and
/// the allocator is not charged to the measured streams.
const WARM_STREAMS: usize = 10;
/// How long a server is left alone before its RSS is read.
const SETTLE: Duration = Duration::from_millis(500);

/// Runs the bench to its exit code: 0 whenever it measured, whatever the figures.
pub async fn run(args: BenchArgs) -> ExitCode {
    let plan = Plan::new(&args);
    // Thousands of streams need thousands of descriptors, here and in the servers (children
    // inherit the raised limit).
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(limit) if limit < plan.max_connections() as u64 => {
            eprintln!("gatehouse bench: only {limit} open files allowed; the stream figures may fail");
        }
        Ok(_) => {}
        Err(e) => eprintln!("gatehouse bench: cannot raise the open-file limit: {e}"),
    }
    let started = Instant::now();
    eprintln!("gatehouse bench ({}): measuring, {} runs per figure…", plan.mode, plan.runs);
    let measured = tokio::select! {
        measured = measure(&plan, args.sync, args.database_url.as_deref()) => measured,
        _ = tokio::signal::ctrl_c() => {
            // Dropping the measurement killed the servers and removed the temporary files.
            eprintln!("gatehouse bench: interrupted");
            return ExitCode::from(130);
        }
    };
    let (samples, frame_bytes) = match measured {
        Ok(measured) => measured,
        Err(e) => {
            eprintln!("gatehouse bench: {e}");
            return ExitCode::FAILURE;
        }
    };
    let report = Report {
        mode: plan.mode,
        sync: args.sync.as_str(),
        figures: samples.into_figures(),
        sizes: plan.sizes(frame_bytes),
        seconds: started.elapsed().as_secs_f64(),
    };
    println!("{}", report.table());
    let mut written = true;
    if let Some(path) = &args.json {
        written &= write(path, &format!("{}\n", report.json()));
    }
    if let Some(path) = &args.svg {
        written &= write(path, &report.svg());
    }
    if written { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}

fn write(path: &Path, text: &str) -> bool {
    std::fs::write(path, text).map_err(|e| eprintln!("gatehouse bench: cannot write {}: {e}", path.display())).is_ok()
}

/// Every measurement, on servers started for it; returns the samples and the size of a real
/// `GateResolved` frame.
async fn measure(plan: &Plan, sync: SyncMode, postgres: Option<&str>) -> Result<(Samples, usize), BenchError> {
    let dir = tempfile::Builder::new().prefix("gatehouse-bench-").tempdir()?;
    let mut samples = Samples::default();
    let db = dir.path().join("gatehouse.db");
    let gatehouse = Server::gatehouse(Database::Sqlite(&db, sync), plan.max_streams(), plan.max_connections()).await?;
    let ceiling = Server::ceiling().await?;
    let frame_bytes = gate::resolved_frame_bytes(gatehouse.addr).await?;

    eprintln!("writes: one transaction per answer, then answers over HTTP with group commit");
    for _ in 0..plan.runs {
        let minimal = ceilings::minimal_claims_per_second(dir.path(), sync.into(), plan.sqlite_answers).await?;
        samples.add("ceilings.sqlite_min_claim_event_txn_per_s", minimal);
        let claims = ceilings::sqlite_claims_per_second(dir.path(), sync.into(), plan.sqlite_answers).await?;
        samples.add("ceilings.sqlite_gate_claim_txn_per_s", claims);
        let gates = gate::open_gates(gatehouse.addr, plan.answers, plan.concurrency).await?;
        let answers = gate::answers_per_second(gatehouse.addr, &gates, plan.concurrency).await?;
        samples.add("gate.answers_per_s_c64", answers);
    }

    eprintln!("reads: axum hello, then GET gate");
    let hello = ["/hello".to_owned()];
    let gates = gate::gate_paths(gatehouse.addr, plan.concurrency).await?;
    let warm_up = plan.duration / 4;
    load::requests_per_second(ceiling.addr, plan.concurrency, warm_up, &hello).await?;
    load::requests_per_second(gatehouse.addr, plan.concurrency, warm_up, &gates).await?;
    for _ in 0..plan.runs {
        let rate = load::requests_per_second(ceiling.addr, plan.concurrency, plan.duration, &hello).await?;
        samples.add("ceilings.http_hello_req_per_s", rate);
        let rate = load::requests_per_second(gatehouse.addr, plan.concurrency, plan.duration, &gates).await?;
        samples.add("gate.gate_get_req_per_s", rate);
    }

    eprintln!("fan-out: bare broadcast, then the journal, to {} streams each", plan.fanout_streams);
    fanout(plan, gatehouse.addr, ceiling.addr, frame_bytes, &mut samples).await?;

    eprintln!("stuck clients: answers with and without {} never-reading streams", plan.stuck_streams);
    stuck_clients(plan, gatehouse.addr, frame_bytes, &mut samples).await?;

    eprintln!("latency: a minimal claim, answer → agent, open → stream");
    for _ in 0..plan.runs {
        let minimal =
            ceilings::minimal_claim_latencies_ms(dir.path(), sync.into(), plan.latency_samples, gate::ANSWER_PAUSE)
                .await?;
        let (p50, p99) = gate::percentiles(&minimal);
        samples.add("ceilings.sqlite_min_claim_event_txn_ms.p50", p50);
        samples.add("ceilings.sqlite_min_claim_event_txn_ms.p99", p99);
        let (p50, p99) = gate::percentiles(&gate::answer_to_agent_ms(gatehouse.addr, plan.latency_samples).await?);
        samples.add("gate.answer_to_agent_ms.p50", p50);
        samples.add("gate.answer_to_agent_ms.p99", p99);
        let (p50, p99) = gate::percentiles(&gate::open_to_sse_ms(gatehouse.addr, plan.latency_samples).await?);
        samples.add("gate.open_to_sse_ms.p50", p50);
        samples.add("gate.open_to_sse_ms.p99", p99);
    }

    eprintln!("race: {} answers to one gate at once", plan.racers);
    for _ in 0..plan.runs {
        samples.add("gate.race_1000_winners", gate::race_winners(gatehouse.addr, plan.racers).await?);
    }
    drop((gatehouse, ceiling));

    eprintln!("memory: {} idle streams on fresh servers", plan.idle_streams);
    for run in 0..plan.runs {
        let bare = Server::ceiling().await?;
        samples.add("ceilings.sse_raw_idle_bytes_per_conn", idle_bytes_per_stream(&bare, "/sse", plan).await?);
        let db = dir.path().join(format!("idle-{run}.db"));
        let gatehouse =
            Server::gatehouse(Database::Sqlite(&db, sync), plan.max_streams(), plan.max_connections()).await?;
        samples.add("gate.sse_idle_bytes_per_conn", idle_bytes_per_stream(&gatehouse, "/v1/events", plan).await?);
    }
    if let Some(admin) = postgres {
        postgres::measure(plan, admin, dir.path(), &mut samples).await?;
    }
    Ok((samples, frame_bytes))
}

/// Frames per second into `fanout_streams` streams: the bare server broadcasting frames the
/// size of real `GateResolved` frames, and gatehouse journaling answers to its `/v1/events`.
async fn fanout(
    plan: &Plan,
    gatehouse: SocketAddr,
    ceiling: SocketAddr,
    frame_bytes: usize,
    samples: &mut Samples,
) -> Result<(), BenchError> {
    let frames = plan.fanout_frames;
    // Opened before the streams connect, so the streams see only the answers' frames.
    let gates = gate::open_gates(gatehouse, frames * plan.runs, plan.concurrency).await?;
    let mut bare = Fanout::connect(ceiling, "/sse", plan.fanout_streams).await?;
    let mut journal = Fanout::connect(gatehouse, "/v1/events", plan.fanout_streams).await?;
    let mut publisher = Http::connect(ceiling).await?;
    let publish = Request::post(format!("/publish?frames={frames}&bytes={frame_bytes}"), &json!({}));
    for batch in gates.chunks(frames) {
        let broadcast = async {
            let reply = publisher.send(&publish).await?;
            if reply.status == 204 { Ok(()) } else { Err(BenchError(format!("publishing: {}", reply.status))) }
        };
        samples.add("ceilings.sse_raw_fanout_deliveries_per_s", bare.deliveries_per_second(frames, broadcast).await?);
        let answers = async { gate::answer_all(gatehouse, batch, plan.concurrency).await.map(drop) };
        samples.add("gate.sse_fanout_1000_deliveries_per_s", journal.deliveries_per_second(frames, answers).await?);
    }
    Ok(())
}

/// Answers per second with `stuck_streams` never-reading streams attached, divided by the rate
/// without them. The streams are filled until they stall before their half is measured (opening
/// gates, about `stuck_backlog` bytes of events), so what is measured is the cost of clients that
/// stopped reading, not of the fan-out to them while they still took data. The two halves of a
/// run swap order from run to run, so neither always gets the warmer database.
async fn stuck_clients(
    plan: &Plan,
    gatehouse: SocketAddr,
    frame_bytes: usize,
    samples: &mut Samples,
) -> Result<(), BenchError> {
    for run in 0..plan.runs {
        let gates = gate::open_gates(gatehouse, 2 * plan.answers, plan.concurrency).await?;
        let (first, second) = gates.split_at(plan.answers);
        let stuck_first = run % 2 == 1;
        let (mut with, mut without) = (0.0, 0.0);
        for (half, stuck) in [(first, stuck_first), (second, !stuck_first)] {
            let attached = match stuck {
                true => {
                    let streams = load::connect_streams(gatehouse, "/v1/events", plan.stuck_streams, true).await?;
                    // Each open journals two events, each about a frame's size or more.
                    gate::open_gates(gatehouse, plan.stuck_backlog / frame_bytes / 2, plan.concurrency).await?;
                    streams
                }
                false => Vec::new(),
            };
            let rate = gate::answers_per_second(gatehouse, half, plan.concurrency).await?;
            drop(attached);
            *(if stuck { &mut with } else { &mut without }) = rate;
        }
        samples.add("gate.stuck_clients_answer_ratio", with / without);
    }
    Ok(())
}

/// (RSS with `idle_streams` more idle streams − RSS before) ÷ `idle_streams`, on a fresh server.
async fn idle_bytes_per_stream(server: &Server, path: &str, plan: &Plan) -> Result<f64, BenchError> {
    let warm = load::connect_streams(server.addr, path, WARM_STREAMS, false).await?;
    tokio::time::sleep(SETTLE).await;
    let before = server.rss_bytes()?;
    let idle = load::connect_streams(server.addr, path, plan.idle_streams, false).await?;
    tokio::time::sleep(SETTLE).await;
    let after = server.rss_bytes()?;
    drop((warm, idle));
    Ok(after.saturating_sub(before) as f64 / plan.idle_streams as f64)
}
