// The inbox page: every open gate across sessions, live, answerable from here.
//
// The page holds two keyed collections, open gates and recently resolved ones, and changes the
// DOM one gate at a time, so a card being typed into is never rebuilt under the person's cursor.
// Journal events are applied idempotently by gate id: a snapshot followed by the journal may
// repeat what the page already knows, and that must change nothing.
//
// A permission gate (`harness.permission`, one with a `tool_call`) shows as an approval card:
// Approve, Approve always (when offered), Deny with an optional reason and, when the call is
// editable, an editor of its input (permission.js). Its resolved entry says how it was decided.
//
// A form gate (`harness.form`) shows its fields as native controls, checked before anything is
// sent, with its controls (Submit, Decline, Cancel); an open-URL gate (`harness.open_url`) shows
// where its link goes and the link itself, read from the server when the card is built (it is a
// secret, in no event or view), with Done, Decline and Cancel (form.js). Their resolved entries
// say what was answered, by whom, and a form's values.
//
// With a tokens file on the server, any call refused with 401 (or 403 for a token that may not read
// everything) swaps the lists for a login form; a login sets an HttpOnly cookie and starts over
// from a snapshot. The token only passes through the form: the script keeps no copy of it.

import { answerGate, getGate, getGateUrl, listAllGates, listSomeGates, login, newIdempotencyKey } from './api.js';
import { FORM, OPEN_URL, actionWord, answerLine, controlButtons, formGate, isFormOrOpenUrl, originLine, urlLink, valuesView } from './form.js';
import { APPROVE, DENY, approvalDetails, decisionEffect, decisionLine, inputEditor, isSevere } from './permission.js';
import { JournalFollower } from './stream.js';
import {
  answerField,
  fill,
  fieldMessage,
  h,
  howResolved,
  liveTime,
  matchesSearch,
  parseTime,
  refreshTimes,
  shortId,
} from './view.js';

const RECENT_LIMIT = 20;
const ANSWER_TRIES = 4;
const DEFAULT_TITLE = 'User input requested';

const dom = {
  connection: document.getElementById('connection'),
  openHeading: document.getElementById('open-heading'),
  openCount: document.getElementById('open-count'),
  openEmpty: document.getElementById('open-empty'),
  openList: document.getElementById('open-list'),
  resolvedCount: document.getElementById('resolved-count'),
  resolvedEmpty: document.getElementById('resolved-empty'),
  resolvedList: document.getElementById('resolved-list'),
  sessionFilter: document.getElementById('filter-session'),
  search: document.getElementById('filter-search'),
  announcer: document.getElementById('announcer'),
  skipLink: document.getElementById('skip-link'),
  inbox: document.getElementById('inbox'),
  login: document.getElementById('login'),
  loginForbidden: document.getElementById('login-forbidden'),
  loginForm: document.getElementById('login-form'),
  loginToken: document.getElementById('login-token'),
  loginButton: document.querySelector('#login-form button[type="submit"]'),
  loginError: document.getElementById('login-error'),
  loginStatus: document.getElementById('login-status'),
};

/** gate id → { view, card, fieldset, input, editor, status, errors, attempt, submitting, hadFocus }.
 *  `editor` shows the server's field problems next to their controls: a permission gate's input
 *  editor, or a form's fields. */
const openGates = new Map();
/** gate id → { view, item } */
const resolvedGates = new Map();
/** gate id → { answer, won }: what this tab sent (an answer, or a decision in words), so the
 *  resolved list can say what became of it. */
const sentHere = new Map();
/** session id → its <option> in the session filter */
const sessionOptions = new Map();
/** Bumped by every snapshot, so a gate view fetched for an older one cannot resurrect stale state. */
let generation = 0;
let snapshotDone = false;

// ---- open gates -------------------------------------------------------------------------------

/** The view of a gate that was just opened, built from its GateOpened event and seq. */
function viewFromOpened(event, seq) {
  const view = {
    session_id: event.session_id,
    loop_id: event.loop_id,
    state: 'open',
    gate: event.gate,
    opened_seq: seq,
    opened_at: event.created_at,
  };
  const timeout = event.gate.response_policy?.timeout; // nanoseconds
  if (timeout) view.deadline = new Date(parseTime(event.created_at) + timeout / 1e6).toISOString();
  return view;
}

