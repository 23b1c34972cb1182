//! The PostgreSQL figures of `gatehouse bench --database-url URL`, measured in the same run as
//! the SQLite ones. Every figure runs on a database of its own that the bench creates on the
//! server the URL names (so its user needs `CREATEDB`) and drops afterwards:
//!
//! - answers/s at 64 answerers on one replica, and on three replicas of one database (the
//!   answerers spread over them: a replica set must not collapse under its own ordering);
//! - answer → agent across replicas: each gate opened on replica A, its loop long-polling on B,
//!   the person answering on C;
//! - the cost of ordering: the claim path itself (the store, no HTTP) on three writers of one
//!   database, with the ordering lock and without it. Without it the journal is not
//!   commit-ordered across writers; that is measured here only to price the lock.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use serde_json::json;

use super::servers::{Database, Server};
use super::{BenchError, Plan, Samples, gate};
use crate::domain::{Answer, AnsweredBy, OpenGateIn, OpenRules, Reply, SessionId};
use crate::store::postgres::PgSettings;
use crate::store::{Answering, Claim, DatabaseUrl, GateRecord, OpenOutcome, Store, StoreSettings};

/// A database made for one figure, dropped after it.
pub struct Scratch {
    admin: String,
    name: String,
    url: String,
}

impl Scratch {
    /// Creates a fresh database on the server of `admin`.
    pub async fn create(admin: &str) -> Result<Self, BenchError> {
        let mut url = url::Url::parse(admin)
            .ok()
            .filter(|u| matches!(u.scheme(), "postgres" | "postgresql"))
            .ok_or_else(|| BenchError("--database-url must be a URL like postgres://USER@HOST:PORT/DATABASE".into()))?;
        let name = format!("gatehouse_bench_{}", uuid::Uuid::new_v4().simple());
        url.set_path(&format!("/{name}"));
        let scratch = Self { admin: admin.to_owned(), name, url: url.into() };
        scratch.admin_statement(&format!("CREATE DATABASE {}", scratch.name)).await?;
        Ok(scratch)
    }

    /// Drops the database, even while a killed server's sessions linger.
    pub async fn remove(self) -> Result<(), BenchError> {
        self.admin_statement(&format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name)).await
    }

    async fn admin_statement(&self, sql: &str) -> Result<(), BenchError> {
        let (client, connection) = tokio_postgres::connect(&self.admin, tokio_postgres::NoTls).await.map_err(|e| {
            BenchError(format!("cannot connect to --database-url: {}", crate::common::innermost_cause(&e)))
        })?;
        let driver = tokio::spawn(connection);
        let done = client.batch_execute(sql).await.map_err(|e| BenchError(format!("{sql}: {e}")));
        drop(client);
        let _ = driver.await;
        done
    }
}

/// Every PostgreSQL figure, `plan.runs` times each.
pub async fn measure(plan: &Plan, admin: &str, dir: &Path, samples: &mut Samples) -> Result<(), BenchError> {
    // One key for every replica, as in production; the URL in a file, out of the process list.
    let key_file = dir.join("postgres.key");
    std::fs::write(&key_file, format!("{}{}\n", uuid::Uuid::new_v4().simple(), uuid::Uuid::new_v4().simple()))?;
    let url_file = dir.join("postgres.url");

    eprintln!("PostgreSQL: answers on one replica, then on three replicas of one database");
    for _ in 0..plan.runs {
        let scratch = Scratch::create(admin).await?;
        std::fs::write(&url_file, &scratch.url)?;
        let database = || Database::Postgres { url_file: &url_file, key_file: &key_file };
        let mut replicas = vec![Server::gatehouse(database(), plan.max_streams(), plan.max_connections()).await?];
        let one = [replicas[0].addr];
        let gates = gate::open_gates(one[0], plan.answers, plan.concurrency).await?;
        samples.add(
            "postgres.answers_per_s_c64_1_replica",
            gate::answers_per_second_over(&one, &gates, plan.concurrency).await?,
        );
        for _ in 0..2 {
            replicas.push(Server::gatehouse(database(), plan.max_streams(), plan.max_connections()).await?);
        }
        let three: Vec<SocketAddr> = replicas.iter().map(|r| r.addr).collect();
        let gates = gate::open_gates(three[0], plan.answers, plan.concurrency).await?;
        let rate = gate::answers_per_second_over(&three, &gates, plan.concurrency).await?;
        samples.add("postgres.answers_per_s_c64_3_replicas", rate);

        let across = [three[0], three[1], three[2]];
        let (p50, p99) = gate::percentiles(&gate::answer_to_agent_across_ms(across, plan.latency_samples).await?);
        samples.add("postgres.answer_to_agent_ms_across_replicas.p50", p50);
        samples.add("postgres.answer_to_agent_ms_across_replicas.p99", p99);
        drop(replicas);
        scratch.remove().await?;
    }

    eprintln!("PostgreSQL: the claim path on three writers, with the ordering lock and without");
    for _ in 0..plan.runs {
        for ordered in [true, false] {
            let scratch = Scratch::create(admin).await?;
            let rate = claims_per_second(&scratch.url, &key_file, ordered, plan.answers, plan.concurrency).await;
            scratch.remove().await?;
            let figure = if ordered {
                "postgres.claims_per_s_3_writers_ordered"
            } else {
                "postgres.claims_per_s_3_writers_unordered"
            };
            samples.add(figure, rate?);
        }
    }
    Ok(())
}

