//! What a bench run found, three ways: a table on stdout, JSON (medians where the issue asks for
//! them, every run beside them) and an SVG chart of the targets.

use std::fmt::Write as _;

use serde_json::{Value, json};

/// One figure, measured once per run.
#[derive(Debug, Clone)]
pub struct Figure {
    /// Where it goes in the JSON: `ceilings.…` or `gate.…`, with a third part for percentiles.
    pub path: &'static str,
    pub unit: &'static str,
    pub samples: Vec<f64>,
}

impl Figure {
    pub fn median(&self) -> f64 {
        let mut sorted = self.samples.clone();
        sorted.sort_by(f64::total_cmp);
        match sorted.len() {
            0 => f64::NAN,
            n if n % 2 == 1 => sorted[n / 2],
            n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
        }
    }

    pub fn min(&self) -> f64 {
        self.samples.iter().copied().fold(f64::INFINITY, f64::min)
    }

    pub fn max(&self) -> f64 {
        self.samples.iter().copied().fold(f64::NEG_INFINITY, f64::max)
    }
}

/// How a target judges its ratio.
#[derive(Debug, Clone, Copy)]
enum Rule {
    AtLeast(f64),
    AtMost(f64),
    Exactly(f64),
}

impl Rule {
    fn met(self, ratio: f64) -> bool {
        match self {
            Self::AtLeast(target) => ratio >= target,
            Self::AtMost(target) => ratio <= target,
            Self::Exactly(target) => ratio == target,
        }
    }

    fn target(self) -> f64 {
        match self {
            Self::AtLeast(t) | Self::AtMost(t) | Self::Exactly(t) => t,
        }
    }

    fn describe(self) -> String {
        match self {
            Self::AtLeast(t) => format!("≥ {t}"),
            Self::AtMost(t) => format!("≤ {t}"),
            Self::Exactly(t) => format!("= {t}"),
        }
    }
}

/// A target of the issue: a gate figure divided by its ceiling (or a figure that is a ratio or a
/// count itself), judged by a rule.
struct Target {
    label: &'static str,
    figure: &'static str,
    ceiling: Option<&'static str>,
    rule: Rule,
}

const TARGETS: &[Target] = &[
    Target {
        label: "answers/s ({concurrency} answerers) ÷ minimal claims/s",
        figure: "gate.answers_per_s_c64",
        ceiling: Some("ceilings.sqlite_min_claim_event_txn_per_s"),
        rule: Rule::AtLeast(1.0),
    },
    Target {
        label: "answers/s ({concurrency} answerers) ÷ own-claim txns/s",
        figure: "gate.answers_per_s_c64",
        ceiling: Some("ceilings.sqlite_gate_claim_txn_per_s"),
        rule: Rule::AtLeast(1.0),
    },
    Target {
        label: "GET gate/s ÷ axum hello/s",
        figure: "gate.gate_get_req_per_s",
        ceiling: Some("ceilings.http_hello_req_per_s"),
        rule: Rule::AtLeast(0.5),
    },
    Target {
        label: "answer → agent p99 (ms)",
        figure: "gate.answer_to_agent_ms.p99",
        ceiling: None,
        rule: Rule::AtMost(3.0),
    },
    Target {
        label: "journal fan-out ÷ bare broadcast fan-out",
        figure: "gate.sse_fanout_1000_deliveries_per_s",
        ceiling: Some("ceilings.sse_raw_fanout_deliveries_per_s"),
        rule: Rule::AtLeast(0.4),
    },
    Target {
        label: "RSS per idle stream ÷ bare idle stream",
        figure: "gate.sse_idle_bytes_per_conn",
        ceiling: Some("ceilings.sse_raw_idle_bytes_per_conn"),
        rule: Rule::AtMost(2.0),
    },
    Target {
        label: "answers/s with {stuck_streams} stuck streams ÷ without",
        figure: "gate.stuck_clients_answer_ratio",
        ceiling: None,
        rule: Rule::AtLeast(0.9),
    },
    Target {
        label: "winners of a {racers}-way race",
        figure: "gate.race_1000_winners",
        ceiling: None,
        rule: Rule::Exactly(1.0),
    },
    Target {
        label: "PostgreSQL answers/s (1 replica) ÷ on SQLite",
        figure: "postgres.answers_per_s_c64_1_replica",
        ceiling: Some("gate.answers_per_s_c64"),
        rule: Rule::AtLeast(0.5),
    },
    Target {
        label: "answers/s on 3 replicas ÷ on 1",
        figure: "postgres.answers_per_s_c64_3_replicas",
        ceiling: Some("postgres.answers_per_s_c64_1_replica"),
        rule: Rule::AtLeast(0.8),
    },
    Target {
        label: "answer → agent p99 across replicas ÷ single node",
        figure: "postgres.answer_to_agent_ms_across_replicas.p99",
        ceiling: Some("gate.answer_to_agent_ms.p99"),
        rule: Rule::AtMost(2.0),
    },
    Target {
        label: "claims/s with the ordering lock ÷ without",
        figure: "postgres.claims_per_s_3_writers_ordered",
        ceiling: Some("postgres.claims_per_s_3_writers_unordered"),
        rule: Rule::AtLeast(0.75),
    },
];