function addOpen(view) {
  const id = view.gate.id;
  if (openGates.has(id) || resolvedGates.has(id)) return false;
  const entry = buildOpenCard(view);
  openGates.set(id, entry);
  insertNewestFirst(dom.openList, entry.card, view.opened_seq);
  noteSession(view.session_id);
  entry.card.hidden = !matchesFilters(view);
  return true;
}

function buildOpenCard(view) {
  if (view.gate.tool_call) return buildApprovalCard(view);
  if (view.gate.kind === FORM) return buildFormCard(view);
  if (view.gate.kind === OPEN_URL) return buildOpenUrlCard(view);
  const { gate } = view;
  const id = gate.id;
  const field = answerField(gate);
  const entry = { view, attempt: null, submitting: false, hadFocus: false };
  const questionId = `question-${id}`;
  const errorsId = `errors-${id}`;
  const inputId = `answer-${id}`;

  const choices = (field.kind === 'select' ? field.options ?? [] : []).map((option) => {
    const button = h(
      'button',
      { type: 'button', class: 'choice', 'data-testid': 'choice', 'data-value': option.value },
      option.label || option.value,
    );
    button.addEventListener('click', () => submitAnswer(id, option.value));
    return button;
  });

  // Free text when the field is text, or a select that allows an answer besides its choices.
  const freeText = field.kind !== 'select' || field.allow_other === true;
  entry.input = freeText
    ? h('input', {
        id: inputId,
        type: 'text',
        autocomplete: 'off',
        enterkeyhint: 'send',
        'aria-describedby': errorsId,
        'data-testid': 'answer-input',
      })
    : null;

  entry.fieldset = h(
    'fieldset',
    {},
    h('legend', { class: 'visually-hidden' }, 'Answer'),
    choices.length > 0 && h('div', { class: 'choices' }, choices),
    freeText &&
      h(
        'div',
        { class: 'free' },
        h('label', { for: inputId }, choices.length > 0 ? 'Other answer' : 'Your answer'),
        h('div', { class: 'free-row' }, entry.input, h('button', { type: 'submit', class: 'send', 'data-testid': 'send' }, 'Send')),
      ),
  );
  entry.status = h('p', { class: 'status', 'data-testid': 'gate-status', role: 'status' });
  entry.errors = h('div', { id: errorsId, class: 'errors', role: 'alert', 'data-testid': 'gate-error', hidden: true });

  // A form gives Enter-to-submit in the text field for free; CSP forbids it from navigating anyway.
  const form = h('form', { class: 'answer', 'aria-labelledby': questionId, novalidate: true }, entry.fieldset, entry.status, entry.errors);
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    if (entry.input) submitAnswer(id, entry.input.value);
  });

  const title = gate.prompt?.title;
  entry.card = h(
    'li',
    { class: 'card', 'data-testid': 'open-gate', 'data-gate-id': id, 'data-session-id': view.session_id, 'data-seq': view.opened_seq },
    h(
      'article',
      { 'aria-labelledby': questionId, tabindex: -1 },
      cardMeta(view, title !== DEFAULT_TITLE && title),
      h('h3', { id: questionId, class: 'question', 'data-testid': 'question' }, gate.prompt?.body ?? ''),
      form,
    ),
  );
  return entry;
}

