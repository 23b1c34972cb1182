//! What operators scrape: `GET /metrics` in the Prometheus text format, built with
//! `prometheus-client`. Counters and histograms are kept as things happen (requests, answers,
//! writer batches, webhook attempts, timer firings); what the database or the process knows is
//! read when the metrics are scraped (`Metrics::render`'s caller fills the `Scrape`). No label
//! takes an unbounded value: routes are templates, reasons and codes come from closed sets,
//! and webhook endpoints are the configured ones, without their query strings.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Metric, Registry, Unit};

/// The media type of the Prometheus text format.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub method: &'static str,
    pub route: &'static str,
    pub status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabels {
    pub method: &'static str,
    pub route: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CodeLabels {
    pub code: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    pub kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EndpointLabels {
    pub endpoint: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VersionLabels {
    version: &'static str,
}

/// What a stream or a long-poll follows.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Kind {
    /// A journal stream (`/v1/events`, a session's events).
    Journal,
    /// A loop's inbox (its stream, or its long-poll).
    Inbox,
    /// One gate's long-poll (`…/wait`).
    Gate,
}

impl Kind {
    fn label(self) -> KindLabels {
        KindLabels {
            kind: match self {
                Self::Journal => "journal",
                Self::Inbox => "inbox",
                Self::Gate => "gate",
            },
        }
    }
}

/// The writer's own figures, shared with the store (both backends record them).
#[derive(Debug)]
pub struct WriterMetrics {
    batch_size: Histogram,
    commit_seconds: Histogram,
    storage_errors: Counter,
}

impl Default for WriterMetrics {
    fn default() -> Self {
        Self {
            batch_size: Histogram::new(exponential_buckets(1.0, 2.0, 9)),
            commit_seconds: Histogram::new(seconds_buckets()),
            storage_errors: Counter::default(),
        }
    }
}

impl WriterMetrics {
    /// A batch of `jobs` committed after `took`.
    pub fn committed(&self, jobs: usize, took: Duration) {
        self.batch_size.observe(jobs as f64);
        self.commit_seconds.observe(took.as_secs_f64());
    }

    /// A transaction failed for storage reasons (busy, read-only, full, unreachable).
    pub fn storage_error(&self) {
        self.storage_errors.inc();
    }
}

/// Every metric of one server.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    request_seconds: Family<RouteLabels, Histogram>,
    gates_opened: Counter,
    gates_resolved: Family<ReasonLabels, Counter>,
    answers_refused: Family<CodeLabels, Counter>,
    pub writer: Arc<WriterMetrics>,
    streams_open: Family<KindLabels, Gauge>,
    stalled_closed: Counter,
    long_polls_parked: Family<KindLabels, Gauge>,
    webhook_deliveries: Family<OutcomeLabels, Counter>,
    webhook_dead_letters: Counter,
    timer_fired: Family<OutcomeLabels, Counter>,
    // Read at scrape time.
    gates_open: Gauge,
    sessions_with_open_gates: Gauge,
    oldest_open_gate_seconds: Gauge<f64, std::sync::atomic::AtomicU64>,
    writer_queue: Gauge,
    webhook_backlog: Family<EndpointLabels, Gauge>,
    webhook_oldest_pending_seconds: Family<EndpointLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    timer_armed: Gauge,
    resident_bytes: Gauge,
    open_fds: Gauge,
}

/// What a scrape reads from the database and the server's parts, for `Metrics::render`.
#[derive(Debug, Default)]
pub struct Scrape {
    pub gates_open: i64,
    pub sessions_with_open_gates: i64,
    /// Seconds since the oldest open gate opened (0 without one).
    pub oldest_open_gate_seconds: f64,
    pub writer_queue: i64,
    pub timer_armed: i64,
    /// Per webhook endpoint: events not yet delivered, and seconds since the oldest of them.
    pub webhooks: Vec<(String, i64, f64)>,
}

fn seconds_buckets() -> impl Iterator<Item = f64> {
    // 100 µs to about 6.5 s.
    exponential_buckets(0.0001, 2.0, 17)
}

/// A new metric, registered under `name` with `help`; the value returned is the handle the server
/// keeps to record into it (a clone of a metric is the same metric).
fn registered<M: Metric + Clone + Default>(registry: &mut Registry, name: &str, help: &str) -> M {
    let metric = M::default();
    registry.register(name, help, metric.clone());
    metric
}

/// `registered`, for a metric measured in `unit` (which its name gets as a suffix).
fn registered_with_unit<M: Metric + Clone + Default>(registry: &mut Registry, name: &str, help: &str, unit: Unit) -> M {
    let metric = M::default();
    registry.register_with_unit(name, help, unit, metric.clone());
    metric
}

impl Metrics {
    /// The metrics of a server whose store records into `writer`.
    pub fn new(writer: Arc<WriterMetrics>) -> Arc<Self> {
        let mut registry = Registry::with_prefix("gatehouse");
        let requests: Family<RequestLabels, Counter> =
            registered(&mut registry, "http_requests", "HTTP requests answered, by route template and status");
        let request_seconds =
            Family::<RouteLabels, Histogram>::new_with_constructor(|| Histogram::new(seconds_buckets()));
        registry.register_with_unit(
            "http_request_duration",
            "Time to answer an HTTP request (to its response head, for streams), by route template",
            Unit::Seconds,
            request_seconds.clone(),
        );
        let gates_opened: Counter =
            registered(&mut registry, "gates_opened", "Gates opened (not counting re-asks that found their gate)");
        let gates_resolved: Family<ReasonLabels, Counter> = registered(
            &mut registry,
            "gates_resolved",
            "Gates that left open, by reason: answered, policy_response, owner_closed, abandoned",
        );
        let answers_refused: Family<CodeLabels, Counter> = registered(
            &mut registry,
            "answers_refused",
            "Answers not accepted, by error code (gate_not_ready is a lost race)",
        );
        let gates_open: Gauge = registered(&mut registry, "gates_open", "Gates open now, in every session");
        let sessions_with_open_gates: Gauge =
            registered(&mut registry, "sessions_with_open_gates", "Sessions holding at least one open gate");
        let oldest_open_gate_seconds: Gauge<f64, std::sync::atomic::AtomicU64> = registered_with_unit(
            &mut registry,
            "oldest_open_gate_age",
            "How long the oldest open gate has waited for an answer (0 without open gates)",
            Unit::Seconds,
        );
        registry.register("writer_batch_size", "Write jobs per committed transaction", writer.batch_size.clone());
        registry.register_with_unit(
            "writer_commit_duration",
            "Time of one write transaction, from its start to its COMMIT",
            Unit::Seconds,
            writer.commit_seconds.clone(),
        );
        registry.register(
            "storage_errors",
            "Write transactions that failed for storage reasons (each answered 503)",
            writer.storage_errors.clone(),
        );
        let writer_queue: Gauge = registered(&mut registry, "writer_queue_depth", "Write jobs waiting for the writer");
        let streams_open: Family<KindLabels, Gauge> =
            registered(&mut registry, "streams_open", "Event streams open, by kind: journal or inbox");
        let stalled_closed: Counter = registered(
            &mut registry,
            "stalled_connections_closed",
            "Connections (nearly always streams) closed because the client accepted no data for --stream-stall",
        );
        let long_polls_parked: Family<KindLabels, Gauge> = registered(
            &mut registry,
            "long_polls_parked",
            "Long-polls waiting, by kind: gate (…/wait) or inbox (…/commands?wait=)",
        );
        let webhook_deliveries: Family<OutcomeLabels, Counter> = registered(
            &mut registry,
            "webhook_deliveries",
            "Webhook delivery attempts, by outcome: delivered, failed, gone",
        );
        let webhook_dead_letters: Counter =
            registered(&mut registry, "webhook_dead_letters", "Webhook events given up on after the last retry");
        let webhook_backlog: Family<EndpointLabels, Gauge> =
            registered(&mut registry, "webhook_backlog", "Journal events an endpoint has not been delivered yet");
        let webhook_oldest_pending_seconds: Family<EndpointLabels, Gauge<f64, std::sync::atomic::AtomicU64>> =
            registered_with_unit(
                &mut registry,
                "webhook_oldest_pending_age",
                "How long the oldest event not yet delivered to an endpoint has waited (0 when caught up)",
                Unit::Seconds,
            );
        let timer_armed: Gauge = registered(&mut registry, "timer_armed_deadlines", "Deadlines the timer holds");
        let timer_fired: Family<OutcomeLabels, Counter> = registered(
            &mut registry,
            "timer_fired",
            "Deadlines that came due, by outcome: answered, moot (already resolved), busy, failed",
        );
        let resident_bytes: Gauge =
            registered_with_unit(&mut registry, "process_resident_memory", "Resident memory", Unit::Bytes);
        let open_fds: Gauge = registered(&mut registry, "process_open_fds", "Open file descriptors");
        let started: Gauge = Gauge::default();
        let since_epoch = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        started.set(since_epoch.as_secs() as i64);
        registry.register_with_unit(
            "process_start_time",
            "When the process started (Unix time)",
            Unit::Seconds,
            started,
        );
        let build = Family::<VersionLabels, Gauge>::default();
        build.get_or_create(&VersionLabels { version: env!("CARGO_PKG_VERSION") }).set(1);
        registry.register("build_info", "The version serving (always 1)", build);
        Arc::new(Self {
            registry,
            requests,
            request_seconds,
            gates_opened,
            gates_resolved,
            answers_refused,
            writer,
            streams_open,
            stalled_closed,
            long_polls_parked,
            webhook_deliveries,
            webhook_dead_letters,
            timer_fired,
            gates_open,
            sessions_with_open_gates,
            oldest_open_gate_seconds,
            writer_queue,
            webhook_backlog,
            webhook_oldest_pending_seconds,
            timer_armed,
            resident_bytes,
            open_fds,
        })
    }

    /// One HTTP request answered.
    pub fn request(&self, method: &'static str, route: &'static str, status: u16, took: Duration) {
        self.request_seconds.get_or_create(&RouteLabels { method, route }).observe(took.as_secs_f64());
        self.requests.get_or_create(&RequestLabels { method, route, status }).inc();
    }

    pub fn gate_opened(&self) {
        self.gates_opened.inc();
    }

    /// A gate left `open` for `reason` (`answered`, `policy_response`, `owner_closed`, `abandoned`).
    pub fn gate_resolved(&self, reason: &'static str) {
        self.gates_resolved.get_or_create(&ReasonLabels { reason }).inc();
    }

    pub fn answer_refused(&self, code: &'static str) {
        self.answers_refused.get_or_create(&CodeLabels { code }).inc();
    }

    /// Counts an open stream of `kind` until the guard is dropped.
    pub fn stream_open(self: &Arc<Self>, kind: Kind) -> Open {
        self.streams_open.get_or_create(&kind.label()).inc();
        Open { metrics: Arc::clone(self), kind, family: Which::Streams }
    }

    /// Counts a parked long-poll of `kind` until the guard is dropped.
    pub fn long_poll(self: &Arc<Self>, kind: Kind) -> Open {
        self.long_polls_parked.get_or_create(&kind.label()).inc();
        Open { metrics: Arc::clone(self), kind, family: Which::LongPolls }
    }

    /// A connection was closed because its client stopped reading.
    pub fn stalled(&self) {
        self.stalled_closed.inc();
    }

    /// A webhook attempt ended: `delivered`, `failed` or `gone`.
    pub fn webhook_attempt(&self, outcome: &'static str) {
        self.webhook_deliveries.get_or_create(&OutcomeLabels { outcome }).inc();
    }

    pub fn webhook_dead_letter(&self) {
        self.webhook_dead_letters.inc();
    }

    /// A deadline came due: `answered`, `moot`, `busy` or `failed`.
    pub fn timer_fired(&self, outcome: &'static str) {
        self.timer_fired.get_or_create(&OutcomeLabels { outcome }).inc();
    }

    /// The text exposition, with what `scrape` read just now.
    pub fn render(&self, scrape: Scrape) -> String {
        self.gates_open.set(scrape.gates_open);
        self.sessions_with_open_gates.set(scrape.sessions_with_open_gates);
        self.oldest_open_gate_seconds.set(scrape.oldest_open_gate_seconds);
        self.writer_queue.set(scrape.writer_queue);
        self.timer_armed.set(scrape.timer_armed);
        self.webhook_backlog.clear();
        self.webhook_oldest_pending_seconds.clear();
        for (endpoint, backlog, oldest) in scrape.webhooks {
            let labels = EndpointLabels { endpoint };
            self.webhook_backlog.get_or_create(&labels).set(backlog);
            self.webhook_oldest_pending_seconds.get_or_create(&labels).set(oldest);
        }
        let (resident, fds) = process_figures();
        self.resident_bytes.set(resident);
        self.open_fds.set(fds);
        let mut text = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut text, &self.registry)
            .expect("a String takes any text");
        text
    }
}

