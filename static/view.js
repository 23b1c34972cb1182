// Building the page's elements. Text from gates only ever goes in as text (h() sets textContent
// and attributes, never HTML), so a question containing <script> shows as those characters.

/** h('p', {class: 'x'}, 'text', child…): an element with attributes and text or element children. */
export function h(tag, attributes = {}, ...children) {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value === false || value === null || value === undefined) continue;
    element.setAttribute(name, value === true ? '' : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    element.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return element;
}

/** Replaces an element's children, with h()'s rules for what a child may be. */
export function fill(element, ...children) {
  element.replaceChildren(...h('div', {}, ...children).childNodes);
}

/**
 * The first block of a UUID: enough to tell sessions apart at a glance; the full id is on hover.
 * Nothing for an id the gate does not have (a host-owned gate has no loop).
 */
export function shortId(label, id) {
  if (!id) return null;
  return h('span', { class: 'id' }, `${label} `, h('code', { title: id, 'data-testid': `${label}-id` }, id.slice(0, 8)));
}

/** RFC 3339 with nanoseconds: Date.parse is only specified for milliseconds, so cut the rest. */
export function parseTime(text) {
  return Date.parse(text.replace(/(\.\d{3})\d+/, '$1'));
}

const absolute = new Intl.DateTimeFormat(undefined, { dateStyle: 'medium', timeStyle: 'medium' });

function span(ms) {
  // Up: a deadline 59.5 s away is "in 60 s", never "in 1 min" while it is under a minute.
  const seconds = Math.ceil(Math.abs(ms) / 1000);
  if (seconds <= 60) return `${seconds} s`;
  const minutes = Math.round(seconds / 60);
  if (minutes < 60) return `${minutes} min`;
  const hours = Math.round(minutes / 60);
  if (hours < 48) return `${hours} h`;
  return `${Math.round(hours / 24)} days`;
}

/**
 * "just now", "3 min ago", or for a time ahead "in 4 min". A time ahead is never "just now": under
 * a minute a deadline counts down in seconds.
 */
export function relative(time, now = Date.now()) {
  const ms = parseTime(time) - now;
  if (ms > 0) return `in ${span(ms)}`;
  return -ms < 10000 ? 'just now' : `${span(ms)} ago`;
}

/**
 * A <time> that keeps itself current: `refreshTimes()` rewrites every one from its datetime,
 * with `data-prefix` before it ("asked 3 min ago", "deadline in 4 min").
 */
export function liveTime(prefix, time) {
  const element = h('time', { datetime: time, 'data-prefix': prefix, title: absolute.format(parseTime(time)) });
  element.textContent = withPrefix(prefix, relative(time));
  return element;
}

/** Called every second; only a text that changed is written, so most ticks touch nothing. */
export function refreshTimes(root = document) {
  const now = Date.now();
  for (const element of root.querySelectorAll('time[data-prefix]')) {
    const text = withPrefix(element.dataset.prefix, relative(element.getAttribute('datetime'), now));
    if (element.textContent !== text) element.textContent = text;
  }
}

function withPrefix(prefix, text) {
  return prefix ? `${prefix} ${text}` : text;
}

/** A policy's wait in words: 5 min, 1 min 30 s, 2 h, 7 days. `ns`: nanoseconds, as the API has it. */
function formatDuration(ns) {
  if (ns < 1e9) return `${Math.round(ns / 1e6)} ms`;
  let seconds = Math.round(ns / 1e9);
  const parts = [];
  for (const [size, unit] of [
    [86400, (n) => (n === 1 ? '1 day' : `${n} days`)],
    [3600, (n) => `${n} h`],
    [60, (n) => `${n} min`],
    [1, (n) => `${n} s`],
  ]) {
    const count = Math.floor(seconds / size);
    seconds -= count * size;
    if (count > 0 || parts.length > 0) parts.push(count > 0 ? unit(count) : null);
  }
  // The two largest units say enough ("1 day 2 h", never "1 day 2 h 3 min 4 s").
  return parts.slice(0, 2).filter(Boolean).join(' ');
}

/**
 * Who decided a gate, in words: "alice", "a person", "policy after 5 min". From the view's
 * `decision`, or from its resolution alone while the full view is still being fetched.
 */
export function decidedBy({ decision, resolution, gate }) {
  const byPolicy = decision ? decision.source === 'policy' : resolution?.source?.kind === 'policy';
  if (byPolicy) {
    const timeout = gate.response_policy?.timeout;
    return timeout ? `policy after ${formatDuration(timeout)}` : 'policy';
  }
  return decision?.principal ?? resolution?.source?.principal ?? 'a person';
}

/** How a gate left open, in words a person uses; a permission gate is decided, not answered. */
export function howResolved(resolution, permission = false) {
  switch (resolution?.reason) {
    case 'answered':
      return permission ? 'Decided by a person' : 'Answered by a person';
    case 'policy_response':
      return permission ? 'Decided on timeout' : 'Answered on timeout';
    case 'owner_closed':
      return 'Closed by its agent';
    case 'abandoned':
      return 'Abandoned';
    default:
      return 'Resolved';
  }
}

const FIELD_WORDS = {
  required: 'an answer is required',
  empty: 'the answer must not be empty',
  blank: 'the answer must not be only spaces',
  type: 'the answer must be text',
  not_a_choice: 'the answer must be one of the choices',
  too_long: 'the answer is too long',
};

/** The server's own message for a field problem; our words when it sent none. */
export function fieldMessage(field) {
  return field.message || FIELD_WORDS[field.code] || `invalid (${field.code})`;
}

/** The answer field of an AskUser gate's schema: kind text, or select with options. */
export function answerField(gate) {
  return gate.prompt?.schema?.fields?.find((field) => field.name === 'answer') ?? { kind: 'text' };
}

/**
 * Whether the question matches a search: every word somewhere in the question or its title (or,
 * for a permission gate, its tool's name: the body starts with the summary instead when there is one).
 */
export function matchesSearch(view, search) {
  if (!search) return true;
  const { gate } = view;
  const text = `${gate.prompt?.title ?? ''}\n${gate.tool_call?.tool_name ?? ''}\n${gate.prompt?.body ?? ''}`.toLowerCase();
  return search
    .toLowerCase()
    .split(/\s+/)
    .filter(Boolean)
    .every((word) => text.includes(word));
}
