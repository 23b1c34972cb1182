//! Several `gatehouse serve` replicas on one PostgreSQL database (issue 16): one winner of a race
//! spread over them, answers reaching agents that wait on another replica, one journal that every
//! replica replays alike, deadlines and webhooks that survive the replica holding them, and
//! PostgreSQL itself crashing under a replica. PostgreSQL only: on SQLite each test says it is
//! skipped.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::{HeaderMap, StatusCode};
use serde_json::{Value, json};

use crate::database::{OwnCluster, on_postgres};
use crate::helpers::{
    Client, EventStream, ServerProcess, ask, bounded, eventually, gate_id, race_answers, temp_db, uuid,
};

fn skipped() -> bool {
    if !on_postgres() {
        eprintln!("skipped: several replicas need PostgreSQL (GATEHOUSE_TEST_DATABASE_URL)");
    }
    !on_postgres()
}

/// Three replicas on the database standing for `db`, with room for a thousand connections from
/// this one test address.
fn three_replicas(db: &std::path::Path, extra: &[&str]) -> Vec<ServerProcess> {
    let mut flags = vec!["--max-unauthenticated-per-address", "4096"];
    flags.extend(extra);
    (0..3).map(|_| ServerProcess::start_with(db, "127.0.0.1:0", &flags)).collect()
}

/// Three replicas on a fresh database that lives as long as the returned `TempDir`, or `None`
/// (the test is skipped) without PostgreSQL.
fn three_fresh_replicas() -> Option<(tempfile::TempDir, Vec<ServerProcess>)> {
    if skipped() {
        return None;
    }
    let (dir, db) = temp_db();
    let replicas = three_replicas(&db, &[]);
    Some((dir, replicas))
}

/// How many times `gate` was resolved in the journal as `replica` reads it.
async fn resolutions_of(replica: &ServerProcess, gate: &str) -> usize {
    replica
        .journal_all()
        .await
        .into_iter()
        .filter(|e| e["event"]["type"] == "GateResolved" && e["event"]["gate_id"] == gate)
        .count()
}

#[tokio::test]
async fn a_thousand_answers_spread_over_three_replicas_have_one_winner() {
    let Some((_dir, replicas)) = three_fresh_replicas() else {
        return;
    };
    let (session, loop_id, gate) = replicas[0].open_asking("Who wins?").await;
    let path = format!("/v1/sessions/{session}/gates/{gate}");
    let clients: Vec<Client> = replicas.iter().map(|r| r.client.clone()).collect();
    let winner = race_answers(
        &clients,
        &path,
        1000,
        |i| json!({"action": "answer", "values": {"answer": format!("racer {i}")}}),
    )
    .await;

    for replica in &replicas {
        let view = replica.view(&session, &gate).await;
        assert_eq!(view["answer"], format!("racer {winner}"), "every replica reads the winner");
        assert_eq!(resolutions_of(replica, &gate).await, 1);
    }
    let inbox = replicas[2].inbox_all(&session, &loop_id).await;
    assert_eq!(inbox.len(), 1, "one command");
    assert_eq!(inbox[0]["command"]["answer"], format!("racer {winner}"));
}

#[tokio::test]
async fn a_thousand_decisions_on_one_permission_gate_over_three_replicas_have_one_winner() {
    let Some((_dir, replicas)) = three_fresh_replicas() else {
        return;
    };
    let (session, loop_id) = (uuid(), uuid());
    let body = crate::permissions::request(&loop_id, &uuid());
    let gate = gate_id(&replicas[0].open(&session, &body).await);
    let path = format!("/v1/sessions/{session}/gates/{gate}");
    let clients: Vec<Client> = replicas.iter().map(|r| r.client.clone()).collect();
    let winner = race_answers(&clients, &path, 1000, crate::permissions::racer).await;
    for replica in &replicas {
        assert_eq!(resolutions_of(replica, &gate).await, 1);
    }
    let inbox = replicas[1].inbox_all(&session, &loop_id).await;
    assert_eq!(inbox.len(), 1, "one command");
    crate::permissions::check_winner(winner, &replicas[2].view(&session, &gate).await, &inbox[0]["command"]);
}

