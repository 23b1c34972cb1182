"""The Python client against the real binary: ask and answer from two sides, timeouts and
withdrawals, typed errors, listings, the journal iterator, and restarts of the server."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from typing import Any, Dict, List

import pytest

from conftest import Server, eventually
from gatehouse import (
    AsyncClient,
    Client,
    GateConflict,
    InvalidRequest,
    NotFound,
    TimedOut,
    Unauthorized,
    Unreachable,
    Withdrawn,
)


def asking(client: Client, *args: Any, **kwargs: Any) -> Dict[str, Any]:
    """Runs `client.ask` in a thread; the dict gets its `answer` or `error`."""
    outcome: Dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["answer"] = client.ask(*args, **kwargs)
        except Exception as e:  # noqa: BLE001 - the test looks at it
            outcome["error"] = e

    outcome["thread"] = threading.Thread(target=run, daemon=True)
    outcome["thread"].start()
    return outcome


def one_open_gate(client: Client, session: str) -> Dict[str, Any]:
    return eventually("the gate opens", lambda: (client.gates(session=session) or [None])[0])


def test_ask_blocks_until_a_person_answers_and_acks_its_command(server: Server) -> None:
    session = str(uuid.uuid4())
    with Client(server.url) as agent, Client(server.url) as person:
        outcome = asking(agent, "Deploy to prod?", ["yes", "no"], session=session)
        gate = one_open_gate(person, session)
        assert gate["gate"]["prompt"]["body"] == "Deploy to prod?"
        # Not a choice: refused before anything is claimed, and the gate stays open.
        with pytest.raises(InvalidRequest) as refused:
            person.answer(gate["gate"]["id"], "maybe")
        assert refused.value.code == "gate_values_invalid" and refused.value.fields
        seq = person.answer(gate["gate"]["id"], "yes")
        assert seq > 0
        outcome["thread"].join(15)
        assert outcome == {"thread": outcome["thread"], "answer": "yes"}
        # The loop's command was acknowledged by `ask`.
        with server.http() as http:
            inbox = http.get(f"/v1/sessions/{session}/loops/{gate['loop_id']}/commands?include_acked=true").json()
        assert [c["command"]["answer"] for c in inbox["commands"]] == ["yes"]
        assert inbox["commands"][0]["acked_at"]
        # A second answer loses, and is told who won.
        with pytest.raises(GateConflict) as late:
            person.answer(gate["gate"]["id"], "no")
        assert late.value.status == 409 and late.value.resolution["gate_id"] == gate["gate"]["id"]
        assert late.value.resolution["reason"] == "answered"
        with pytest.raises(NotFound):
            person.answer(str(uuid.uuid4()), "yes")


def test_a_timeout_answers_the_default_or_withdraws_the_gate(server: Server) -> None:
    with Client(server.url) as client:
        assert client.ask("Proceed?", ["yes", "no"], timeout=1, default="no") == "no"
        session = str(uuid.uuid4())
        with pytest.raises(TimedOut):
            client.ask("Anyone there?", timeout=1, session=session)
        (gate,) = client.gates(state="closed", session=session)
        assert gate["resolution"]["reason"] == "abandoned"


def test_a_withdrawn_gate_ends_the_ask(server: Server) -> None:
    session = str(uuid.uuid4())
    with Client(server.url) as agent:
        outcome = asking(agent, "Which region?", session=session)
        gate = one_open_gate(agent, session)
        with server.http() as http:
            path = f"/v1/sessions/{session}/gates/{gate['gate']['id']}/close"
            assert http.post(path, json={"reason": "owner_closed"}).status_code == 200
        outcome["thread"].join(15)
        assert isinstance(outcome["error"], Withdrawn)
        assert outcome["error"].view["resolution"]["reason"] == "owner_closed"


def test_ask_rides_out_a_restart_of_the_server(server: Server) -> None:
    session = str(uuid.uuid4())
    with Client(server.url) as agent, Client(server.url) as person:
        outcome = asking(agent, "Still there after a restart?", session=session)
        gate = one_open_gate(person, session)
        server.restart()
        person.answer(gate["gate"]["id"], "yes, still here")
        outcome["thread"].join(30)
        assert outcome.get("answer") == "yes, still here", outcome


def test_events_iterate_the_journal_and_resume_across_a_restart(server: Server) -> None:
    session = str(uuid.uuid4())
    seen: List[int] = []
    with Client(server.url) as client:
        client.ask("First?", timeout=1, default="a", session=session)
        events = client.events(after=0, session=session)
        for event in events:
            seen.append(event.seq)
            if event.type == "GateResolved":
                break
        assert [e for e in seen] == sorted(seen) and len(seen) == 3
        server.restart()
        client.ask("Second?", timeout=1, default="b", session=session)
        for event in events:
            seen.append(event.seq)
            if len(seen) == 6:
                break
        with server.http() as http:
            journal = http.get(f"/v1/sessions/{session}/journal").json()
        assert seen == [e["journal_seq"] for e in journal["events"]], "nothing skipped, nothing twice"


def test_the_async_client_asks_and_answers_the_same_way(server: Server) -> None:
    async def main() -> str:
        session = str(uuid.uuid4())
        async with AsyncClient(server.url) as agent, AsyncClient(server.url) as person:
            waiting = asyncio.ensure_future(agent.ask("Async?", ["yes", "no"], session=session))
            for _ in range(300):
                gates = await person.gates(session=session)
                if gates:
                    break
                await asyncio.sleep(0.05)
            await person.answer(gates[0]["gate"]["id"], "yes")
            answer = await asyncio.wait_for(waiting, 15)
            async for event in person.events(session=session):
                if event.type == "GateResolved":
                    assert event.event["gate_id"] == gates[0]["gate"]["id"]
                    break
            return answer

    assert asyncio.run(main()) == "yes"


def test_credentials_and_unreachable_servers_give_typed_errors(tokens_server: Server) -> None:
    with Client(tokens_server.url) as anonymous:
        with pytest.raises(Unauthorized) as refused:
            anonymous.gates()
        assert refused.value.status == 401 and "token" in str(refused.value)
    with Client(tokens_server.url, token="admin-secret-0123456789") as admin:
        assert admin.gates() == []
    with Client("http://127.0.0.1:9") as nowhere:
        start = time.monotonic()
        with pytest.raises(Unreachable):
            nowhere.gates()
        assert time.monotonic() - start < 30
