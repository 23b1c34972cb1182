// A client for gatehouse: an AI agent asks a person a question and gets back exactly one answer,
// asks whether a tool call may run and gets back one decision (approved, edited, or denied), or
// asks them to fill in a form or open a URL and gets back what they did.
// ESM, for Node.js 20+ and browsers, on the built-in fetch; no dependency. Types: index.d.ts.

/** An error answer of the server, or of the client's own flow (the subclasses below). */
export class GatehouseError extends Error {
  constructor(message, { status = 0, code = '', retryable = false, body = {} } = {}) {
    super(message);
    this.name = new.target.name;
    this.status = status;
    this.code = code;
    this.retryable = retryable;
    this.body = body ?? {};
  }

  /** The `error` member of the response body. */
  get error() {
    return this.body?.error ?? {};
  }
}

/**
 * No answer at all from the server (connection refused, reset, timed out). `maybeSent` is false
 * when the request surely never reached it (no connection was made).
 */
export class Unreachable extends GatehouseError {
  constructor(url, cause, { maybeSent = true } = {}) {
    super(`cannot reach gatehouse at ${url}: ${cause}`, { retryable: true });
    this.url = url;
    this.maybeSent = maybeSent;
  }
}
/** 400, 413 or 415: the request is at fault; `fields` says where, when it can. */
export class InvalidRequest extends GatehouseError {
  get fields() {
    return this.error.fields ?? [];
  }
}
/** 401: no token, or one the server does not accept. */
export class Unauthorized extends GatehouseError {}
/** 403: the token's role or session scope does not cover this. */
export class Forbidden extends GatehouseError {}
/** 404: no such gate (in this session), command or route. */
export class NotFound extends GatehouseError {}
/** 409 `gate_not_ready`: the gate is no longer open; `resolution` is the winning GateResolved. */
export class GateConflict extends GatehouseError {
  get resolution() {
    return this.error.resolution ?? {};
  }
}
/** 409 `gate_conflict`: these ids already asked something else; `gate` is that view. */
export class ReaskConflict extends GatehouseError {
  get gate() {
    return this.error.gate ?? {};
  }
}
/** 409 `idempotency_conflict`: this key already answered the gate differently. */
export class IdempotencyConflict extends GatehouseError {}
/** 429: too many requests; retry after `retryAfter` seconds. */
export class RateLimited extends GatehouseError {
  constructor(message, options = {}) {
    super(message, options);
    this.retryAfter = options.retryAfter ?? 1;
  }
}
/** 503: storage unavailable or a capacity cap; retryable (with the same idempotency key). */
export class Unavailable extends GatehouseError {}
/** 500 or another unexpected status. */
export class ServerError extends GatehouseError {}
/** `ask`, `approveToolCall`, `form`, `openUrl`: the gate was closed (withdrawn by its owner or abandoned) unanswered. */
export class Withdrawn extends GatehouseError {
  constructor(view) {
    const reason = view?.resolution?.reason ?? 'closed';
    const [what, done] = {
      'harness.permission': ["the tool call's permission gate", 'decided'],
      'harness.form': ['the form', 'answered'],
      'harness.open_url': ['the request to open a URL', 'answered'],
    }[view?.gate?.kind] ?? ['the question', 'answered'];
    super(`${what} was withdrawn (${reason}) before anyone ${done} it`);
    this.view = view;
  }
}
/** `ask`: nobody answered before `timeout` and there was no `default`; the gate was withdrawn. */
export class TimedOut extends GatehouseError {
  constructor(gateId) {
    super(`nobody answered in time; gate ${gateId} was withdrawn`);
    this.gateId = gateId;
  }
}
/** `events`: the cursor is ahead of the journal or older than it keeps. */
export class StreamReset extends GatehouseError {
  constructor(earliest, head) {
    super(`the journal cannot resume there (it holds ${earliest}..${head})`);
    this.earliest = earliest;
    this.head = head;
  }
}

