"""What the client does, free of I/O, so the blocking and the async client share it.

A flow is a generator: it yields a :class:`Call` (an HTTP request) or a :class:`Sleep`, and is
sent back the :class:`Response` (or has :class:`~gatehouse.errors.Unreachable` thrown into it);
its return value is the method's result. ``Client`` and ``AsyncClient`` only drive flows.
Also here: the Server-Sent Events parser the event iterators share.
"""

from __future__ import annotations

import codecs
import json
import random
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Dict, Generator, List, Literal, Mapping, Optional, Sequence, Union

from .errors import GatehouseError, StreamReset, TimedOut, Unreachable, Withdrawn, from_response


@dataclass
class Call:
    method: str
    path: str
    json: Any = None
    headers: Dict[str, str] = field(default_factory=dict)
    #: Seconds to wait for the whole answer (a long-poll needs longer than the default).
    timeout: float = 30.0


@dataclass
class Sleep:
    seconds: float


@dataclass
class Response:
    status: int
    body: Any
    headers: Mapping[str, str]

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    def error(self) -> GatehouseError:
        return from_response(self.status, self.body, self.headers.get("retry-after"))


Step = Union[Call, Sleep]
Flow = Generator[Step, Optional[Response], Any]


class Cancelled(BaseException):
    """Thrown into a flow when whoever awaits it was cancelled: the flow may still send what
    cleans up after it (a host-owned gate is withdrawn), then lets this propagate."""

#: How many times a request that may not be retried forever (an open, an answer) is tried.
TRIES = 5


class Backoff:
    """Full-jitter delays: at random up to 250 ms, 500 ms, 1 s, … at most 5 s, so clients that
    lost the same server do not come back in lock-step."""

    def __init__(self, first: float = 0.25, most: float = 5.0) -> None:
        self.first, self.most, self.ceiling = first, most, first

    def next(self) -> float:
        delay = random.uniform(0, self.ceiling)
        self.ceiling = min(self.ceiling * 2, self.most)
        return delay

    def reset(self) -> None:
        self.ceiling = self.first


def fresh_id() -> str:
    return str(uuid.uuid4())


def retried(call: Call, tries: Optional[int] = TRIES, *, repeatable: bool = True) -> Flow:
    """Sends ``call`` until it gets an answer that is not a retryable ``503`` (or the server is
    reachable again), at most ``tries`` times (``None``: until it does); returns the response,
    whatever its status. The call must be safe to repeat (idempotent by its ids or its key),
    unless not ``repeatable``: then it is sent again only when it surely did not arrive (no
    connection, or a ``503`` that did nothing)."""
    backoff = Backoff()
    attempt = 0
    while True:
        attempt += 1
        last = tries is not None and attempt >= tries
        try:
            response = yield call
        except Unreachable as e:
            if last or (e.maybe_sent and not repeatable):
                raise
        else:
            assert response is not None
            if not (response.status == 503 and response.error().retryable) or last:
                return response
        yield Sleep(backoff.next())


def expect(response: Response) -> Any:
    """The body of a 2xx response, or the response's exception."""
    if not response.ok:
        raise response.error()
    return response.body


def question_body(
    loop_id: str,
    tool: str,
    question: str,
    choices: Optional[Sequence[str]],
    allow_other: bool,
    timeout: Optional[float],
    default: Optional[str],
) -> Dict[str, Any]:
    body: Dict[str, Any] = {"loop_id": loop_id, "tool_execution_id": tool, "question": question}
    if choices:
        body["choices"] = list(choices)
        body["allow_other"] = allow_other
    if timeout is not None:
        nanos = int(timeout * 1_000_000_000)
        if default is not None:
            answer = {"action": "answer", "values": {"answer": default}}
            body["response_policy"] = {"timeout": nanos, "on_timeout": "respond", "response": answer}
        else:
            body["response_policy"] = {"timeout": nanos, "on_timeout": "wait"}
    return body


