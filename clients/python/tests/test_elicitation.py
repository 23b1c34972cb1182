"""MCP elicitation answered through gatehouse: a real MCP server on the official Python SDK
(elicitation_server.py, over stdio) elicits from a client whose ``elicitation_callback`` is
``gatehouse.mcp_elicitation``'s, against the real gatehouse binary; a person answers the gate over
gatehouse's HTTP API. Form mode with every primitive kind, accepted (the server gets exactly the
values the person sent), declined, and timed out into cancel; URL mode, whose URL only the answer
side reads; both carried by 2026-07-28 ``input_required`` results too; a request the server gives
up on, whose gate is withdrawn; and a schema gatehouse refuses."""

from __future__ import annotations

import asyncio
import json
import sys
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator, Dict, Optional

import httpx
import pytest

from conftest import Server

mcp = pytest.importorskip("mcp")
from mcp import ClientSession, StdioServerParameters  # noqa: E402
from mcp.client.stdio import stdio_client  # noqa: E402

from gatehouse import AsyncClient  # noqa: E402
from gatehouse.mcp_elicitation import elicitation_callback  # noqa: E402

SERVER = StdioServerParameters(command=sys.executable, args=[str(Path(__file__).with_name("elicitation_server.py"))])
MESSAGE = "The deploy needs its details."
# Every step is bounded: a hung call fails the test instead of the run.
STEP = 20

#: What the person submits: one value of each kind of the server's form (`note` left out).
VALUES: Dict[str, Any] = {
    "name": "Ada Lovelace",
    "email": "ada@example.com",
    "day": "2026-12-03",
    "ratio": 0.25,
    "replicas": 3,
    "dry_run": True,
    "environment": "prod",
    "region": "eu",
    "features": ["logs", "traces"],
    "channels": ["chat"],
}


@asynccontextmanager
async def mcp_session(url: str, timeout: Optional[float] = None) -> AsyncIterator[ClientSession]:
    """The test MCP server over stdio, in a session whose elicitations become gates at `url`."""
    async with AsyncClient(url) as gatehouse:
        callback = elicitation_callback(gatehouse, timeout=timeout, title="Deploy")
        async with stdio_client(SERVER) as (read, write):
            async with ClientSession(read, write, elicitation_callback=callback) as session:
                await asyncio.wait_for(session.initialize(), STEP)
                yield session


async def open_gate(url: str, kind: str) -> Dict[str, Any]:
    """The one open gate of `kind`, once the callback has opened it."""
    async with httpx.AsyncClient(base_url=url, timeout=10) as http:
        for _ in range(400):
            gates = (await http.get(f"/v1/gates?state=open&kind={kind}")).json()["gates"]
            if gates:
                assert len(gates) == 1, gates
                return gates[0]
            await asyncio.sleep(0.05)
    raise AssertionError(f"no open {kind} gate appeared")


async def respond(url: str, gate: Dict[str, Any], body: Dict[str, Any]) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=10) as http:
        reply = await http.post(f"/v1/sessions/{gate['session_id']}/gates/{gate['gate']['id']}", json=body)
        assert reply.status_code == 202, reply.text


async def view_of(url: str, gate: Dict[str, Any]) -> Dict[str, Any]:
    async with httpx.AsyncClient(base_url=url, timeout=10) as http:
        return (await http.get(f"/v1/gates/{gate['gate']['id']}")).json()


def received(result: Any) -> Dict[str, Any]:
    """What the MCP server's tool says it received."""
    assert not result.is_error, result
    return json.loads(result.content[0].text)


def check_form_gate(gate: Dict[str, Any]) -> None:
    """The gate carries the elicitation: its message, its schema translated into fields."""
    assert gate["gate"]["kind"] == "harness.form" and gate["gate"]["resolver"] == "session"
    prompt = gate["gate"]["prompt"]
    assert prompt["title"] == "Deploy" and prompt["body"] == MESSAGE
    fields = {f["name"]: f for f in prompt["schema"]["fields"]}
    assert list(fields) == [*VALUES, "note"]
    kinds = {name: f["kind"] for name, f in fields.items()}
    assert kinds == {
        "name": "text",
        "email": "email",
        "day": "date",
        "ratio": "number",
        "replicas": "integer",
        "dry_run": "confirm",
        "environment": "select",
        "region": "select",
        "features": "multi_select",
        "channels": "multi_select",
        "note": "text",
    }
    assert fields["region"]["options"] == [{"value": "eu", "label": "Europe"}, {"value": "us", "label": "United States"}]
    assert fields["replicas"]["minimum"] == 1 and fields["replicas"]["maximum"] == 10
    assert fields["name"]["required"] and not fields["note"].get("required")
    assert [c["action"] for c in prompt["controls"]] == ["accept", "decline", "cancel"]


def test_an_accepted_form_reaches_the_server_with_exactly_the_values_sent(server: Server) -> None:
    async def run() -> None:
        async with mcp_session(server.url) as session:
            call = asyncio.create_task(session.call_tool("deploy", {}))
            gate = await open_gate(server.url, "harness.form")
            check_form_gate(gate)
            # Values the schema refuses are refused by gatehouse, and the gate stays open.
            async with httpx.AsyncClient(base_url=server.url, timeout=10) as http:
                path = f"/v1/sessions/{gate['session_id']}/gates/{gate['gate']['id']}"
                bad = {**VALUES, "replicas": 11, "email": "nobody"}
                reply = await http.post(path, json={"action": "accept", "values": bad})
            assert reply.status_code == 400 and reply.json()["error"]["code"] == "gate_values_invalid"
            paths = sorted(f["path"] for f in reply.json()["error"]["fields"])
            assert paths == ["/values/email", "/values/replicas"]
            assert not call.done()
            await respond(server.url, gate, {"action": "accept", "values": VALUES})
            assert received(await asyncio.wait_for(call, STEP)) == {"action": "accept", "data": VALUES}
            decision = (await view_of(server.url, gate))["decision"]
            assert decision["action"] == "accept" and decision["values"] == VALUES and decision["source"] == "user"

    asyncio.run(run())