const BY_CODE = { gate_not_ready: GateConflict, gate_conflict: ReaskConflict, idempotency_conflict: IdempotencyConflict };
const BY_STATUS = { 401: Unauthorized, 403: Forbidden, 404: NotFound, 503: Unavailable };

/** The exception for an error response. */
function errorOf(status, body, retryAfter) {
  const error = body?.error ?? {};
  let message = error.message || `gatehouse answered ${status}`;
  const options = { status, code: error.code ?? '', retryable: error.retryable === true, body };
  if (status === 401) message += "; give the client a token from the server's tokens file ({ token })";
  if (status === 429) return new RateLimited(message, { ...options, retryAfter: Number(retryAfter) || 1 });
  const Kind = BY_CODE[error.code] ?? BY_STATUS[status] ?? (status >= 400 && status < 500 ? InvalidRequest : ServerError);
  return new Kind(message, options);
}

/** Full-jitter delays: at random up to 250 ms, 500 ms, … at most 5 s. */
class Backoff {
  #ceiling = 250;
  next() {
    const delay = Math.random() * this.#ceiling;
    this.#ceiling = Math.min(this.#ceiling * 2, 5000);
    return delay;
  }
  reset() {
    this.#ceiling = 250;
  }
}

const sleep = (ms, signal) =>
  new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener('abort', () => (clearTimeout(timer), reject(signal.reason)), { once: true });
  });

const freshId = () => crypto.randomUUID();
/** The kind of a permission gate, and its controls. */
const PERMISSION = 'harness.permission';
const APPROVE = 'Approve';
const APPROVE_ALWAYS = 'Approve always for this workspace';
const DENY = 'Deny';

/** The Decision in a decided permission gate's view; without one, a denial (it approves nothing). */
function decisionOf(view, toolInput) {
  const decision = view.decision ?? {};
  const approved = decision.effect === 'approve';
  const byPolicy = decision.source === 'policy';
  return {
    approved,
    toolInput: (approved && decision.tool_input !== undefined ? decision.tool_input : toolInput) ?? null,
    edited: approved && decision.edited === true,
    reason: (!approved && decision.reason) || null,
    principal: (!byPolicy && decision.principal) || null,
    byPolicy,
    action: decision.action ?? '',
    gateId: view.gate.id,
    view,
  };
}

/** The kinds of the host-owned gates: a form to fill in, and a URL to open. */
const FORM = 'harness.form';
const OPEN_URL = 'harness.open_url';

/** The response policy that answers `cancel` after `timeout` seconds. */
const cancelAt = (timeout) => ({ timeout: Math.round(timeout * 1e9), on_timeout: 'respond', response: { action: 'cancel' } });

/** A host-owned gate's answer (one that cannot be read accepts nothing: cancel), who gave it, and how. */
function answerOf(view) {
  const decision = view.decision ?? {};
  const action = decision.action === 'accept' || decision.action === 'decline' ? decision.action : 'cancel';
  const source = typeof decision.source === 'object' ? decision.source?.kind : decision.source;
  return { action, principal: decision.principal ?? null, source: source ?? 'user', gateId: view.gate.id, view };
}

