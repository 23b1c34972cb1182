//! Which database the integration tests run their servers on: a SQLite file by default, or
//! PostgreSQL when `GATEHOUSE_TEST_DATABASE_URL` names a server (a throwaway cluster: `.ci/test`
//! starts one under `target/`). The tests name a database by a path in their temporary
//! directory, as they always have; on PostgreSQL that path stands for a database of its own
//! (created on first use, so a restart on the same path finds the same database), with its
//! server key in a file beside the path.

use std::path::Path;
use std::process::Command;
use std::sync::LazyLock;

use gatehouse::ServeArgs;
use sha2::Digest;

/// The PostgreSQL server the tests use, if any: a URL whose user may create databases.
static POSTGRES: LazyLock<Option<String>> =
    LazyLock::new(|| std::env::var("GATEHOUSE_TEST_DATABASE_URL").ok().filter(|url| !url.trim().is_empty()));

/// A killed server's webhook leases run out after this long, and a restarted one (a new owner)
/// takes its endpoints over: short, so tests that kill servers need not wait the default 45 s.
const WEBHOOK_LEASE: &str = "2s";

/// Whether the servers of this run are on PostgreSQL.
pub fn on_postgres() -> bool {
    POSTGRES.is_some()
}

/// For tests of what only SQLite has (its files, its lock, its writer hook): `true`, after saying
/// so, when this run is on PostgreSQL and the test should return at once.
pub fn sqlite_only(what: &str) -> bool {
    if on_postgres() {
        eprintln!("skipped on PostgreSQL: {what} is SQLite's own");
    }
    on_postgres()
}

/// The `serve` flags that put a server's database at `db`.
pub fn flags(db: &Path) -> Vec<String> {
    match &*POSTGRES {
        None => vec!["--db".into(), db.display().to_string()],
        Some(admin) => postgres_flags(admin, db),
    }
}

/// The `serve` flags of the PostgreSQL database standing for `db` on the server of `admin`.
fn postgres_flags(admin: &str, db: &Path) -> Vec<String> {
    let (url, key) = postgres_database(admin, db);
    let mut flags = vec!["--database-url".into(), url, "--secret-file".into(), key.display().to_string()];
    flags.extend(["--webhook-lease".into(), WEBHOOK_LEASE.into()]);
    flags
}

/// Points `args` at the database for `db`.
pub async fn configure(args: &mut ServeArgs, db: &Path) {
    if let Some(admin) = &*POSTGRES {
        let (admin, db) = (admin.clone(), db.to_owned());
        let (url, key) = tokio::task::spawn_blocking(move || postgres_database(&admin, &db)).await.expect("setup");
        args.store.database_url = Some(gatehouse::store::DatabaseUrl::new(url));
        args.store.secret_file = Some(key);
        args.webhooks.lease = gatehouse::config::parse_duration(WEBHOOK_LEASE).expect("a duration");
    }
}

/// On PostgreSQL, the URL of the database standing for `db` (created if missing) and its key
/// file; `None` on SQLite.
pub fn postgres_for(db: &Path) -> Option<(String, std::path::PathBuf)> {
    POSTGRES.as_ref().map(|admin| postgres_database(admin, db))
}

/// The URL of the PostgreSQL database standing for `db` (created if missing), and its key file.
fn postgres_database(admin: &str, db: &Path) -> (String, std::path::PathBuf) {
    let digest = sha2::Sha256::digest(db.as_os_str().as_encoded_bytes());
    let name: String = format!("gh_{}", digest.iter().take(10).map(|b| format!("{b:02x}")).collect::<String>());
    let mut url = url::Url::parse(admin).expect("GATEHOUSE_TEST_DATABASE_URL is a URL");
    url.set_path(&format!("/{name}"));
    let key = db.with_extension("key");
    if !key.exists() {
        let secret = format!("{}{}", uuid::Uuid::new_v4().simple(), uuid::Uuid::new_v4().simple());
        std::fs::write(&key, secret).expect("write the test's server key");
    }
    // Its own thread and runtime: this runs from synchronous helpers and from inside tests' own
    // runtimes alike.
    let admin = admin.to_owned();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        runtime.block_on(async {
            let (client, connection) = tokio_postgres::connect(&admin, tokio_postgres::NoTls)
                .await
                .expect("connect to GATEHOUSE_TEST_DATABASE_URL");
            tokio::spawn(connection);
            match client.batch_execute(&format!("CREATE DATABASE {name}")).await {
                Ok(()) => {}
                Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::DUPLICATE_DATABASE) => {}
                Err(e) => panic!("CREATE DATABASE {name}: {e}"),
            }
        });
    })
    .join()
    .expect("create the test database");
    (url.to_string(), key)
}