def test_a_declined_form_is_declined_at_the_server(server: Server) -> None:
    async def run() -> None:
        async with mcp_session(server.url) as session:
            call = asyncio.create_task(session.call_tool("deploy", {}))
            gate = await open_gate(server.url, "harness.form")
            await respond(server.url, gate, {"action": "decline"})
            assert received(await asyncio.wait_for(call, STEP)) == {"action": "decline", "data": None}

    asyncio.run(run())


def test_a_form_nobody_answers_in_time_is_cancelled_by_the_policy(server: Server) -> None:
    async def run() -> None:
        async with mcp_session(server.url, timeout=1) as session:
            call = asyncio.create_task(session.call_tool("deploy", {}))
            gate = await open_gate(server.url, "harness.form")
            assert gate["gate"]["response_policy"] == {
                "timeout": 1_000_000_000,
                "on_timeout": "respond",
                "response": {"action": "cancel"},
            }
            assert received(await asyncio.wait_for(call, STEP)) == {"action": "cancel", "data": None}
            view = await view_of(server.url, gate)
            assert view["state"] == "resolved" and view["decision"]["action"] == "cancel"
            assert view["decision"]["source"] == "policy"

    asyncio.run(run())


def test_a_form_in_an_input_required_result_of_2026_07_28(server: Server) -> None:
    """`mcp.Client` at 2026-07-28: the server returns `input_required` with the elicitation
    embedded; the SDK hands it to the same callback and retries the call with the answer."""

    async def run() -> None:
        async with AsyncClient(server.url) as gatehouse:
            callback = elicitation_callback(gatehouse, title="Deploy")
            async with mcp.Client(SERVER, mode="2026-07-28", elicitation_callback=callback) as client:
                assert client.protocol_version == "2026-07-28"
                call = asyncio.create_task(client.call_tool("deploy_resolved", {}))
                gate = await open_gate(server.url, "harness.form")
                check_form_gate(gate)
                await respond(server.url, gate, {"action": "accept", "values": VALUES})
                assert received(await asyncio.wait_for(call, STEP)) == {"action": "accept", "data": VALUES}

    asyncio.run(run())


def test_url_mode_in_an_input_required_result_of_2026_07_28(server: Server) -> None:
    async def run() -> None:
        async with AsyncClient(server.url) as gatehouse:
            callback = elicitation_callback(gatehouse)
            async with mcp.Client(SERVER, mode="2026-07-28", elicitation_callback=callback) as client:
                call = asyncio.create_task(client.call_tool("sign_in_rounds", {}))
                gate = await open_gate(server.url, "harness.open_url")
                assert gate["gate"]["prompt"]["origin"] == "https://registry.example.com"
                await respond(server.url, gate, {"action": "decline"})
                assert received(await asyncio.wait_for(call, STEP)) == {"action": "decline", "state": "asked"}

    asyncio.run(run())


def test_url_mode_opens_a_url_gate_whose_url_only_the_answer_side_reads(server: Server) -> None:
    url = "https://registry.example.com/device?code=WXYZ-1234"

    async def run() -> None:
        async with mcp_session(server.url) as session:
            call = asyncio.create_task(session.call_tool("sign_in", {}))
            gate = await open_gate(server.url, "harness.open_url")
            assert gate["gate"]["prompt"]["body"] == "Sign in to the registry."
            assert gate["gate"]["prompt"]["origin"] == "https://registry.example.com"
            assert "WXYZ" not in json.dumps(gate)
            async with httpx.AsyncClient(base_url=server.url, timeout=10) as http:
                shown = await http.get(f"/v1/sessions/{gate['session_id']}/gates/{gate['gate']['id']}/url")
            assert shown.status_code == 200 and shown.json() == {"url": url}
            await respond(server.url, gate, {"action": "accept"})
            assert received(await asyncio.wait_for(call, STEP)) == {"action": "accept"}

    asyncio.run(run())


def test_a_request_the_server_gives_up_on_withdraws_its_gate(server: Server) -> None:
    async def run() -> None:
        async with mcp_session(server.url) as session:
            call = asyncio.create_task(session.call_tool("impatient", {"seconds": 1.5}))
            gate = await open_gate(server.url, "harness.form")
            assert received(await asyncio.wait_for(call, STEP)) == {"action": "gave up"}
            # The SDK cancelled its request; the callback's cancelled wait withdrew the gate.
            for _ in range(200):
                view = await view_of(server.url, gate)
                if view["state"] != "open":
                    break
                await asyncio.sleep(0.05)
            assert view["state"] == "closed" and view["resolution"]["reason"] == "abandoned"

    asyncio.run(run())


def test_a_schema_gatehouse_cannot_enforce_is_an_invalid_params_error(server: Server) -> None:
    async def run() -> None:
        async with mcp_session(server.url) as session:
            refused = received(await asyncio.wait_for(session.call_tool("strict", {}), STEP))
            assert refused["refused"] == mcp.types.INVALID_PARAMS
            assert refused["message"].startswith("gatehouse refused the elicitation")
            assert "pattern" in json.dumps(refused["data"]["fields"])
        async with httpx.AsyncClient(base_url=server.url, timeout=10) as http:
            assert (await http.get("/v1/gates?state=open")).json()["gates"] == []

    asyncio.run(run())
