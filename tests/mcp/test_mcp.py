"""`gatehouse mcp` driven by the official MCP Python SDK over stdio, against a real gatehouse
server: the tools it lists, `ask_user` answered over HTTP while it waits (with progress), a
retried call that finds its gate again, a cancelled call that withdraws its gate, defaults and
timeouts, `approve_tool_call` and `permission_prompt` on real permission gates (approved, edited,
denied), `ask_form` on a real form gate (submitted, declined, timed out), and clear errors when the server is not there or refuses the token. The server fixtures come from the Python client's tests."""

from __future__ import annotations

import asyncio
import json
import re
import sys
import uuid
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator, Dict, List, Optional

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "clients" / "python" / "tests"))
from conftest import BINARY, Server, server, tokens_server  # noqa: E402,F401  (fixtures)

from mcp import ClientSession, StdioServerParameters  # noqa: E402
from mcp.client.stdio import stdio_client  # noqa: E402

# Every step is bounded: a hung call fails the test instead of the CI run.
STEP = 20


@asynccontextmanager
async def mcp_session(url: str, session: str, token: Optional[str] = None) -> AsyncIterator[ClientSession]:
    env = {"GATEHOUSE_URL": url, "RUST_LOG": "gatehouse=debug"}
    if token:
        env["GATEHOUSE_TOKEN"] = token
    params = StdioServerParameters(command=BINARY, args=["mcp", "--session", session], env=env)
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as client:
            await asyncio.wait_for(client.initialize(), STEP)
            yield client


async def open_gates(url: str, session: str, count: int = 1) -> List[Dict[str, Any]]:
    """Waits until `session` has `count` open gates (the tool opened them), and returns them."""
    async with httpx.AsyncClient(base_url=url, timeout=10) as http:
        for _ in range(400):
            gates = (await http.get(f"/v1/sessions/{session}/gates?state=open")).json()["gates"]
            if len(gates) >= count:
                return gates
            await asyncio.sleep(0.05)
    raise AssertionError(f"{count} open gates never appeared")


async def answer(url: str, session: str, gate: Dict[str, Any], text: str) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=10) as http:
        path = f"/v1/sessions/{session}/gates/{gate['gate']['id']}"
        reply = await http.post(path, json={"action": "answer", "values": {"answer": text}})
        assert reply.status_code == 202, reply.text


async def decide(url: str, gate: Dict[str, Any], action: str, values: Optional[Dict[str, Any]] = None) -> None:
    """Decides a permission gate over HTTP, as a person's client would."""
    body: Dict[str, Any] = {"action": action}
    if values is not None:
        body["values"] = values
    async with httpx.AsyncClient(base_url=url, timeout=10) as http:
        path = f"/v1/sessions/{gate['session_id']}/gates/{gate['gate']['id']}"
        reply = await http.post(path, json=body)
        assert reply.status_code == 202, reply.text


async def open_permission_gate(url: str, session: str) -> Dict[str, Any]:
    """The one open gate of `session`, which must be a real permission gate, as the listing by
    kind shows it."""
    (gate,) = await open_gates(url, session)
    async with httpx.AsyncClient(base_url=url, timeout=10) as http:
        listed = (await http.get("/v1/gates?kind=harness.permission&state=open&limit=1000")).json()["gates"]
    assert gate["gate"]["id"] in [g["gate"]["id"] for g in listed], "listed as harness.permission"
    assert gate["gate"]["kind"] == "harness.permission"
    return gate


def only_text(result: Any) -> str:
    """The text of a result that is exactly one text content."""
    assert len(result.content) == 1 and result.content[0].type == "text", result.content
    return result.content[0].text


def text_of(result: Any) -> str:
    return "".join(block.text for block in result.content if getattr(block, "type", "") == "text")


def run(coroutine: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coroutine, 120))