/// A target's outcome in one run.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The target's words, with the sizes the run really used.
    pub label: String,
    pub ratio: f64,
    pub rule: String,
    target: f64,
    pub met: bool,
}

/// Everything one run measured.
#[derive(Debug)]
pub struct Report {
    pub mode: &'static str,
    pub sync: &'static str,
    pub figures: Vec<Figure>,
    /// The sizes the run used (streams, answerers, racers…), which `--smoke` shrinks.
    pub sizes: Value,
    pub seconds: f64,
}

impl Report {
    /// `text` with each `{size}` replaced by the size this run used (so `--smoke` says what it
    /// measured).
    fn sized(&self, text: &str) -> String {
        let mut text = text.to_owned();
        if let Some(sizes) = self.sizes.as_object() {
            for (name, value) in sizes {
                text = text.replace(&format!("{{{name}}}"), &value.to_string());
            }
        }
        text
    }

    fn figure(&self, path: &str) -> Option<&Figure> {
        self.figures.iter().find(|f| f.path == path)
    }

    /// Every target, as ratios of medians.
    pub fn outcomes(&self) -> Vec<Outcome> {
        TARGETS
            .iter()
            .filter_map(|t| {
                let figure = self.figure(t.figure)?.median();
                let ratio = match t.ceiling {
                    Some(ceiling) => figure / self.figure(ceiling)?.median(),
                    None => figure,
                };
                Some(Outcome {
                    label: self.sized(t.label),
                    ratio,
                    rule: t.rule.describe(),
                    target: t.rule.target(),
                    met: t.rule.met(ratio),
                })
            })
            .collect()
    }

    /// The JSON document, its keys in this order: `mode`, `sync`, the medians under `ceilings`,
    /// `gate` and `postgres` (figures in the order of the table), `targets`, each figure's
    /// `runs` (the same order), the `sizes` used, and `seconds`.
    pub fn json(&self) -> String {
        let mut medians = Node::default();
        let mut runs = Node::default();
        for figure in &self.figures {
            medians.insert(figure.path, rounded(figure.median()));
            let samples = figure.samples.iter().map(|s| rounded(*s)).collect();
            runs.insert(figure.path, Value::Array(samples));
        }
        let targets = self.outcomes().into_iter().map(|o| {
            let mut target = Node::default();
            target.insert("target", json!(o.label));
            target.insert("ratio", rounded(o.ratio));
            target.insert("rule", json!(o.rule));
            target.insert("met", json!(o.met));
            target
        });
        let mut doc = Node::default();
        doc.insert("mode", json!(self.mode));
        doc.insert("sync", json!(self.sync));
        doc.extend(medians);
        doc.put("targets", Node::List(targets.collect()));
        doc.put("runs", runs);
        doc.insert("sizes", self.sizes.clone());
        doc.insert("seconds", rounded(self.seconds));
        serde_json::to_string_pretty(&doc).expect("a document of JSON values serialises")
    }