def ask(
    question: str,
    choices: Optional[Sequence[str]],
    allow_other: bool,
    timeout: Optional[float],
    default: Optional[str],
    session: Optional[str],
) -> Flow:
    """Opens a gate, waits until it leaves ``open`` (through restarts of the server: the gate is
    durable), acknowledges the command the answer put in this loop's inbox, returns the answer."""
    session = session or fresh_id()
    loop_id, tool = fresh_id(), fresh_id()
    body = question_body(loop_id, tool, question, choices, allow_other, timeout, default)
    # The same ids find the same gate: an open is safe to repeat.
    view = expect((yield from retried(Call("POST", f"/v1/sessions/{session}/gates", json=body))))
    # With a default the server answers at the deadline; without one, the deadline is ours.
    deadline = time.monotonic() + timeout if timeout is not None and default is None else None
    view = yield from settled(session, view, deadline)
    if view["state"] == "closed":
        raise Withdrawn(view)
    yield from acknowledge(session, loop_id, view["gate"]["id"])
    return view["answer"]


def settled(session: str, view: Dict[str, Any], deadline: Optional[float]) -> Flow:
    """Long-polls the gate of ``view`` until it leaves ``open`` and returns its final view.
    Connection trouble and restarts are waited out (the gate is durable). At ``deadline`` (a
    ``time.monotonic()``; ``None``: never) the gate is withdrawn, see :func:`withdraw`."""
    gate = view["gate"]["id"]
    path = f"/v1/sessions/{session}/gates/{gate}"
    backoff = Backoff()
    while view["state"] == "open":
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            view = yield from withdraw(path, gate)
            break
        seconds = 30 if left is None else max(0, min(30, int(left)))
        if seconds == 0:
            yield Sleep(left or 0)
            continue
        try:
            response = yield Call("GET", f"{path}/wait?timeout={seconds}", timeout=seconds + 15)
        except Unreachable:
            yield Sleep(backoff.next())
            continue
        if response.ok:
            backoff.reset()
            view = response.body
        elif response.error().retryable:
            yield Sleep(backoff.next())
        else:
            raise response.error()
    return view


def withdraw(path: str, gate: str) -> Flow:
    """The deadline passed: withdraws the gate as abandoned and raises :class:`TimedOut`, unless
    an answer (or a close) won the race, whose view is then returned."""
    response = yield from retried(Call("POST", f"{path}/close", json={"reason": "abandoned"}))
    if response.status == 409:
        return expect((yield from retried(Call("GET", path))))
    raise TimedOut(gate)


def acknowledge(session: str, loop_id: str, gate: str) -> Flow:
    """Acks the command of ``gate`` in the loop's inbox (its answer has been taken), looking
    through the loop's unacked commands page by page. Best effort: the answer is known either
    way, and an unacked command is merely offered again."""
    inbox = f"/v1/sessions/{session}/loops/{loop_id}/commands"
    after = 0
    try:
        while True:
            page = expect((yield from retried(Call("GET", f"{inbox}?after={after}&limit=1000"))))
            if not page["commands"]:
                return
            for entry in page["commands"]:
                command = entry["command"]
                if command["gate_id"] == gate:
                    yield from retried(Call("POST", f"{inbox}/{command['command_id']}/ack"))
                    return
            if int(page["next_after"]) <= after:
                return
            after = int(page["next_after"])
    except GatehouseError:
        pass


def answer(gate_id: str, text: str, idempotency_key: Optional[str]) -> Flow:
    """Answers an ``ask`` gate by its id alone; returns the journal seq of the answer."""
    return (yield from respond(gate_id, {"action": "answer", "values": {"answer": text}}, idempotency_key))


def respond(gate_id: str, body: Dict[str, Any], idempotency_key: Optional[str]) -> Flow:
    """Responds to a gate by its id alone (its session is looked up); returns the journal seq of
    the response. One key for every retry, so a response whose first try's outcome is unknown is
    never given twice."""
    view = expect((yield from retried(Call("GET", f"/v1/gates/{gate_id}"))))
    key = idempotency_key or fresh_id()
    call = Call(
        "POST",
        f"/v1/sessions/{view['session_id']}/gates/{gate_id}",
        json=body,
        headers={"Idempotency-Key": key},
    )
    accepted = expect((yield from retried(call)))
    return int(accepted["journal_seq"])


#: The kinds of the host-owned gates: a form to fill in, and a URL to open.
FORM = "harness.form"
OPEN_URL = "harness.open_url"


def cancel_at(timeout: float) -> Dict[str, Any]:
    """The response policy that answers ``cancel`` after ``timeout`` seconds."""
    nanos = int(timeout * 1_000_000_000)
    return {"timeout": nanos, "on_timeout": "respond", "response": {"action": "cancel"}}