#[tokio::test]
async fn a_host_owned_form_answered_on_one_replica_wakes_its_host_waiting_on_another() {
    let Some((_dir, replicas)) = three_fresh_replicas() else {
        return;
    };
    let session = uuid();
    let body = json!({"kind": "harness.form", "body": "Which region?",
                      "schema": {"fields": [{"name": "region", "kind": "select", "required": true,
                                             "options": [{"value": "eu"}, {"value": "us"}]}]}});
    let gate = gate_id(&replicas[0].open(&session, &body).await);
    let path = format!("/v1/sessions/{session}/gates/{gate}");
    let waited = replicas[1].spawn_get(format!("{path}/wait?timeout=30"));
    tokio::time::sleep(Duration::from_millis(200)).await;
    replicas[2].post(&path, &json!({"action": "accept", "values": {"region": "us"}})).await.expect(202);
    let view = bounded("the host's wait on another replica", waited).await.unwrap().expect(200).json();
    assert_eq!((&view["state"], &view["decision"]["values"]), (&json!("resolved"), &json!({"region": "us"})));
    // The race, over the three replicas: one winner, told to every loser.
    let other = gate_id(&replicas[0].open(&session, &body).await);
    let clients: Vec<Client> = replicas.iter().map(|r| r.client.clone()).collect();
    race_answers(&clients, &format!("/v1/sessions/{session}/gates/{other}"), 300, |i| {
        let region = ["eu", "us"][i % 2];
        json!({"action": "accept", "values": {"region": region}})
    })
    .await;
    for replica in &replicas {
        assert_eq!(resolutions_of(replica, &other).await, 1);
    }
}

#[tokio::test]
async fn an_answer_on_one_replica_reaches_agents_waiting_on_another_and_every_replica_replays_one_journal() {
    let Some((_dir, replicas)) = three_fresh_replicas() else {
        return;
    };
    let clients: Vec<Client> = replicas.iter().map(|r| r.client.clone()).collect();
    // On each replica an agent opens a gate; it waits on the next replica (inbox long-poll,
    // inbox stream, gate long-poll); a person answers on the one after.
    for i in 0..3 {
        let (opener, waiter, answerer) = (&clients[i], &clients[(i + 1) % 3], &clients[(i + 2) % 3]);
        let (session, loop_id, gate) = opener.open_asking(&format!("Opened on replica {i}?")).await;
        let inbox = waiter.spawn_get(format!("/v1/sessions/{session}/loops/{loop_id}/commands?wait=30"));
        let waited = waiter.spawn_get(format!("/v1/sessions/{session}/gates/{gate}/wait?timeout=30"));
        let commands = format!("/v1/sessions/{session}/loops/{loop_id}/commands");
        let mut stream = EventStream::connect(waiter, &commands, &[("accept", "text/event-stream")]).await;
        // Parked on the waiter's replica before the answer (else the answer would merely be read).
        tokio::time::sleep(Duration::from_millis(200)).await;
        let answer = format!("answered on replica {}", (i + 2) % 3);
        answerer.answer(&session, &gate, &answer).await.expect(202);

        let page = bounded("the inbox long-poll", inbox).await.unwrap().expect(200).json();
        assert_eq!(page["commands"][0]["command"]["answer"], answer.as_str(), "{page}");
        assert_eq!(page["commands"][0]["command"]["gate_id"], gate.as_str());
        let view = bounded("the gate long-poll", waited).await.unwrap().expect(200).json();
        assert_eq!((view["state"].as_str(), view["answer"].as_str()), (Some("resolved"), Some(answer.as_str())));
        let mut frame = stream.next().await;
        while frame.event.is_none() {
            frame = stream.next().await; // `retry:` and pings
        }
        assert_eq!(frame.event.as_deref(), Some("command"));
        assert_eq!(frame.to_json()["data"]["command"]["answer"], answer.as_str());
    }

    // One journal: every replica's stream from 0 replays exactly what every replica pages.
    let journal = clients[0].journal_all().await;
    let head = journal.last().unwrap()["journal_seq"].as_i64().unwrap();
    for client in &clients {
        assert_eq!(client.journal_all().await, journal);
        let mut stream = EventStream::connect(client, "/v1/events?after=0", &[]).await;
        let replay: Vec<Value> = stream
            .enduring_until(head)
            .await
            .into_iter()
            .map(|(seq, event)| json!({"journal_seq": seq, "event": event}))
            .collect();
        assert_eq!(replay, journal, "a replay from 0 on {} equals the journal", client.base);
    }
}

