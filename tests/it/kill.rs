//! The kill test (issue 10), Jepsen-style: agents open gates (AskUser questions, permission gates
//! and forms, in turn), wait and ack their inboxes; answerers race on the same gates, some retrying
//! with an `Idempotency-Key`, approving, editing or denying the permission gates, filling in the
//! forms; meanwhile the real
//! binary is SIGKILLed at random moments and restarted. Every request is recorded with its
//! outcome — ok, refused, not sent, or unknown when the connection died mid-request — and a
//! checker then proves from the history and the server's final state that no acknowledged answer
//! was lost or doubled.
//!
//! On PostgreSQL the same load runs against three replicas on a PostgreSQL server of the test's
//! own: every request goes to a random replica, the killer SIGKILLs a random one each time, and
//! once, halfway, PostgreSQL itself dies (`pg_ctl stop -m immediate`) and comes back. The
//! checker is the same, and every replica must replay the one journal.
//!
//! `GATEHOUSE_KILLS=1000 cargo test --test it kill:: -- --nocapture` runs it with more kills (20
//! by default; plain `cargo test`, since nextest ends tests after two minutes);
//! `GATEHOUSE_KILL_SEED=N` replays a schedule.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use crate::database::OwnCluster;
use crate::helpers::{Client, EventStream, ServerProcess, bounded, temp_db, uuid};

const AGENTS: usize = 4;
const ANSWERERS: usize = 6;
/// Answerers pick among the newest gates, so they race on the same ones.
const RACE_WINDOW: usize = 4;

/// A small deterministic generator (xorshift64*), so a failing schedule can be replayed.
#[derive(Clone)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn fork(&mut self) -> Self {
        Self(self.next() | 1)
    }
}

/// What became of one request.
#[derive(Debug, Clone, PartialEq)]
enum Outcome {
    /// A 2xx, with its body.
    Ok(u16, Value),
    /// A definite refusal: a non-2xx response, with its body.
    Refused(u16, Value),
    /// The connection was never made: nothing was sent.
    NotSent,
    /// The request may or may not have reached the server.
    Unknown,
}

impl Outcome {
    fn applied_for_sure(&self) -> bool {
        matches!(self, Self::Ok(..))
    }

    fn definite_failure(&self) -> bool {
        matches!(self, Self::Refused(..) | Self::NotSent)
    }
}

/// One answer attempt.
#[derive(Debug, Clone)]
struct AnswerOp {
    gate: String,
    value: String,
    keyed: bool,
    outcome: Outcome,
}

#[derive(Default, Clone)]
struct History {
    opens: Vec<(String, String, Outcome)>,
    answers: Vec<AnswerOp>,
    acks: Vec<(String, Outcome)>,
    /// (session, gate id, its kind) of every gate whose open was acknowledged, newest last.
    open_gates: Vec<(String, String, Kind)>,
}

/// The kinds the agents open, in turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    AskUser,
    Permission,
    Form,
}

impl Kind {
    fn next(self) -> Self {
        match self {
            Self::AskUser => Self::Permission,
            Self::Permission => Self::Form,
            Self::Form => Self::AskUser,
        }
    }
}

/// Sends one request and classifies what happened. A `503` is unknown too: after a failed COMMIT
/// (the database died under it) the request may well have been applied.
async fn send(http: &reqwest::Client, req: reqwest::RequestBuilder) -> Outcome {
    let req = req.build().expect("a valid request");
    let resp = match http.execute(req).await {
        Ok(resp) => resp,
        Err(e) if e.is_connect() => return Outcome::NotSent,
        Err(_) => return Outcome::Unknown,
    };
    let status = resp.status().as_u16();
    let Ok(bytes) = resp.bytes().await else { return Outcome::Unknown };
    let body = if bytes.is_empty() { Value::Null } else { serde_json::from_slice(&bytes).unwrap_or(Value::Null) };
    match status {
        200..300 => Outcome::Ok(status, body),
        503 => Outcome::Unknown,
        _ => Outcome::Refused(status, body),
    }
}

/// The servers' addresses (one, or the replicas'): every request goes to one of them at random.
#[derive(Clone)]
struct Servers(Arc<Vec<String>>);

impl Servers {
    fn pick(&self, rng: &mut Rng) -> &str {
        &self.0[rng.below(self.0.len() as u64) as usize]
    }
}