def form_body(
    schema: Mapping[str, Any], body: str, *, title: Optional[str], timeout: Optional[float]
) -> Dict[str, Any]:
    request: Dict[str, Any] = {"kind": FORM, "body": body}
    if title is not None:
        request["title"] = title
    # Harness fields as they are, or a JSON Schema the server translates into them.
    request["schema" if "fields" in schema else "json_schema"] = dict(schema)
    if timeout is not None:
        request["response_policy"] = cancel_at(timeout)
    return request


def open_url_body(
    url: str, body: str, *, title: Optional[str], requires_completion: bool, timeout: Optional[float]
) -> Dict[str, Any]:
    request: Dict[str, Any] = {"kind": OPEN_URL, "body": body, "url": url}
    if title is not None:
        request["title"] = title
    if requires_completion:
        request["requires_completion"] = True
    if timeout is not None:
        request["response_policy"] = cancel_at(timeout)
    return request


def host_gate(request: Dict[str, Any], session: Optional[str]) -> Flow:
    """Opens a host-owned gate and waits until it leaves ``open``; returns its final view (a
    closed one raises :class:`Withdrawn`). No ids find such a gate again, so the open is not
    repeated blindly, and a wait that is cancelled withdraws the gate as ``abandoned``: nobody
    would read its answer."""
    session = session or fresh_id()
    call = Call("POST", f"/v1/sessions/{session}/gates", json=request)
    view = expect((yield from retried(call, repeatable=False)))
    try:
        view = yield from settled(session, view, None)
    except Cancelled:
        yield from abandon(session, view["gate"]["id"])
        raise
    if view["state"] == "closed":
        raise Withdrawn(view)
    return view


def abandon(session: str, gate: str) -> Flow:
    """Withdraws ``gate`` as ``abandoned``, best effort (it may have been answered meanwhile)."""
    close = Call("POST", f"/v1/sessions/{session}/gates/{gate}/close", json={"reason": "abandoned"}, timeout=5.0)
    try:
        yield from retried(close, tries=2)
    except GatehouseError:
        pass


def form(
    schema: Mapping[str, Any],
    body: str,
    *,
    title: Optional[str],
    timeout: Optional[float],
    session: Optional[str],
) -> Flow:
    """Opens a form gate, waits until the person (or the policy, at ``timeout``) answers it,
    returns the :class:`FormResult`."""
    view = yield from host_gate(form_body(schema, body, title=title, timeout=timeout), session)
    decision = view.get("decision") or {}
    values = decision.get("values")
    return FormResult(
        action=action_of(decision),
        values=dict(values) if decision.get("action") == "accept" and isinstance(values, dict) else None,
        principal=decision.get("principal"),
        source=source_of(decision),
        gate_id=str(view["gate"]["id"]),
        view=view,
    )


def open_url(
    url: str,
    body: str,
    *,
    title: Optional[str],
    requires_completion: bool,
    timeout: Optional[float],
    session: Optional[str],
) -> Flow:
    """Opens an open-URL gate, waits until the person (or the policy, at ``timeout``) answers
    it, returns the :class:`OpenUrlResult`."""
    request = open_url_body(url, body, title=title, requires_completion=requires_completion, timeout=timeout)
    view = yield from host_gate(request, session)
    decision = view.get("decision") or {}
    return OpenUrlResult(
        action=action_of(decision),
        principal=decision.get("principal"),
        source=source_of(decision),
        gate_id=str(view["gate"]["id"]),
        view=view,
    )


def action_of(decision: Mapping[str, Any]) -> "FormAction":
    """A host-owned gate's answer; one that cannot be read accepts nothing (``cancel``)."""
    action = decision.get("action")
    return action if action in ("accept", "decline") else "cancel"


def source_of(decision: Mapping[str, Any]) -> str:
    source = decision.get("source")
    if isinstance(source, Mapping):
        source = source.get("kind")
    return str(source or "user")


#: The kind of a permission gate, and its controls.
PERMISSION = "harness.permission"
APPROVE = "Approve"
APPROVE_ALWAYS = "Approve always for this workspace"
DENY = "Deny"


