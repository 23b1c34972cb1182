"""Permission gates through the Python client against the real binary: approve_tool_call from the
agent's side, approve and deny from the person's, edits against the input's schema, denials by
a person and by the policy at the deadline, re-calls that find their gate, withdrawals, and who
decided."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from typing import Any, Dict

import pytest

from conftest import Server, eventually
from gatehouse import (
    AsyncClient,
    Client,
    Decision,
    GateConflict,
    InvalidRequest,
    ReaskConflict,
    Withdrawn,
)

SCHEMA = {
    "type": "object",
    "properties": {"command": {"type": "string"}, "timeout": {"type": "integer", "maximum": 600}},
    "required": ["command"],
    "additionalProperties": False,
}


def deciding(client: Client, *args: Any, **kwargs: Any) -> Dict[str, Any]:
    """Runs `client.approve_tool_call` in a thread; the dict gets its `decision` or `error`."""
    outcome: Dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["decision"] = client.approve_tool_call(*args, **kwargs)
        except Exception as e:  # noqa: BLE001 - the test looks at it
            outcome["error"] = e

    outcome["thread"] = threading.Thread(target=run, daemon=True)
    outcome["thread"].start()
    return outcome


def decided(outcome: Dict[str, Any], within: float = 15) -> Decision:
    outcome["thread"].join(within)
    assert not outcome["thread"].is_alive(), "approve_tool_call returned"
    assert "error" not in outcome, outcome["error"]
    return outcome["decision"]


def one_open_gate(client: Client, session: str) -> Dict[str, Any]:
    return eventually("the gate opens", lambda: (client.gates(session=session) or [None])[0])


def commands(server: Server, session: str, loop_id: str) -> list:
    with server.http() as http:
        path = f"/v1/sessions/{session}/loops/{loop_id}/commands?include_acked=true"
        return [c for c in http.get(path).json()["commands"]]


def test_approved_as_it_is_returns_the_original_input_and_acks_the_command(server: Server) -> None:
    session = str(uuid.uuid4())
    call = {"command": "git push origin main"}
    with Client(server.url) as agent, Client(server.url) as person:
        outcome = deciding(agent, "Bash", call, summary="git push origin main", risk="high", session=session)
        gate = one_open_gate(person, session)
        assert gate["gate"]["kind"] == "harness.permission"
        assert gate["gate"]["prompt"]["body"] == "git push origin main"
        assert gate["gate"]["tool_call"]["tool_input"] == call
        assert gate["gate"]["tool_call"]["risk"] == "high"
        assert [c["action"] for c in gate["gate"]["prompt"]["controls"]] == ["Approve", "Deny"]
        # Without a timeout the server's default policy applies: a denial after 5 minutes.
        assert gate["gate"]["response_policy"] == {
            "timeout": 300_000_000_000,
            "on_timeout": "respond",
            "response": {"action": "Deny"},
        }
        assert person.approve(gate["gate"]["id"]) > 0
        decision = decided(outcome)
        assert (decision.approved, decision.tool_input, decision.edited) == (True, call, False)
        assert (decision.reason, decision.principal, decision.by_policy) == (None, None, False)
        assert (decision.action, decision.gate_id) == ("Approve", gate["gate"]["id"])
        assert decision.view["state"] == "resolved"
        # The loop's command was acknowledged by approve_tool_call.
        (command,) = commands(server, session, gate["loop_id"])
        assert command["command"]["type"] == "ApproveToolCall" and command["acked_at"]
        # A second decision loses, and is told who won.
        with pytest.raises(GateConflict) as late:
            person.deny(gate["gate"]["id"], "too late")
        assert late.value.resolution["action"] == "Approve"


def test_an_edit_comes_back_exactly_and_one_breaking_the_schema_is_refused(server: Server) -> None:
    session = str(uuid.uuid4())
    call = {"command": "git push --force", "timeout": 30}
    with Client(server.url) as agent, Client(server.url) as person:
        outcome = deciding(agent, "Bash", call, schema=SCHEMA, editable=True, session=session)
        gate = one_open_gate(person, session)
        gate_id = gate["gate"]["id"]
        assert gate["gate"]["tool_call"]["editable"] is True
        assert gate["gate"]["tool_call"]["tool_input_schema"] == SCHEMA
        # An edit that breaks the schema: refused before anything is claimed, each place named.
        with pytest.raises(InvalidRequest) as refused:
            person.approve(gate_id, tool_input={"command": 5, "timeout": 9000})
        assert refused.value.status == 400 and refused.value.code == "gate_values_invalid"
        found = {(f["path"], f["code"]) for f in refused.value.fields}
        assert ("/values/tool_input/command", "type") in found, found
        assert ("/values/tool_input/timeout", "out_of_range") in found, found
        # ... and the gate stays open, its caller still waiting.
        (still,) = person.gates(session=session)
        assert still["gate"]["id"] == gate_id and still["state"] == "open"
        assert outcome["thread"].is_alive()
        edit = {"command": "git push --force-with-lease", "timeout": 30}
        person.approve(gate_id, tool_input=edit)
        decision = decided(outcome)
        assert (decision.approved, decision.edited, decision.tool_input) == (True, True, edit)
        (command,) = commands(server, session, gate["loop_id"])
        assert command["command"]["tool_input"] == edit and command["acked_at"]


def test_a_denial_is_returned_with_its_reason(server: Server) -> None:
    session = str(uuid.uuid4())
    call = {"command": "rm -rf build"}
    with Client(server.url) as agent, Client(server.url) as person:
        outcome = deciding(agent, "Bash", call, session=session)
        gate = one_open_gate(person, session)
        # Not editable: an edit is refused at /values/tool_input.
        with pytest.raises(InvalidRequest) as refused:
            person.approve(gate["gate"]["id"], tool_input={"command": "rm -rf /"})
        assert [(f["path"], f["code"]) for f in refused.value.fields] == [("/values/tool_input", "unknown_key")]
        person.deny(gate["gate"]["id"], "not the build directory of main")
        decision = decided(outcome)
        assert (decision.approved, decision.reason, decision.by_policy) == (False, "not the build directory of main", False)
        assert (decision.tool_input, decision.edited, decision.action) == (call, False, "Deny")
        (command,) = commands(server, session, gate["loop_id"])
        assert command["command"]["type"] == "DenyToolCall" and command["acked_at"]


def test_a_timeout_is_a_denial_by_the_policy(server: Server) -> None:
    session = str(uuid.uuid4())
    with Client(server.url) as agent:
        start = time.monotonic()
        decision = agent.approve_tool_call("Bash", {"command": "make deploy"}, timeout=1, session=session)
        assert time.monotonic() - start < 15
        assert (decision.approved, decision.by_policy, decision.principal, decision.reason) == (False, True, None, None)
        (gate,) = agent.gates(state="resolved", session=session)
        assert gate["gate"]["response_policy"] == {
            "timeout": 1_000_000_000,
            "on_timeout": "respond",
            "response": {"action": "Deny"},
        }
        assert gate["resolution"]["source"] == {"kind": "policy", "reason": "timeout"}


def test_the_same_ids_find_the_same_gate(server: Server) -> None:
    ids = {"session": str(uuid.uuid4()), "loop_id": str(uuid.uuid4()), "tool_execution_id": str(uuid.uuid4())}
    call = {"command": "terraform apply"}
    with Client(server.url) as agent, Client(server.url) as again, Client(server.url) as person:
        first = deciding(agent, "Bash", call, risk="critical", **ids)
        gate = one_open_gate(person, ids["session"])
        # The agent comes back (a retry, a restart of its process) with the same call and ids.
        second = deciding(again, "Bash", call, risk="critical", **ids)
        time.sleep(0.3)
        assert second["thread"].is_alive(), "the re-call waits on the same, still open gate"
        assert [g["gate"]["id"] for g in person.gates(state=None, session=ids["session"])] == [gate["gate"]["id"]]
        # The same ids asking something else are told so.
        with pytest.raises(ReaskConflict) as conflict:
            agent.approve_tool_call("Bash", {"command": "terraform destroy"}, risk="critical", **ids)
        assert conflict.value.gate["gate"]["id"] == gate["gate"]["id"]
        person.approve(gate["gate"]["id"])
        for outcome in (first, second):
            decision = decided(outcome)
            assert (decision.approved, decision.gate_id, decision.tool_input) == (True, gate["gate"]["id"], call)
        # Once decided, the same call returns the same decision: nothing is asked twice.
        assert agent.approve_tool_call("Bash", call, risk="critical", **ids).gate_id == gate["gate"]["id"]
        assert len(person.gates(state=None, session=ids["session"])) == 1


def test_a_withdrawn_gate_raises_withdrawn(server: Server) -> None:
    session = str(uuid.uuid4())
    with Client(server.url) as agent:
        outcome = deciding(agent, "Bash", {"command": "ls"}, session=session)
        gate = one_open_gate(agent, session)
        with server.http() as http:
            path = f"/v1/sessions/{session}/gates/{gate['gate']['id']}/close"
            assert http.post(path, json={"reason": "owner_closed"}).status_code == 200
        outcome["thread"].join(15)
        assert isinstance(outcome.get("error"), Withdrawn), outcome
        assert outcome["error"].view["resolution"]["reason"] == "owner_closed"
        assert "permission gate was withdrawn (owner_closed)" in str(outcome["error"])


def test_a_bad_request_names_its_fields(server: Server) -> None:
    with Client(server.url) as agent:
        with pytest.raises(InvalidRequest) as refused:
            agent.approve_tool_call("Bash", {"a": 1}, schema={"type": "nope"}, editable=True, risk="extreme")
        assert refused.value.code == "invalid_body"
        assert {f["path"] for f in refused.value.fields} == {"/tool_input_schema", "/risk"}
        with pytest.raises(InvalidRequest) as refused:
            agent.approve_tool_call("Bash", None, editable=True)
        assert [f["path"] for f in refused.value.fields] == ["/tool_input"]
        assert agent.gates(state=None) == []


def test_who_decided_and_approve_always(tokens_server: Server) -> None:
    session = str(uuid.uuid4())
    requirements = [
        "reads the workspace",
        {
            "kind": "command.execute",
            "match": "npm test",
            "description": "run npm test",
            "candidates": [{"kind": "command.execute", "match": "npm *", "description": "run npm"}],
        },
    ]
    with Client(tokens_server.url, token="admin-secret-0123456789") as agent, Client(
        tokens_server.url, token="responder-secret-0123456789"
    ) as alice:
        outcome = deciding(agent, "Bash", {"command": "npm test"}, requirements=requirements, session=session)
        gate = one_open_gate(alice, session)
        assert gate["gate"]["prompt"]["body"] == (
            "Bash\n\nCapabilities:\n- reads the workspace\n- run npm test\n\nApprove always saves:\n- run npm"
        )
        alice.approve(gate["gate"]["id"], always=True, idempotency_key="alice-approves-npm-test")
        # The same key again is the same approval, not a conflict.
        alice.approve(gate["gate"]["id"], always=True, idempotency_key="alice-approves-npm-test")
        decision = decided(outcome)
        assert (decision.approved, decision.action) == (True, "Approve always for this workspace")
        assert (decision.principal, decision.by_policy) == ("alice", False)


def test_the_async_client_decides_the_same_way(server: Server) -> None:
    async def main() -> Decision:
        session = str(uuid.uuid4())
        async with AsyncClient(server.url) as agent, AsyncClient(server.url) as person:
            waiting = asyncio.ensure_future(agent.approve_tool_call("Bash", {"command": "ls"}, session=session))
            for _ in range(300):
                gates = await person.gates(session=session)
                if gates:
                    break
                await asyncio.sleep(0.05)
            await person.deny(gates[0]["gate"]["id"], "not now")
            return await asyncio.wait_for(waiting, 15)

    decision = asyncio.run(main())
    assert (decision.approved, decision.reason, decision.tool_input) == (False, "not now", {"command": "ls"})


def test_acknowledge_looks_past_a_full_page_of_other_commands() -> None:
    """A loop that asked many times (one loop_id for a whole agent run) has more unacked commands
    than one page holds: the command of this gate is looked for page by page. The flow is free
    of I/O, so it is driven here with made-up responses."""
    from gatehouse._flows import Response, acknowledge

    inbox = "/v1/sessions/s/loops/l/commands"
    other = [{"seq": n, "command": {"gate_id": f"other-{n}", "command_id": f"c{n}"}} for n in range(1, 1001)]
    mine = [{"seq": 1001, "command": {"gate_id": "g", "command_id": "c1001"}}]
    flow = acknowledge("s", "l", "g")
    call = flow.send(None)
    assert (call.method, call.path) == ("GET", f"{inbox}?after=0&limit=1000")
    call = flow.send(Response(200, {"commands": other, "next_after": 1000}, {}))
    assert (call.method, call.path) == ("GET", f"{inbox}?after=1000&limit=1000")
    call = flow.send(Response(200, {"commands": mine, "next_after": 1001}, {}))
    assert (call.method, call.path) == ("POST", f"{inbox}/c1001/ack")
    with pytest.raises(StopIteration):
        flow.send(Response(200, {}, {}))