def test_ask_user_waits_for_the_answer_with_progress_and_a_retry_finds_the_same_gate(server: Server) -> None:
    session = str(uuid.uuid4())

    async def main() -> None:
        async with mcp_session(server.url, session) as client:
            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
            assert set(tools) == {"ask_user", "ask_form", "approve_tool_call", "permission_prompt"}
            assert "question" in tools["ask_user"].input_schema["properties"]
            assert set(tools["permission_prompt"].input_schema["properties"]) == {"tool_name", "input", "tool_use_id"}
            assert set(tools["approve_tool_call"].output_schema["properties"]) >= {
                "approved", "tool_input", "edited", "reason", "principal"
            }
            progress: List[str] = []

            async def on_progress(done: float, total: Optional[float], message: Optional[str]) -> None:
                progress.append(message or "")

            args = {"question": "Which database first?", "choices": ["postgres", "mysql"]}
            first = asyncio.ensure_future(client.call_tool("ask_user", args, progress_callback=on_progress))
            (gate,) = await open_gates(server.url, session)
            # The same call again while the first waits: the same gate, not a second one.
            again = asyncio.ensure_future(client.call_tool("ask_user", args))
            await asyncio.sleep(1)
            assert len(await open_gates(server.url, session)) == 1
            await answer(server.url, session, gate, "postgres")
            results = await asyncio.wait_for(asyncio.gather(first, again), STEP)
            assert [(r.is_error, text_of(r)) for r in results] == [(False, "postgres"), (False, "postgres")]
            assert progress and gate["gate"]["id"] in progress[0], progress
            # Asked again once the answer was taken: a new question, not the old answer.
            third = asyncio.ensure_future(client.call_tool("ask_user", args))
            (fresh,) = await open_gates(server.url, session)
            assert fresh["gate"]["id"] != gate["gate"]["id"]
            await answer(server.url, session, fresh, "mysql")
            assert text_of(await asyncio.wait_for(third, STEP)) == "mysql"

    run(main())


def test_a_call_named_by_its_client_finds_its_gate_after_a_restart_of_the_mcp_server(server: Server) -> None:
    session = str(uuid.uuid4())
    meta = {"gatehouse/call_id": "call-42"}
    args = {"question": "Ship it?"}

    async def main() -> None:
        async with mcp_session(server.url, session) as client:
            waiting = asyncio.ensure_future(client.call_tool("ask_user", args, meta=meta))
            (gate,) = await open_gates(server.url, session)
            await asyncio.sleep(0.3)
        # The MCP server went away with the call (its client did, too); the gate stays open, and
        # whoever answers it answers the call's retry on a new MCP server.
        waiting.cancel()
        await answer(server.url, session, gate, "ship")
        async with mcp_session(server.url, session) as client:
            result = await asyncio.wait_for(client.call_tool("ask_user", args, meta=meta), STEP)
            assert (result.is_error, text_of(result)) == (False, "ship")
            again = await asyncio.wait_for(client.call_tool("ask_user", args, meta=meta), STEP)
            assert text_of(again) == "ship", "a call id names one gate, answered or not"

    run(main())


def test_a_cancelled_call_withdraws_its_gate(server: Server) -> None:
    session = str(uuid.uuid4())

    async def main() -> None:
        async with mcp_session(server.url, session) as client:
            call = asyncio.ensure_future(client.call_tool("ask_user", {"question": "Cancel me?"}))
            (gate,) = await open_gates(server.url, session)
            call.cancel()
            async with httpx.AsyncClient(base_url=server.url, timeout=10) as http:
                path = f"/v1/sessions/{session}/gates/{gate['gate']['id']}"
                for _ in range(200):
                    view = (await http.get(path)).json()
                    if view["state"] != "open":
                        break
                    await asyncio.sleep(0.05)
            assert (view["state"], view["resolution"]["reason"]) == ("closed", "abandoned")
            # The server goes on serving calls.
            result = await asyncio.wait_for(
                client.call_tool("ask_user", {"question": "Quick?", "timeout_seconds": 1, "default": "yes"}), STEP
            )
            assert text_of(result) == "yes"
            timed_out = await asyncio.wait_for(
                client.call_tool("ask_user", {"question": "Nobody?", "timeout_seconds": 1}), STEP
            )
            assert timed_out.is_error and "nobody answered" in text_of(timed_out)

    run(main())


def test_permission_prompt_allows_edits_and_denies_in_claude_codes_shape(server: Server) -> None:
    session = str(uuid.uuid4())
    command = {"command": "rm -rf build", "description": "clean the build"}
    edited = {"command": "rm -rf build/cache", "description": "clean the cache only"}

    async def main() -> None:
        async with mcp_session(server.url, session) as client:
            for n, (action, values, expected) in enumerate([
                ("Approve", None, {"behavior": "allow", "updatedInput": command}),
                ("Approve", {"tool_input": edited}, {"behavior": "allow", "updatedInput": edited}),
                ("Deny", {"reason": "not on a Friday"}, None),
                ("Deny", None, None),
            ]):
                args = {"tool_name": "Bash", "input": command, "tool_use_id": f"toolu_{n}"}
                call = asyncio.ensure_future(client.call_tool("permission_prompt", args))
                gate = await open_permission_gate(server.url, session)
                tool_call = gate["gate"]["tool_call"]
                assert (tool_call["tool_name"], tool_call["tool_input"]) == ("Bash", command)
                assert tool_call["editable"] is True, "the person may fix the arguments"
                await decide(server.url, gate, action, values)
                result = await asyncio.wait_for(call, STEP)
                assert not result.is_error
                text = only_text(result)
                decision = json.loads(text)
                if expected is not None:
                    assert decision == expected, text
                    assert text == json.dumps(expected, separators=(",", ":")), "compact JSON, nothing else"
                else:
                    assert set(decision) == {"behavior", "message"} and decision["behavior"] == "deny", text
                    if values:
                        assert values["reason"] in decision["message"], text
                    else:
                        assert decision["message"] == "Denied by a person.", text

    run(main())