/** Connection errors that mean no connection was made: the request surely never arrived. */
const NOT_SENT = new Set(['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'UND_ERR_CONNECT_TIMEOUT']);

/** Tries of a request that is safe to repeat but should not be repeated forever. */
const TRIES = 5;

export class Client {
  /**
   * @param {string} [url] the server, http://127.0.0.1:8080 by default
   * @param {{token?: string, fetch?: typeof fetch}} [options] a bearer token from its tokens file
   */
  constructor(url = 'http://127.0.0.1:8080', { token, fetch: fetchImpl } = {}) {
    this.url = url.replace(/\/+$/, '');
    this.#headers = token ? { authorization: `Bearer ${token}` } : {};
    this.#fetch = fetchImpl ?? globalThis.fetch.bind(globalThis);
  }

  #headers;
  #fetch;

  /**
   * Asks a person and resolves to the answer once they give it (restarts of the server are
   * waited out; the loop command the answer produced is acknowledged).
   */
  async ask(question, { choices, allowOther = false, timeout, default: fallback, session, signal } = {}) {
    session ??= freshId();
    const loopId = freshId();
    const body = { loop_id: loopId, tool_execution_id: freshId(), question };
    if (choices?.length) Object.assign(body, { choices, allow_other: allowOther });
    if (timeout !== undefined) {
      const nanos = Math.round(timeout * 1e9);
      body.response_policy =
        fallback !== undefined
          ? { timeout: nanos, on_timeout: 'respond', response: { action: 'answer', values: { answer: fallback } } }
          : { timeout: nanos, on_timeout: 'wait' };
    }
    // The same ids find the same gate: an open is safe to repeat.
    let view = await this.#expect(this.#retried('POST', `/v1/sessions/${session}/gates`, { body, signal }));
    // With a default the server answers at the deadline; without one, the deadline is ours.
    const deadline = timeout !== undefined && fallback === undefined ? Date.now() + timeout * 1000 : undefined;
    view = await this.#settled(session, view, deadline, signal);
    if (view.state === 'closed') throw new Withdrawn(view);
    await this.#acknowledge(session, loopId, view.gate.id);
    return view.answer;
  }

  /**
   * Asks a person whether the tool call `toolName(toolInput)` may run and resolves to the
   * Decision once it is decided: approved as it is, approved with an edited input (`editable`,
   * checked against `schema`), or denied, by a person or by the policy at the deadline (`timeout`
   * seconds; without one the server's default, a denial after 5 minutes). A denial resolves; it
   * does not reject. The same `session`, `loopId` and `toolExecutionId` find the same gate again.
   */
  async approveToolCall(
    toolName,
    toolInput,
    { schema, editable = false, risk, timeout, summary, requirements, session, loopId, toolExecutionId, signal } = {},
  ) {
    session ??= freshId();
    loopId ??= freshId();
    const body = { kind: PERMISSION, loop_id: loopId, tool_execution_id: toolExecutionId ?? freshId(), tool_name: toolName };
    if (summary !== undefined) body.summary = summary;
    if (requirements?.length) body.requirements = requirements;
    if (toolInput !== undefined && toolInput !== null) body.tool_input = toolInput;
    if (schema !== undefined) body.tool_input_schema = schema;
    if (risk !== undefined) body.risk = risk;
    body.editable = editable;
    if (timeout !== undefined) {
      body.response_policy = { timeout: Math.round(timeout * 1e9), on_timeout: 'respond', response: { action: DENY } };
    }
    // The same ids find the same gate: an open is safe to repeat, and so is a whole call.
    let view = await this.#expect(this.#retried('POST', `/v1/sessions/${session}/gates`, { body, signal }));
    // The server decides at the deadline: the wait has none of its own.
    view = await this.#settled(session, view, undefined, signal);
    if (view.state === 'closed') throw new Withdrawn(view);
    await this.#acknowledge(session, loopId, view.gate.id);
    return decisionOf(view, toolInput);
  }

  /**
   * Asks a person to fill in a form and resolves to the FormResult once they answer: `accept`
   * with the typed `values`, `decline` or `cancel`. `schema` is a JSON Schema of an object (sent
   * as `json_schema`) or harness fields (`{fields: [...]}`, sent as `schema`); `body` is what the
   * person reads, under `title`. The server checks the values against the schema. At `timeout`
   * seconds the server answers `cancel` (`source: 'policy'`). Each call opens a new gate in
   * `session` (a fresh one by default); aborting `signal` withdraws it. A gate closed unanswered
   * rejects with Withdrawn, a schema the server refuses with InvalidRequest.
   */
  async form(schema, body, { title, timeout, session, signal } = {}) {
    const request = { kind: FORM, body };
    if (title !== undefined) request.title = title;
    // Harness fields as they are, or a JSON Schema the server translates into them.
    request['fields' in schema ? 'schema' : 'json_schema'] = schema;
    if (timeout !== undefined) request.response_policy = cancelAt(timeout);
    const view = await this.#hostGate(request, session, signal);
    const answer = answerOf(view);
    const values = answer.action === 'accept' ? view.decision?.values ?? null : null;
    return { action: answer.action, values, principal: answer.principal, source: answer.source, gateId: answer.gateId, view };
  }

  /**
   * Asks a person to open `url` (a sign-in, a device code, a payment) and resolves to the
   * OpenUrlResult once they answer: `accept` (done, or completed with `requiresCompletion`),
   * `decline` or `cancel`. The URL is a secret only the answer side reads. At `timeout` seconds
   * the server answers `cancel`. Each call opens a new gate; aborting `signal` withdraws it.
   */
  async openUrl(url, body, { title, requiresCompletion = false, timeout, session, signal } = {}) {
    const request = { kind: OPEN_URL, body, url };
    if (title !== undefined) request.title = title;
    if (requiresCompletion) request.requires_completion = true;
    if (timeout !== undefined) request.response_policy = cancelAt(timeout);
    return answerOf(await this.#hostGate(request, session, signal));
  }

  /** Answers an `ask` gate by its id; resolves to the answer's journal seq. */
  async answer(gateId, answer, { idempotencyKey } = {}) {
    return this.#respond(gateId, { action: 'answer', values: { answer } }, idempotencyKey);
  }

  /**
   * Approves a permission gate by its id (with `toolInput`: that edit, which must fit the gate's
   * schema; with `always`: "Approve always for this workspace"); resolves to the journal seq.
   */
  async approve(gateId, { toolInput, always = false, idempotencyKey } = {}) {
    const body = { action: always ? APPROVE_ALWAYS : APPROVE };
    if (toolInput !== undefined && toolInput !== null) body.values = { tool_input: toolInput };
    return this.#respond(gateId, body, idempotencyKey);
  }

  /** Denies a permission gate by its id, with `reason` for the agent; resolves to the journal seq. */
  async deny(gateId, { reason, idempotencyKey } = {}) {
    const body = { action: DENY };
    if (reason !== undefined && reason !== null) body.values = { reason };
    return this.#respond(gateId, body, idempotencyKey);
  }

  /** The gates in `state` (comma-separated states; null: all), of every session or of `session`. */
  async gates({ state = 'open', session } = {}) {
    const base = session ? `/v1/sessions/${session}/gates` : '/v1/gates';
    const found = [];
    let after;
    do {
      const query = new URLSearchParams({ limit: '1000' });
      if (state) query.set('state', state);
      if (after) query.set('after', after);
      const page = await this.#expect(this.#retried('GET', `${base}?${query}`));
      found.push(...page.gates);
      after = page.next_after;
    } while (after);
    return found;
  }

  /**
   * Every journal event after seq `after`, then live ones, until `signal` aborts (or the loop
   * breaks): reconnects by itself with Last-Event-ID, never skipping or repeating an event.
   */
  async *events({ after = 0, session, signal } = {}) {
    const path = session ? `/v1/sessions/${session}/events` : '/v1/events';
    const backoff = new Backoff();
    while (!signal?.aborted) {
      let response;
      try {
        response = await this.#fetch(`${this.url}${path}`, {
          headers: { ...this.#headers, accept: 'text/event-stream', 'last-event-id': String(after) },
          signal,
        });
      } catch (e) {
        if (signal?.aborted) return;
        await sleep(backoff.next(), signal).catch(() => {});
        continue;
      }
      if (response.status !== 200) {
        const body = await response.json().catch(() => ({}));
        throw errorOf(response.status, body, response.headers.get('retry-after'));
      }
      backoff.reset();
      const parser = new SseParser();
      try {
        for await (const chunk of response.body) {
          for (const frame of parser.feed(chunk)) {
            if (frame.event === 'reset') {
              const data = JSON.parse(frame.data || '{}');
              throw new StreamReset(data.earliest ?? 0, data.head ?? 0);
            }
            if (frame.event !== 'enduring' || frame.id === undefined) continue;
            const seq = Number(frame.id);
            after = seq;
            const event = JSON.parse(frame.data).event;
            yield { seq, type: event.type, event };
          }
        }
      } catch (e) {
        if (e instanceof GatehouseError) throw e;
        if (signal?.aborted) return;
      }
      // The server went away (a restart, a stall): come back after the last event seen.
      await sleep(backoff.next(), signal).catch(() => {});
    }
  }

  /**
   * Opens a host-owned gate and waits until it leaves open; resolves to its final view (a closed
   * one rejects with Withdrawn). No ids find such a gate again, so the open is not repeated
   * blindly, and a wait that `signal` aborts withdraws the gate as abandoned: nobody would read
   * its answer.
   */
  async #hostGate(body, session, signal) {
    session ??= freshId();
    let view = await this.#expect(this.#retried('POST', `/v1/sessions/${session}/gates`, { body, signal, repeatable: false }));
    try {
      view = await this.#settled(session, view, undefined, signal);
    } catch (e) {
      if (signal?.aborted) await this.#abandon(`/v1/sessions/${session}/gates/${view.gate.id}`);
      throw e;
    }
    if (view.state === 'closed') throw new Withdrawn(view);
    return view;
  }

  /** Withdraws a gate as abandoned, best effort (it may have been answered meanwhile). */
  async #abandon(path) {
    try {
      await this.#retried('POST', `${path}/close`, { body: { reason: 'abandoned' }, timeout: 5000, tries: 2 });
    } catch {
      // Unreachable: the gate stays open until someone answers or closes it.
    }
  }

  async #withdraw(path, gate) {
    const reply = await this.#retried('POST', `${path}/close`, { body: { reason: 'abandoned' } });
    if (reply.status === 409) return this.#expect(this.#retried('GET', path));
    throw new TimedOut(gate);
  }

  /**
   * Long-polls the gate of `view` until it leaves `open`; resolves to its final view. Connection
   * trouble and restarts are waited out (the gate is durable). At `deadline` (epoch ms) the gate
   * is withdrawn (TimedOut, unless an answer won the race); `signal` stops waiting.
   */
  async #settled(session, view, deadline, signal) {
    const gate = view.gate.id;
    const path = `/v1/sessions/${session}/gates/${gate}`;
    const backoff = new Backoff();
    while (view.state === 'open') {
      const left = deadline === undefined ? undefined : deadline - Date.now();
      if (left !== undefined && left <= 0) {
        view = await this.#withdraw(path, gate);
        break;
      }
      const seconds = left === undefined ? 30 : Math.min(30, Math.floor(left / 1000));
      if (seconds === 0) {
        await sleep(left, signal);
        continue;
      }
      let reply;
      try {
        reply = await this.#send('GET', `${path}/wait?timeout=${seconds}`, { signal, timeout: (seconds + 15) * 1000 });
      } catch (e) {
        if (!(e instanceof Unreachable)) throw e;
        await sleep(backoff.next(), signal);
        continue;
      }
      if (reply.ok) {
        backoff.reset();
        view = reply.body;
      } else if (reply.error.retryable) {
        await sleep(backoff.next(), signal);
      } else {
        throw reply.error;
      }
    }
    return view;
  }

  /** Responds to a gate by its id alone (its session looked up), one idempotency key for every try. */
  async #respond(gateId, body, idempotencyKey) {
    const view = await this.#expect(this.#retried('GET', `/v1/gates/${gateId}`));
    const headers = { 'idempotency-key': idempotencyKey ?? freshId() };
    const accepted = await this.#expect(
      this.#retried('POST', `/v1/sessions/${view.session_id}/gates/${gateId}`, { body, headers }),
    );
    return accepted.journal_seq;
  }

  /**
   * Acks the command of `gate` in the loop's inbox, looking through its unacked commands page by
   * page. Best effort: the answer is known either way, and an unacked command is offered again.
   */
  async #acknowledge(session, loopId, gate) {
    const inbox = `/v1/sessions/${session}/loops/${loopId}/commands`;
    try {
      for (let after = 0; ; ) {
        const page = await this.#expect(this.#retried('GET', `${inbox}?after=${after}&limit=1000`));
        if (!page.commands.length) return;
        const entry = page.commands.find((c) => c.command.gate_id === gate);
        if (entry) {
          await this.#retried('POST', `${inbox}/${entry.command.command_id}/ack`);
          return;
        }
        if (!(page.next_after > after)) return;
        after = page.next_after;
      }
    } catch (e) {
      if (!(e instanceof GatehouseError)) throw e;
    }
  }

  async #expect(replying) {
    const reply = await replying;
    if (!reply.ok) throw reply.error;
    return reply.body;
  }

  /**
   * Sends until the answer is not a retryable 503 and the server was reached, at most `tries`
   * times. Unless `repeatable`, a request that may have arrived is not sent again.
   */
  async #retried(method, path, { tries = TRIES, repeatable = true, ...options } = {}) {
    const backoff = new Backoff();
    for (let attempt = 1; ; attempt++) {
      const last = attempt >= tries;
      try {
        const reply = await this.#send(method, path, options);
        if (!(reply.status === 503 && reply.error.retryable) || last) return reply;
      } catch (e) {
        if (!(e instanceof Unreachable) || last || (e.maybeSent && !repeatable)) throw e;
      }
      await sleep(backoff.next(), options.signal);
    }
  }

  async #send(method, path, { body, headers = {}, signal, timeout = 30_000 } = {}) {
    const signals = [AbortSignal.timeout(timeout), signal].filter(Boolean);
    let response;
    try {
      response = await this.#fetch(`${this.url}${path}`, {
        method,
        headers: { ...this.#headers, ...headers, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
        body: body === undefined ? undefined : JSON.stringify(body),
        signal: AbortSignal.any(signals),
      });
    } catch (e) {
      if (signal?.aborted) throw signal.reason;
      const cause = e?.cause?.code ?? e?.cause?.message ?? e?.message ?? String(e);
      throw new Unreachable(this.url, cause, { maybeSent: !NOT_SENT.has(e?.cause?.code) });
    }
    const text = await response.text();
    let parsed = null;
    try {
      parsed = text ? JSON.parse(text) : null;
    } catch {
      // A proxy's HTML error page: no details.
    }
    const ok = response.status >= 200 && response.status < 300;
    const reply = { ok, status: response.status, body: parsed };
    if (!ok) reply.error = errorOf(response.status, parsed, response.headers.get('retry-after'));
    return reply;
  }
}