def permission_body(
    loop_id: str,
    tool: str,
    tool_name: str,
    tool_input: Optional[Mapping[str, Any]],
    *,
    schema: Optional[Mapping[str, Any]],
    editable: bool,
    risk: Optional[str],
    timeout: Optional[float],
    summary: Optional[str],
    requirements: Optional[Sequence[Union[str, Mapping[str, Any]]]],
) -> Dict[str, Any]:
    body: Dict[str, Any] = {"kind": PERMISSION, "loop_id": loop_id, "tool_execution_id": tool, "tool_name": tool_name}
    if summary is not None:
        body["summary"] = summary
    if requirements:
        body["requirements"] = [r if isinstance(r, str) else dict(r) for r in requirements]
    if tool_input is not None:
        body["tool_input"] = dict(tool_input)
    if schema is not None:
        body["tool_input_schema"] = schema
    if risk is not None:
        body["risk"] = risk
    body["editable"] = editable
    if timeout is not None:
        nanos = int(timeout * 1_000_000_000)
        body["response_policy"] = {"timeout": nanos, "on_timeout": "respond", "response": {"action": DENY}}
    return body


def approve_tool_call(
    tool_name: str,
    tool_input: Optional[Mapping[str, Any]],
    *,
    schema: Optional[Mapping[str, Any]],
    editable: bool,
    risk: Optional[str],
    timeout: Optional[float],
    summary: Optional[str],
    requirements: Optional[Sequence[Union[str, Mapping[str, Any]]]],
    session: Optional[str],
    loop_id: Optional[str],
    tool_execution_id: Optional[str],
) -> Flow:
    """Opens a permission gate (or finds the one these ids opened before), waits until it is
    decided (the server denies it at its deadline, so the deadline is never ours), acknowledges
    the loop's ApproveToolCall or DenyToolCall command, returns the :class:`Decision`."""
    session = session or fresh_id()
    loop_id = loop_id or fresh_id()
    tool = tool_execution_id or fresh_id()
    body = permission_body(
        loop_id, tool, tool_name, tool_input,
        schema=schema, editable=editable, risk=risk, timeout=timeout, summary=summary, requirements=requirements,
    )
    # The same ids find the same gate: an open is safe to repeat, and so is a whole call.
    view = expect((yield from retried(Call("POST", f"/v1/sessions/{session}/gates", json=body))))
    view = yield from settled(session, view, None)
    if view["state"] == "closed":
        raise Withdrawn(view)
    yield from acknowledge(session, loop_id, view["gate"]["id"])
    return decision_of(view, tool_input)


def decision_of(view: Dict[str, Any], tool_input: Optional[Mapping[str, Any]]) -> "Decision":
    """The :class:`Decision` in a decided permission gate's view; without one, a denial (a
    decision that cannot be read approves nothing)."""
    decision = view.get("decision") or {}
    approved = decision.get("effect") == "approve"
    by_policy = decision.get("source") == "policy"
    final = decision.get("tool_input", tool_input) if approved else tool_input
    return Decision(
        approved=approved,
        tool_input=None if final is None else dict(final),
        edited=approved and bool(decision.get("edited")),
        reason=None if approved else decision.get("reason"),
        principal=None if by_policy else decision.get("principal"),
        by_policy=by_policy,
        action=str(decision.get("action") or ""),
        gate_id=str(view["gate"]["id"]),
        view=view,
    )


def approval(tool_input: Optional[Mapping[str, Any]], always: bool) -> Dict[str, Any]:
    body: Dict[str, Any] = {"action": APPROVE_ALWAYS if always else APPROVE}
    if tool_input is not None:
        body["values"] = {"tool_input": dict(tool_input)}
    return body


def denial(reason: Optional[str]) -> Dict[str, Any]:
    body: Dict[str, Any] = {"action": DENY}
    if reason is not None:
        body["values"] = {"reason": reason}
    return body


def gates(state: Optional[str], session: Optional[str]) -> Flow:
    """Every gate in ``state`` (comma-separated states; ``None``: all), oldest first, page by page."""
    base = f"/v1/sessions/{session}/gates" if session else "/v1/gates"
    query = "limit=1000" + (f"&state={state}" if state else "")
    found: List[Dict[str, Any]] = []
    after: Optional[str] = None
    while True:
        cursor = f"&after={after}" if after else ""
        page = expect((yield from retried(Call("GET", f"{base}?{query}{cursor}"))))
        found.extend(page["gates"])
        after = page.get("next_after")
        if not after:
            return found


def events_call(after: int, session: Optional[str]) -> Call:
    """The request that follows the journal after seq ``after``."""
    path = f"/v1/sessions/{session}/events" if session else "/v1/events"
    return Call("GET", path, headers={"Accept": "text/event-stream", "Last-Event-ID": str(after)})


@dataclass
class Event:
    """One journal event: its ``seq`` (the SSE id) and the event itself."""

    seq: int
    event: Dict[str, Any]

    @property
    def type(self) -> str:
        return str(self.event.get("type", ""))