def test_permission_prompt_retried_with_its_tool_use_id_finds_its_gate_and_a_cancel_withdraws_it(
    server: Server,
) -> None:
    session = str(uuid.uuid4())
    args = {"tool_name": "Write", "input": {"file_path": "notes.txt", "content": "hi"}, "tool_use_id": "toolu_42"}

    async def main() -> None:
        async with mcp_session(server.url, session) as client:
            first = asyncio.ensure_future(client.call_tool("permission_prompt", args))
            gate = await open_permission_gate(server.url, session)
            again = asyncio.ensure_future(client.call_tool("permission_prompt", args))
            await asyncio.sleep(1)
            assert len(await open_gates(server.url, session)) == 1, "one tool use, one gate"
            await decide(server.url, gate, "Approve")
            results = await asyncio.wait_for(asyncio.gather(first, again), STEP)
            allowed = {"behavior": "allow", "updatedInput": args["input"]}
            assert [json.loads(only_text(r)) for r in results] == [allowed, allowed]
            # The same tool use once more: the decision it already has, no new gate.
            third = await asyncio.wait_for(client.call_tool("permission_prompt", args), STEP)
            assert json.loads(only_text(third)) == allowed

            cancelled = asyncio.ensure_future(client.call_tool("permission_prompt", {**args, "tool_use_id": "toolu_43"}))
            gate = await open_permission_gate(server.url, session)
            cancelled.cancel()
            async with httpx.AsyncClient(base_url=server.url, timeout=10) as http:
                path = f"/v1/sessions/{session}/gates/{gate['gate']['id']}"
                for _ in range(200):
                    view = (await http.get(path)).json()
                    if view["state"] != "open":
                        break
                    await asyncio.sleep(0.05)
            assert (view["state"], view["resolution"]["reason"]) == ("closed", "abandoned")

    run(main())


def test_approve_tool_call_opens_a_permission_gate_and_returns_the_decision_as_structured_content(
    server: Server,
) -> None:
    session = str(uuid.uuid4())
    command = {"command": "git push origin main"}
    schema = {"type": "object", "required": ["command"], "properties": {"command": {"type": "string"}}}

    async def main() -> None:
        async with mcp_session(server.url, session) as client:
            args = {"tool_name": "Bash", "input": command, "tool_input_schema": schema, "editable": True,
                    "risk": "high", "summary": "push to main"}
            call = asyncio.ensure_future(client.call_tool("approve_tool_call", args))
            gate = await open_permission_gate(server.url, session)
            tool_call = gate["gate"]["tool_call"]
            assert (tool_call["risk"], tool_call["editable"], tool_call["summary"]) == ("high", True, "push to main")
            assert tool_call["tool_input_schema"] == schema
            assert gate["gate"]["prompt"]["body"].startswith("push to main")
            # An edit that breaks the schema is refused, and the gate waits on.
            async with httpx.AsyncClient(base_url=server.url, timeout=10) as http:
                path = f"/v1/sessions/{session}/gates/{gate['gate']['id']}"
                bad = await http.post(path, json={"action": "Approve", "values": {"tool_input": {"command": 5}}})
                assert bad.status_code == 400 and bad.json()["error"]["code"] == "gate_values_invalid", bad.text
                assert bad.json()["error"]["fields"][0]["path"] == "/values/tool_input/command"
            edited = {"command": "git push origin feature"}
            await decide(server.url, gate, "Approve", {"tool_input": edited})
            result = await asyncio.wait_for(call, STEP)
            assert not result.is_error
            assert result.structured_content == {
                "approved": True, "tool_input": edited, "edited": True, "reason": None, "principal": None,
                "timed_out": False,
            }
            assert json.loads(text_of(result)) == result.structured_content, "the same as text"

            call = asyncio.ensure_future(client.call_tool("approve_tool_call", {"tool_name": "Bash", "input": command}))
            gate = await open_permission_gate(server.url, session)
            assert gate["gate"]["tool_call"].get("editable", False) is False
            await decide(server.url, gate, "Deny", {"reason": "not on main"})
            denied = (await asyncio.wait_for(call, STEP)).structured_content
            assert (denied["approved"], denied["tool_input"], denied["reason"]) == (False, None, "not on main")

            timed = await asyncio.wait_for(
                client.call_tool("approve_tool_call", {"tool_name": "Bash", "input": {"command": "ls"},
                                                       "timeout_seconds": 1}),
                STEP,
            )
            assert (timed.structured_content["approved"], timed.structured_content["timed_out"]) == (False, True)

    run(main())