/// One boolean from a query on the database standing for `db` (for tests that look past the API
/// at what is stored; the SQL must mean the same on both).
pub fn query_bool(db: &Path, sql: &str) -> bool {
    match &*POSTGRES {
        None => rusqlite::Connection::open(db).unwrap().query_row(sql, [], |r| r.get(0)).unwrap(),
        Some(admin) => {
            let (url, _) = postgres_database(admin, db);
            let sql = sql.to_owned();
            std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
                runtime.block_on(async {
                    let (client, connection) =
                        tokio_postgres::connect(&url, tokio_postgres::NoTls).await.expect("connect");
                    tokio::spawn(connection);
                    client.query_one(&sql, &[]).await.expect("query").get(0)
                })
            })
            .join()
            .expect("query the test database")
        }
    }
}

/// A PostgreSQL server of one test's own, for tests that stop or kill PostgreSQL itself (which
/// would break every other test on the shared one): initdb in a temporary directory, on
/// 127.0.0.1 and a free port, with the binaries `.ci/test` names in `GATEHOUSE_TEST_PG_BIN`. As
/// root it runs as the `postgres` user, since PostgreSQL refuses root. Dropped, it is killed by
/// its PID.
pub struct OwnCluster {
    dir: tempfile::TempDir,
    bin: std::path::PathBuf,
    port: u16,
    /// A URL whose user may create databases.
    pub url: String,
}

impl OwnCluster {
    /// `None` when this run is not on PostgreSQL.
    pub fn start() -> Option<Self> {
        POSTGRES.as_ref()?;
        let bin = std::path::PathBuf::from(
            std::env::var("GATEHOUSE_TEST_PG_BIN").expect("GATEHOUSE_TEST_PG_BIN names PostgreSQL's binaries"),
        );
        let dir = tempfile::Builder::new().prefix("gatehouse-pg-").tempdir().expect("a temporary directory");
        if as_root() {
            run(Command::new("chown").arg("postgres").arg(dir.path()));
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let data = dir.path().join("data");
        let mut initdb = owner_command(&bin.join("initdb"));
        initdb.arg("-D").arg(&data).args(["-U", "gatehouse", "--auth=trust", "--no-sync", "-E", "UTF8"]);
        run(&mut initdb);
        let cluster = Self { dir, bin, port, url: format!("postgres://gatehouse@127.0.0.1:{port}/postgres") };
        cluster.start_again();
        Some(cluster)
    }

    /// The `serve` flags that put a server's database on this cluster, standing for `db`.
    pub fn flags(&self, db: &Path) -> Vec<String> {
        postgres_flags(&self.url, db)
    }

    /// Starts the server (again) on its port, waiting until it accepts connections.
    pub fn start_again(&self) {
        let options = format!("-c listen_addresses=127.0.0.1 -c port={} -c unix_socket_directories=''", self.port);
        let mut start = self.pg_ctl();
        start.args(["-w", "-t", "30", "-o", &options, "-l"]).arg(self.dir.path().join("server.log")).arg("start");
        run(&mut start);
    }

    /// `pg_ctl stop -m immediate`: PostgreSQL dies at once, as in a crash (it recovers from its
    /// WAL at the next start).
    pub fn crash(&self) {
        run(self.pg_ctl().args(["-m", "immediate", "-w", "stop"]));
    }

    fn pg_ctl(&self) -> Command {
        let mut command = owner_command(&self.bin.join("pg_ctl"));
        command.arg("-D").arg(self.dir.path().join("data"));
        command
    }

    /// The postmaster's PID, while it runs.
    fn pid(&self) -> Option<String> {
        let pid = std::fs::read_to_string(self.dir.path().join("data/postmaster.pid")).ok()?;
        pid.lines().next().map(str::to_owned)
    }
}

impl Drop for OwnCluster {
    fn drop(&mut self) {
        // SIGQUIT is PostgreSQL's immediate shutdown; by the PID it wrote, nothing else.
        if let Some(pid) = self.pid() {
            let _ = Command::new("kill").args(["-QUIT", &pid]).status();
            for _ in 0..100 {
                let alive = Command::new("kill").args(["-0", &pid]).stderr(std::process::Stdio::null()).status();
                if !alive.is_ok_and(|s| s.success()) {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
        }
    }
}

fn as_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("Uid:")).map(|l| l.split_whitespace().nth(1) == Some("0")))
        .unwrap_or(false)
}

/// A PostgreSQL program run as the cluster's owner: `postgres` when the tests run as root.
fn owner_command(program: &Path) -> Command {
    if as_root() {
        let mut command = Command::new("runuser");
        command.args(["-u", "postgres", "--"]).arg(program);
        command
    } else {
        Command::new(program)
    }
}

fn run(command: &mut Command) {
    let output = command.stdin(std::process::Stdio::null()).output().expect("run a PostgreSQL program");
    assert!(output.status.success(), "{command:?}: {}", String::from_utf8_lossy(&output.stderr));
}