/// Pause after a failure, so a dead server is not hammered.
async fn backoff(outcome: &Outcome) {
    if !matches!(outcome, Outcome::Ok(..)) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// An agent loop: open a gate (re-asking after an unclear outcome), then read and ack its
/// inbox with a short long-poll.
async fn agent(servers: Servers, stop: Arc<AtomicBool>, history: Arc<Mutex<History>>, mut rng: Rng) {
    let http = worker_client();
    let (session, loop_id) = (uuid(), uuid());
    let mut kind = Kind::Form;
    while !stop.load(Ordering::Relaxed) {
        let tool = uuid();
        kind = kind.next();
        let body = match kind {
            Kind::Permission => json!({"kind": "harness.permission", "loop_id": loop_id, "tool_execution_id": tool,
                   "tool_name": "Bash", "tool_input": {"note": "as asked"}, "editable": true,
                   "tool_input_schema": {"type": "object", "required": ["note"]}}),
            Kind::Form => json!({"kind": "harness.form", "loop_id": loop_id, "tool_execution_id": tool,
                   "body": format!("Kill test {tool}"),
                   "schema": {"fields": [{"name": "note", "kind": "text", "required": true},
                                         {"name": "n", "kind": "integer", "minimum": 1}]}}),
            Kind::AskUser => {
                json!({"loop_id": loop_id, "tool_execution_id": tool, "question": format!("Kill test {tool}?")})
            }
        };
        // Re-asking with the same tool execution id is idempotent: it finds the same gate.
        for _ in 0..50 {
            let base = servers.pick(&mut rng);
            let req = http.post(format!("{base}/v1/sessions/{session}/gates")).json(&body);
            let outcome = send(&http, req).await;
            let opened = {
                let mut h = history.lock().unwrap();
                h.opens.push((session.clone(), tool.clone(), outcome.clone()));
                if let Outcome::Ok(_, view) = &outcome {
                    let gate = view["gate"]["id"].as_str().expect("gate id").to_owned();
                    h.open_gates.push((session.clone(), gate, kind));
                }
                matches!(outcome, Outcome::Ok(..))
            };
            if opened {
                break;
            }
            backoff(&outcome).await;
            if stop.load(Ordering::Relaxed) {
                break;
            }
        }
        let base = servers.pick(&mut rng);
        let inbox = format!("{base}/v1/sessions/{session}/loops/{loop_id}/commands?wait=1");
        let outcome = send(&http, http.get(inbox)).await;
        if let Outcome::Ok(_, page) = &outcome {
            for command in page["commands"].as_array().into_iter().flatten() {
                let id = command["command"]["command_id"].as_str().expect("command id").to_owned();
                let base = servers.pick(&mut rng);
                let ack = format!("{base}/v1/sessions/{session}/loops/{loop_id}/commands/{id}/ack");
                let outcome = send(&http, http.post(ack)).await;
                history.lock().unwrap().acks.push((id, outcome));
            }
        }
        backoff(&outcome).await;
    }
}

/// An answerer: picks one of the newest gates and answers it with a value no one else uses;
/// keyed answers are retried with the same key and value while their outcome is unknown.
async fn answerer(servers: Servers, stop: Arc<AtomicBool>, history: Arc<Mutex<History>>, mut rng: Rng) {
    let http = worker_client();
    while !stop.load(Ordering::Relaxed) {
        let target = {
            let h = history.lock().unwrap();
            let newest = &h.open_gates[h.open_gates.len().saturating_sub(RACE_WINDOW)..];
            (!newest.is_empty()).then(|| newest[rng.below(newest.len() as u64) as usize].clone())
        };
        let Some((session, gate, kind)) = target else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let value = format!("answer-{}", uuid());
        let key = (rng.below(2) == 0).then(uuid);
        // What `decided` reads back from the gate's command: an edit's note, a denial's reason,
        // for an approval as asked the same value for everyone (they answer alike), a form's note.
        let (value, body) = match (kind, rng.below(3)) {
            (Kind::AskUser, _) => (value.clone(), json!({"action": "answer", "values": {"answer": value}})),
            (Kind::Permission, 0) => {
                (value.clone(), json!({"action": "Approve", "values": {"tool_input": {"note": value}}}))
            }
            (Kind::Permission, 1) => (value.clone(), json!({"action": "Deny", "values": {"reason": value}})),
            (Kind::Permission, _) => (format!("as asked {gate}"), json!({"action": "Approve"})),
            (Kind::Form, _) => (value.clone(), json!({"action": "accept", "values": {"note": value, "n": 7}})),
        };
        for _ in 0..50 {
            let base = servers.pick(&mut rng);
            let mut req = http.post(format!("{base}/v1/sessions/{session}/gates/{gate}")).json(&body);
            if let Some(key) = &key {
                req = req.header("idempotency-key", key);
            }
            let outcome = send(&http, req).await;
            let unclear = matches!(outcome, Outcome::Unknown | Outcome::NotSent);
            history.lock().unwrap().answers.push(AnswerOp {
                gate: gate.clone(),
                value: value.clone(),
                keyed: key.is_some(),
                outcome: outcome.clone(),
            });
            backoff(&outcome).await;
            if !(unclear && key.is_some()) || stop.load(Ordering::Relaxed) {
                break;
            }
        }
    }
}

fn worker_client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .connect_timeout(Duration::from_secs(1))
        .timeout(Duration::from_secs(5))
        .build()
        .expect("client")
}

