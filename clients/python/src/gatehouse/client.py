"""The blocking :class:`Client` and its ``async`` twin :class:`AsyncClient`: the same methods, the
same flows (``_flows``), two ways of doing the I/O."""

from __future__ import annotations

import asyncio
import time
from typing import Any, AsyncIterator, Iterator, List, Mapping, Optional, Sequence, Union

import anyio  # httpx's own dependency: its shielded cancel scopes
import httpx

from . import _flows
from ._flows import Backoff, Call, Decision, Event, Flow, FormResult, OpenUrlResult, Response, Sleep, SseParser, event_of
from .errors import GatehouseError, Unreachable


#: A tool call's requirement: a plain description, or the harness's structured one (``kind``,
#: ``scope``, ``match``, ``description``, ``candidates`` …).
Requirement = Union[str, Mapping[str, Any]]


def _headers(token: Optional[str]) -> dict:
    return {"Authorization": f"Bearer {token}"} if token else {}


def _unreachable(url: str, e: httpx.TransportError) -> Unreachable:
    # No connection made: the request surely never arrived.
    not_sent = isinstance(e, (httpx.ConnectError, httpx.ConnectTimeout))
    return Unreachable(url, str(e) or type(e).__name__, maybe_sent=not not_sent)


def _response(reply: httpx.Response) -> Response:
    try:
        body = reply.json() if reply.content else None
    except ValueError:
        body = None
    return Response(reply.status_code, body, reply.headers)