/// Claims per second through three stores (three writers, as three replicas have) on one
/// database: `answers` gates opened first (unmeasured), then answered by `concurrency` tasks
/// spread over the stores.
async fn claims_per_second(
    url: &str,
    key_file: &Path,
    ordered: bool,
    answers: usize,
    concurrency: usize,
) -> Result<f64, BenchError> {
    let mut stores = Vec::new();
    let mut tasks = Vec::new();
    for _ in 0..3 {
        let settings = PgSettings {
            order_lock: ordered,
            ..PgSettings::new(DatabaseUrl::new(url.to_owned()), Some(key_file.to_owned()))
        };
        let opened = Store::open(StoreSettings::Postgres(settings), Arc::default()).await?;
        tasks.extend(opened.background.into_iter().map(|task| tokio::spawn(task.task)));
        stores.push(opened.store);
    }
    let gates = Arc::new(open_gates(&stores[0], answers).await?);
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let workers: Vec<_> = (0..concurrency)
        .map(|worker| {
            let (store, gates, next) = (stores[worker % 3].clone(), Arc::clone(&gates), Arc::clone(&next));
            tokio::spawn(async move {
                while let Some(target) = gates.get(next.fetch_add(1, Ordering::Relaxed)) {
                    let answer = Answer { action: "answer".into(), reply: Reply::Text("yes".into()) };
                    let by = AnsweredBy::Person { principal: None };
                    store.answer_gate(Claim { target: target.clone(), answer, key: None, by }).await?;
                }
                Ok::<_, BenchError>(())
            })
        })
        .collect();
    for worker in workers {
        worker.await??;
    }
    let rate = gates.len() as f64 / started.elapsed().as_secs_f64();
    for store in &stores {
        store.shutdown().await;
    }
    for task in tasks {
        let _ = task.await;
    }
    Ok(rate)
}

/// Opens `count` free-text gates, 500 a session, straight through the store, 64 at a time (so
/// they share commits).
async fn open_gates(store: &Store, count: usize) -> Result<Vec<Answering>, BenchError> {
    use futures_util::{StreamExt, TryStreamExt};
    let sessions: Vec<SessionId> =
        (0..count.div_ceil(500)).map(|_| SessionId::from_uuid(uuid::Uuid::new_v4()).expect("not nil")).collect();
    futures_util::stream::iter(0..count)
        .map(|n| {
            let session = sessions[n / 500];
            async move {
                let (loop_id, tool) = (uuid::Uuid::new_v4().to_string(), uuid::Uuid::new_v4().to_string());
                let body = json!({"loop_id": loop_id, "tool_execution_id": tool, "question": "Claim?"});
                let ask = serde_json::from_value::<OpenGateIn>(body)?
                    .validate(OpenRules::default())
                    .map_err(|e| BenchError(format!("a bench question was refused: {e:?}")))?;
                match store.open_gate(session, ask, 1000).await? {
                    OpenOutcome::Created(view) => Ok(GateRecord { view, idempotency: None, secret: None }.answering()?),
                    other => Err(BenchError(format!("opening a bench gate: {other:?}"))),
                }
            }
        })
        .buffer_unordered(64)
        .try_collect()
        .await
}
