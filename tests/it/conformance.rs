//! The contract cannot drift: `openapi.yaml` documents exactly the router's routes and stays
//! self-consistent (every response of every test is also checked against it, in `helpers`), and
//! journal events validate against the harness's own wire schemas.

use std::collections::BTreeSet;

use serde::Deserialize;
use serde::de::{IgnoredAny, MapAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::{Value, json};

use crate::contract;
use crate::helpers::{TestApp, ask, gate_id, uuid};

#[test]
fn openapi_documents_exactly_the_routes_the_router_serves_and_who_may_call_them() {
    let served: BTreeSet<(String, String, String)> = gatehouse::http::route_table()
        .into_iter()
        .map(|(m, p, access)| (m.to_string(), p.to_owned(), access.names().join(",")))
        .collect();
    let documented = contract::documented_operations();
    let undocumented: Vec<_> = served.difference(&documented).collect();
    let unserved: Vec<_> = documented.difference(&served).collect();
    assert!(
        undocumented.is_empty() && unserved.is_empty(),
        "served but not documented: {undocumented:?}; documented but not served: {unserved:?}"
    );
}

#[test]
fn openapi_is_self_consistent() {
    contract::self_check();
}

#[test]
fn the_harness_validator_can_fail() {
    // Guards against a validator that accepts everything.
    let fixture: Value = serde_json::from_str(include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/harness-wire/fixtures/journal_page.json"
    )))
    .unwrap();
    contract::assert_harness("event_journal_page.schema.json", &fixture);
    let mut broken = fixture.clone();
    broken["events"][0]["event"]["session_id"] = json!("not-a-uuid");
    let refused = std::panic::catch_unwind(|| contract::assert_harness("event_journal_page.schema.json", &broken));
    assert!(refused.is_err(), "a bad session id must fail the harness schema");
}

#[tokio::test]
async fn journal_pages_and_enduring_payloads_match_the_harness_schemas() {
    let app = TestApp::spawn().await;
    let session = uuid();
    let mut with_ids = ask(&uuid(), &uuid(), "Conformance?");
    with_ids["turn_id"] = json!(uuid());
    with_ids["step_id"] = json!(uuid());
    with_ids["choices"] = json!(["a", "b"]);
    let answered = gate_id(&app.open(&session, &with_ids).await);
    let closed = gate_id(&app.open(&session, &ask(&uuid(), &uuid(), "Close me")).await);
    app.answer(&session, &answered, "a").await.expect(202);
    app.send(reqwest::Method::POST, &format!("/v1/sessions/{session}/gates/{closed}/close"), &[], None)
        .await
        .expect(200);

    for path in [format!("/v1/sessions/{session}/journal"), "/v1/journal?limit=2".to_owned()] {
        let page = app.get(&path).await.expect(200).json();
        contract::assert_harness("event_journal_page.schema.json", &page);
    }
    let events = app.journal().await;
    let types: BTreeSet<&str> = events.iter().map(|e| e["event"]["type"].as_str().unwrap()).collect();
    assert_eq!(types, BTreeSet::from(["GateOpened", "UserInputRequested", "GateResolved"]));
    for entry in &events {
        // As it will travel in an SSE `event: enduring` frame.
        contract::assert_harness("enduring_frame.schema.json", &json!({"v": 1, "event": entry["event"]}));
        contract::assert_harness("status_event.schema.json", entry);
    }
    // Top-level members come out sorted on the wire, as the harness emits them (read from the raw
    // bytes: a parsed `Value` would sort them by itself).
    let raw = app.get("/v1/journal?limit=1000").await.expect(200);
    let page: RawPage = serde_json::from_slice(&raw.body).unwrap();
    assert_eq!(page.events.len(), events.len());
    for entry in page.events {
        let KeyOrder(keys) = serde_json::from_str(entry.event.get()).unwrap();
        let mut sorted = keys.clone();
        sorted.sort();
        assert_eq!(keys, sorted);
    }
    let err = app.get(&format!("/v1/gates/{}", uuid())).await.expect_error(404, "gate_not_found");
    contract::assert_harness("error_response.schema.json", &err);
}

#[derive(Deserialize)]
struct RawPage {
    events: Vec<RawEntry>,
}

#[derive(Deserialize)]
struct RawEntry {
    event: Box<RawValue>,
}

/// The keys of a JSON object in the order they appear.
struct KeyOrder(Vec<String>);

impl<'de> Deserialize<'de> for KeyOrder {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Keys;
        impl<'de> Visitor<'de> for Keys {
            type Value = KeyOrder;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<KeyOrder, A::Error> {
                let mut keys = Vec::new();
                while let Some(key) = map.next_key::<String>()? {
                    map.next_value::<IgnoredAny>()?;
                    keys.push(key);
                }
                Ok(KeyOrder(keys))
            }
        }
        d.deserialize_map(Keys)
    }
}