/** A permission gate's card: the call, and what may be decided on it (its prompt's controls). */
function buildApprovalCard(view) {
  const { gate } = view;
  const id = gate.id;
  const call = gate.tool_call;
  const controls = gate.prompt?.controls ?? [];
  const headingId = `question-${id}`;
  const reasonId = `reason-${id}`;
  const entry = { view, input: null, editor: null, attempt: null, submitting: false, hadFocus: false };

  const approvals = controls
    .filter((control) => control.action !== DENY)
    .map((control) => {
      const label = control.label || control.action;
      const button = h('button', { type: 'button', class: control.action === APPROVE ? 'send' : 'choice', 'data-testid': 'control', 'data-action': control.action }, label);
      button.addEventListener('click', () => submit(id, { action: control.action }, label));
      return button;
    });

  // Only an editable call with an input to start from can be edited (the server insists too).
  let editButton = null;
  if (call.editable && call.tool_input !== undefined && controls.some((control) => control.action === APPROVE)) {
    entry.editor = inputEditor({
      original: call.tool_input,
      schema: call.tool_input_schema,
      idPrefix: `edit-${id}`,
      onConfirm: (toolInput) => submit(id, { action: APPROVE, values: { tool_input: toolInput } }, 'Approve, edited'),
    });
    editButton = h('button', { type: 'button', class: 'choice', 'data-testid': 'edit' }, 'Edit input…');
    editButton.addEventListener('click', () => entry.editor.open());
  }

  // Deny has a form of its own, so Enter in the reason denies: it must never approve.
  const deny = controls.find((control) => control.action === DENY);
  let denyForm = null;
  if (deny) {
    const reason = h('input', { id: reasonId, type: 'text', autocomplete: 'off', enterkeyhint: 'send', 'data-testid': 'deny-reason' });
    denyForm = h(
      'form',
      { class: 'deny', novalidate: true },
      h('label', { for: reasonId }, 'Reason for denying (optional)'),
      h('div', { class: 'free-row' }, reason, h('button', { type: 'submit', class: 'deny-button', 'data-testid': 'deny' }, deny.label || DENY)),
    );
    denyForm.addEventListener('submit', (event) => {
      event.preventDefault();
      const text = reason.value.trim();
      submit(id, text ? { action: DENY, values: { reason: text } } : { action: DENY }, text ? `Deny: ${text}` : 'Deny');
    });
  }

  entry.fieldset = h(
    'fieldset',
    {},
    h('legend', { class: 'visually-hidden' }, 'Decision'),
    h('div', { class: 'actions' }, approvals, editButton),
    entry.editor?.element,
    denyForm,
  );
  entry.status = h('p', { class: 'status', 'data-testid': 'gate-status', role: 'status' });
  entry.errors = h('div', { class: 'errors', role: 'alert', 'data-testid': 'gate-error', hidden: true });

  const severe = isSevere(call.risk);
  entry.card = h(
    'li',
    {
      class: severe ? `card approval risk-${call.risk}` : 'card approval',
      'data-testid': 'open-gate',
      'data-kind': 'permission',
      'data-gate-id': id,
      'data-session-id': view.session_id,
      'data-seq': view.opened_seq,
    },
    h(
      'article',
      { 'aria-labelledby': headingId, tabindex: -1 },
      cardMeta(view),
      approvalDetails(call, headingId),
      entry.fieldset,
      entry.status,
      entry.errors,
    ),
  );
  return entry;
}

/** A form gate's card: its fields as native controls and its controls' buttons (form.js). */
function buildFormCard(view) {
  const { gate } = view;
  const id = gate.id;
  const entry = { view, input: null, editor: null, attempt: null, submitting: false, hadFocus: false };
  const form = formGate({ prompt: gate.prompt, idPrefix: `form-${id}`, onAnswer: (body, label) => submit(id, body, label) });
  entry.editor = form;
  entry.fieldset = form.fieldset;
  return controlCard(entry, 'form', form.element);
}

/** The URL is read when the card is built: it is in no event or listing, only behind its own route. */
function buildOpenUrlCard(view) {
  const { gate } = view;
  const id = gate.id;
  const entry = { view, input: null, editor: null, attempt: null, submitting: false, hadFocus: false };
  const link = h('p', { class: 'open-url', 'data-testid': 'url' }, 'Loading the link…');
  entry.fieldset = h(
    'fieldset',
    {},
    h('legend', { class: 'visually-hidden' }, 'Answer'),
    h('div', { class: 'actions' }, controlButtons(gate.prompt?.controls ?? [], (action, label) => submit(id, { action }, label))),
  );
  loadUrl(view, link);
  return controlCard(entry, 'open_url', [originLine(gate.prompt ?? {}), link, entry.fieldset]);
}

async function loadUrl(view, slot) {
  try {
    const { url } = await getGateUrl(view);
    fill(slot, urlLink(url));
  } catch (error) {
    if (error.code === 'gate_not_ready') fill(slot, 'This request is no longer open.');
    else fill(slot, `The link could not be loaded: ${error.message}.`);
    if (error.status === 401) needLogin(error);
  }
}

/** The card around a form's or an open-URL gate's own parts, for `entry`; returns `entry`. */
function controlCard(entry, kind, parts) {
  const { view } = entry;
  const id = view.gate.id;
  const headingId = `question-${id}`;
  entry.status = h('p', { class: 'status', 'data-testid': 'gate-status', role: 'status' });
  entry.errors = h('div', { class: 'errors', role: 'alert', 'data-testid': 'gate-error', hidden: true });
  entry.card = h(
    'li',
    { class: `card ${kind.replace('_', '-')}-card`, 'data-testid': 'open-gate', 'data-kind': kind, 'data-gate-id': id, 'data-session-id': view.session_id, 'data-seq': view.opened_seq },
    h(
      'article',
      { 'aria-labelledby': headingId, tabindex: -1 },
      cardMeta(view),
      h('h3', { id: headingId, class: 'question', 'data-testid': 'question' }, view.gate.prompt?.title ?? ''),
      h('p', { class: 'summary', 'data-testid': 'body' }, view.gate.prompt?.body ?? ''),
      parts,
      entry.status,
      entry.errors,
    ),
  );
  return entry;
}