/// Which gauge family an `Open` guard counts in.
#[derive(Debug)]
enum Which {
    Streams,
    LongPolls,
}

/// One open stream or parked long-poll, counted until dropped.
#[derive(Debug)]
pub struct Open {
    metrics: Arc<Metrics>,
    kind: Kind,
    family: Which,
}

impl Drop for Open {
    fn drop(&mut self) {
        let family = match self.family {
            Which::Streams => &self.metrics.streams_open,
            Which::LongPolls => &self.metrics.long_polls_parked,
        };
        family.get_or_create(&self.kind.label()).dec();
    }
}

/// Resident bytes and open descriptors of this process (Linux `/proc`; zeros elsewhere).
fn process_figures() -> (i64, i64) {
    let resident = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let line = status.lines().find(|l| l.starts_with("VmRSS:"))?.to_owned();
            line.split_whitespace().nth(1)?.parse::<i64>().ok()
        })
        .map_or(0, |kib| kib * 1024);
    let fds = std::fs::read_dir("/proc/self/fd").map_or(0, |entries| entries.count() as i64);
    (resident, fds)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_has_every_family_and_no_unbounded_label() {
        let metrics = Metrics::new(Arc::default());
        metrics.request("GET", "/v1/gates/{gate_id}", 200, Duration::from_millis(3));
        metrics.gate_resolved("answered");
        metrics.writer.committed(4, Duration::from_millis(2));
        let open = metrics.stream_open(Kind::Journal);
        let text = metrics.render(Scrape {
            gates_open: 2,
            webhooks: vec![(crate::common::redact::display_url("https://bot.example.com/hook?key=secret"), 3, 1.5)],
            ..Scrape::default()
        });
        assert!(
            text.contains(
                "gatehouse_http_requests_total{method=\"GET\",route=\"/v1/gates/{gate_id}\",status=\"200\"} 1"
            ),
            "{text}"
        );
        assert!(text.contains("gatehouse_gates_resolved_total{reason=\"answered\"} 1"));
        assert!(text.contains("gatehouse_gates_open 2"));
        assert!(text.contains("gatehouse_streams_open{kind=\"journal\"} 1"));
        assert!(text.contains("gatehouse_webhook_backlog{endpoint=\"https://bot.example.com/hook\"} 3"));
        assert!(!text.contains("secret"), "no query string in a label");
        drop(open);
        assert!(metrics.render(Scrape::default()).contains("gatehouse_streams_open{kind=\"journal\"} 0"));
    }
}
