//! Journal and inbox streams over real sockets: resume without gaps or duplicates, fan-out under
//! concurrent writers, session isolation, slow clients, heartbeats, resets and the stream cap.

use std::time::Duration;

use futures_util::future::join_all;
use serde_json::{Value, json};

use crate::helpers::{Client, EventStream, NET_TIMEOUT, SseFrame, StuckClient, TestApp, ask, bounded, gate_id, uuid};

/// Opens `gates` gates (two events each), one after another.
async fn open_gates(client: &Client, session: &str, gates: usize, question: &str) {
    for i in 0..gates {
        client.open(session, &ask(&uuid(), &uuid(), &format!("{question} {i}"))).await;
    }
}

async fn head(client: &Client) -> i64 {
    client.get("/v1/gates?limit=1").await.expect(200).json()["journal_seq"].as_i64().unwrap()
}

fn seqs(frames: &[(i64, Value)]) -> Vec<i64> {
    frames.iter().map(|(seq, _)| *seq).collect()
}

#[tokio::test]
async fn a_client_that_reconnects_gets_exactly_the_rest() {
    let app = TestApp::spawn().await;
    let session = uuid();
    let mut live = EventStream::connect(&app, "/v1/events", &[]).await;
    let writer = {
        let client = app.client.clone();
        let session = session.clone();
        tokio::spawn(async move { open_gates(&client, &session, 250, "Q").await })
    };
    // Read about a hundred, then drop the connection while the writer goes on.
    let first = live.enduring_until(100).await;
    assert_eq!(seqs(&first), (1..=100).collect::<Vec<_>>(), "live from the start, in order");
    drop(live);
    bounded("writer", writer).await.unwrap();
    let journal: Vec<i64> = app.journal().await.iter().map(|e| e["journal_seq"].as_i64().unwrap()).collect();
    assert_eq!(journal, (1..=500).collect::<Vec<_>>());

    let mut resumed = EventStream::connect(&app, "/v1/events", &[("last-event-id", "100")]).await;
    assert_eq!(seqs(&resumed.enduring_until(500).await), (101..=500).collect::<Vec<_>>());

    let mut by_query = EventStream::connect(&app, "/v1/events?after=250", &[]).await;
    let rest = by_query.enduring_until(500).await;
    assert_eq!(seqs(&rest), (251..=500).collect::<Vec<_>>());
    // The replayed payloads are the journal's events.
    let page = app.get("/v1/journal?from_journal_seq=251&limit=1").await.expect(200).json();
    assert_eq!(rest[0].1, page["events"][0]["event"]);

    // The header wins over ?after=, and new events still arrive live after a replay.
    let mut both = EventStream::connect(&app, "/v1/events?after=10", &[("last-event-id", "400")]).await;
    app.open(&session, &ask(&uuid(), &uuid(), "one more")).await;
    assert_eq!(seqs(&both.enduring_until(502).await), (401..=502).collect::<Vec<_>>());
}

#[tokio::test]
async fn twenty_readers_see_the_journal_while_ten_writers_commit() {
    let app = TestApp::spawn().await;
    let readers: Vec<EventStream> =
        join_all((0..20).map(|_| EventStream::connect(&app, "/v1/events?after=0", &[]))).await;
    let writers = (0..10).map(|_| {
        let client = app.client.clone();
        tokio::spawn(async move {
            let session = uuid();
            for i in 0..10 {
                let gate = gate_id(&client.open(&session, &ask(&uuid(), &uuid(), &format!("w{i}"))).await);
                client.answer(&session, &gate, "ok").await.expect(202);
            }
        })
    });
    for writer in join_all(writers).await {
        writer.unwrap();
    }
    let journal: Vec<i64> = app.journal().await.iter().map(|e| e["journal_seq"].as_i64().unwrap()).collect();
    assert_eq!(journal.len(), 300);
    let last = *journal.last().unwrap();
    let seen = join_all(readers.into_iter().map(|mut r| async move { seqs(&r.enduring_until(last).await) })).await;
    for reader in seen {
        assert_eq!(reader, journal, "every reader sees the journal's sequence, gap-free and in order");
    }
}