/** The card's first line: its title when it has one of its own, the ids, when it was asked and its deadline. */
function cardMeta(view, title = null) {
  return h(
    'p',
    { class: 'meta' },
    title && h('span', { class: 'title', 'data-testid': 'title' }, title),
    shortId('session', view.session_id),
    shortId('loop', view.loop_id),
    liveTime('asked', view.opened_at),
    view.deadline && deadlineNote(view),
  );
}

/** What the policy answers at the deadline, in the card's words ("no", "denied", "declined"). */
function fallbackWords(view) {
  const { gate } = view;
  const policy = gate.response_policy;
  if (policy?.on_timeout !== 'respond') return undefined;
  if (isFormOrOpenUrl(gate)) return policy.response?.action && actionWord(gate.kind, policy.response.action);
  if (!gate.tool_call) return policy.response?.values?.answer;
  return policy.response?.action === DENY ? 'denied' : 'approved';
}

/** "deadline in 4 min, then “no”": when the gate stops waiting and what it answers then. */
function deadlineNote(view) {
  const fallback = fallbackWords(view);
  const question = !view.gate.tool_call && !isFormOrOpenUrl(view.gate);
  return h(
    'span',
    { class: 'deadline', 'data-testid': 'deadline' },
    liveTime('deadline', view.deadline),
    // An answer is quoted, a decision is not: "then “no”", "then denied", "then declined".
    fallback !== undefined && (question ? `, then “${fallback}”` : `, then ${fallback}`),
  );
}

/** Takes a gate's card off the open list; focus that was in it moves to the next question. */
function removeOpen(id) {
  const entry = openGates.get(id);
  if (!entry) return null;
  // Focus in the card, or lost to <body> when the card's controls were disabled for sending; if the
  // person has moved on to something else meanwhile, leave their focus alone.
  const focusLost = !document.activeElement || document.activeElement === document.body;
  const hadFocus = entry.card.contains(document.activeElement) || (entry.hadFocus && focusLost);
  const neighbour = visibleSibling(entry.card);
  entry.card.remove();
  openGates.delete(id);
  // The next question itself, not its text field: that would pop up a phone's keyboard unasked.
  if (hadFocus) (neighbour?.querySelector('article') ?? dom.openHeading).focus();
  return entry;
}

function visibleSibling(card) {
  for (let other = card.nextElementSibling; other; other = other.nextElementSibling) if (!other.hidden) return other;
  for (let other = card.previousElementSibling; other; other = other.previousElementSibling) if (!other.hidden) return other;
  return null;
}

/** Keeps a list ordered by data-seq, highest first, without moving any element already in it. */
function insertNewestFirst(list, element, seq) {
  element.dataset.seq = String(seq);
  for (const other of list.children) {
    if (Number(other.dataset.seq) < seq) {
      list.insertBefore(element, other);
      return;
    }
  }
  list.append(element);
}

// ---- answering --------------------------------------------------------------------------------

function submitAnswer(id, answer) {
  return submit(id, { action: 'answer', values: { answer } }, answer);
}

