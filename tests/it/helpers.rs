//! Test harness: the real server on a port-0 loopback listener with a temporary database, either
//! in this process (`TestApp`) or as a child process of the real binary (`ServerProcess`, for
//! SIGKILL and restart tests). Every network await is bounded by a timeout, and every response
//! is checked against `openapi.yaml`.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use gatehouse::ServeArgs;
use gatehouse::bus::Bus;
use reqwest::Method;
use serde_json::{Value, json};
use tempfile::TempDir;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::contract;
use crate::database;

/// How long any single network operation of a test may take.
pub const NET_TIMEOUT: Duration = Duration::from_secs(20);

/// Bounds a future; a hang fails the test instead of eating CI time.
pub async fn bounded<T>(what: &str, fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(NET_TIMEOUT, fut).await.unwrap_or_else(|_| panic!("timed out: {what}"))
}

/// Polls `check` until it holds (bounded); for effects that arrive after a commit.
pub async fn eventually(what: &str, mut check: impl AsyncFnMut() -> bool) {
    bounded(what, async {
        while !check().await {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
}

/// A fresh temporary directory and the database path inside it (the directory must outlive the
/// servers using it).
pub fn temp_db() -> (TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("gatehouse.db");
    (dir, db)
}

/// A fresh random UUID (lower case).
pub fn uuid() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// An open-gate body for an AskUser question.
pub fn ask(loop_id: &str, tool: &str, question: &str) -> Value {
    json!({"loop_id": loop_id, "tool_execution_id": tool, "question": question})
}

/// A valid answer body.
pub fn answer(text: &str) -> Value {
    json!({"action": "answer", "values": {"answer": text}})
}

/// Sends `n` answers to the gate at `path` all at once, racer `i` through `clients[i % len]` with
/// `body(i)`, and checks the race had one winner (`202`) and that every loser was told of the
/// same winner (`409 gate_not_ready` naming one resolution). Returns the winner's index.
pub async fn race_answers(clients: &[Client], path: &str, n: usize, body: impl Fn(usize) -> Value) -> usize {
    let http: Vec<reqwest::Client> =
        clients.iter().map(|_| reqwest::Client::builder().no_proxy().build().unwrap()).collect();
    let racers = (0..n).map(|i| {
        let request = http[i % http.len()].post(format!("{}{path}", clients[i % clients.len()].base)).json(&body(i));
        async move {
            let resp = bounded("a racer's answer", request.send()).await.expect("an answer");
            let status = resp.status().as_u16();
            (i, status, resp.json::<Value>().await.expect("a JSON body"))
        }
    });
    let results = futures_util::future::join_all(racers).await;
    let winners: Vec<usize> = results.iter().filter(|(_, status, _)| *status == 202).map(|(i, _, _)| *i).collect();
    assert_eq!(winners.len(), 1, "one winner among {n} answers");
    let mut names = std::collections::HashSet::new();
    for (_, status, body) in results.iter().filter(|(_, status, _)| *status != 202) {
        assert_eq!((*status, body["error"]["code"].as_str()), (409, Some("gate_not_ready")), "{body}");
        names.insert(body["error"]["resolution"]["event_id"].as_str().unwrap().to_owned());
    }
    assert_eq!(names.len(), 1, "every loser is told of the same winner");
    winners[0]
}

/// A response, read whole.
#[derive(Debug, Clone)]
pub struct Resp {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("{e}: not JSON: {}", String::from_utf8_lossy(&self.body)))
    }

    /// Asserts the status, showing the body when it differs.
    #[track_caller]
    pub fn expect(self, status: u16) -> Self {
        assert_eq!(self.status, status, "unexpected status; body: {}", String::from_utf8_lossy(&self.body));
        self
    }

    /// Asserts an error status and code.
    #[track_caller]
    pub fn expect_error(self, status: u16, code: &str) -> Value {
        let body = self.expect(status).json();
        assert_eq!(body["error"]["code"], code, "{body}");
        body
    }
}

/// Every JSON answer of the API, errors included, forbids caches to keep it.
#[track_caller]
pub fn check_no_store(what: &str, headers: &reqwest::header::HeaderMap) {
    let json =
        headers.get("content-type").and_then(|v| v.to_str().ok()).is_some_and(|ct| ct.starts_with("application/json"));
    if json {
        let cache = headers.get("cache-control").and_then(|v| v.to_str().ok());
        assert_eq!(cache, Some("no-store"), "{what}: a JSON response without Cache-Control: no-store");
    }
}

/// An HTTP client for one server.
#[derive(Clone)]
pub struct Client {
    pub base: String,
    http: reqwest::Client,
    /// What `http` was built with, so a derived client keeps it.
    headers: reqwest::header::HeaderMap,
    local: Option<std::net::IpAddr>,
}

impl Client {
    pub fn new(base: String) -> Self {
        Self::build(base, reqwest::header::HeaderMap::new(), None)
    }

    fn build(base: String, headers: reqwest::header::HeaderMap, local: Option<std::net::IpAddr>) -> Self {
        let http = reqwest::Client::builder()
            .no_proxy()
            .default_headers(headers.clone())
            .local_address(local)
            .build()
            .expect("client");
        Self { base, http, headers, local }
    }

    /// The same server, every request carrying `Authorization: Bearer {token}`.
    pub fn bearer(&self, token: &str) -> Self {
        self.with_header("authorization", &format!("Bearer {token}"))
    }

    /// The same server, every request carrying one more header (or another value of it).
    pub fn with_header(&self, name: &str, value: &str) -> Self {
        let mut headers = self.headers.clone();
        headers.insert(
            reqwest::header::HeaderName::from_bytes(name.as_bytes()).expect("header name"),
            value.parse().expect("header value"),
        );
        Self::build(self.base.clone(), headers, self.local)
    }

    /// The same server, reached from another loopback address (`127.0.0.2`, say): another client
    /// as per-address limits count them.
    pub fn via_address(&self, local: std::net::IpAddr) -> Self {
        Self::build(self.base.clone(), self.headers.clone(), Some(local))
    }

    /// A client that opens a connection per request and closes it after.
    pub fn without_keep_alive(base: String) -> Self {
        let http = reqwest::Client::builder().no_proxy().pool_max_idle_per_host(0).build().expect("client");
        Self { base, http, headers: reqwest::header::HeaderMap::new(), local: None }
    }

    /// Sends a request and checks the response against the contract.
    pub async fn send(&self, method: Method, path: &str, headers: &[(&str, &str)], body: Option<Vec<u8>>) -> Resp {
        let mut req = self.http.request(method.clone(), format!("{}{path}", self.base));
        for (name, value) in headers {
            req = req.header(*name, *value);
        }
        if let Some(body) = body {
            req = req.body(body);
        }
        let what = format!("{method} {path}");
        let resp = bounded(&what, req.send()).await.unwrap_or_else(|e| panic!("{what}: {e}"));
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let body = bounded(&what, resp.bytes()).await.unwrap_or_else(|e| panic!("{what}: {e}")).to_vec();
        let content_type = headers.get("content-type").and_then(|v| v.to_str().ok());
        contract::check_response(method.as_str(), path, status, content_type, &body);
        check_no_store(&what, &headers);
        Resp { status, headers, body }
    }

    /// Sends a body as a chunked stream (no Content-Length).
    pub async fn send_chunked(&self, path: &str, headers: &[(&str, &str)], body: Vec<u8>) -> Resp {
        let half = body.len() / 2;
        let (a, b) = (body[..half].to_vec(), body[half..].to_vec());
        let chunks = futures_util::stream::iter([Ok::<_, std::io::Error>(a), Ok(b)]);
        let mut req = self.http.post(format!("{}{path}", self.base)).body(reqwest::Body::wrap_stream(chunks));
        for (name, value) in headers {
            req = req.header(*name, *value);
        }
        let resp = bounded(path, req.send()).await.expect("send");
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let body = bounded(path, resp.bytes()).await.expect("body").to_vec();
        let content_type = headers.get("content-type").and_then(|v| v.to_str().ok());
        contract::check_response("POST", path, status, content_type, &body);
        check_no_store(path, &headers);
        Resp { status, headers, body }
    }

    pub async fn get(&self, path: &str) -> Resp {
        self.send(Method::GET, path, &[], None).await
    }

    /// A GET running in the background (a long-poll), to await later.
    pub fn spawn_get(&self, path: String) -> JoinHandle<Resp> {
        let client = self.clone();
        tokio::spawn(async move { client.get(&path).await })
    }

    pub async fn post(&self, path: &str, body: &Value) -> Resp {
        self.post_with(path, &[], body).await
    }

    pub async fn post_with(&self, path: &str, headers: &[(&str, &str)], body: &Value) -> Resp {
        let mut all = vec![("content-type", "application/json")];
        all.extend_from_slice(headers);
        self.send(Method::POST, path, &all, Some(body.to_string().into_bytes())).await
    }

    /// Opens a gate and returns its view (201 expected).
    pub async fn open(&self, session: &str, body: &Value) -> Value {
        self.post(&format!("/v1/sessions/{session}/gates"), body).await.expect(201).json()
    }

    /// Answers a gate.
    pub async fn answer(&self, session: &str, gate: &str, text: &str) -> Resp {
        self.post(&format!("/v1/sessions/{session}/gates/{gate}"), &answer(text)).await
    }

    /// The unacked inbox of a loop.
    pub async fn inbox(&self, session: &str, loop_id: &str) -> Vec<Value> {
        let page = self.get(&format!("/v1/sessions/{session}/loops/{loop_id}/commands")).await.expect(200).json();
        page["commands"].as_array().expect("commands").clone()
    }

    /// Every journal event, in order.
    pub async fn journal(&self) -> Vec<Value> {
        let page = self.get("/v1/journal?limit=1000").await.expect(200).json();
        assert_eq!(page["done"], true, "test journals fit in one page");
        page["events"].as_array().expect("events").clone()
    }

    /// The gate ids of a listing (`path` with its query), page by page along `next_after`.
    pub async fn listed_gate_ids(&self, path: &str) -> Vec<String> {
        let mut ids = Vec::new();
        let mut url = path.to_owned();
        for _ in 0..50 {
            let page = self.get(&url).await.expect(200).json();
            ids.extend(page["gates"].as_array().expect("gates").iter().map(gate_id));
            match page.get("next_after").and_then(Value::as_str) {
                Some(cursor) => url = format!("{path}&after={cursor}"),
                None => return ids,
            }
        }
        panic!("{path}: more than 50 pages")
    }

    /// Every journal entry (`{journal_seq, event}`), across pages.
    pub async fn journal_all(&self) -> Vec<Value> {
        let mut entries = Vec::new();
        let mut from = 0;
        loop {
            let page = self.get(&format!("/v1/journal?limit=1000&from_journal_seq={from}")).await.expect(200).json();
            entries.extend(page["events"].as_array().expect("events").iter().cloned());
            if page["done"] == true {
                return entries;
            }
            from = page["next_journal_seq"].as_i64().expect("next seq");
        }
    }

    /// A loop's whole inbox, acked commands included, across pages.
    pub async fn inbox_all(&self, session: &str, loop_id: &str) -> Vec<Value> {
        let mut commands = Vec::new();
        let mut after = 0;
        loop {
            let path =
                format!("/v1/sessions/{session}/loops/{loop_id}/commands?include_acked=true&limit=1000&after={after}");
            let page = self.get(&path).await.expect(200).json();
            let got = page["commands"].as_array().expect("commands").clone();
            if got.is_empty() {
                return commands;
            }
            after = page["next_after"].as_i64().expect("cursor");
            commands.extend(got);
        }
    }

    /// One gate's current view.
    pub async fn view(&self, session: &str, gate: &str) -> Value {
        self.get(&format!("/v1/sessions/{session}/gates/{gate}")).await.expect(200).json()
    }
}

/// The id of the gate in a view.
pub fn gate_id(view: &Value) -> String {
    view["gate"]["id"].as_str().expect("gate id").to_owned()
}

/// The real server running inside the test process.
pub struct TestApp {
    pub client: Client,
    /// The server's bus, to see who is waiting, and its armed-deadline counter.
    running: Option<gatehouse::Server>,
    shutdown: Option<oneshot::Sender<()>>,
    _dir: Option<TempDir>,
}

impl std::ops::Deref for TestApp {
    type Target = Client;
    fn deref(&self) -> &Client {
        &self.client
    }
}

impl TestApp {
    pub async fn spawn() -> Self {
        Self::spawn_with(|_| {}).await
    }

    /// Starts a server with adjusted flags on a fresh temporary database.
    pub async fn spawn_with(adjust: impl FnOnce(&mut ServeArgs)) -> Self {
        Self::spawn_hooked(gatehouse::Hooks::default(), adjust).await
    }

    /// Starts a server with test hooks and adjusted flags on a fresh temporary database.
    pub async fn spawn_hooked(hooks: gatehouse::Hooks, adjust: impl FnOnce(&mut ServeArgs)) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let db = dir.path().join("gatehouse.db");
        let mut app = Self::start_hooked(&db, hooks, adjust).await;
        app._dir = Some(dir);
        app
    }

    /// Starts a server on an existing database path (for restarts).
    pub async fn start(db: &Path, adjust: impl FnOnce(&mut ServeArgs)) -> Self {
        Self::start_hooked(db, gatehouse::Hooks::default(), adjust).await
    }

    /// Starts a server with test hooks on an existing database path.
    pub async fn start_hooked(db: &Path, hooks: gatehouse::Hooks, adjust: impl FnOnce(&mut ServeArgs)) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind loopback");
        let addr = listener.local_addr().expect("address");
        let mut args = ServeArgs::new(db, addr);
        database::configure(&mut args, db).await;
        adjust(&mut args);
        let (tx, rx) = oneshot::channel::<()>();
        let running = bounded(
            "the server starts",
            gatehouse::Server::start(args, hooks, gatehouse::Listen::On(listener), async {
                let _ = rx.await;
            }),
        )
        .await
        .unwrap_or_else(|e| panic!("the server did not start: {e}"));
        Self { client: Client::new(format!("http://{addr}")), running: Some(running), shutdown: Some(tx), _dir: None }
    }

    fn running(&self) -> &gatehouse::Server {
        self.running.as_ref().expect("running until stopped")
    }

    /// Waits (bounded) until `count` requests are parked on the gate, so a test knows its
    /// long-poll will be woken by the commit rather than find the result on its first read.
    pub async fn parked_on_gate(&self, gate: &str, count: usize) {
        let gate = gatehouse::domain::GateId::parse(gate).unwrap();
        self.until_parked(|bus| bus.gate_interest(gate) >= count).await;
    }

    /// Waits (bounded) until `count` requests are parked on the loop's inbox.
    pub async fn parked_on_inbox(&self, session: &str, loop_id: &str, count: usize) {
        let session = gatehouse::domain::SessionId::parse(session).unwrap();
        let loop_id = gatehouse::domain::LoopId::parse(loop_id).unwrap();
        self.until_parked(|bus| bus.inbox_interest(session, loop_id) >= count).await;
    }

    /// How many deadlines the server's timer has armed.
    pub fn armed_deadlines(&self) -> usize {
        self.running().armed.get()
    }

    async fn until_parked(&self, parked: impl Fn(&Bus) -> bool) {
        bounded("a request parks", async {
            while !parked(&self.running().bus) {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await;
    }

    /// Graceful shutdown; returns the temporary directory so the database outlives the server.
    pub async fn stop(mut self) -> Option<TempDir> {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(running) = self.running.take() {
            bounded("server shutdown", running.wait()).await.expect("server ran cleanly");
        }
        self._dir.take()
    }
}

/// The real `gatehouse` binary as a child process, for kill and restart tests.
pub struct ServerProcess {
    pub client: Client,
    child: Child,
    /// Kept so the forwarding thread keeps draining the pipe.
    stderr: mpsc::Receiver<String>,
    /// What the server wrote before it said where it listens (start-up warnings).
    startup: std::sync::Mutex<Vec<String>>,
}

impl std::ops::Deref for ServerProcess {
    type Target = Client;
    fn deref(&self) -> &Client {
        &self.client
    }
}

/// The binary, or with `open_files`, `sh` running it under that hard (and soft) open-file limit.
fn binary_under(open_files: Option<u64>) -> Command {
    let gatehouse = env!("CARGO_BIN_EXE_gatehouse");
    let mut cmd = match open_files {
        None => Command::new(gatehouse),
        Some(limit) => {
            let mut sh = Command::new("sh");
            let script = format!("ulimit -Sn {limit} && ulimit -Hn {limit} && exec \"$0\" \"$@\"");
            sh.args(["-c", &script, gatehouse]);
            sh
        }
    };
    cmd.env_remove("RUST_LOG").stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped());
    cmd
}

/// Forwards a child's stderr lines to a channel (and to the test output).
fn collect_stderr(child: &mut Child) -> mpsc::Receiver<String> {
    let stderr = child.stderr.take().expect("piped stderr");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            eprintln!("[server] {line}");
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

impl ServerProcess {
    /// Starts `gatehouse serve` on a port chosen by the OS and waits for its listening line.
    pub fn start(db: &Path) -> Self {
        Self::start_on(db, "127.0.0.1:0")
    }

    /// Starts `gatehouse serve` on `bind` (a restart on the port a client already knows).
    pub fn start_on(db: &Path, bind: &str) -> Self {
        Self::start_with(db, bind, &[])
    }

    /// Starts `gatehouse serve` on `bind` with more flags.
    pub fn start_with(db: &Path, bind: &str, extra: &[&str]) -> Self {
        Self::start_with_env(db, bind, extra, &[])
    }

    /// Starts `gatehouse serve` on `bind` with more flags and environment variables.
    pub fn start_with_env(db: &Path, bind: &str, extra: &[&str], env: &[(&str, &str)]) -> Self {
        let mut args = vec!["--bind".to_owned(), bind.to_owned()];
        args.extend(database::flags(db));
        args.extend(extra.iter().map(|a| (*a).to_owned()));
        Self::serve(&args, env)
    }

    /// Starts `gatehouse serve ARGS…` (the database flags among them) and waits for its listening
    /// line.
    pub fn serve(args: &[String], env: &[(&str, &str)]) -> Self {
        Self::serve_under(None, args, env)
    }

    /// Starts `gatehouse serve --bind BIND` with more flags under a hard open-file limit of
    /// `open_files`.
    pub fn start_under_open_file_limit(db: &Path, bind: &str, open_files: u64, extra: &[&str]) -> Self {
        let mut args = vec!["--bind".to_owned(), bind.to_owned()];
        args.extend(database::flags(db));
        args.extend(extra.iter().map(|a| (*a).to_owned()));
        Self::serve_under(Some(open_files), &args, &[])
    }

    fn serve_under(open_files: Option<u64>, args: &[String], env: &[(&str, &str)]) -> Self {
        let mut child = binary_under(open_files)
            .arg("serve")
            .args(args)
            .envs(env.iter().copied())
            .spawn()
            .expect("start gatehouse");
        let stderr = collect_stderr(&mut child);
        let deadline = std::time::Instant::now() + NET_TIMEOUT;
        let mut startup = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let line = stderr.recv_timeout(left).unwrap_or_else(|_| {
                let _ = child.kill();
                panic!("gatehouse did not say where it listens")
            });
            if let Some(rest) = line.split("listening on ").nth(1) {
                let base = rest.split_whitespace().next().expect("address").to_owned();
                startup.push(line);
                return Self { client: Client::new(base), child, stderr, startup: startup.into() };
            }
            startup.push(line);
        }
    }

    /// The server's resident memory now, from `/proc` (Linux).
    pub fn rss_bytes(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).expect("/proc status");
        let line = status.lines().find(|l| l.starts_with("VmRSS:")).expect("VmRSS");
        line.split_whitespace().nth(1).and_then(|kb| kb.parse::<u64>().ok()).expect("VmRSS in kB") * 1024
    }

    /// The lines the server wrote to stderr since the last call (the first call includes those
    /// it wrote while starting).
    pub fn log_lines(&self) -> Vec<String> {
        let mut lines = std::mem::take(&mut *self.startup.lock().expect("start-up lines"));
        lines.extend(self.stderr.try_iter());
        lines
    }

    /// Runs `gatehouse serve --bind BIND --db DB EXTRA…` to completion (bounded), for servers that
    /// must refuse to start; returns the exit code and stderr.
    pub fn serve_to_exit(db: &Path, bind: &str, extra: &[&str]) -> (Option<i32>, String) {
        Self::serve_to_exit_under(None, db, bind, extra)
    }

    /// `serve_to_exit`, with `open_files`, under that hard open-file limit.
    pub fn serve_to_exit_under(
        open_files: Option<u64>,
        db: &Path,
        bind: &str,
        extra: &[&str],
    ) -> (Option<i32>, String) {
        let flags = database::flags(db);
        let mut args: Vec<&std::ffi::OsStr> = vec!["serve".as_ref(), "--bind".as_ref(), bind.as_ref()];
        args.extend(flags.iter().map(std::ffi::OsStr::new));
        args.extend(extra.iter().map(std::ffi::OsStr::new));
        Self::run_to_exit_under(open_files, &args)
    }

    /// Runs `gatehouse ARGS…` to completion (bounded), returning its exit code and stderr.
    pub fn run_to_exit(args: &[&std::ffi::OsStr]) -> (Option<i32>, String) {
        Self::run_to_exit_under(None, args)
    }

    fn run_to_exit_under(open_files: Option<u64>, args: &[&std::ffi::OsStr]) -> (Option<i32>, String) {
        let mut child = binary_under(open_files).args(args).spawn().expect("start gatehouse");
        let stderr = collect_stderr(&mut child);
        let code = wait_bounded(&mut child, NET_TIMEOUT).unwrap_or_else(|| {
            let _ = child.kill();
            panic!("gatehouse did not exit")
        });
        // The child has exited; its pipe ends once the forwarding thread has read everything.
        let mut lines = Vec::new();
        while let Ok(line) = stderr.recv_timeout(NET_TIMEOUT) {
            lines.push(line);
        }
        (code, lines.join("\n"))
    }

    /// SIGKILL: no shutdown code runs.
    pub fn kill(mut self) {
        self.child.kill().expect("SIGKILL");
        self.child.wait().expect("reap");
    }

    /// SIGTERM, then waits (bounded) for the exit; returns the exit code.
    pub fn terminate(mut self, within: Duration) -> Option<i32> {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill").args(["-TERM", &pid]).status().expect("run kill");
        assert!(sent.success(), "kill -TERM {pid}");
        match wait_bounded(&mut self.child, within) {
            Some(code) => code,
            None => {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("gatehouse did not exit within {within:?} of SIGTERM");
            }
        }
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        // A failing test must not leave a server behind.
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Waits for a child to exit, polling, for at most `limit`. `None` if it is still running.
fn wait_bounded(child: &mut Child, limit: Duration) -> Option<Option<i32>> {
    let deadline = std::time::Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return Some(status.code());
        }
        if std::time::Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A stream client that never reads: a raw socket with a small receive window, so the server's
/// writes to it stall quickly.
pub struct StuckClient {
    socket: tokio::net::TcpStream,
}

impl StuckClient {
    /// Connects to the server at `base` and asks for the event stream at `path`.
    pub async fn connect(base: &str, path: &str) -> Self {
        use tokio::io::AsyncWriteExt;
        let addr: std::net::SocketAddr = base.trim_start_matches("http://").parse().expect("a loopback address");
        let socket = tokio::net::TcpSocket::new_v4().expect("socket");
        socket.set_recv_buffer_size(4096).expect("receive buffer");
        let mut socket = bounded("connect", socket.connect(addr)).await.expect("connect");
        let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nAccept: text/event-stream\r\n\r\n");
        socket.write_all(request.as_bytes()).await.expect("send the request");
        Self { socket }
    }

    /// Reads, at last, whatever the server sent before it closed the connection (bounded: the
    /// server must close it), and returns the seqs of the complete enduring frames.
    pub async fn drain(mut self) -> Vec<i64> {
        use tokio::io::AsyncReadExt;
        let mut received = Vec::new();
        bounded("the stalled connection is closed", async {
            let mut chunk = vec![0u8; 64 * 1024];
            loop {
                match self.socket.read(&mut chunk).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => received.extend_from_slice(&chunk[..n]),
                }
            }
        })
        .await;
        let body_start = received.windows(4).position(|w| w == b"\r\n\r\n").expect("response headers") + 4;
        // Undo chunked framing: keep only complete SSE frames that precede the cut.
        let mut body = dechunk(&received[body_start..]);
        take_frames(&mut body).iter().filter_map(SseFrame::enduring).map(|(seq, _)| seq).collect()
    }
}

/// Decodes an HTTP/1.1 chunked body, stopping at the first incomplete chunk.
fn dechunk(mut raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(line_end) = raw.windows(2).position(|w| w == b"\r\n") {
        let size = usize::from_str_radix(std::str::from_utf8(&raw[..line_end]).unwrap().trim(), 16).unwrap();
        let start = line_end + 2;
        if size == 0 || raw.len() < start + size + 2 {
            break;
        }
        out.extend_from_slice(&raw[start..start + size]);
        raw = &raw[start + size + 2..];
    }
    out
}

/// One Server-Sent Events frame as a client parses it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SseFrame {
    pub event: Option<String>,
    pub id: Option<String>,
    pub data: Option<String>,
    pub retry: Option<String>,
    pub comment: Option<String>,
}