    /// The human-readable table.
    pub fn table(&self) -> String {
        let runs = self.figures.first().map_or(0, |f| f.samples.len());
        let mut out = format!(
            "gatehouse bench ({}, sync={}): {runs} runs per figure, median [min – max], in {:.0} s\n",
            self.mode, self.sync, self.seconds
        );
        let mut group = "";
        for figure in &self.figures {
            let (this_group, name) = figure.path.split_once('.').unwrap_or(("", figure.path));
            if this_group != group {
                group = this_group;
                let _ = writeln!(out, "\n{group}");
            }
            let _ = writeln!(
                out,
                "  {name:<38} {:>12}  [{} – {}]  {}",
                human(figure.median()),
                human(figure.min()),
                human(figure.max()),
                figure.unit
            );
        }
        let _ = writeln!(out, "\ntargets (ratios of the medians above)");
        for o in self.outcomes() {
            let verdict = if o.met { "met" } else { "MISSED" };
            let _ = writeln!(out, "  {:<52} {:>8}  target {:<6} {verdict}", o.label, human(o.ratio), o.rule);
        }
        out
    }

    /// A bar per target: the ratio against a line at the target, green when met.
    pub fn svg(&self) -> String {
        const WIDTH: f64 = 820.0;
        const LABEL: f64 = 340.0;
        const BAR: f64 = 330.0;
        const ROW: f64 = 40.0;
        const TOP: f64 = 56.0;
        let outcomes = self.outcomes();
        let height = TOP + ROW * outcomes.len() as f64 + 30.0;
        let mut svg = format!(
            r##"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="13">
<rect width="100%" height="100%" fill="white"/>
<text x="12" y="24" font-size="16" font-weight="bold">gatehouse bench ({mode}, sync={sync}): each target as a ratio from one run</text>
<text x="12" y="44" fill="#555">bar: the ratio; dashed line: the target; green: met, red: missed</text>
"##,
            mode = self.mode,
            sync = self.sync
        );
        for (row, o) in outcomes.iter().enumerate() {
            let y = TOP + ROW * row as f64;
            // Each row has its own scale, so a target of 0.4 and one of 2 both read well.
            let scale = BAR / (o.target * 2.0).max(o.ratio * 1.1).max(f64::MIN_POSITIVE);
            let bar = (o.ratio * scale).clamp(0.0, BAR);
            let line = LABEL + o.target * scale;
            let colour = if o.met { "#2e7d32" } else { "#c62828" };
            let _ = write!(
                svg,
                r##"<text x="12" y="{ty}">{label}</text>
<rect x="{LABEL}" y="{y0}" width="{bar:.1}" height="20" fill="{colour}"/>
<line x1="{line:.1}" y1="{l0}" x2="{line:.1}" y2="{l1}" stroke="#222" stroke-dasharray="4 3"/>
<text x="{tx}" y="{ty}">{ratio} (target {rule})</text>
"##,
                ty = y + 15.0,
                label = escape(&o.label),
                y0 = y,
                l0 = y - 4.0,
                l1 = y + 24.0,
                tx = LABEL + BAR + 12.0,
                ratio = human(o.ratio),
                rule = escape(&o.rule),
            );
        }
        svg.push_str("</svg>\n");
        svg
    }
}

/// A JSON object whose keys keep the order they were put in (serde_json's own map sorts them).
enum Node {
    Leaf(Value),
    Tree(Vec<(String, Node)>),
    List(Vec<Node>),
}

impl Default for Node {
    fn default() -> Self {
        Self::Tree(Vec::new())
    }
}

impl Node {
    /// Puts `value` at a dotted `path` inside nested objects, after what is there.
    fn insert(&mut self, path: &str, value: Value) {
        match path.split_once('.') {
            None => self.put(path, Node::Leaf(value)),
            Some((head, rest)) => {
                let Node::Tree(items) = self else { return };
                let at = match items.iter().position(|(key, _)| key == head) {
                    Some(at) => at,
                    None => {
                        items.push((head.to_owned(), Node::default()));
                        items.len() - 1
                    }
                };
                items[at].1.insert(rest, value);
            }
        }
    }

    fn put(&mut self, key: &str, node: Node) {
        if let Node::Tree(items) = self {
            items.push((key.to_owned(), node));
        }
    }

    /// Appends the members of another tree.
    fn extend(&mut self, other: Node) {
        if let (Node::Tree(items), Node::Tree(more)) = (self, other) {
            items.extend(more);
        }
    }
}

impl serde::Serialize for Node {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        match self {
            Self::Leaf(value) => value.serialize(s),
            Self::Tree(items) => {
                let mut map = s.serialize_map(Some(items.len()))?;
                for (key, node) in items {
                    map.serialize_entry(key, node)?;
                }
                map.end()
            }
            Self::List(nodes) => s.collect_seq(nodes),
        }
    }
}