#[test]
fn no_acknowledged_answer_is_lost_or_doubled_across_sigkills() {
    let kills: usize = std::env::var("GATEHOUSE_KILLS").ok().and_then(|n| n.parse().ok()).unwrap_or(20);
    let seed: u64 = std::env::var("GATEHOUSE_KILL_SEED").ok().and_then(|n| n.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64 | 1
    });
    eprintln!("kill test: {kills} kills, GATEHOUSE_KILL_SEED={seed}");
    let mut rng = Rng(seed);
    let (dir, db) = temp_db();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();

    // SQLite: one server. PostgreSQL: three replicas, on a server of this test's own, which it
    // crashes once.
    let cluster = OwnCluster::start();
    let flags = match &cluster {
        Some(cluster) => cluster.flags(&db),
        None => crate::database::flags(&db),
    };
    let start = |bind: &str| {
        let mut args = vec!["--bind".to_owned(), bind.to_owned()];
        args.extend(flags.iter().cloned());
        ServerProcess::serve(&args, &[])
    };
    let mut servers: Vec<ServerProcess> =
        (0..if cluster.is_some() { 3 } else { 1 }).map(|_| start("127.0.0.1:0")).collect();
    let bases: Vec<String> = servers.iter().map(|s| s.client.base.clone()).collect();
    let addresses = Servers(Arc::new(bases.clone()));
    let history = Arc::new(Mutex::new(History::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let mut workers = Vec::new();
    for _ in 0..AGENTS {
        workers.push(runtime.spawn(agent(addresses.clone(), stop.clone(), history.clone(), rng.fork())));
    }
    for _ in 0..ANSWERERS {
        workers.push(runtime.spawn(answerer(addresses.clone(), stop.clone(), history.clone(), rng.fork())));
    }

    // The killer: load for a random while, SIGKILL a server, restart it on the same address.
    for kill in 0..kills {
        std::thread::sleep(Duration::from_millis(50 + rng.below(400)));
        if let Some(cluster) = cluster.as_ref().filter(|_| kill == kills / 2) {
            cluster.crash();
            std::thread::sleep(Duration::from_millis(50 + rng.below(400)));
            cluster.start_again();
            eprintln!("kill test: PostgreSQL crashed and restarted");
        }
        let victim = rng.below(servers.len() as u64) as usize;
        servers.remove(victim).kill();
        servers.insert(victim, start(bases[victim].trim_start_matches("http://")));
    }
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    runtime.block_on(async {
        for worker in workers {
            bounded("a worker stops", worker).await.expect("worker");
        }
    });

    let history = std::mem::take(&mut *history.lock().unwrap());
    let clients: Vec<Client> = servers.iter().map(|s| s.client.clone()).collect();
    let figures = runtime.block_on(check(&clients, &history)).unwrap_or_else(|faults| panic!("{faults}"));
    // The checker can fail: an acknowledged answer that is nowhere is caught.
    let mut forged = history.clone();
    let gate = history.open_gates[0].1.clone();
    forged.answers.push(AnswerOp {
        gate,
        value: "never-given".into(),
        keyed: false,
        outcome: Outcome::Ok(202, Value::Null),
    });
    let caught = runtime.block_on(check(&clients, &forged));
    assert!(
        caught.as_ref().is_err_and(|faults| faults.contains("lost answers")),
        "the checker must catch a lost answer: {caught:?}"
    );
    // A last SIGKILL, then (on SQLite) the database's own verdict on its file.
    for server in servers {
        server.kill();
    }
    if cluster.is_some() {
        eprintln!("kill test: {kills} kills of 3 replicas and one of PostgreSQL; {figures}");
    } else {
        let conn = rusqlite::Connection::open(&db).expect("open the database");
        let verdict: String = conn.query_row("PRAGMA integrity_check", [], |r| r.get(0)).expect("integrity_check");
        assert_eq!(verdict, "ok", "PRAGMA integrity_check");
        eprintln!("kill test: {kills} kills; {figures}; integrity_check ok");
    }
    drop(dir);
}

/// The checker: the history against the servers' final state. Returns the figures, or every
/// broken promise it found (so its self-test on a forged history fails without a panic).
async fn check(servers: &[Client], history: &History) -> Result<String, String> {
    let mut faults: Vec<String> = Vec::new();
    let client = &servers[0];
    let events = client.journal_all().await;
    // The journal is strictly increasing, and an SSE replay from 0 on every server reproduces it.
    let seqs: Vec<i64> = events.iter().map(|e| e["journal_seq"].as_i64().unwrap()).collect();
    if !seqs.windows(2).all(|w| w[0] < w[1]) {
        faults.push("journal seqs do not strictly increase".into());
    }
    let head = *seqs.last().expect("a journal");
    for server in servers {
        let mut stream = EventStream::connect(server, "/v1/events?after=0", &[]).await;
        let replay = stream.enduring_until(head).await;
        if replay.len() != events.len() {
            faults.push(format!(
                "the replay on {} has {} events, the journal {}",
                server.base,
                replay.len(),
                events.len()
            ));
        }
        for ((seq, event), stored) in replay.iter().zip(&events) {
            if (*seq, event) != (stored["journal_seq"].as_i64().unwrap(), &stored["event"]) {
                faults.push(format!("replay on {} ≠ journal at seq {seq}", server.base));
            }
        }
    }

    // Gates, their resolutions and the commands in their loops' inboxes.
    let mut resolutions: HashMap<String, usize> = HashMap::new();
    let mut gate_loop: HashMap<String, (String, String, String)> = HashMap::new();
    for e in &events {
        let event = &e["event"];
        match event["type"].as_str() {
            Some("GateOpened") => {
                let at = (
                    event["session_id"].as_str().unwrap().to_owned(),
                    event["loop_id"].as_str().unwrap().to_owned(),
                    event["gate"]["subject"]["tool_execution_id"].as_str().unwrap().to_owned(),
                );
                gate_loop.insert(event["gate"]["id"].as_str().unwrap().to_owned(), at);
            }
            Some("GateResolved") => *resolutions.entry(event["gate_id"].as_str().unwrap().to_owned()).or_default() += 1,
            _ => {}
        }
    }
    let doubled = resolutions.values().filter(|n| **n > 1).count();
    if doubled > 0 {
        faults.push(format!("{doubled} gates resolved twice"));
    }
    let loops: HashSet<(String, String)> = gate_loop.values().map(|(s, l, _)| (s.clone(), l.clone())).collect();
    let mut commands: HashMap<String, Vec<Value>> = HashMap::new();
    for (session, loop_id) in &loops {
        for entry in client.inbox_all(session, loop_id).await {
            let command = entry["command"].clone();
            if (command["session_id"].as_str(), command["loop_id"].as_str())
                != (Some(session.as_str()), Some(loop_id.as_str()))
            {
                faults.push(format!("a command in the inbox of {session}/{loop_id} names another loop: {command}"));
            }
            let gate = command["gate_id"].as_str().unwrap().to_owned();
            commands.entry(gate).or_default().push(entry);
        }
    }
    // Exactly one command per resolution, in the gate's own loop, for its tool execution.
    let mut answers: HashMap<String, String> = HashMap::new();
    for (gate, (_, _, tool)) in &gate_loop {
        let got = commands.get(gate).map_or(0, Vec::len);
        let resolved = resolutions.get(gate).copied().unwrap_or(0);
        if got != resolved {
            faults.push(format!("gate {gate}: {got} commands for {resolved} resolutions"));
        }
        if let Some(entry) = commands.get(gate).and_then(|c| c.first()) {
            if entry["command"]["tool_execution_id"].as_str() != Some(tool.as_str()) {
                faults.push(format!("gate {gate}: its command names another tool execution"));
            }
            answers.insert(gate.clone(), decided(gate, &entry["command"]));
        }
    }

    // Every acknowledged open survived.
    let acked_opens = history.opens.iter().filter(|(_, _, o)| o.applied_for_sure()).count();
    let mut lost = 0;
    for (_, gate, _) in &history.open_gates {
        if !gate_loop.contains_key(gate) {
            lost += 1;
        }
    }
    // Answers: every 202 is the one resolution of its gate; a value whose every attempt failed
    // for sure, or whose keyed retry ended refused, is nobody's answer.
    let mut by_value: BTreeMap<&str, Vec<&AnswerOp>> = BTreeMap::new();
    for op in &history.answers {
        by_value.entry(&op.value).or_default().push(op);
    }
    let applied_values: HashSet<&str> = answers.values().map(String::as_str).collect();
    let (mut accepted, mut unknown, mut conflicts, mut phantom) = (0, 0, 0, 0);
    for (value, attempts) in &by_value {
        let gate = &attempts[0].gate;
        let ok = attempts.iter().any(|a| a.outcome.applied_for_sure());
        let last = &attempts.last().unwrap().outcome;
        let never = attempts.iter().all(|a| a.outcome.definite_failure())
            || (attempts[0].keyed && matches!(last, Outcome::Refused(..)));
        if ok {
            accepted += 1;
            if answers.get(gate).map(String::as_str) != Some(*value) {
                lost += 1;
            }
        } else if never {
            if applied_values.contains(value) {
                phantom += 1;
            }
        } else {
            unknown += 1;
        }
        conflicts += attempts.iter().filter(|a| matches!(a.outcome, Outcome::Refused(409, _))).count();
    }
    // Acks that were acknowledged stay acked.
    let acked: HashSet<&str> = commands
        .values()
        .flatten()
        .filter(|e| e["acked_at"].is_string())
        .filter_map(|e| e["command"]["command_id"].as_str())
        .collect();
    let acks_ok = history.acks.iter().filter(|(_, o)| o.applied_for_sure()).collect::<Vec<_>>();
    let lost_acks = acks_ok.iter().filter(|(id, _)| !acked.contains(id.as_str())).count();
    if (lost, phantom, lost_acks) != (0, 0, 0) {
        faults.push(format!("{lost} lost answers or opens, {phantom} phantom answers, {lost_acks} lost acks"));
    }
    if !faults.is_empty() {
        return Err(format!("the history checker found:\n- {}", faults.join("\n- ")));
    }
    let unknown_requests = history
        .opens
        .iter()
        .map(|(_, _, o)| o)
        .chain(history.answers.iter().map(|a| &a.outcome))
        .chain(history.acks.iter().map(|(_, o)| o))
        .filter(|o| **o == Outcome::Unknown)
        .count();
    Ok(format!(
        "{} gates opened ({acked_opens} acknowledged), {} answer requests for {} answers: {accepted} accepted, \
         {conflicts} lost races (409), {unknown} of unknown outcome; {} resolutions; {} acks acknowledged; \
         {unknown_requests} requests of unknown outcome; lost = 0, doubled = 0",
        gate_loop.len(),
        history.answers.len(),
        by_value.len(),
        resolutions.len(),
        acks_ok.len()
    ))
}

/// The answer a gate's command carries, in the answerers' values: an AskUser answer's text, an
/// edit's note, a denial's reason, `as asked {gate}` for an approval of the input as it was, or a
/// form's note.
fn decided(gate: &str, command: &Value) -> String {
    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    match command["type"].as_str() {
        Some("ProvideFormInput") => text(&command["values"]["note"]),
        Some("ApproveToolCall") if command["edited"] == true => text(&command["tool_input"]["note"]),
        Some("ApproveToolCall") => format!("as asked {gate}"),
        Some("DenyToolCall") => text(&command["reason"]),
        _ => text(&command["answer"]),
    }
}