impl SseFrame {
    /// The seq and event of an `event: enduring` frame.
    pub fn enduring(&self) -> Option<(i64, Value)> {
        if self.event.as_deref() != Some("enduring") {
            return None;
        }
        let seq = self.id.as_deref()?.parse().ok()?;
        let data: Value = serde_json::from_str(self.data.as_deref()?).ok()?;
        assert_eq!(data["v"], 1, "enduring payloads carry v: 1");
        Some((seq, data["event"].clone()))
    }

    /// The frame as the contract's `SseFrames` states it: its fields as members, `data` decoded
    /// from JSON (kept as text when it is not JSON, which then fails the contract).
    pub fn to_json(&self) -> Value {
        let mut object = serde_json::Map::new();
        let text = [("event", &self.event), ("id", &self.id), ("retry", &self.retry), ("comment", &self.comment)];
        for (name, value) in text {
            if let Some(value) = value {
                object.insert(name.to_owned(), Value::String(value.clone()));
            }
        }
        if let Some(data) = &self.data {
            let decoded = serde_json::from_str(data).unwrap_or_else(|_| Value::String(data.clone()));
            object.insert("data".to_owned(), decoded);
        }
        Value::Object(object)
    }

    /// Parses the lines of one frame (the text between blank lines).
    pub fn parse(text: &str) -> Self {
        let mut frame = Self::default();
        for line in text.lines() {
            if let Some(comment) = line.strip_prefix(':') {
                frame.comment = Some(comment.trim_start().to_owned());
                continue;
            }
            let (field, value) =
                line.split_once(':').map_or((line, ""), |(f, v)| (f, v.strip_prefix(' ').unwrap_or(v)));
            let slot = match field {
                "event" => &mut frame.event,
                "id" => &mut frame.id,
                "data" => &mut frame.data,
                "retry" => &mut frame.retry,
                other => panic!("unexpected SSE field {other:?} in {text:?}"),
            };
            assert!(slot.is_none(), "field {field} twice in one frame: {text:?}");
            *slot = Some(value.to_owned());
        }
        frame
    }
}

