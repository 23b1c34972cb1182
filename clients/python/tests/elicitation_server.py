"""An MCP server on the official Python SDK (stdio) whose tools elicit, for test_elicitation.py:
each returns, as JSON text, what the client answered as the server received it.

- ``deploy``: ``ctx.elicit`` with a form of every primitive kind (the ``elicitation/create``
  request of protocol 2025-11-25).
- ``deploy_resolved``: the same form through ``Resolve(Elicit)``, which protocol 2026-07-28
  carries in an ``input_required`` result.
- ``sign_in``: ``ctx.elicit_url``, URL mode.
- ``sign_in_rounds``: URL mode in a hand-made ``input_required`` result (2026-07-28).
- ``impatient``: ``ctx.elicit`` given up after ``seconds`` (the SDK cancels its request).
- ``strict``: a raw schema with ``pattern``, which gatehouse cannot enforce and so refuses.
"""

from __future__ import annotations

import datetime
import json
from typing import Annotated, List, Literal, Optional, Union

import anyio
from pydantic import BaseModel, Field

from mcp.server.mcpserver import Context, Elicit, ElicitationResult, MCPServer, Resolve
from mcp.shared.exceptions import MCPError
from mcp.types import ElicitRequest, ElicitRequestURLParams, InputRequiredResult


class Deployment(BaseModel):
    """Every primitive kind of an MCP form, and both multi-selects."""

    name: str = Field(min_length=1, max_length=40, description="Who deploys")
    email: str = Field(json_schema_extra={"format": "email"})
    day: datetime.date
    ratio: float = Field(ge=0, le=1)
    replicas: int = Field(ge=1, le=10)
    dry_run: bool
    environment: Literal["staging", "prod"]
    region: str = Field(
        json_schema_extra={"oneOf": [{"const": "eu", "title": "Europe"}, {"const": "us", "title": "United States"}]}
    )
    features: List[Literal["logs", "metrics", "traces"]] = Field(min_length=1, max_length=2)
    channels: List[str] = Field(
        default_factory=list,
        json_schema_extra={"items": {"anyOf": [{"const": "mail", "title": "E-mail"}, {"const": "chat", "title": "Chat"}]}},
    )
    note: Optional[str] = None


MESSAGE = "The deploy needs its details."
SIGN_IN = "https://registry.example.com/device?code=WXYZ-1234"

server = MCPServer("elicitation-test")


def outcome(result: ElicitationResult[Deployment]) -> str:
    data = result.data.model_dump(mode="json", exclude_unset=True) if result.action == "accept" else None
    return json.dumps({"action": result.action, "data": data})


@server.tool()
async def deploy(ctx: Context) -> str:
    return outcome(await ctx.elicit(MESSAGE, Deployment))


def details(ctx: Context) -> Elicit[Deployment]:
    return Elicit(MESSAGE, Deployment)


@server.tool()
async def deploy_resolved(deployment: Annotated[ElicitationResult[Deployment], Resolve(details)]) -> str:
    return outcome(deployment)


@server.tool()
async def sign_in(ctx: Context) -> str:
    result = await ctx.elicit_url("Sign in to the registry.", SIGN_IN, "sign-in-1")
    return json.dumps({"action": result.action})


@server.tool()
async def sign_in_rounds(ctx: Context) -> Union[str, InputRequiredResult]:
    answers = ctx.input_responses or {}
    if "sign-in" not in answers:
        params = ElicitRequestURLParams(message="Sign in to the registry.", url=SIGN_IN)
        return InputRequiredResult(input_requests={"sign-in": ElicitRequest(params=params)}, request_state="asked")
    return json.dumps({"action": answers["sign-in"].action, "state": ctx.request_state})


@server.tool()
async def impatient(ctx: Context, seconds: float) -> str:
    with anyio.move_on_after(seconds):
        return outcome(await ctx.elicit("Quick, the details.", Deployment))
    return json.dumps({"action": "gave up"})


@server.tool()
async def strict(ctx: Context) -> str:
    schema = {"type": "object", "properties": {"code": {"type": "string", "pattern": "^[A-Z]{4}$"}}}
    try:
        result = await ctx.session.elicit_form("A code, please.", schema, related_request_id=ctx.request_id)
    except MCPError as refused:
        return json.dumps({"refused": refused.error.code, "message": refused.error.message, "data": refused.error.data})
    return json.dumps({"action": result.action})


if __name__ == "__main__":
    server.run("stdio")
