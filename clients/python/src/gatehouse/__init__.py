"""A client for gatehouse: an AI agent asks a person a question and gets back exactly one answer.

>>> from gatehouse import Client
>>> with Client("http://127.0.0.1:8080") as client:          # doctest: +SKIP
...     if client.ask("Deploy to prod?", ["yes", "no"]) == "yes":
...         deploy()
"""

from ._flows import Event
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
    "Event",
    "Forbidden",
    "GateConflict",
    "GatehouseError",
    "IdempotencyConflict",
    "InvalidRequest",
    "NotFound",
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