/** Sends `body` as the gate's answer; `said` is what it answers, in words, for the resolved list. */
async function submit(id, body, said) {
  const entry = openGates.get(id);
  if (!entry || entry.submitting) return;
  // One Idempotency-Key per attempt. Sending the same answer again after an unknown outcome is a
  // retry of that attempt and reuses its key, so a 202 lost on the way back is replayed, not doubled.
  const sent = JSON.stringify(body);
  if (entry.attempt?.sent !== sent) entry.attempt = { sent, key: newIdempotencyKey() };
  const { key } = entry.attempt;
  const permission = Boolean(entry.view.gate.tool_call);
  setBusy(entry, true);
  try {
    const accepted = await answerWithRetries(entry.view, body, key);
    sentHere.set(id, { answer: said, won: true });
    const resolution = {
      type: 'GateResolved',
      gate_id: id,
      reason: 'answered',
      action: body.action,
      source: { kind: 'user' },
      created_at: new Date().toISOString(),
    };
    const answer = body.action === 'answer' ? body.values.answer : undefined;
    gateLeftOpen(id, { state: 'resolved', resolved_seq: accepted.journal_seq, resolution, answer });
    announce(permission ? 'Decision sent.' : 'Answer sent.');
  } catch (error) {
    if (error.code === 'gate_not_ready' && error.resolution) {
      // Losing a race is an outcome, not an error: the gate has its answer, show the winner's.
      sentHere.set(id, { answer: said, won: false });
      gateLeftOpen(id, provisional(error.resolution, Number.MAX_SAFE_INTEGER));
      announce(permission ? 'Someone else decided this first.' : 'Someone else answered this question first.');
      return;
    }
    // The server refused this answer: whatever is sent next is a new attempt with a new key.
    if (!error.retryable) entry.attempt = null;
    setBusy(entry, false);
    // Problems with an edited input belong next to the editor that made it.
    if (!entry.editor?.showServerProblems(error.fields)) showError(entry, error);
    if (error.status === 401) needLogin(error);
  }
}

/** Retries what may not have arrived (no response, 503), always with the same key. */
async function answerWithRetries(view, body, key) {
  for (let attempt = 1; ; attempt += 1) {
    try {
      return await answerGate(view, body, key);
    } catch (error) {
      if (!error.retryable || attempt >= ANSWER_TRIES) throw error;
      await new Promise((resolve) => setTimeout(resolve, 400 * 2 ** (attempt - 1)));
    }
  }
}

function setBusy(entry, busy) {
  if (busy) {
    entry.hadFocus = entry.card.contains(document.activeElement);
    entry.errors.hidden = true;
    entry.errors.replaceChildren();
    entry.input?.removeAttribute('aria-invalid');
  }
  entry.submitting = busy;
  entry.fieldset.disabled = busy; // disables every control of the gate at once
  entry.card.setAttribute('aria-busy', String(busy));
  entry.status.textContent = busy ? 'Sending…' : '';
  if (!busy && entry.hadFocus) {
    entry.hadFocus = false;
    const focusLost = !document.activeElement || document.activeElement === document.body;
    if (focusLost) (entry.input ?? entry.fieldset.querySelector('button'))?.focus();
  }
}

function showError(entry, error) {
  const fieldError = (field) => h('span', { 'data-testid': 'field-error' }, fieldMessage(field));
  if (error.fields.length === 1) {
    fill(entry.errors, h('p', {}, 'This answer was not accepted: ', fieldError(error.fields[0]), '.'));
  } else if (error.fields.length > 1) {
    fill(entry.errors, h('p', {}, 'This answer was not accepted:'), h('ul', {}, error.fields.map((field) => h('li', {}, fieldError(field)))));
  } else if (error.status === 401) {
    fill(entry.errors, h('p', {}, 'This answer was not accepted: the login has expired. Log in again, then send it again.'));
  } else if (error.retryable) {
    fill(entry.errors, h('p', {}, `Your answer may not have arrived (${error.message}). Send it again: it will not be counted twice.`));
  } else {
    fill(entry.errors, h('p', {}, `This answer was not accepted: ${error.message}.`));
  }
  entry.errors.hidden = false;
  if (error.fields.length > 0) entry.input?.setAttribute('aria-invalid', 'true');
}

// ---- recently resolved ------------------------------------------------------------------------

/** The members a resolution adds to a view, from a GateResolved we have before the full view. */
function provisional(resolution, seq) {
  return {
    state: resolution.action ? 'resolved' : 'closed',
    resolved_seq: seq,
    resolution,
    // The event carries an 80-character preview; the full answer comes with the fetched view.
    answer: resolution.action ? resolution.audit?.data?.answer_preview : undefined,
  };
}

/**
 * A gate left open (a GateResolved event, or our own 202 or 409): off the open list at once, onto
 * the resolved list with what we know, then with its full view once fetched.
 */
function gateLeftOpen(id, resolvedMembers) {
  const entry = removeOpen(id);
  const known = resolvedGates.get(id);
  if (known) {
    renderResolved(known); // what this tab sent may have just become known
  } else {
    if (entry) showResolved({ ...entry.view, ...resolvedMembers });
    const asOf = generation;
    getGate(id)
      .then((view) => {
        if (asOf === generation && view.state !== 'open') {
          showResolved(view);
          updateCounts();
        }
      })
      .catch((error) => {
        if (error.status === 401) needLogin(error);
        else console.warn('gatehouse: could not read gate', id, error);
      });
  }
  updateCounts();
}

