"""MCP elicitation answered through gatehouse: an ``elicitation_callback`` for the official MCP
Python SDK (``mcp.ClientSession`` or ``mcp.Client``) that puts each server's elicitation to a
person as a gatehouse gate, and hands their answer back as the ``ElicitResult``.

- Form mode (``message`` and ``requestedSchema``) becomes a ``harness.form`` gate: the schema is
  sent as ``json_schema`` and ``message`` is the body. The person's ``accept`` (with the values,
  typed and checked against the schema by the server), ``decline`` or ``cancel`` goes back as
  it is.
- URL mode (``message`` and ``url``) becomes a ``harness.open_url`` gate; the URL is shown only
  to whoever may answer it.
- Both ways a server asks work, since the SDK routes them through the same callback: the
  ``elicitation/create`` request (protocol 2025-11-25 and before) and the requests embedded in
  an ``input_required`` result (2026-07-28, driven by ``mcp.Client``).
- With ``timeout`` the gate answers ``cancel`` at the deadline, and so does a gate that is
  withdrawn unanswered; when the server cancels its request, the gate is withdrawn. A schema
  gatehouse refuses (a keyword it cannot enforce, such as ``pattern``) is an ``INVALID_PARAMS``
  error, whose ``data.fields`` say where.

Install with the extra: ``pip install './clients/python[mcp]'``.

>>> from mcp import ClientSession                                   # doctest: +SKIP
>>> from gatehouse import AsyncClient
>>> from gatehouse.mcp_elicitation import elicitation_callback
>>> async with AsyncClient("http://127.0.0.1:8080") as gatehouse:  # doctest: +SKIP
...     callback = elicitation_callback(gatehouse, timeout=600)
...     async with ClientSession(read, write, elicitation_callback=callback) as session:
...         await session.initialize()
...         await session.call_tool("deploy", {})
"""

from __future__ import annotations

import uuid
from typing import Any, Optional, Union

from mcp import types
from mcp.client.session import ElicitationFnT

from .client import AsyncClient
from .errors import GatehouseError, InvalidRequest, Withdrawn

__all__ = ["elicitation_callback"]

#: What the gate's body says when the server sent an empty message.
NO_MESSAGE = "An MCP server asks for your input."


def elicitation_callback(
    client: AsyncClient,
    *,
    session: Optional[str] = None,
    timeout: Optional[float] = None,
    title: Optional[str] = None,
) -> ElicitationFnT:
    """The ``elicitation_callback`` for ``mcp.ClientSession(..., elicitation_callback=...)`` or
    ``mcp.Client(..., elicitation_callback=...)``: each elicitation opens a gate through
    ``client`` and waits for the person's answer.

    The gates go into the gatehouse ``session`` (a fresh one for this callback by default, so
    one MCP connection's questions stay together), with ``title`` (else the server's default)
    and, with ``timeout`` (seconds), a policy that answers ``cancel`` at the deadline.
    """
    session = session or str(uuid.uuid4())

    async def callback(context: Any, params: Any) -> Union[types.ElicitResult, types.ErrorData]:
        message = params.message or NO_MESSAGE
        try:
            if getattr(params, "mode", "form") == "url":
                opened = await client.open_url(params.url, message, title=title, timeout=timeout, session=session)
                return types.ElicitResult(action=opened.action)
            schema = params.requested_schema
            filled = await client.form(schema, message, title=title, timeout=timeout, session=session)
            return types.ElicitResult(action=filled.action, content=filled.values)
        except Withdrawn:
            # Closed unanswered: nobody chose, which is what cancel means.
            return types.ElicitResult(action="cancel")
        except InvalidRequest as refused:
            return types.ErrorData(
                code=types.INVALID_PARAMS,
                message=f"gatehouse refused the elicitation: {refused.message}",
                data={"fields": refused.fields},
            )
        except GatehouseError as failed:
            return types.ErrorData(code=types.INTERNAL_ERROR, message=f"gatehouse: {failed.message}")

    return callback
