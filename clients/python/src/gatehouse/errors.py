"""The errors a gatehouse server answers with, as exceptions.

Every error response of the API has the same envelope, ``{"error": {"code", "message",
"retryable", ...}}``; :func:`from_response` turns it into the exception class for its status and
code, keeping the details the envelope carries (``fields``, the winning ``resolution`` of a
``409 gate_not_ready``, the existing ``gate`` of a ``409 gate_conflict``).
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional


class GatehouseError(Exception):
    """An error answer of the server (or, for subclasses below, of the client's own flow)."""

    def __init__(
        self,
        message: str,
        *,
        status: int = 0,
        code: str = "",
        retryable: bool = False,
        body: Optional[Mapping[str, Any]] = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code
        self.retryable = retryable
        self.body: Dict[str, Any] = dict(body or {})

    @property
    def error(self) -> Dict[str, Any]:
        """The ``error`` member of the response body."""
        error = self.body.get("error")
        return error if isinstance(error, dict) else {}


class Unreachable(GatehouseError):
    """No answer from the server at all (connection refused, reset, timed out). ``maybe_sent``
    is false when the request surely never reached it (no connection was made)."""

    def __init__(self, url: str, cause: str, *, maybe_sent: bool = True) -> None:
        super().__init__(f"cannot reach gatehouse at {url}: {cause}", retryable=True)
        self.url = url
        self.maybe_sent = maybe_sent


class InvalidRequest(GatehouseError):
    """400, 413 or 415: the request itself is at fault; ``fields`` says where, when it can."""

    @property
    def fields(self) -> List[Dict[str, Any]]:
        return list(self.error.get("fields") or [])


class Unauthorized(GatehouseError):
    """401: no token, or one the server does not accept (give ``token=`` to the client)."""


class Forbidden(GatehouseError):
    """403: the token's role or session scope does not cover this."""


class NotFound(GatehouseError):
    """404: no such gate (in this session), command or route."""


class GateConflict(GatehouseError):
    """409 ``gate_not_ready``: the gate is no longer open; ``resolution`` is the winning
    ``GateResolved`` event (who answered, and how)."""

    @property
    def resolution(self) -> Dict[str, Any]:
        return dict(self.error.get("resolution") or {})


class ReaskConflict(GatehouseError):
    """409 ``gate_conflict``: these ids already asked something else; ``gate`` is that view."""

    @property
    def gate(self) -> Dict[str, Any]:
        return dict(self.error.get("gate") or {})


class IdempotencyConflict(GatehouseError):
    """409 ``idempotency_conflict``: this key already answered the gate differently."""


class RateLimited(GatehouseError):
    """429: too many requests; retry after ``retry_after`` seconds."""

    def __init__(self, *args: Any, retry_after: float = 1.0, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.retry_after = retry_after


class Unavailable(GatehouseError):
    """503: storage unavailable or a capacity cap; retryable (with the same idempotency key)."""


class ServerError(GatehouseError):
    """500 or another unexpected status: a bug of the server, logged there with a request id."""


class Withdrawn(GatehouseError):
    """:meth:`Client.ask`, :meth:`Client.approve_tool_call`, :meth:`Client.form`,
    :meth:`Client.open_url`: the gate was closed (withdrawn by its owner or abandoned) before
    anyone answered or decided it; ``view`` is its final view."""

    def __init__(self, view: Mapping[str, Any]) -> None:
        reason = (view.get("resolution") or {}).get("reason", "closed")
        kind = (view.get("gate") or {}).get("kind")
        if kind == "harness.permission":
            message = f"the tool call's permission gate was withdrawn ({reason}) before anyone decided it"
        elif kind == "harness.form":
            message = f"the form was withdrawn ({reason}) before anyone answered it"
        elif kind == "harness.open_url":
            message = f"the request to open a URL was withdrawn ({reason}) before anyone answered it"
        else:
            message = f"the question was withdrawn ({reason}) before anyone answered it"
        super().__init__(message)
        self.view = dict(view)


class TimedOut(GatehouseError):
    """:meth:`Client.ask`: nobody answered before ``timeout`` and there was no ``default``; the
    gate has been withdrawn as ``abandoned``."""

    def __init__(self, gate_id: str) -> None:
        super().__init__(f"nobody answered in time; gate {gate_id} was withdrawn")
        self.gate_id = gate_id


class StreamReset(GatehouseError):
    """:meth:`Client.events`: the cursor is ahead of the journal or older than it keeps
    (``earliest``, ``head``): re-read what you need, then follow again from ``head``."""

    def __init__(self, earliest: int, head: int) -> None:
        super().__init__(f"the journal cannot resume there (it holds {earliest}..{head})")
        self.earliest = earliest
        self.head = head


_BY_STATUS = {401: Unauthorized, 403: Forbidden, 404: NotFound, 503: Unavailable}
_BY_CODE = {
    "gate_not_ready": GateConflict,
    "gate_conflict": ReaskConflict,
    "idempotency_conflict": IdempotencyConflict,
}


def from_response(status: int, body: Any, retry_after: Optional[str] = None) -> GatehouseError:
    """The exception for an error response."""
    body = body if isinstance(body, dict) else {}
    error = body.get("error") if isinstance(body.get("error"), dict) else {}
    code = str(error.get("code") or "")
    message = str(error.get("message") or f"gatehouse answered {status}")
    kwargs: Dict[str, Any] = dict(status=status, code=code, retryable=bool(error.get("retryable")), body=body)
    if status == 401:
        message += "; give the client a token from the server's tokens file (token=...)"
    if status == 429:
        try:
            wait = float(retry_after) if retry_after is not None else 1.0
        except ValueError:
            wait = 1.0
        return RateLimited(message, retry_after=wait, **kwargs)
    cls = _BY_CODE.get(code) or _BY_STATUS.get(status)
    if cls is None:
        cls = InvalidRequest if 400 <= status < 500 else ServerError
    return cls(message, **kwargs)
