"""Form and open-URL gates through the Python client against the real binary: form() with a JSON
Schema and with harness fields, answered, declined, timed out into cancel by the policy, withdrawn,
refused at open; open_url() whose URL only the answer side reads; who answered; and an async call
that is cancelled withdrawing its gate."""

from __future__ import annotations

import asyncio
import threading
import uuid
from typing import Any, Callable, Dict

import pytest

from conftest import Server, eventually
from gatehouse import AsyncClient, Client, FormResult, InvalidRequest, OpenUrlResult, Withdrawn

SCHEMA = {
    "type": "object",
    "properties": {
        "target": {"type": "string", "title": "Target", "enum": ["staging", "prod"]},
        "replicas": {"type": "integer", "minimum": 1, "maximum": 10},
        "notify": {"type": "string", "format": "email"},
    },
    "required": ["target", "replicas"],
}
FIELDS = {
    "fields": [
        {"name": "environment", "label": "Environment", "kind": "select", "required": True,
         "options": [{"value": "prod", "label": "Production"}, {"value": "staging", "label": "Staging"}]},
        {"name": "confirm", "kind": "confirm"},
    ]
}


def running(call: Callable[[], Any]) -> Dict[str, Any]:
    """Runs `call` in a thread; the dict gets its `result` or `error`."""
    outcome: Dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["result"] = call()
        except Exception as e:  # noqa: BLE001 - the test looks at it
            outcome["error"] = e

    outcome["thread"] = threading.Thread(target=run, daemon=True)
    outcome["thread"].start()
    return outcome


def finished(outcome: Dict[str, Any], within: float = 15) -> Any:
    outcome["thread"].join(within)
    assert not outcome["thread"].is_alive(), "the call returned"
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]


def one_open_gate(client: Client, session: str) -> Dict[str, Any]:
    return eventually("the gate opens", lambda: (client.gates(session=session) or [None])[0])


def post(server: Server, gate: Dict[str, Any], body: Dict[str, Any], token: str = "") -> Any:
    with server.http(token or None) as http:
        return http.post(f"/v1/sessions/{gate['session_id']}/gates/{gate['gate']['id']}", json=body)


def test_a_json_schema_form_returns_the_typed_values_submitted(server: Server) -> None:
    session = str(uuid.uuid4())
    with Client(server.url) as agent, Client(server.url) as person:
        outcome = running(lambda: agent.form(SCHEMA, "Where should it go?", title="Deploy", session=session))
        gate = one_open_gate(person, session)
        assert gate["gate"]["kind"] == "harness.form" and gate["gate"]["resolver"] == "session"
        assert "loop_id" not in gate
        prompt = gate["gate"]["prompt"]
        assert prompt["title"] == "Deploy" and prompt["body"] == "Where should it go?"
        assert [(f["name"], f["kind"]) for f in prompt["schema"]["fields"]] == [
            ("target", "select"), ("replicas", "integer"), ("notify", "email"),
        ]
        # Values that break the schema are refused, and the gate stays open.
        refused = post(server, gate, {"action": "accept", "values": {"target": "moon", "replicas": 3}})
        assert refused.status_code == 400 and refused.json()["error"]["code"] == "gate_values_invalid"
        assert [f["path"] for f in refused.json()["error"]["fields"]] == ["/values/target"]
        assert outcome["thread"].is_alive()
        assert post(server, gate, {"action": "accept", "values": {"target": "prod", "replicas": 3.0}}).status_code == 202
        result = finished(outcome)
    assert isinstance(result, FormResult)
    assert (result.action, result.values, result.source, result.gate_id) == (
        "accept", {"target": "prod", "replicas": 3}, "user", gate["gate"]["id"],
    )
    assert result.view["state"] == "resolved"


