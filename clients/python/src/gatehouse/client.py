"""The blocking :class:`Client` and its ``async`` twin :class:`AsyncClient`: the same methods, the
same flows (``_flows``), two ways of doing the I/O."""

from __future__ import annotations

import asyncio
import time
from typing import Any, AsyncIterator, Iterator, List, Optional, Sequence

import httpx

from . import _flows
from ._flows import Backoff, Call, Event, Flow, Response, Sleep, SseParser, event_of
from .errors import Unreachable


def _headers(token: Optional[str]) -> dict:
    return {"Authorization": f"Bearer {token}"} if token else {}


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
            raise Unreachable(self.url, str(e) or type(e).__name__) from e
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

    async def _run(self, flow: Flow) -> Any:
        outcome: Any = None
        failure: Optional[BaseException] = None
        while True:
            try:
                step = flow.throw(failure) if failure is not None else flow.send(outcome)
            except StopIteration as done:
                return done.value
            outcome, failure = None, None
            if isinstance(step, Sleep):
                await asyncio.sleep(step.seconds)
                continue
            try:
                outcome = await self._send(step)
            except Unreachable as e:
                failure = e

    async def _send(self, call: Call) -> Response:
        try:
            reply = await self._http.request(
                call.method, call.path, json=call.json, headers=call.headers, timeout=call.timeout
            )
        except httpx.TransportError as e:
            raise Unreachable(self.url, str(e) or type(e).__name__) from e
        return _response(reply)