class Client:
    """A gatehouse server, over HTTP, for code that blocks.

    ``url`` is the server (``http://127.0.0.1:8080`` by default); ``token`` a bearer token from
    its tokens file, when it has one. Use it as a context manager, or call :meth:`close`.
    """

    def __init__(self, url: str = "http://127.0.0.1:8080", token: Optional[str] = None) -> None:
        self.url = url.rstrip("/")
        self._http = httpx.Client(base_url=self.url, headers=_headers(token), timeout=30.0)

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def ask(
        self,
        question: str,
        choices: Optional[Sequence[str]] = None,
        *,
        allow_other: bool = False,
        timeout: Optional[float] = None,
        default: Optional[str] = None,
        session: Optional[str] = None,
    ) -> str:
        """Asks a person ``question`` and blocks until they answer; returns the answer.

        With ``choices`` the answer is one of them (or free text with ``allow_other``). With
        ``timeout`` (seconds) the server answers ``default`` at the deadline; without a default
        the gate is withdrawn then and :class:`~gatehouse.errors.TimedOut` raised. A gate closed
        unanswered raises :class:`~gatehouse.errors.Withdrawn`. Restarts of the server are waited
        out; the loop command the answer produced is acknowledged.
        """
        return self._run(_flows.ask(question, choices, allow_other, timeout, default, session))

    def answer(self, gate_id: str, answer: str, *, idempotency_key: Optional[str] = None) -> int:
        """Answers the gate ``gate_id``; returns the answer's journal seq. A gate already
        answered raises :class:`~gatehouse.errors.GateConflict` carrying the winner."""
        return self._run(_flows.answer(gate_id, answer, idempotency_key))

    def approve_tool_call(
        self,
        tool_name: str,
        tool_input: Optional[Mapping[str, Any]],
        *,
        schema: Optional[Mapping[str, Any]] = None,
        editable: bool = False,
        risk: Optional[str] = None,
        timeout: Optional[float] = None,
        summary: Optional[str] = None,
        requirements: Optional[Sequence[Requirement]] = None,
        session: Optional[str] = None,
        loop_id: Optional[str] = None,
        tool_execution_id: Optional[str] = None,
    ) -> Decision:
        """Asks a person whether the tool call ``tool_name(tool_input)`` may run, and blocks until
        it is decided; returns the :class:`~gatehouse.Decision`.

        ``schema`` is the JSON Schema of ``tool_input``; with ``editable`` the approver may
        change the input (an edit must fit the schema), and ``Decision.tool_input`` is what to
        run. ``risk`` is ``low``, ``medium``, ``high`` or ``critical``; ``summary`` the first line
        the person reads (else the tool's name); ``requirements`` the capabilities the call needs.
        With ``timeout`` (seconds) the server denies the call at the deadline; without one its
        default applies (``--permission-timeout``, a denial after 5 minutes). Either way a denial
        is returned (``approved`` false, ``by_policy`` true), not raised.

        ``session``, ``loop_id`` and ``tool_execution_id`` (UUIDs; fresh ones by default) name
        the gate: calling again with the same three and the same request finds the same gate,
        waiting or decided, instead of asking twice (different content under the same ids
        raises :class:`~gatehouse.errors.ReaskConflict`). A gate closed undecided raises
        :class:`~gatehouse.errors.Withdrawn`. Restarts of the server are waited out; the loop
        command the decision produced is acknowledged.
        """
        return self._run(
            _flows.approve_tool_call(
                tool_name, tool_input,
                schema=schema, editable=editable, risk=risk, timeout=timeout, summary=summary,
                requirements=requirements, session=session, loop_id=loop_id, tool_execution_id=tool_execution_id,
            )
        )

    def form(
        self,
        schema: Mapping[str, Any],
        body: str,
        *,
        title: Optional[str] = None,
        timeout: Optional[float] = None,
        session: Optional[str] = None,
    ) -> FormResult:
        """Asks a person to fill in a form and blocks until they answer; returns the
        :class:`~gatehouse.FormResult`: ``accept`` with the typed ``values``, ``decline`` or
        ``cancel``.

        ``schema`` is a JSON Schema of an object (sent as ``json_schema``: strings, with
        ``format`` email, uri, date or date-time, numbers, integers, booleans, single and
        multi-selects, nested objects and lists of objects), or harness fields
        (``{"fields": [...]}``, sent as ``schema``); ``body`` is what the person reads, under
        ``title``. The server checks the values against the schema before it takes them. With
        ``timeout`` (seconds) the server answers ``cancel`` at the deadline (``source`` is
        ``"policy"``). Each call opens a new gate in ``session`` (a fresh one by default); a gate
        closed unanswered raises :class:`~gatehouse.errors.Withdrawn`, a schema the server
        refuses :class:`~gatehouse.errors.InvalidRequest` (its ``fields`` say where).
        """
        return self._run(_flows.form(schema, body, title=title, timeout=timeout, session=session))

    def open_url(
        self,
        url: str,
        body: str,
        *,
        title: Optional[str] = None,
        requires_completion: bool = False,
        timeout: Optional[float] = None,
        session: Optional[str] = None,
    ) -> OpenUrlResult:
        """Asks a person to open ``url`` (a sign-in, a device code, a payment) and blocks until
        they answer; returns the :class:`~gatehouse.OpenUrlResult`: ``accept`` (done, or
        completed with ``requires_completion``), ``decline`` or ``cancel``.

        The URL is a secret: only someone allowed to answer reads it; listings, the journal and
        webhooks show its origin alone. ``body`` is what the person reads, under ``title``. With
        ``timeout`` (seconds) the server answers ``cancel`` at the deadline. Each call opens a
        new gate in ``session`` (a fresh one by default); a gate closed unanswered raises
        :class:`~gatehouse.errors.Withdrawn`.
        """
        return self._run(
            _flows.open_url(
                url, body, title=title, requires_completion=requires_completion, timeout=timeout, session=session
            )
        )

    def approve(
        self,
        gate_id: str,
        *,
        tool_input: Optional[Mapping[str, Any]] = None,
        always: bool = False,
        idempotency_key: Optional[str] = None,
    ) -> int:
        """Approves the permission gate ``gate_id``; returns the decision's journal seq. With
        ``tool_input``, approves that edit instead (an editable gate only; it must fit the
        gate's schema, or :class:`~gatehouse.errors.InvalidRequest` says where in ``fields``
        and the gate stays open). ``always`` picks *Approve always for this workspace* (offered
        when the request has candidates). Too late raises
        :class:`~gatehouse.errors.GateConflict` carrying the winner."""
        return self._run(_flows.respond(gate_id, _flows.approval(tool_input, always), idempotency_key))

    def deny(self, gate_id: str, reason: Optional[str] = None, *, idempotency_key: Optional[str] = None) -> int:
        """Denies the permission gate ``gate_id``, with ``reason`` for the agent when given;
        returns the decision's journal seq. Too late raises :class:`~gatehouse.errors.GateConflict`."""
        return self._run(_flows.respond(gate_id, _flows.denial(reason), idempotency_key))

    def gates(self, state: Optional[str] = "open", *, session: Optional[str] = None) -> List[dict]:
        """The gates in ``state`` (``open``, ``resolved``, ``closed``, comma-separated, or
        ``None`` for all), of every session or of ``session``, oldest first."""
        return self._run(_flows.gates(state, session))

    def events(self, after: int = 0, *, session: Optional[str] = None) -> Iterator[Event]:
        """Every journal event after seq ``after``, then live ones, forever: an iterator that
        reconnects by itself with ``Last-Event-ID``, so it never skips or repeats an event."""
        backoff = Backoff()
        while True:
            call = _flows.events_call(after, session)
            try:
                with self._http.stream(
                    call.method, call.path, headers=call.headers, timeout=httpx.Timeout(30.0, read=None)
                ) as reply:
                    if reply.status_code != 200:
                        reply.read()
                        raise _response(reply).error()
                    backoff.reset()
                    parser = SseParser()
                    for chunk in reply.iter_bytes():
                        for frame in parser.feed(chunk):
                            event = event_of(frame)
                            if event is not None:
                                after = event.seq
                                yield event
            except httpx.TransportError:
                pass
            # The server went away (a restart, a stall): come back after the last event seen.
            time.sleep(backoff.next())

    def _run(self, flow: Flow) -> Any:
        outcome: Any = None
        failure: Optional[BaseException] = None
        while True:
            try:
                step = flow.throw(failure) if failure is not None else flow.send(outcome)
            except StopIteration as done:
                return done.value
            outcome, failure = None, None
            if isinstance(step, Sleep):
                time.sleep(step.seconds)
                continue
            try:
                outcome = self._send(step)
            except Unreachable as e:
                failure = e

    def _send(self, call: Call) -> Response:
        try:
            reply = self._http.request(call.method, call.path, json=call.json, headers=call.headers, timeout=call.timeout)
        except httpx.TransportError as e:
            raise _unreachable(self.url, e) from e
        return _response(reply)