function showResolved(view) {
  const id = view.gate.id;
  let known = resolvedGates.get(id);
  if (!known) {
    known = { view, item: h('li', { class: 'resolved-item', 'data-testid': 'resolved-gate', 'data-gate-id': id }) };
    resolvedGates.set(id, known);
    noteSession(view.session_id);
  } else if (known.view.resolved_seq !== view.resolved_seq) {
    known.item.remove(); // re-placed below: a provisional seq became the real one
  }
  known.view = view;
  if (!known.item.isConnected) insertNewestFirst(dom.resolvedList, known.item, view.resolved_seq);
  renderResolved(known);
  known.item.hidden = !matchesFilters(view);
  // Only the most recent stay: the oldest go, as the listing on page start would show them.
  while (resolvedGates.size > RECENT_LIMIT) {
    const oldest = dom.resolvedList.lastElementChild;
    resolvedGates.delete(oldest.dataset.gateId);
    oldest.remove();
  }
}

function renderResolved({ view, item }) {
  const { resolution } = view;
  const call = view.gate.tool_call;
  const sent = sentHere.get(view.gate.id);
  let question;
  let outcome;
  if (isFormOrOpenUrl(view.gate)) {
    question = view.gate.prompt?.title ?? '';
    const line = answerLine(view);
    const action = view.decision?.action ?? resolution.action;
    const values = view.decision?.values;
    outcome = line
      ? [
          h('p', { class: `decision decision-${action}`, 'data-testid': 'decision', 'data-action': action }, line),
          values && valuesView(view.gate.prompt?.schema?.fields ?? [], values),
        ]
      : h('p', { class: 'answer-text none', 'data-testid': 'decision' }, 'No answer');
  } else if (call) {
    question = call.summary ? `${call.tool_name}: ${call.summary}` : call.tool_name;
    const line = decisionLine(view);
    const effect = decisionEffect(view);
    outcome = line
      ? h('p', { class: `decision decision-${effect}`, 'data-testid': 'decision', 'data-effect': effect }, line)
      : h('p', { class: 'answer-text none', 'data-testid': 'decision' }, 'No decision');
  } else {
    question = view.gate.prompt?.body ?? '';
    outcome =
      view.answer !== undefined
        ? h('p', { class: 'answer-text', 'data-testid': 'answer' }, view.answer)
        : h('p', { class: 'answer-text none', 'data-testid': 'answer' }, 'No answer');
  }
  fill(
    item,
    h('p', { class: 'question', 'data-testid': 'question' }, question),
    outcome,
    h(
      'p',
      { class: 'meta' },
      h('span', { class: `how how-${resolution.reason}`, 'data-testid': 'how', 'data-reason': resolution.reason }, howResolved(resolution, Boolean(call))),
      liveTime('', resolution.created_at),
      shortId('session', view.session_id),
      shortId('loop', view.loop_id),
    ),
    sent && sentNote(sent, view),
  );
}

/** What became of the answer this tab sent: it counted, or another one got there first. */
function sentNote(sent, view) {
  const permission = Boolean(view.gate.tool_call);
  if (isFormOrOpenUrl(view.gate)) {
    if (sent.won) return h('p', { class: 'note', 'data-testid': 'own-answer' }, 'You answered this from this page.');
    const first = { answered: 'Someone else answered first', policy_response: 'The timeout answered first' };
    return h('p', { class: 'note lost', 'data-testid': 'lost-race' }, `${first[view.resolution.reason] ?? 'It was closed first'}; your “${sent.answer}” was not used.`);
  }
  if (sent.won) return h('p', { class: 'note', 'data-testid': 'own-answer' }, permission ? 'You decided this from this page.' : 'You answered this from this page.');
  let text;
  if (permission) {
    const first = { answered: 'Someone else decided first', policy_response: 'The timeout decided first' };
    text = `${first[view.resolution.reason] ?? 'The request was closed first'}; your “${sent.answer}” was not used.`;
  } else if (view.resolution.reason === 'answered' && view.answer === sent.answer) {
    text = 'Someone else gave the same answer first; yours was not needed.';
  } else {
    const first = { answered: 'Someone else answered first', policy_response: 'The timeout answered first' };
    text = `${first[view.resolution.reason] ?? 'The question was closed first'}; your answer “${sent.answer}” was not used.`;
  }
  return h('p', { class: 'note lost', 'data-testid': 'lost-race' }, text);
}

