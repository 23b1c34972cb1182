"""`gatehouse mcp` driven by the official MCP Python SDK over stdio, against a real gatehouse
server: the tools it lists, `ask_user` answered over HTTP while it waits (with progress), a
retried call that finds its gate again, a cancelled call that withdraws its gate, defaults and
timeouts, `approve_tool_call` allowed and denied, and clear errors when the server is not there
or refuses the token. The server fixtures come from the Python client's tests."""

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


def text_of(result: Any) -> str:
    return "".join(block.text for block in result.content if getattr(block, "type", "") == "text")


def run(coroutine: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coroutine, 120))


def test_ask_user_waits_for_the_answer_with_progress_and_a_retry_finds_the_same_gate(server: Server) -> None:
    session = str(uuid.uuid4())

    async def main() -> None:
        async with mcp_session(server.url, session) as client:
            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
            assert set(tools) == {"ask_user", "approve_tool_call"}
            assert "question" in tools["ask_user"].input_schema["properties"]
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


def test_approve_tool_call_allows_and_denies_in_the_permission_prompt_shape(server: Server) -> None:
    session = str(uuid.uuid4())
    command = {"command": "rm -rf build", "description": "clean the build"}

    async def main() -> None:
        async with mcp_session(server.url, session) as client:
            for reply, expected in [
                ("allow", {"behavior": "allow", "updatedInput": command}),
                ("deny", {"behavior": "deny", "message": "A person denied this tool call."}),
                ("not on a Friday", {"behavior": "deny", "message": "not on a Friday"}),
            ]:
                args = {"tool_name": "Bash", "input": command}
                call = asyncio.ensure_future(client.call_tool("approve_tool_call", args))
                (gate,) = await open_gates(server.url, session)
                assert gate["gate"]["prompt"]["title"] == "Allow Bash?"
                assert "rm -rf build" in gate["gate"]["prompt"]["body"]
                await answer(server.url, session, gate, reply)
                result = await asyncio.wait_for(call, STEP)
                assert not result.is_error
                assert json.loads(text_of(result)) == expected

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