def test_harness_fields_are_sent_as_they_are_and_a_decline_has_no_values(server: Server) -> None:
    session = str(uuid.uuid4())
    with Client(server.url) as agent, Client(server.url) as person:
        outcome = running(lambda: agent.form(FIELDS, "Which environment?", session=session))
        gate = one_open_gate(person, session)
        fields = gate["gate"]["prompt"]["schema"]["fields"]
        assert [(f["name"], f["kind"]) for f in fields] == [("environment", "select"), ("confirm", "confirm")]
        assert fields[0]["options"][0] == {"value": "prod", "label": "Production"}
        assert post(server, gate, {"action": "decline", "values": {"environment": "prod"}}).status_code == 202
        result = finished(outcome)
    assert (result.action, result.values, result.source) == ("decline", None, "user")


def test_who_answered_comes_back(tokens_server: Server) -> None:
    session = str(uuid.uuid4())
    with Client(tokens_server.url, token="admin-secret-0123456789") as agent:
        outcome = running(lambda: agent.form(FIELDS, "Which environment?", session=session))
        gate = one_open_gate(agent, session)
        reply = post(tokens_server, gate, {"action": "accept", "values": {"environment": "staging", "confirm": True}},
                     token="responder-secret-0123456789")
        assert reply.status_code == 202, reply.text
        result = finished(outcome)
    assert (result.action, result.values, result.principal) == ("accept", {"environment": "staging", "confirm": True}, "alice")


AGENT, RESPONDER, ADMIN = "agent-secret-0123456789", "responder-secret-0123456789", "admin-secret-0123456789"
#: Bounds and formats, each broken by `BROKEN`.
CHECKED = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 3},
        "email": {"type": "string", "format": "email"},
        "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b", "c"]}, "minItems": 2},
        "day": {"type": "string", "format": "date"},
    },
}
BROKEN = {"name": "ab", "email": "ada.example.com", "tags": ["a"], "day": "2026-02-30"}


def test_field_codes_an_accept_of_nothing_and_who_reads_the_url(tokens_server: Server) -> None:
    session = str(uuid.uuid4())
    with Client(tokens_server.url, token=AGENT) as agent:
        outcome = running(lambda: agent.form(CHECKED, "Details?", session=session))
        gate = one_open_gate(agent, session)
        assert "loop_id" not in gate
        # Too short (characters or items) is out_of_range; a broken format is invalid.
        refused = post(tokens_server, gate, {"action": "accept", "values": BROKEN}, token=RESPONDER)
        assert refused.status_code == 400 and refused.json()["error"]["code"] == "gate_values_invalid"
        assert sorted((f["path"], f["code"]) for f in refused.json()["error"]["fields"]) == [
            ("/values/day", "invalid"), ("/values/email", "invalid"),
            ("/values/name", "out_of_range"), ("/values/tags", "out_of_range"),
        ]
        with tokens_server.http(RESPONDER) as http:
            no_url = http.get(f"/v1/sessions/{session}/gates/{gate['gate']['id']}/url")
        assert no_url.status_code == 404 and no_url.json()["error"]["code"] == "gate_not_found"
        # Nothing filled in (every field optional) is an accept of no values, not of none.
        assert post(tokens_server, gate, {"action": "accept", "values": {}}, token=RESPONDER).status_code == 202
        result = finished(outcome)
        assert (result.action, result.values, result.principal) == ("accept", {}, "alice")
        assert result.view["decision"]["values"] == {}

        url = "https://example.com/device?code=WXYZ-9876"
        outcome = running(lambda: agent.open_url(url, "Sign in.", session=session))
        gate = one_open_gate(agent, session)
        path = f"/v1/sessions/{session}/gates/{gate['gate']['id']}/url"
        with tokens_server.http() as anonymous, tokens_server.http(AGENT) as bot:
            assert anonymous.get(path).status_code == 401
            assert bot.get(path).status_code == 403
        for token in (RESPONDER, ADMIN):
            with tokens_server.http(token) as http:
                shown = http.get(path)
            assert (shown.status_code, shown.json()) == (200, {"url": url})
        # A decline's values are ignored.
        assert post(tokens_server, gate, {"action": "decline", "values": {"x": 1}}, token=RESPONDER).status_code == 202
        result = finished(outcome)
        assert (result.action, result.principal) == ("decline", "alice")
        assert "values" not in result.view["decision"]
        with tokens_server.http(RESPONDER) as http:
            gone = http.get(path)
        assert gone.status_code == 409 and gone.json()["error"]["code"] == "gate_not_ready"
        assert "WXYZ" not in gone.text