@dataclass
class Decision:
    """How a person (or the gate's policy) decided a tool call, as
    :meth:`~gatehouse.Client.approve_tool_call` returns it."""

    #: Whether the call may run. A denial is ``False``, also one by the policy at the deadline.
    approved: bool
    #: The input to run the call with: the approver's edit, or the input as it was asked (also
    #: for a denial, for the record).
    tool_input: Optional[Dict[str, Any]]
    #: Whether the approver changed the input.
    edited: bool
    #: A denial's reason, when the person gave one; ``None`` otherwise.
    reason: Optional[str]
    #: Who decided, when the server knows (the name of their token); ``None`` for the policy.
    principal: Optional[str]
    #: Whether the gate's policy decided (at its deadline), not a person.
    by_policy: bool
    #: The control chosen: ``"Approve"``, ``"Approve always for this workspace"`` or ``"Deny"``.
    action: str
    #: The gate that asked.
    gate_id: str
    #: The gate's final view (``decision``, ``resolution``, ``gate.tool_call``).
    view: Dict[str, Any] = field(default_factory=dict, repr=False)


#: How a person answered a form or open-URL gate: submitted (or confirmed), declined, or
#: dismissed it (also what a timeout answers).
FormAction = Literal["accept", "decline", "cancel"]


@dataclass
class FormResult:
    """How a person (or the gate's policy, at its deadline) answered a form, as
    :meth:`~gatehouse.Client.form` returns it."""

    #: ``"accept"`` (submitted), ``"decline"`` or ``"cancel"`` (also the policy's, at the deadline).
    action: FormAction
    #: The submitted values, typed as the fields are (``None`` unless accepted).
    values: Optional[Dict[str, Any]]
    #: Who answered, when the server knows (the name of their token).
    principal: Optional[str]
    #: ``"user"``, or ``"policy"`` for the answer at the deadline.
    source: str
    #: The gate that asked.
    gate_id: str
    #: The gate's final view (``decision``, ``resolution``, ``gate.prompt.schema``).
    view: Dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass
class OpenUrlResult:
    """How a person (or the gate's policy) answered an open-URL gate, as
    :meth:`~gatehouse.Client.open_url` returns it."""

    #: ``"accept"`` (done, or completed when completion was required), ``"decline"`` or ``"cancel"``.
    action: FormAction
    #: Who answered, when the server knows.
    principal: Optional[str]
    #: ``"user"``, or ``"policy"`` for the answer at the deadline.
    source: str
    #: The gate that asked.
    gate_id: str
    #: The gate's final view.
    view: Dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass
class Frame:
    event: str = "message"
    data: str = ""
    id: Optional[str] = None


class SseParser:
    """Server-Sent Events, as the WHATWG rules read them: CRLF, LF or CR ends a line (also split
    across chunks), ``data`` lines are joined with ``\\n``, comments and unknown fields are
    ignored, a blank line dispatches a frame."""

    def __init__(self) -> None:
        self._buffer = ""
        self._pending_cr = False
        self._event = ""
        self._data: List[str] = []
        self._id: Optional[str] = None
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")

    def feed(self, chunk: bytes) -> List[Frame]:
        text = self._decoder.decode(chunk)
        frames: List[Frame] = []
        for char in text:
            if self._pending_cr:
                self._pending_cr = False
                if char == "\n":
                    continue
            if char in "\r\n":
                self._pending_cr = char == "\r"
                frame = self._line(self._buffer)
                self._buffer = ""
                if frame is not None:
                    frames.append(frame)
            else:
                self._buffer += char
        return frames

    def _line(self, line: str) -> Optional[Frame]:
        if line == "":
            if not self._data and not self._event:
                return None
            frame = Frame(event=self._event or "message", data="\n".join(self._data), id=self._id)
            self._event, self._data = "", []
            return frame
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        elif name == "id" and "\0" not in value:
            self._id = value
        return None


def event_of(frame: Frame) -> Optional[Event]:
    """The journal event of an ``enduring`` frame; raises :class:`StreamReset` for ``reset``."""
    if frame.event == "reset":
        data = json.loads(frame.data or "{}")
        raise StreamReset(int(data.get("earliest", 0)), int(data.get("head", 0)))
    if frame.event != "enduring" or frame.id is None:
        return None
    return Event(seq=int(frame.id), event=json.loads(frame.data)["event"])