// ---- filters, counts, announcements -------------------------------------------------------------

function matchesFilters(view) {
  const session = dom.sessionFilter.value;
  return (!session || view.session_id === session) && matchesSearch(view, dom.search.value.trim());
}

function applyFilters() {
  for (const { view, card } of openGates.values()) card.hidden = !matchesFilters(view);
  for (const { view, item } of resolvedGates.values()) item.hidden = !matchesFilters(view);
  updateCounts();
}

/** Every session the page has seen stays selectable, even when its gates are gone. */
function noteSession(sessionId) {
  if (sessionOptions.has(sessionId)) return;
  const option = h('option', { value: sessionId, title: sessionId }, `${sessionId.slice(0, 8)} (0 open)`);
  sessionOptions.set(sessionId, option);
  dom.sessionFilter.append(option);
}

function updateCounts() {
  const openPerSession = new Map();
  let openShown = 0;
  for (const { view, card } of openGates.values()) {
    openPerSession.set(view.session_id, (openPerSession.get(view.session_id) ?? 0) + 1);
    if (!card.hidden) openShown += 1;
  }
  for (const [sessionId, option] of sessionOptions) {
    option.textContent = `${sessionId.slice(0, 8)} (${openPerSession.get(sessionId) ?? 0} open)`;
  }
  dom.openCount.textContent = countText(openShown, openGates.size);
  dom.openEmpty.hidden = openShown > 0;
  if (!snapshotDone) dom.openEmpty.textContent = 'Loading…';
  else if (openGates.size === 0) dom.openEmpty.textContent = 'No open questions. New ones appear here as soon as an agent asks.';
  else dom.openEmpty.textContent = 'No open question matches the filters.';

  let resolvedShown = 0;
  for (const { item } of resolvedGates.values()) if (!item.hidden) resolvedShown += 1;
  dom.resolvedCount.textContent = countText(resolvedShown, resolvedGates.size);
  dom.resolvedEmpty.hidden = resolvedShown > 0;
  dom.resolvedEmpty.textContent = resolvedGates.size === 0 ? 'Nothing resolved yet.' : 'Nothing here matches the filters.';

  document.title = openGates.size > 0 ? `(${openGates.size}) gatehouse` : 'gatehouse';
}

function countText(shown, total) {
  return shown === total ? `(${total})` : `(${shown} of ${total})`;
}

function announce(text) {
  dom.announcer.textContent = text;
}

// ---- following the journal ----------------------------------------------------------------------

/**
 * Loads the open gates and the recent resolutions, reconciled with what the page shows: cards
 * still open keep their element (and anything typed into them). Returns the journal seq to
 * follow from.
 */
async function snapshot(isCurrent) {
  const { gates: open, journalSeq } = await listAllGates('open');
  const recent = await listSomeGates('resolved,closed', RECENT_LIMIT);
  // A snapshot begun before a stop (say, a login meanwhile) must not overwrite a newer one.
  if (!isCurrent()) return null;
  generation += 1;

  for (const { item } of resolvedGates.values()) item.remove();
  resolvedGates.clear();
  for (const view of recent) showResolved(view);

  // A gate resolved between the two reads is in both: the later read wins.
  const stillOpen = open.filter((view) => !resolvedGates.has(view.gate.id));
  const stillOpenIds = new Set(stillOpen.map((view) => view.gate.id));
  for (const id of [...openGates.keys()]) if (!stillOpenIds.has(id)) removeOpen(id);
  for (const view of stillOpen) addOpen(view);

  snapshotDone = true;
  loggedInJustNow = false; // the login worked: its cookie came back
  updateCounts();
  return journalSeq;
}

function applyEvent(event, seq) {
  if (event.type === 'GateOpened') {
    if (addOpen(viewFromOpened(event, seq))) {
      updateCounts();
      const { gate } = event;
      const call = gate.tool_call;
      let text = `New question: ${gate.prompt?.body ?? ''}`;
      if (call) text = `Approval requested: ${call.tool_name}${call.summary ? `: ${call.summary}` : ''}`;
      else if (gate.kind === FORM) text = `New form: ${gate.prompt?.title ?? ''}`;
      else if (gate.kind === OPEN_URL) text = `Action requested: ${gate.prompt?.title ?? ''}`;
      announce(text.slice(0, 200));
    }
  } else if (event.type === 'GateResolved') {
    gateLeftOpen(event.gate_id, provisional(event, seq));
  }
  // UserInputRequested and PermissionRequested repeat GateOpened for the harness, and
  // PermissionDecided what the gate's fetched view has (its `decision`): nothing more to show.
}