#[tokio::test]
async fn session_streams_show_only_their_session() {
    let app = TestApp::spawn().await;
    let (s1, s2) = (uuid(), uuid());
    let mut mine = EventStream::connect(&app, &format!("/v1/sessions/{s1}/events?after=0"), &[]).await;
    let mut filtered = EventStream::connect(&app, &format!("/v1/events?session_id={s2}&after=0"), &[]).await;
    let mut all = EventStream::connect(&app, "/v1/events?after=0", &[]).await;
    for i in 0..5 {
        open_gates(&app, if i % 2 == 0 { &s1 } else { &s2 }, 1, "interleaved").await;
    }
    let gate = gate_id(&app.open(&s1, &ask(&uuid(), &uuid(), "answer me")).await);
    app.answer(&s1, &gate, "done").await.expect(202);

    let journal = app.journal().await;
    let of = |session: &str| -> Vec<i64> {
        journal
            .iter()
            .filter(|e| e["event"]["session_id"] == session)
            .map(|e| e["journal_seq"].as_i64().unwrap())
            .collect()
    };
    let (want1, want2) = (of(&s1), of(&s2));
    let last = journal.last().unwrap()["journal_seq"].as_i64().unwrap();
    assert_eq!(seqs(&all.enduring_until(last).await).len(), journal.len(), "the global stream shows all");
    let got1 = mine.enduring_until(*want1.last().unwrap()).await;
    assert_eq!(seqs(&got1), want1);
    assert!(got1.iter().all(|(_, e)| e["session_id"] == s1.as_str()));
    let got2 = filtered.enduring_until(*want2.last().unwrap()).await;
    assert_eq!(seqs(&got2), want2);
}

#[tokio::test]
async fn headers_retry_heartbeats_and_reset() {
    let app = TestApp::spawn_with(|args| args.http.heartbeat = Duration::from_millis(200)).await;
    let session = uuid();
    open_gates(&app, &session, 1, "before").await; // seqs 1, 2

    let mut stream = EventStream::connect(&app, "/v1/events", &[("accept-encoding", "gzip, br")]).await;
    assert_eq!(stream.headers["cache-control"], "no-store");
    assert_eq!(stream.headers["x-accel-buffering"], "no");
    assert!(stream.headers.get("content-encoding").is_none(), "never compressed");
    assert_eq!(stream.next().await, SseFrame { retry: Some("3000".into()), ..Default::default() });
    assert_eq!(stream.next().await, SseFrame { comment: Some("ping".into()), ..Default::default() });

    let mut ahead = EventStream::connect(&app, "/v1/events", &[("last-event-id", "99")]).await;
    ahead.next().await; // retry
    let reset = ahead.next().await;
    assert_eq!(reset.event.as_deref(), Some("reset"));
    assert_eq!(reset.id, None, "a reset carries no id");
    assert_eq!(
        serde_json::from_str::<Value>(reset.data.as_deref().unwrap()).unwrap(),
        json!({"earliest": 1, "head": 2})
    );
    // The stream goes on live from the head.
    open_gates(&app, &session, 1, "after").await;
    assert_eq!(ahead.next_enduring().await.0, 3);
    assert_eq!(stream.next_enduring().await.0, 3, "no cursor: live from the moment of connecting");

    for bad in ["abc", "-1", "1.5"] {
        let resp = app.send(reqwest::Method::GET, "/v1/events", &[("last-event-id", bad)], None).await;
        resp.expect_error(400, "invalid_parameter");
    }
}

