"""A client for gatehouse: an AI agent asks a person a question and gets back exactly one answer,
asks whether a tool call may run and gets back one decision (approved, edited, or denied), or
asks them to fill in a form or open a URL and gets back what they did.

>>> from gatehouse import Client
>>> with Client("http://127.0.0.1:8080") as client:          # doctest: +SKIP
...     if client.ask("Deploy to prod?", ["yes", "no"]) == "yes":
...         deploy()
...     decision = client.approve_tool_call("Bash", {"command": "git push"}, risk="high")
...     if decision.approved:
...         run("Bash", decision.tool_input)
...     schema = {"type": "object", "properties": {"target": {"type": "string"}}, "required": ["target"]}
...     details = client.form(schema, "Where to?", timeout=300)
...     if details.action == "accept":
...         deploy(details.values["target"])
"""

from ._flows import Decision, Event, FormResult, OpenUrlResult
from .client import AsyncClient, Client
from .errors import (
    Forbidden,
    GateConflict,
    GatehouseError,
    IdempotencyConflict,
    InvalidRequest,
    NotFound,
    RateLimited,
    ReaskConflict,
    ServerError,
    StreamReset,
    TimedOut,
    Unauthorized,
    Unavailable,
    Unreachable,
    Withdrawn,
)

__all__ = [
    "AsyncClient",
    "Client",
    "Decision",
    "Event",
    "FormResult",
    "Forbidden",
    "GateConflict",
    "GatehouseError",
    "IdempotencyConflict",
    "InvalidRequest",
    "NotFound",
    "OpenUrlResult",
    "RateLimited",
    "ReaskConflict",
    "ServerError",
    "StreamReset",
    "TimedOut",
    "Unauthorized",
    "Unavailable",
    "Unreachable",
    "Withdrawn",
]