def test_at_the_timeout_the_policy_cancels_form_and_url_gates(server: Server) -> None:
    with Client(server.url) as client:
        result = client.form(SCHEMA, "Anyone?", timeout=1)
        assert (result.action, result.values, result.source, result.principal) == ("cancel", None, "policy", None)
        assert result.view["gate"]["response_policy"] == {
            "timeout": 1_000_000_000, "on_timeout": "respond", "response": {"action": "cancel"},
        }
        opened = client.open_url("https://example.com/device", "Sign in, anyone?", timeout=1)
        assert isinstance(opened, OpenUrlResult)
        assert (opened.action, opened.source) == ("cancel", "policy")


def test_a_withdrawn_form_raises_and_a_refused_schema_says_where(server: Server) -> None:
    session = str(uuid.uuid4())
    with Client(server.url) as agent, Client(server.url) as person:
        outcome = running(lambda: agent.form(SCHEMA, "Where to?", session=session))
        gate = one_open_gate(person, session)
        with server.http() as http:
            path = f"/v1/sessions/{session}/gates/{gate['gate']['id']}/close"
            assert http.post(path, json={"reason": "owner_closed"}).status_code == 200
        with pytest.raises(Withdrawn) as withdrawn:
            finished(outcome)
        assert "form was withdrawn (owner_closed)" in str(withdrawn.value)
        # A keyword gatehouse cannot enforce is refused at open, naming where.
        bad = {"type": "object", "properties": {"code": {"type": "string", "pattern": "^[A-Z]+$"}}}
        with pytest.raises(InvalidRequest) as refused:
            agent.form(bad, "A code?")
        assert refused.value.fields and "code" in refused.value.fields[0]["path"]
        assert person.gates(session=session) == []


def test_open_url_shows_the_url_only_to_the_answer_side(server: Server) -> None:
    url = "https://github.com/login/device?code=ABCD-1234"
    session = str(uuid.uuid4())
    with Client(server.url) as agent, Client(server.url) as person:
        outcome = running(
            lambda: agent.open_url(url, "Sign in, then confirm here.", title="Authorize GitHub",
                                   requires_completion=True, session=session)
        )
        gate = one_open_gate(person, session)
        assert gate["gate"]["kind"] == "harness.open_url"
        prompt = gate["gate"]["prompt"]
        assert (prompt["title"], prompt["body"], prompt["origin"]) == (
            "Authorize GitHub", "Sign in, then confirm here.", "https://github.com",
        )
        assert prompt["requires_completion"] is True
        assert "ABCD" not in str(gate)
        with server.http() as http:
            shown = http.get(f"/v1/sessions/{session}/gates/{gate['gate']['id']}/url")
        assert shown.json() == {"url": url}
        assert post(server, gate, {"action": "accept"}).status_code == 202
        result = finished(outcome)
    assert (result.action, result.source, result.gate_id) == ("accept", "user", gate["gate"]["id"])


def test_each_call_opens_a_new_gate_and_a_cancelled_async_call_withdraws_its_own(server: Server) -> None:
    session = str(uuid.uuid4())

    async def run() -> None:
        async with AsyncClient(server.url) as client:
            first = asyncio.ensure_future(client.form(FIELDS, "Which one?", session=session))
            second = asyncio.ensure_future(client.open_url("https://example.com/a", "Open it.", session=session))
            for _ in range(300):
                gates = await client.gates(session=session)
                if len(gates) == 2:
                    break
                await asyncio.sleep(0.05)
            assert sorted(g["gate"]["kind"] for g in gates) == ["harness.form", "harness.open_url"]
            first.cancel()
            with pytest.raises(asyncio.CancelledError):
                await first
            (closed,) = await client.gates("closed", session=session)
            assert closed["gate"]["kind"] == "harness.form" and closed["resolution"]["reason"] == "abandoned"
            (still,) = await client.gates(session=session)
            assert post(server, still, {"action": "decline"}).status_code == 202
            assert (await asyncio.wait_for(second, 15)).action == "decline"

    asyncio.run(run())