#[tokio::test]
async fn the_stream_cap_answers_503_and_frees_slots_on_disconnect() {
    let app = TestApp::spawn_with(|args| args.http.max_streams = Some(2)).await;
    let one = EventStream::connect(&app, "/v1/events", &[]).await;
    let _two = EventStream::connect(&app, "/v1/events", &[]).await;
    let refused = app.send(reqwest::Method::GET, "/v1/events", &[("accept", "text/event-stream")], None).await;
    let body = refused.expect_error(503, "gate_capacity");
    assert_eq!(body["error"]["retryable"], true);
    drop(one);
    // The slot comes back once the server notices the disconnect.
    let mut reopened = false;
    for _ in 0..100 {
        let resp = app.send(reqwest::Method::GET, "/v1/gates/00000000-0000-4000-8000-000000000000", &[], None).await;
        resp.expect_error(404, "gate_not_found");
        let probe = app.client.clone();
        if let Ok(Ok(r)) = tokio::time::timeout(Duration::from_secs(1), async move {
            reqwest::Client::builder().no_proxy().build().unwrap().get(format!("{}/v1/events", probe.base)).send().await
        })
        .await
            && r.status() == 200
        {
            reopened = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(reopened, "a slot was freed");
}

// Two threads: the reading client's task keeps taking chunks off its socket while the test checks
// frames, so only the client that stops reading stalls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_is_closed_and_resumes_from_its_cursor() {
    let app = TestApp::spawn_with(|args| args.http.stream_stall = Duration::from_secs(1)).await;
    let session = uuid();
    let slow = StuckClient::connect(&app.base, "/v1/events?after=0").await;
    let mut reader = EventStream::connect(&app, "/v1/events?after=0", &[]).await;
    // The reading client reads all along: one that waited for the writes to end could itself be
    // stalled for a second on a busy machine, and closed.
    let last = 400;
    let reading = tokio::spawn(async move { reader.enduring_until(last).await });

    // Big events: the slow client's window fills long before the last one.
    let question = "x".repeat(4000);
    let started = tokio::time::Instant::now();
    open_gates(&app, &session, 200, &question).await;
    assert_eq!(head(&app).await, last);
    let took = started.elapsed();
    // The reading client got everything, whatever the slow one does.
    assert_eq!(seqs(&bounded("the reader", reading).await.unwrap()), (1..=last).collect::<Vec<_>>());

    // Past the stall limit the server has closed the slow connection: reading now drains what was
    // buffered and then ends, instead of un-stalling the stream.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let got = slow.drain().await;
    let cut = *got.last().expect("some events before the stall");
    assert!(cut < last, "the slow client stalled (got up to {cut} of {last}; writes took {took:?})");
    assert_eq!(got, (1..=cut).collect::<Vec<_>>());

    let mut resumed = EventStream::connect(&app, "/v1/events", &[("last-event-id", &cut.to_string())]).await;
    assert_eq!(seqs(&resumed.enduring_until(last).await), (cut + 1..=last).collect::<Vec<_>>());
}

#[tokio::test]
async fn an_inbox_stream_delivers_commands_committed_before_and_after_it_opened() {
    let app = TestApp::spawn().await;
    let (session, loop_id) = (uuid(), uuid());
    let first = gate_id(&app.open(&session, &ask(&loop_id, &uuid(), "before")).await);
    let second = gate_id(&app.open(&session, &ask(&loop_id, &uuid(), "after")).await);
    app.answer(&session, &first, "committed before").await.expect(202);
    let stop = app.stop().await.expect("temp dir");

    // The loop (and the server) restarted; the stream opens with no cursor and still gets it.
    let db = stop.path().join("gatehouse.db");
    let app = TestApp::start(&db, |_| {}).await;
    let path = format!("/v1/sessions/{session}/loops/{loop_id}/commands");
    let mut stream = EventStream::connect(&app, &path, &[]).await;
    let command = |frame: SseFrame| -> (i64, Value) {
        assert_eq!(frame.event.as_deref(), Some("command"));
        let data: Value = serde_json::from_str(frame.data.as_deref().unwrap()).unwrap();
        let seq = frame.id.unwrap().parse::<i64>().unwrap();
        assert_eq!(data["seq"], seq);
        (seq, data["command"].clone())
    };
    assert!(stream.next().await.retry.is_some());
    let (seq1, cmd1) = command(stream.next().await);
    assert_eq!(cmd1["answer"], "committed before");

    app.answer(&session, &second, "committed live").await.expect(202);
    let (seq2, cmd2) = command(stream.next().await);
    assert_eq!(cmd2["answer"], "committed live");
    assert!(seq2 > seq1);

    // Acked rows are not streamed again; a cursor skips what was seen.
    let ack = format!("{path}/{}/ack", cmd1["command_id"].as_str().unwrap());
    app.send(reqwest::Method::POST, &ack, &[], None).await.expect(204);
    let mut again = EventStream::connect(&app, &path, &[]).await;
    again.next().await; // retry
    assert_eq!(command(again.next().await).0, seq2);
    let mut after = EventStream::connect(&app, &path, &[("last-event-id", &seq2.to_string())]).await;
    after.next().await; // retry
    assert!(after.next_within(Duration::from_millis(300)).await.is_err(), "nothing after the cursor");
    for bad in ["limit=0", "wait=61", "after=x"] {
        let resp =
            app.send(reqwest::Method::GET, &format!("{path}?{bad}"), &[("accept", "text/event-stream")], None).await;
        resp.expect_error(400, "invalid_parameter");
    }
    drop(stop);
}

#[tokio::test]
async fn streams_end_when_the_server_stops() {
    let app = TestApp::spawn().await;
    let mut streams = join_all((0..5).map(|_| EventStream::connect(&app, "/v1/events", &[]))).await;
    bounded("graceful stop with open streams", app.stop()).await;
    for stream in &mut streams {
        // Drain `retry:`; then the body ends.
        loop {
            match stream.next_within(NET_TIMEOUT).await.expect("ends in time") {
                None => break,
                Some(frame) => assert!(frame.retry.is_some() || frame.comment.is_some()),
            }
        }
    }
}

#[tokio::test]
async fn a_snapshot_then_a_stream_never_resets_under_writes() {
    let app = TestApp::spawn().await;
    let writing = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let writers: Vec<_> = (0..3)
        .map(|_| {
            let client = app.client.clone();
            let writing = writing.clone();
            tokio::spawn(async move {
                let session = uuid();
                while writing.load(std::sync::atomic::Ordering::Relaxed) {
                    client.open(&session, &ask(&uuid(), &uuid(), "busy")).await;
                }
            })
        })
        .collect();
    for _ in 0..100 {
        // What a page does: list, then stream from the listing's journal_seq.
        let listing = app.get("/v1/gates?limit=1").await.expect(200).json();
        let seq = listing["journal_seq"].as_i64().unwrap();
        let mut stream = EventStream::connect(&app, &format!("/v1/events?after={seq}"), &[]).await;
        assert!(stream.next().await.retry.is_some());
        let first = stream.next().await;
        assert_ne!(first.event.as_deref(), Some("reset"), "a listing's own journal_seq is never ahead: {first:?}");
        if let Some((next, _)) = first.enduring() {
            assert_eq!(next, seq + 1, "the stream continues right after the snapshot");
        }
    }
    writing.store(false, std::sync::atomic::Ordering::Relaxed);
    for writer in writers {
        writer.await.unwrap();
    }
}

#[tokio::test]
async fn streams_behind_the_ring_catch_up_from_the_database() {
    let app = TestApp::spawn().await;
    let (s1, s2) = (uuid(), uuid());
    for i in 0..300 {
        app.open(if i % 3 == 0 { &s2 } else { &s1 }, &ask(&uuid(), &uuid(), "history")).await;
    }
    // A restart empties the ring: everything before it is read from the database, in batches.
    let dir = app.stop().await.expect("temp dir");
    let app = TestApp::start(&dir.path().join("gatehouse.db"), |_| {}).await;
    let journal: Vec<i64> = app.journal_all().await.iter().map(|e| e["journal_seq"].as_i64().unwrap()).collect();
    let last = journal.last().copied().unwrap();
    let mut all = EventStream::connect(&app, "/v1/events?after=0", &[]).await;
    assert_eq!(seqs(&all.enduring_until(last).await), journal);
    let mut from_middle = EventStream::connect(&app, "/v1/events", &[("last-event-id", "123")]).await;
    assert_eq!(seqs(&from_middle.enduring_until(last).await), journal[123..].to_vec());

    let session = app.get(&format!("/v1/sessions/{s2}/journal?limit=1000")).await.expect(200).json();
    let want: Vec<i64> =
        session["events"].as_array().unwrap().iter().map(|e| e["journal_seq"].as_i64().unwrap()).collect();
    let mut mine = EventStream::connect(&app, &format!("/v1/sessions/{s2}/events?after=0"), &[]).await;
    assert_eq!(seqs(&mine.enduring_until(*want.last().unwrap()).await), want);
    // And then live, past the database part.
    app.open(&s2, &ask(&uuid(), &uuid(), "live")).await;
    assert_eq!(mine.next_enduring().await.0, last + 1);
    drop(dir);
}