class AsyncClient:
    """:class:`Client`'s twin for ``asyncio``: the same methods, awaited (``events`` is an async
    iterator). Use it as an async context manager, or await :meth:`close`."""

    def __init__(self, url: str = "http://127.0.0.1:8080", token: Optional[str] = None) -> None:
        self.url = url.rstrip("/")
        self._http = httpx.AsyncClient(base_url=self.url, headers=_headers(token), timeout=30.0)

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def close(self) -> None:
        await self._http.aclose()

    async def ask(
        self,
        question: str,
        choices: Optional[Sequence[str]] = None,
        *,
        allow_other: bool = False,
        timeout: Optional[float] = None,
        default: Optional[str] = None,
        session: Optional[str] = None,
    ) -> str:
        """See :meth:`Client.ask`."""
        return await self._run(_flows.ask(question, choices, allow_other, timeout, default, session))

    async def answer(self, gate_id: str, answer: str, *, idempotency_key: Optional[str] = None) -> int:
        """See :meth:`Client.answer`."""
        return await self._run(_flows.answer(gate_id, answer, idempotency_key))

    async def approve_tool_call(
        self,
        tool_name: str,
        tool_input: Optional[Mapping[str, Any]],
        *,
        schema: Optional[Mapping[str, Any]] = None,
        editable: bool = False,
        risk: Optional[str] = None,
        timeout: Optional[float] = None,
        summary: Optional[str] = None,
        requirements: Optional[Sequence[Requirement]] = None,
        session: Optional[str] = None,
        loop_id: Optional[str] = None,
        tool_execution_id: Optional[str] = None,
    ) -> Decision:
        """See :meth:`Client.approve_tool_call`."""
        return await self._run(
            _flows.approve_tool_call(
                tool_name, tool_input,
                schema=schema, editable=editable, risk=risk, timeout=timeout, summary=summary,
                requirements=requirements, session=session, loop_id=loop_id, tool_execution_id=tool_execution_id,
            )
        )

    async def form(
        self,
        schema: Mapping[str, Any],
        body: str,
        *,
        title: Optional[str] = None,
        timeout: Optional[float] = None,
        session: Optional[str] = None,
    ) -> FormResult:
        """See :meth:`Client.form`. Cancelling the call withdraws its gate (``abandoned``)."""
        return await self._run(_flows.form(schema, body, title=title, timeout=timeout, session=session))

    async def open_url(
        self,
        url: str,
        body: str,
        *,
        title: Optional[str] = None,
        requires_completion: bool = False,
        timeout: Optional[float] = None,
        session: Optional[str] = None,
    ) -> OpenUrlResult:
        """See :meth:`Client.open_url`. Cancelling the call withdraws its gate (``abandoned``)."""
        return await self._run(
            _flows.open_url(
                url, body, title=title, requires_completion=requires_completion, timeout=timeout, session=session
            )
        )

    async def approve(
        self,
        gate_id: str,
        *,
        tool_input: Optional[Mapping[str, Any]] = None,
        always: bool = False,
        idempotency_key: Optional[str] = None,
    ) -> int:
        """See :meth:`Client.approve`."""
        return await self._run(_flows.respond(gate_id, _flows.approval(tool_input, always), idempotency_key))

    async def deny(self, gate_id: str, reason: Optional[str] = None, *, idempotency_key: Optional[str] = None) -> int:
        """See :meth:`Client.deny`."""
        return await self._run(_flows.respond(gate_id, _flows.denial(reason), idempotency_key))

    async def gates(self, state: Optional[str] = "open", *, session: Optional[str] = None) -> List[dict]:
        """See :meth:`Client.gates`."""
        return await self._run(_flows.gates(state, session))

    async def events(self, after: int = 0, *, session: Optional[str] = None) -> AsyncIterator[Event]:
        """See :meth:`Client.events`."""
        backoff = Backoff()
        while True:
            call = _flows.events_call(after, session)
            try:
                async with self._http.stream(
                    call.method, call.path, headers=call.headers, timeout=httpx.Timeout(30.0, read=None)
                ) as reply:
                    if reply.status_code != 200:
                        await reply.aread()
                        raise _response(reply).error()
                    backoff.reset()
                    parser = SseParser()
                    async for chunk in reply.aiter_bytes():
                        for frame in parser.feed(chunk):
                            event = event_of(frame)
                            if event is not None:
                                after = event.seq
                                yield event
            except httpx.TransportError:
                pass
            await asyncio.sleep(backoff.next())

    async def _run(self, flow: Flow, failure: Optional[BaseException] = None, *, unwind: bool = True) -> Any:
        outcome: Any = None
        while True:
            try:
                step = flow.throw(failure) if failure is not None else flow.send(outcome)
            except StopIteration as done:
                return done.value
            outcome, failure = None, None
            try:
                if isinstance(step, Sleep):
                    await asyncio.sleep(step.seconds)
                    continue
                outcome = await self._send(step)
            except Unreachable as e:
                failure = e
            except asyncio.CancelledError:
                if unwind:
                    await self._unwind(flow)
                raise

    async def _unwind(self, flow: Flow) -> None:
        """The caller was cancelled: the flow may still clean up after itself (withdraw the gate
        it opened), shielded from the cancellation for at most 10 seconds."""
        with anyio.move_on_after(10, shield=True):
            try:
                await self._run(flow, _flows.Cancelled(), unwind=False)
            except (_flows.Cancelled, GatehouseError):
                pass

    async def _send(self, call: Call) -> Response:
        try:
            reply = await self._http.request(
                call.method, call.path, json=call.json, headers=call.headers, timeout=call.timeout
            )
        except httpx.TransportError as e:
            raise _unreachable(self.url, e) from e
        return _response(reply)