const CONNECTION_WORDS = {
  login: () => 'Not logged in',
  loading: () => 'Loading…',
  connecting: () => 'Connecting…',
  live: () => 'Live',
  offline: ({ retryInMs }) => `Offline, reconnecting in ${Math.max(1, Math.round(retryInMs / 1000))} s`,
};

function showConnection(state, detail = {}) {
  dom.connection.dataset.state = state;
  dom.connection.textContent = CONNECTION_WORDS[state](detail);
}

// ---- logging in -------------------------------------------------------------------------------------

/** Set by a login the server accepted, until a snapshot shows its cookie works. */
let loggedInJustNow = false;

/**
 * Shows the login form instead of the lists: the server refused our credentials (401), or the token
 * logged in with may not read everything (403). The lists stay in memory (and any typed answer in
 * them) for when a login brings them back.
 */
function needLogin(error) {
  follower.stop();
  const forbidden = error.status === 403;
  let problem = null;
  if (forbidden) {
    problem = `This token may not use this page (${error.message}). Log in with a responder or admin token instead.`;
  } else if (loggedInJustNow) {
    problem = 'The token was accepted, but the browser did not send the login cookie back: are cookies blocked for this site?';
  }
  loggedInJustNow = false;
  dom.loginForbidden.textContent = problem ?? '';
  dom.loginForbidden.hidden = problem === null;
  dom.login.hidden = false;
  dom.inbox.hidden = true;
  dom.skipLink.href = '#login-heading';
  dom.skipLink.textContent = 'Skip to log in';
  showConnection('login');
  document.title = 'Log in · gatehouse';
  // The lists the focus may have been in are gone: the token field is where to go on.
  if (!dom.login.contains(document.activeElement)) dom.loginToken.focus();
}

function showInbox() {
  dom.login.hidden = true;
  dom.loginForbidden.hidden = true;
  dom.inbox.hidden = false;
  dom.skipLink.href = '#open-heading';
  dom.skipLink.textContent = 'Skip to open questions';
  updateCounts(); // the title again
}

function showLoginError(text) {
  dom.loginError.textContent = text;
  dom.loginError.hidden = false;
  dom.loginToken.setAttribute('aria-invalid', 'true');
  dom.loginToken.focus();
  dom.loginToken.select();
}

function setLoginBusy(busy) {
  dom.loginToken.disabled = busy;
  dom.loginButton.disabled = busy;
  dom.loginStatus.textContent = busy ? 'Logging in…' : '';
}

async function submitLogin(event) {
  event.preventDefault();
  if (dom.loginButton.disabled) return;
  // Tokens have no spaces (the tokens file splits on them); a paste may bring some along.
  const token = dom.loginToken.value.trim();
  dom.loginError.hidden = true;
  dom.loginToken.removeAttribute('aria-invalid');
  if (!token) {
    showLoginError('Enter a token first.');
    return;
  }
  setLoginBusy(true);
  try {
    await login(token);
  } catch (error) {
    setLoginBusy(false);
    if (error.status === 403) {
      // An agent token: the server refuses it a login at all.
      dom.loginToken.value = '';
      needLogin(error);
      return;
    }
    if (error.status === 401) showLoginError('This token is not valid. Check it and try again.');
    else if (error.status === 0) showLoginError('Could not reach gatehouse. Try again.');
    else showLoginError(`The login failed: ${error.message}.`);
    return;
  }
  // The cookie holds the login now; the form keeps no copy of the token.
  dom.loginToken.value = '';
  setLoginBusy(false);
  loggedInJustNow = true;
  showInbox();
  dom.openHeading.focus(); // the form that had the focus is gone
  announce('Logged in.');
  follower.start();
}

dom.loginForm.addEventListener('submit', submitLogin);
dom.sessionFilter.addEventListener('change', applyFilters);
dom.search.addEventListener('input', applyFilters);
setInterval(refreshTimes, 1000); // seconds matter once a deadline is under a minute away
const follower = new JournalFollower({ snapshot, onEvent: applyEvent, onState: showConnection, onDenied: needLogin });
follower.start();
