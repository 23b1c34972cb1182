// The few calls the inbox page makes to the gatehouse JSON API (openapi.yaml is the contract).

/** An error answer of the API, or a request that never got one (status 0). */
export class ApiError extends Error {
  constructor(status, error) {
    super(error?.message || `the server answered ${status}`);
    this.status = status;
    this.code = error?.code ?? (status === 0 ? 'unreachable' : 'unexpected');
    // No answer at all, or a server that says so: the outcome is unknown and a retry is safe.
    this.retryable = status === 0 || error?.retryable === true;
    this.fields = Array.isArray(error?.fields) ? error.fields : [];
    this.resolution = error?.resolution ?? null;
  }
}

async function request(path, { method = 'GET', headers = {}, body } = {}) {
  let response;
  let text;
  try {
    response = await fetch(path, {
      method,
      headers: { Accept: 'application/json', ...headers },
      body,
      cache: 'no-store',
    });
    text = await response.text();
  } catch {
    throw new ApiError(0, { message: 'the server could not be reached' });
  }
  let json = null;
  try {
    json = text ? JSON.parse(text) : null;
  } catch {
    // A proxy's HTML error page, say: fall through with no details.
  }
  if (!response.ok) throw new ApiError(response.status, json?.error);
  return json;
}

/**
 * Every gate in the given states, newest first, following `next_after` to the end. The snapshot
 * point is the first page's `journal_seq`: following the journal from there misses nothing.
 */
export async function listAllGates(states) {
  const query = new URLSearchParams({ state: states, order: 'newest', limit: '200' });
  let page = await request(`/v1/gates?${query}`);
  const journalSeq = page.journal_seq;
  const gates = [...page.gates];
  while (page.next_after) {
    query.set('after', page.next_after);
    page = await request(`/v1/gates?${query}`);
    gates.push(...page.gates);
  }
  return { gates, journalSeq };
}

/** One page of finished gates, most recently resolved first: enough for a "recently" list. */
export async function listSomeGates(states, limit) {
  const query = new URLSearchParams({ state: states, order: 'resolved', limit: String(limit) });
  return (await request(`/v1/gates?${query}`)).gates;
}

export function getGate(gateId) {
  return request(`/v1/gates/${encodeURIComponent(gateId)}`);
}

/** A gate's own route, under its session: where it is answered. */
function gatePath(view) {
  return `/v1/sessions/${encodeURIComponent(view.session_id)}/gates/${encodeURIComponent(view.gate.id)}`;
}

/**
 * Answers a gate with `body`: `{action: 'answer', values: {answer}}` for AskUser, `{action:
 * 'Approve' | 'Deny' | …, values?}` for a permission gate, `{action: 'accept', values?}`,
 * `{action: 'decline'}` or `{action: 'cancel'}` for a form or an open-URL gate. `key` is the
 * attempt's Idempotency-Key, the same for every retry of it.
 */
export function answerGate(view, body, key) {
  return request(gatePath(view), {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', 'Idempotency-Key': key },
    body: JSON.stringify(body),
  });
}

/**
 * An open-URL gate's URL, `{url}`. It is a secret, in no view, event or listing: only a person
 * allowed to answer reads it, and only while the gate is open (after that: 409 gate_not_ready).
 */
export function getGateUrl(view) {
  return request(`${gatePath(view)}/url`);
}

/**
 * Trades a token for the server's login cookie (HttpOnly: this script never sees it again, and keeps
 * no copy of the token). 204 on success; 401 for a token the server does not know. A server without
 * a tokens file answers 204 too, and needs no login.
 */
export function login(token) {
  return request('/v1/login', {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ token }),
  });
}

/** A fresh Idempotency-Key. randomUUID exists only in secure contexts; a page served over plain
 *  HTTP on a LAN address is not one, so fall back to the same UUID v4 built by hand. */
export function newIdempotencyKey() {
  if (typeof crypto.randomUUID === 'function') return crypto.randomUUID();
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  bytes[6] = (bytes[6] & 0x0f) | 0x40;
  bytes[8] = (bytes[8] & 0x3f) | 0x80;
  const hex = [...bytes].map((b) => b.toString(16).padStart(2, '0')).join('');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}