def test_ask_form_returns_the_persons_values_as_structured_content(server: Server) -> None:
    session = str(uuid.uuid4())
    fields = [
        {"name": "env", "kind": "select", "required": True,
         "options": [{"value": "prod", "label": "Production"}, {"value": "staging"}]},
        {"name": "replicas", "kind": "integer", "minimum": 1, "maximum": 5},
    ]

    async def main() -> None:
        async with mcp_session(server.url, session) as client:
            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
            assert {"message", "fields", "json_schema"} <= set(tools["ask_form"].input_schema["properties"])
            call = asyncio.ensure_future(
                client.call_tool("ask_form", {"title": "Deploy", "message": "Where to?", "fields": fields})
            )
            (gate,) = await open_gates(server.url, session)
            assert (gate["gate"]["kind"], gate["gate"]["prompt"]["body"]) == ("harness.form", "Where to?")
            # Values that break the form are refused, and the form waits on.
            async with httpx.AsyncClient(base_url=server.url, timeout=10) as http:
                path = f"/v1/sessions/{session}/gates/{gate['gate']['id']}"
                bad = await http.post(path, json={"action": "accept", "values": {"env": "dev"}})
                assert bad.status_code == 400 and bad.json()["error"]["code"] == "gate_values_invalid", bad.text
                assert bad.json()["error"]["fields"][0]["path"] == "/values/env"
            await decide(server.url, gate, "accept", {"env": "prod", "replicas": 2})
            result = await asyncio.wait_for(call, STEP)
            assert not result.is_error, text_of(result)
            assert result.structured_content == {
                "action": "accept", "values": {"env": "prod", "replicas": 2}, "principal": None, "timed_out": False,
            }
            assert json.loads(text_of(result)) == result.structured_content, "the same as text"

            call = asyncio.ensure_future(client.call_tool("ask_form", {"message": "Again?", "fields": fields}))
            (gate,) = await open_gates(server.url, session)
            await decide(server.url, gate, "decline")
            declined = (await asyncio.wait_for(call, STEP)).structured_content
            assert (declined["action"], declined["values"]) == ("decline", None)

            schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}}
            timed = await asyncio.wait_for(
                client.call_tool("ask_form", {"message": "Quick?", "json_schema": schema, "timeout_seconds": 1}), STEP
            )
            assert (timed.structured_content["action"], timed.structured_content["timed_out"]) == ("cancel", True)

    run(main())


def test_an_unreachable_server_or_a_refused_token_is_a_clear_tool_error(tokens_server: Server) -> None:
    async def main() -> None:
        async with mcp_session("http://127.0.0.1:9", str(uuid.uuid4())) as client:
            result = await asyncio.wait_for(client.call_tool("ask_user", {"question": "Anyone?"}), STEP)
            assert result.is_error and "cannot reach gatehouse" in text_of(result), text_of(result)
        async with mcp_session(tokens_server.url, str(uuid.uuid4()), token="not-a-valid-token-0123") as client:
            result = await asyncio.wait_for(client.call_tool("ask_user", {"question": "Anyone?"}), STEP)
            assert result.is_error and "GATEHOUSE_TOKEN" in text_of(result), text_of(result)

    run(main())


def test_the_readme_config_starts_a_server_that_asks(server: Server) -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    block = re.search(r"<!-- mcp-config -->\n```json\n(.*?)```", readme, re.S)
    assert block, "README has the MCP config after <!-- mcp-config -->"
    config = json.loads(block.group(1))["mcpServers"]["gatehouse"]
    assert config["command"] == "gatehouse" and config["args"][0] == "mcp"
    session = config["args"][config["args"].index("--session") + 1]
    env = {**config["env"], "GATEHOUSE_URL": server.url}

    async def main() -> None:
        params = StdioServerParameters(command=BINARY, args=config["args"], env=env)
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as client:
                await asyncio.wait_for(client.initialize(), STEP)
                call = asyncio.ensure_future(client.call_tool("ask_user", {"question": f"From the README {uuid.uuid4()}?"}))
                (gate,) = await open_gates(server.url, session)
                await answer(server.url, session, gate, "it works")
                assert text_of(await asyncio.wait_for(call, STEP)) == "it works"

    run(main())