/// Splits complete frames off the front of a byte buffer.
pub fn take_frames(buf: &mut Vec<u8>) -> Vec<SseFrame> {
    let mut frames = Vec::new();
    while let Some(end) = buf.windows(2).position(|w| w == b"\n\n") {
        let text = String::from_utf8(buf[..end].to_vec()).expect("SSE is UTF-8");
        buf.drain(..end + 2);
        frames.push(SseFrame::parse(&text));
    }
    frames
}

/// A client reading one event stream promptly: a task of its own takes every chunk off the
/// socket as it arrives, however long the test dwells on the frames (each is checked against the
/// contract), so the server never sees this client stall.
pub struct EventStream {
    pub headers: reqwest::header::HeaderMap,
    path: String,
    /// Chunks as they arrived; closed at the end of the stream.
    chunks: tokio::sync::mpsc::UnboundedReceiver<bytes::Bytes>,
    buf: Vec<u8>,
    ready: std::collections::VecDeque<SseFrame>,
}

impl EventStream {
    /// Connects and checks that a stream (not an error) came back.
    pub async fn connect(client: &Client, path: &str, headers: &[(&str, &str)]) -> Self {
        let mut req = client.http.get(format!("{}{path}", client.base)).header("accept", "text/event-stream");
        for (name, value) in headers {
            req = req.header(*name, *value);
        }
        let resp = bounded("stream connect", req.send()).await.expect("stream connect");
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        if status != 200 {
            let body = bounded("error body", resp.text()).await.unwrap_or_default();
            panic!("stream {path}: {status}: {body}");
        }
        assert_eq!(headers["content-type"], "text/event-stream");
        let (tx, chunks) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            use futures_util::StreamExt;
            let mut body = resp.bytes_stream();
            // Ends at the end of the stream, or as soon as the `EventStream` is dropped (which
            // closes the connection, as a client going away does).
            loop {
                let chunk = tokio::select! {
                    chunk = body.next() => chunk,
                    () = tx.closed() => return,
                };
                let Some(Ok(chunk)) = chunk else { return };
                if tx.send(chunk).is_err() {
                    return;
                }
            }
        });
        Self { headers, path: path.to_owned(), chunks, buf: Vec::new(), ready: Default::default() }
    }

    /// The next frame within `limit`: `Ok(None)` at the end of the stream, `Err` on a timeout.
    pub async fn next_within(&mut self, limit: Duration) -> Result<Option<SseFrame>, tokio::time::error::Elapsed> {
        tokio::time::timeout(limit, async {
            loop {
                if let Some(frame) = self.ready.pop_front() {
                    contract::check_stream_frame(&self.path, &frame.to_json());
                    return Some(frame);
                }
                let chunk = self.chunks.recv().await?;
                self.buf.extend_from_slice(&chunk);
                self.ready.extend(take_frames(&mut self.buf));
            }
        })
        .await
    }

    /// The next frame (bounded); panics at the end of the stream.
    pub async fn next(&mut self) -> SseFrame {
        self.next_within(NET_TIMEOUT).await.expect("a frame in time").expect("the stream is still open")
    }

    /// The next enduring frame, skipping `retry:` and pings.
    pub async fn next_enduring(&mut self) -> (i64, Value) {
        loop {
            let frame = self.next().await;
            if let Some(enduring) = frame.enduring() {
                return enduring;
            }
            assert!(frame.comment.is_some() || frame.retry.is_some(), "unexpected frame {frame:?}");
        }
    }

    /// Enduring frames until (and including) seq `last`.
    pub async fn enduring_until(&mut self, last: i64) -> Vec<(i64, Value)> {
        let mut got = Vec::new();
        loop {
            let (seq, event) = self.next_enduring().await;
            got.push((seq, event));
            if seq >= last {
                return got;
            }
        }
    }
}