#[tokio::test]
async fn a_deadline_is_kept_by_another_replica_when_its_own_dies() {
    let Some((_dir, mut replicas)) = three_fresh_replicas() else {
        return;
    };
    let (session, loop_id) = (uuid(), uuid());
    let mut body = ask(&loop_id, &uuid(), "Deploy at the deadline?");
    body["choices"] = json!(["yes", "no"]);
    body["response_policy"] = json!({"timeout": 1_500_000_000u64, "on_timeout": "respond", "response": {"action": "answer", "values": {"answer": "no"}}});
    let gate = gate_id(&replicas[0].open(&session, &body).await);
    // The replica that saw the open commit dies; the others learned of the deadline from the
    // journal.
    replicas.remove(0).kill();
    let view =
        bounded("the deadline", replicas[0].get(&format!("/v1/sessions/{session}/gates/{gate}/wait?timeout=30")))
            .await
            .expect(200)
            .json();
    assert_eq!((view["state"].as_str(), view["answer"].as_str()), (Some("resolved"), Some("no")), "{view}");
    assert_eq!(view["resolution"]["reason"], "policy_response");
    // Both survivors held the deadline: it fired once.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(resolutions_of(&replicas[1], &gate).await, 1);
    assert_eq!(replicas[1].inbox_all(&session, &loop_id).await.len(), 1);
}

/// A webhook receiver that records the journal seq of every request, in arrival order.
#[derive(Clone, Default)]
struct Seqs(Arc<Mutex<Vec<i64>>>);

impl Seqs {
    async fn start(self) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        let app = axum::Router::new().route(
            "/hook",
            axum::routing::post(
                |axum::extract::State(seqs): axum::extract::State<Seqs>, _: HeaderMap, body: String| async move {
                    let body: Value = serde_json::from_str(&body).unwrap();
                    seqs.0.lock().unwrap().push(body["journal_seq"].as_i64().unwrap());
                    StatusCode::OK
                },
            ),
        );
        let app = app.with_state(self);
        tokio::spawn(async move { axum::serve(listener, app).await });
        url
    }

    fn got(&self) -> Vec<i64> {
        self.0.lock().unwrap().clone()
    }
}