/**
 * Server-Sent Events as the WHATWG rules read them: CRLF, LF or CR ends a line (also split
 * across chunks), data lines are joined with "\n", comments and unknown fields are ignored.
 */
export class SseParser {
  #decoder = new TextDecoder();
  #line = '';
  #pendingCr = false;
  #event = '';
  #data = [];
  #id = undefined;

  /** @param {Uint8Array} chunk */
  feed(chunk) {
    const frames = [];
    for (const char of this.#decoder.decode(chunk, { stream: true })) {
      if (this.#pendingCr) {
        this.#pendingCr = false;
        if (char === '\n') continue;
      }
      if (char === '\r' || char === '\n') {
        this.#pendingCr = char === '\r';
        const frame = this.#take(this.#line);
        this.#line = '';
        if (frame) frames.push(frame);
      } else {
        this.#line += char;
      }
    }
    return frames;
  }

  #take(line) {
    if (line === '') {
      if (!this.#data.length && !this.#event) return undefined;
      const frame = { event: this.#event || 'message', data: this.#data.join('\n'), id: this.#id };
      this.#event = '';
      this.#data = [];
      return frame;
    }
    if (line.startsWith(':')) return undefined;
    const colon = line.indexOf(':');
    const name = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (name === 'event') this.#event = value;
    else if (name === 'data') this.#data.push(value);
    else if (name === 'id' && !value.includes('\0')) this.#id = value;
    return undefined;
  }
}