/// A Standard Webhooks signature (spec §9) over one request body: what a signed answer carries in
/// its `webhook-id`, `webhook-timestamp` and `webhook-signature` headers.
pub struct Signed {
    id: String,
    timestamp: String,
    signature: String,
}

impl Signed {
    /// `body` as message `id`, signed with `secret` (`whsec_…`) at `at` (Unix seconds).
    pub fn new(secret: &str, id: &str, at: u64, body: &[u8]) -> Self {
        let secret: gatehouse::common::signature::Secret = secret.parse().expect("a webhook secret");
        let signature = gatehouse::common::signature::sign(&secret, id, at, body);
        Self { id: id.to_owned(), timestamp: at.to_string(), signature }
    }

    /// The headers of a signed JSON request: content type, id, timestamp, signature (in that
    /// order, so a test can swap one of them out).
    pub fn headers(&self) -> [(&str, &str); 4] {
        [
            ("content-type", "application/json"),
            ("webhook-id", &self.id),
            ("webhook-timestamp", &self.timestamp),
            ("webhook-signature", &self.signature),
        ]
    }
}

impl Client {
    /// Opens a gate asking `question` for a new loop in a new session, as most tests begin:
    /// returns (session, loop id, gate id).
    pub async fn open_asking(&self, question: &str) -> (String, String, String) {
        let (session, loop_id) = (uuid(), uuid());
        let gate = gate_id(&self.open(&session, &ask(&loop_id, &uuid(), question)).await);
        (session, loop_id, gate)
    }

    /// A loop's inbox with its acked commands (one page, `?include_acked=true`).
    pub async fn inbox_with_acked(&self, session: &str, loop_id: &str) -> Vec<Value> {
        let path = format!("/v1/sessions/{session}/loops/{loop_id}/commands?include_acked=true");
        let page = self.get(&path).await.expect(200).json();
        page["commands"].as_array().expect("commands").clone()
    }
}

/// A fresh database file for a test of SQLite's own files, locks or connections; `None` (the test
/// is skipped, and says so) on PostgreSQL.
pub fn sqlite_db(what: &str) -> Option<(TempDir, std::path::PathBuf)> {
    if database::sqlite_only(what) {
        return None;
    }
    Some(temp_db())
}