#[tokio::test]
async fn one_replica_at_a_time_delivers_to_a_webhook_in_journal_order_and_another_takes_over() {
    if skipped() {
        return;
    }
    let (dir, db) = temp_db();
    let seqs = Seqs::default();
    let url = seqs.clone().start().await;
    let secret = dir.path().join("webhook.secret");
    std::fs::write(&secret, "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD\n").unwrap();
    let secret = secret.display().to_string();
    let flags = ["--webhook-url", &url, "--webhook-secret-file", &secret, "--webhook-allow-cidr", "127.0.0.1/32"];
    let mut replicas = three_replicas(&db, &flags);
    for (i, replica) in replicas.iter().enumerate() {
        replica.open(&uuid(), &ask(&uuid(), &uuid(), &format!("Notify from replica {i}?"))).await;
    }
    eventually("six events delivered", async || seqs.got().len() >= 6).await;
    // Which replica holds the endpoint: the one whose log says it delivers.
    let holder = replicas
        .iter()
        .position(|r| r.log_lines().iter().any(|l| l.contains("this replica delivers to the webhook endpoint")))
        .expect("a replica holds the lease");
    replicas.remove(holder).kill();
    for replica in &replicas {
        replica.open(&uuid(), &ask(&uuid(), &uuid(), "After the holder died?")).await;
    }
    // Another replica takes the endpoint over once the lease (2 s in tests) ran out.
    eventually("the events after the kill are delivered", async || seqs.got().len() >= 10).await;
    let got = seqs.got();
    // First deliveries in journal order, every event; a takeover may resend the one in flight.
    let mut first = Vec::new();
    for seq in &got {
        if !first.contains(seq) {
            first.push(*seq);
        }
    }
    assert_eq!(first, (1..=10).collect::<Vec<i64>>(), "every event once, in journal order: {got:?}");
    let resent: HashMap<i64, usize> = got.iter().fold(HashMap::new(), |mut n, s| {
        *n.entry(*s).or_default() += 1;
        n
    });
    assert!(resent.values().filter(|n| **n > 1).count() <= 1, "at most the request in flight again: {got:?}");
}

#[tokio::test]
async fn while_postgresql_is_down_writes_get_503_and_nothing_acknowledged_is_lost() {
    let Some(cluster) = OwnCluster::start() else {
        eprintln!("skipped: PostgreSQL of its own needs GATEHOUSE_TEST_DATABASE_URL");
        return;
    };
    let (_dir, db) = temp_db();
    let mut args = vec!["--bind".to_owned(), "127.0.0.1:0".to_owned()];
    args.extend(cluster.flags(&db));
    let server = ServerProcess::serve(&args, &[]);
    let (session, loop_id) = (uuid(), uuid());
    let answered = gate_id(&server.open(&session, &ask(&loop_id, &uuid(), "Answered before the crash?")).await);
    server.answer(&session, &answered, "before").await.expect(202);
    let open = gate_id(&server.open(&session, &ask(&loop_id, &uuid(), "Open across the crash?")).await);

    cluster.crash();
    let path = format!("/v1/sessions/{session}/gates/{open}");
    let keyed = [("idempotency-key", "across-the-crash"), ("content-type", "application/json")];
    let body = serde_json::to_vec(&crate::helpers::answer("after")).unwrap();
    let refused = server.send(reqwest::Method::POST, &path, &keyed, Some(body.clone())).await;
    assert!([503].contains(&refused.status), "an answer with PostgreSQL down: {}", refused.status);
    let error = refused.json();
    assert_eq!(
        (error["error"]["code"].as_str(), error["error"]["retryable"].as_bool()),
        (Some("storage_unavailable"), Some(true))
    );
    server
        .post(&format!("/v1/sessions/{session}/gates"), &ask(&loop_id, &uuid(), "Opened while down?"))
        .await
        .expect_error(503, "storage_unavailable");
    eventually("/readyz says 503", async || server.get("/readyz").await.status == 503).await;

    cluster.start_again();
    eventually("/readyz says 200 again", async || server.get("/readyz").await.status == 200).await;
    // What was acknowledged is all there; the answer refused while down is retried once, with its key.
    assert_eq!(server.view(&session, &answered).await["answer"], "before");
    assert_eq!(server.view(&session, &open).await["state"], "open");
    let accepted = server.send(reqwest::Method::POST, &path, &keyed, Some(body.clone())).await.expect(202).json();
    let again = server.send(reqwest::Method::POST, &path, &keyed, Some(body)).await.expect(202).json();
    assert_eq!(accepted, again, "the same key, the same answer: the original 202");
    let answers: Vec<Value> =
        server.inbox_all(&session, &loop_id).await.into_iter().map(|e| e["command"]["answer"].clone()).collect();
    assert_eq!(answers, [json!("before"), json!("after")]);
    server.open(&session, &ask(&loop_id, &uuid(), "Opened after the restart?")).await;
}
