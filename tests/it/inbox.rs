//! A loop's inbox: unacked commands, long-polls, idempotent acks.

use serde_json::json;

use crate::helpers::{TestApp, ask, bounded, gate_id, uuid};

#[tokio::test]
async fn acks_are_idempotent_and_acked_rows_are_kept() {
    let app = TestApp::spawn().await;
    let (session, loop_id) = (uuid(), uuid());
    let g1 = gate_id(&app.open(&session, &ask(&loop_id, &uuid(), "one")).await);
    let g2 = gate_id(&app.open(&session, &ask(&loop_id, &uuid(), "two")).await);
    app.answer(&session, &g1, "first").await.expect(202);
    app.answer(&session, &g2, "second").await.expect(202);

    let base = format!("/v1/sessions/{session}/loops/{loop_id}/commands");
    let page = app.get(&base).await.expect(200).json();
    let commands = page["commands"].as_array().unwrap();
    assert_eq!(commands.len(), 2);
    assert_eq!(commands[0]["command"]["answer"], "first");
    assert_eq!(commands[1]["command"]["answer"], "second");
    assert_eq!(page["next_after"], commands[1]["seq"]);
    let first_id = commands[0]["command"]["command_id"].as_str().unwrap().to_owned();
    let first_seq = commands[0]["seq"].as_i64().unwrap();

    // A cursor skips what was already seen; a limit pages.
    let after = app.get(&format!("{base}?after={first_seq}")).await.expect(200).json();
    assert_eq!(after["commands"].as_array().unwrap().len(), 1);
    let limited = app.get(&format!("{base}?limit=1")).await.expect(200).json();
    assert_eq!(limited["next_after"], first_seq);

    let ack = format!("{base}/{first_id}/ack");
    for _ in 0..2 {
        let resp = app.send(reqwest::Method::POST, &ack, &[], None).await.expect(204);
        assert!(resp.body.is_empty());
    }
    let unacked = app.inbox(&session, &loop_id).await;
    assert_eq!(unacked.len(), 1);
    assert_eq!(unacked[0]["command"]["answer"], "second");
    let all = app.get(&format!("{base}?include_acked=true")).await.expect(200).json();
    let all = all["commands"].as_array().unwrap();
    assert_eq!(all.len(), 2);
    assert!(all[0]["acked_at"].is_string());
    assert!(all[1].get("acked_at").is_none());

    // Acks are scoped to the inbox that holds the command.
    let elsewhere = format!("/v1/sessions/{session}/loops/{}/commands/{first_id}/ack", uuid());
    app.send(reqwest::Method::POST, &elsewhere, &[], None).await.expect_error(404, "not_found");
    let unknown = format!("{base}/{}/ack", uuid());
    app.send(reqwest::Method::POST, &unknown, &[], None).await.expect_error(404, "not_found");
    for bad in ["after=-1", "limit=0", "wait=61", "include_acked=maybe"] {
        app.get(&format!("{base}?{bad}")).await.expect_error(400, "invalid_parameter");
    }
    let empty = app.get(&format!("{base}?after=999")).await.expect(200).json();
    assert_eq!(empty, json!({"commands": [], "next_after": 999}));
}

#[tokio::test]
async fn an_inbox_long_poll_returns_when_its_command_commits() {
    let app = TestApp::spawn().await;
    let (session, loop_id, other_loop) = (uuid(), uuid(), uuid());
    let gate = gate_id(&app.open(&session, &ask(&loop_id, &uuid(), "Poll me")).await);
    let other = gate_id(&app.open(&session, &ask(&other_loop, &uuid(), "Not yours")).await);

    let poll = app.spawn_get(format!("/v1/sessions/{session}/loops/{loop_id}/commands?wait=60"));
    app.parked_on_inbox(&session, &loop_id, 1).await;
    // Another loop's command does not end this poll with an empty page.
    app.answer(&session, &other, "for the other loop").await.expect(202);
    app.answer(&session, &gate, "for this loop").await.expect(202);
    let page = bounded("inbox long-poll", poll).await.unwrap().expect(200).json();
    let commands = page["commands"].as_array().unwrap();
    assert_eq!(commands.len(), 1);
    assert_eq!(commands[0]["command"]["answer"], "for this loop");
}