/// Whole numbers from 1000 up, four significant digits below: precise enough for a noisy
/// machine, and never rounded down to a misleading zero.
fn rounded(value: f64) -> Value {
    if !value.is_finite() {
        return Value::Null;
    }
    if value.abs() >= 1000.0 || value.fract() == 0.0 {
        return json!(value.round() as i64);
    }
    let digits = 3 - value.abs().log10().floor() as i32;
    let factor = 10f64.powi(digits);
    json!((value * factor).round() / factor)
}

/// `12,345` from 1000 up, four significant digits below.
fn human(value: f64) -> String {
    match rounded(value) {
        Value::Number(n) if n.is_i64() => {
            let digits = n.to_string();
            let (sign, digits) = digits.strip_prefix('-').map_or(("", digits.as_str()), |d| ("-", d));
            let mut grouped = String::new();
            for (i, c) in digits.chars().enumerate() {
                if i > 0 && (digits.len() - i) % 3 == 0 {
                    grouped.push(',');
                }
                grouped.push(c);
            }
            format!("{sign}{grouped}")
        }
        other => other.to_string(),
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figure(path: &'static str, samples: &[f64]) -> Figure {
        Figure { path, unit: "", samples: samples.to_vec() }
    }

    #[test]
    fn medians_and_ranges() {
        let f = figure("gate.x", &[3.0, 1.0, 2.0]);
        assert_eq!((f.median(), f.min(), f.max()), (2.0, 1.0, 3.0));
        assert_eq!(figure("gate.x", &[1.0, 2.0, 3.0, 10.0]).median(), 2.5);
    }

    #[test]
    fn numbers_are_rounded_for_people_but_never_to_zero() {
        assert_eq!(rounded(12345.6), json!(12346));
        assert_eq!(rounded(1.23456), json!(1.235));
        assert_eq!(rounded(0.000_123_456), json!(0.0001235));
        assert_eq!(rounded(1.0), json!(1));
        assert_eq!(human(1_234_567.0), "1,234,567");
        assert_eq!(human(0.5), "0.5");
    }

    #[test]
    fn json_nests_medians_where_the_issue_names_them_and_judges_targets() {
        let report = Report {
            mode: "smoke",
            sync: "full",
            figures: vec![
                figure("ceilings.sqlite_min_claim_event_txn_per_s", &[1000.0, 1100.0, 900.0]),
                figure("gate.answers_per_s_c64", &[2000.0, 2100.0, 1900.0]),
                figure("gate.answer_to_agent_ms.p50", &[1.5, 1.25, 2.0]),
                figure("gate.race_1000_winners", &[1.0, 1.0, 1.0]),
            ],
            sizes: json!({}),
            seconds: 1.0,
        };
        let text = report.json();
        let doc: Value = serde_json::from_str(&text).unwrap();
        let keys = ["\"mode\"", "\"sync\"", "\"ceilings\"", "\"gate\"", "\"targets\"", "\"runs\"", "\"sizes\""];
        let at: Vec<usize> = keys.iter().map(|k| text.find(k).unwrap_or_else(|| panic!("{k} in {text}"))).collect();
        assert!(at.windows(2).all(|w| w[0] < w[1]), "keys in the documented order: {text}");
        let (answers, latency) = (text.find("answers_per_s_c64").unwrap(), text.find("answer_to_agent_ms").unwrap());
        assert!(answers < latency, "figures in the table's order");
        assert_eq!(doc["sync"], "full");
        assert_eq!(doc["gate"]["answers_per_s_c64"], 2000);
        assert_eq!(doc["gate"]["answer_to_agent_ms"]["p50"], 1.5);
        assert_eq!(doc["runs"]["ceilings"]["sqlite_min_claim_event_txn_per_s"], json!([1000, 1100, 900]));
        let targets = doc["targets"].as_array().unwrap();
        assert_eq!(targets.len(), 2, "only targets whose figures were measured");
        assert_eq!((targets[0]["ratio"].clone(), targets[0]["met"].clone()), (json!(2), json!(true)));
        assert_eq!(targets[1]["met"], true);
        assert!(report.svg().starts_with("<svg") && report.table().contains("met"));
    }
}
