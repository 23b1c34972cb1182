// Form gates (`harness.form`: typed fields, nested groups, repeatable list rows) and open-URL
// gates (`harness.open_url`: send the person to a URL, then hear whether they went). The inbox
// (app.js) and the answer-link page (answer.js) build their forms, buttons and decision lines
// from here.
//
// Every field is a native control (text, email, url, date, datetime-local and number inputs, a
// select, checkboxes, fieldsets), filled with its default. Accept checks every field first, with
// the server's rules, and shows each problem next to its control: a value that cannot pass is
// never sent. What the server still refuses comes back as JSON Pointers into the answer body
// (`/values/rows/1/qty`), shown next to the control at that path. Gate text is untrusted:
// everything goes in through h(), as text; a URL becomes a link only when it is http(s).

import { pointerToken } from './schema.js';
import { decidedBy, fieldMessage, h, parseTime } from './view.js';

export const FORM = 'harness.form';
export const OPEN_URL = 'harness.open_url';
export const ACCEPT = 'accept';

/** Where an answer body keeps the values: the server's field paths start here. */
const VALUES_PATH = '/values';
/** The server's bounds on an answer: every string, and each top-level value's JSON text (the
 *  harness's audit bound), in UTF-8 bytes. */
const MAX_STRING_BYTES = 4096;
const MAX_VALUE_BYTES = 4096;
/** The most rows a list may have, whatever its own max_items says. */
const MAX_ROWS = 100;
const REQUIRED = 'This field is required.';

/** Whether a gate is answered with one of its controls (accept, decline, cancel). */
export function isFormOrOpenUrl(gate) {
  return gate.kind === FORM || gate.kind === OPEN_URL;
}

// ---- words ----------------------------------------------------------------------------------------

const ACTION_WORDS = {
  [FORM]: { accept: 'submitted', decline: 'declined', cancel: 'cancelled' },
  [OPEN_URL]: { accept: 'marked done', decline: 'declined', cancel: 'cancelled' },
};

/** What an action did to a gate of this kind, as a past participle: "submitted", "marked done". */
export function actionWord(kind, action) {
  return ACTION_WORDS[kind]?.[action] ?? action;
}

/**
 * "submitted by alice", "declined by policy after 5 min", "marked done by a person": from the
 * view's `decision`, or its resolution while the full view is still being fetched. Null for a
 * gate that was closed rather than answered.
 */
export function answerLine(view) {
  const action = view.decision?.action ?? view.resolution?.action;
  if (!action) return null;
  return `${actionWord(view.gate.kind, action)} by ${decidedBy(view)}`;
}

const bytes = (text) => new TextEncoder().encode(text).length;
const characters = (text) => [...text].length; // as JSON Schema counts, not UTF-16 units
const plural = (count, one) => `${count} ${one}${count === 1 ? '' : 's'}`;
const isObject = (value) => typeof value === 'object' && value !== null && !Array.isArray(value);
const labelOf = (field) => field.label || field.name;

/** `object[name]` only when it is the object's own member: a field may be named "constructor". */
function member(object, name) {
  return isObject(object) && Object.hasOwn(object, name) ? object[name] : undefined;
}

/** Sets a member as data, even one named "__proto__", which plain assignment would not. */
function setMember(object, name, value) {
  Object.defineProperty(object, name, { value, enumerable: true, writable: true, configurable: true });
}

// ---- the checks of one value (the server's rules, in a person's words) ---------------------------

/** One `@`, something on both sides of it, no spaces: the server's rule, no more. */
const EMAIL = /^[^\s@]+@[^\s@]+$/;

function isAbsoluteUrl(text) {
  if (!/^[A-Za-z][A-Za-z0-9+.-]*:/.test(text)) return false;
  try {
    new URL(text);
    return true;
  } catch {
    return false;
  }
}

/** YYYY-MM-DD naming a day that exists (no 31 April). */
function isCalendarDate(text) {
  const match = /^(\d{4})-(\d{2})-(\d{2})$/.exec(text);
  if (!match) return false;
  const [year, month, day] = match.slice(1).map(Number);
  const date = new Date(Date.UTC(year, month - 1, day));
  return date.getUTCFullYear() === year && date.getUTCMonth() === month - 1 && date.getUTCDate() === day;
}

function textProblems(field, value) {
  const problems = [];
  const length = characters(value);
  if (field.min_length != null && length < field.min_length) problems.push(`Enter at least ${plural(field.min_length, 'character')}.`);
  if (field.max_length != null && length > field.max_length) problems.push(`Enter at most ${plural(field.max_length, 'character')}.`);
  if (bytes(value) > MAX_STRING_BYTES) problems.push(`This is too long: at most ${MAX_STRING_BYTES} bytes.`);
  if (field.kind === 'email' && !EMAIL.test(value)) problems.push('Enter an email address, like name@example.com.');
  if (field.kind === 'url' && !isAbsoluteUrl(value)) problems.push('Enter a full address, like https://example.com.');
  if (field.kind === 'date' && !isCalendarDate(value)) problems.push('Enter a date.');
  return problems;
}

function numberProblems(field, value) {
  if (field.kind === 'integer' && !Number.isInteger(value)) return ['Enter a whole number.'];
  const problems = [];
  if (field.minimum != null && value < field.minimum) problems.push(`Enter ${field.minimum} or more.`);
  if (field.maximum != null && value > field.maximum) problems.push(`Enter ${field.maximum} or less.`);
  return problems;
}

function countProblems(field, count, few, many) {
  const problems = [];
  if (field.min_items != null && count < field.min_items) problems.push(few(field.min_items));
  if (count > Math.min(field.max_items ?? MAX_ROWS, MAX_ROWS)) problems.push(many(Math.min(field.max_items ?? MAX_ROWS, MAX_ROWS)));
  return problems;
}

/** What a control holds when it holds no value at all (letters in a number field, say). */
class Unreadable {
  constructor(message) {
    this.message = message;
  }
}

// ---- date and time: the person's clock in the control, RFC 3339 in UTC on the wire --------------

const pad = (number, width = 2) => String(number).padStart(width, '0');

/** An RFC 3339 date-time as a datetime-local control shows it: in the browser's time zone. */
function toLocalInput(text) {
  const ms = typeof text === 'string' ? parseTime(text) : NaN;
  if (Number.isNaN(ms)) return '';
  const d = new Date(ms);
  const minutes = `${pad(d.getFullYear(), 4)}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}`;
  return d.getSeconds() ? `${minutes}:${pad(d.getSeconds())}` : minutes;
}

/** A datetime-local control's value (local time, no offset) as RFC 3339 in UTC: `…T08:30:00Z`. */
function fromLocalInput(value) {
  // ECMAScript reads a date-time without an offset as local time, which is what the person typed.
  const date = new Date(value);
  if (Number.isNaN(date.getTime())) return null;
  const text = date.toISOString().replace('.000Z', 'Z');
  return /^\d{4}-/.test(text) ? text : null; // years past 9999 are no RFC 3339
}

const TIME_ZONE = Intl.DateTimeFormat().resolvedOptions().timeZone;

// ---- the controls ---------------------------------------------------------------------------------

/** Fresh element ids under one prefix: a page may hold many forms, and rows come and go. */
function idMaker(prefix) {
  let count = 0;
  return () => `${prefix}-${(count += 1)}`;
}

const FOCUSABLE = 'input:not(:disabled), select:not(:disabled), button:not(:disabled)';

function requiredMark(field) {
  return field.required ? h('span', { class: 'required', 'aria-hidden': 'true' }, ' *') : null;
}

/** A field's description and the place its problems are shown, and the ids a control points at. */
function aids(field, nextId) {
  const helpId = field.description ? nextId() : null;
  const errorId = nextId();
  const help = helpId && h('p', { id: helpId, class: 'field-help', 'data-testid': 'field-help' }, field.description);
  const error = h('p', { id: errorId, class: 'field-error', 'data-testid': 'field-error', hidden: true });
  return { help, error, describedBy: [helpId, errorId].filter(Boolean).join(' ') };
}

/**
 * One field in the form: `element`; `read()` its value (undefined when it has none, an Unreadable
 * when its control holds no value); `problems(value)` what is wrong with that value itself;
 * `children()` the nodes inside it as [pointer token, node]; `showProblem(message)`; `focus()`.
 */
function node({ element, error, invalid = () => [], read, problems = () => [], children = () => [] }) {
  return {
    element,
    read,
    problems,
    children,
    showProblem(message) {
      error.append(error.childNodes.length > 0 ? ` ${message}` : message);
      error.hidden = false;
      for (const control of invalid()) control.setAttribute('aria-invalid', 'true');
    },
    focus() {
      element.querySelector(FOCUSABLE)?.focus();
    },
  };
}

/** A value's own problems: REQUIRED when it has none and needs one, else `check(value)`'s. */
const unlessAbsent = (field, check) => (value) => (value === undefined ? (field.required ? [REQUIRED] : []) : check(value));

const INPUT_TYPES = { email: 'email', url: 'url', date: 'date', date_time: 'datetime-local', number: 'number', integer: 'number' };

/** text, email, url, date, date_time, number, integer; a kind this page does not know is typed as
 *  text, and the server judges it. */
function inputField(field, initial, nextId) {
  const { kind } = field;
  const id = nextId();
  const { help, error, describedBy } = aids(field, nextId);
  const numeric = kind === 'number' || kind === 'integer';
  const address = kind === 'email' || kind === 'url';
  const input = h('input', {
    id,
    name: field.name,
    type: INPUT_TYPES[kind] ?? 'text',
    autocomplete: 'off',
    autocapitalize: address ? 'off' : null,
    spellcheck: address ? 'false' : null,
    min: numeric ? field.minimum : null,
    max: numeric ? field.maximum : null,
    step: kind === 'integer' ? '1' : kind === 'number' ? 'any' : null,
    required: field.required,
    'aria-describedby': describedBy,
    'data-testid': 'field-input',
    'data-kind': kind,
  });
  if (initial !== undefined && initial !== null) input.value = kind === 'date_time' ? toLocalInput(initial) : String(initial);
  if (kind === 'date_time' && input.value.length > 16) input.step = '1'; // the default has seconds: keep them
  const zone = kind === 'date_time' && h('span', { class: 'field-zone' }, ` (your time, ${TIME_ZONE})`);

  function read() {
    if (numeric && input.validity.badInput) return new Unreadable(kind === 'integer' ? 'Enter a whole number.' : 'Enter a number.');
    const raw = input.value;
    if (raw === '') return undefined; // an empty control is an absent value, as null is
    if (numeric) {
      const number = Number(raw);
      return Number.isFinite(number) ? number : new Unreadable('Enter a number.');
    }
    if (kind === 'date_time') return fromLocalInput(raw) ?? new Unreadable('Enter a date and time.');
    return raw;
  }

  return node({
    element: h('div', { class: 'form-field', 'data-field': field.name }, h('label', { for: id }, labelOf(field), requiredMark(field), zone), help, input, error),
    error,
    invalid: () => [input],
    read,
    problems: unlessAbsent(field, (value) => (numeric ? numberProblems(field, value) : textProblems(field, value))),
  });
}

function selectField(field, initial, nextId) {
  const id = nextId();
  const { help, error, describedBy } = aids(field, nextId);
  const options = field.options ?? [];
  const chosen = options.some((option) => option.value === initial) ? initial : '';
  const select = h(
    'select',
    { id, name: field.name, required: field.required, 'aria-describedby': describedBy, 'data-testid': 'field-input', 'data-kind': 'select' },
    // Nothing is chosen for the person: an empty first entry unless a default chose for them.
    chosen === '' && h('option', { value: '' }, field.required ? 'Choose…' : '(none)'),
    options.map((option) => h('option', { value: option.value, selected: option.value === chosen }, option.label || option.value)),
  );
  return node({
    element: h('div', { class: 'form-field', 'data-field': field.name }, h('label', { for: id }, labelOf(field), requiredMark(field)), help, select, error),
    error,
    invalid: () => [select],
    read: () => select.value || undefined,
    problems: unlessAbsent(field, (value) => (options.some((option) => option.value === value) ? [] : ['Choose one of the options.'])),
  });
}

/** A checkbox: always true or false, so never missing. */
function confirmField(field, initial, nextId) {
  const id = nextId();
  const { help, error, describedBy } = aids(field, nextId);
  const box = h('input', { id, name: field.name, type: 'checkbox', checked: initial === true, 'aria-describedby': describedBy, 'data-testid': 'field-input', 'data-kind': 'confirm' });
  return node({
    element: h(
      'div',
      { class: 'form-field form-check', 'data-field': field.name },
      h('div', { class: 'check-row' }, box, h('label', { for: id }, labelOf(field), requiredMark(field))),
      help,
      error,
    ),
    error,
    invalid: () => [box],
    read: () => box.checked,
  });
}

/** A group of checkboxes, one per option; the value lists the checked ones in the options' order. */
function multiSelectField(field, initial, nextId) {
  const { help, error, describedBy } = aids(field, nextId);
  const picked = new Set(Array.isArray(initial) ? initial : []);
  const boxes = (field.options ?? []).map((option) => {
    const id = nextId();
    const box = h('input', { id, type: 'checkbox', value: option.value, checked: picked.has(option.value), 'data-testid': 'option' });
    return { box, row: h('div', { class: 'check-row' }, box, h('label', { for: id }, option.label || option.value)) };
  });
  return node({
    element: h(
      'fieldset',
      { class: 'form-field form-options', 'aria-describedby': describedBy, 'data-field': field.name, 'data-kind': 'multi_select' },
      h('legend', {}, labelOf(field), requiredMark(field)),
      help,
      boxes.map(({ row }) => row),
      error,
    ),
    error,
    invalid: () => boxes.map(({ box }) => box),
    read() {
      const values = boxes.filter(({ box }) => box.checked).map(({ box }) => box.value);
      // Nothing checked: an optional field is left out; a required one has chosen none.
      return values.length === 0 && !field.required ? undefined : values;
    },
    problems: unlessAbsent(field, (values) => countProblems(field, values.length, (n) => `Choose at least ${n}.`, (n) => `Choose at most ${n}.`)),
  });
}

/** The fields of one object (the form itself, a group, a list row), filled from `initial` where it
 *  has a member and from each field's default elsewhere. */
function membersOf(fields, initial, nextId) {
  const members = fields.map((field) => {
    const own = member(initial, field.name);
    return [field.name, fieldNode(field, own === undefined ? field.default : own, nextId)];
  });
  return {
    elements: members.map(([, child]) => child.element),
    read() {
      const object = {};
      for (const [name, child] of members) {
        const value = child.read();
        if (value !== undefined) setMember(object, name, value);
      }
      return object;
    },
    children: () => members.map(([name, child]) => [pointerToken(name), child]),
  };
}

function groupField(field, initial, nextId) {
  const { help, error, describedBy } = aids(field, nextId);
  const members = membersOf(field.fields ?? [], initial, nextId);
  return node({
    element: h(
      'fieldset',
      { class: 'form-field form-group', 'aria-describedby': describedBy, 'data-field': field.name, 'data-kind': 'group' },
      h('legend', {}, labelOf(field), requiredMark(field)),
      help,
      members.elements,
      error,
    ),
    error,
    read() {
      const object = members.read();
      // An optional group left empty is left out, so its own required fields do not block the form.
      return Object.keys(object).length === 0 && !field.required ? undefined : object;
    },
    problems: unlessAbsent(field, () => []),
    children: members.children,
  });
}

/** Repeatable rows, each an object of the list's fields, with "Add row" and each row's "Remove"
 *  within min_items and max_items. */
function listField(field, initial, nextId) {
  const { help, error, describedBy } = aids(field, nextId);
  const fewest = field.min_items ?? 0;
  const most = Math.min(field.max_items ?? MAX_ROWS, MAX_ROWS);
  const rowsElement = h('div', { class: 'list-rows' });
  const addButton = h('button', { type: 'button', class: 'choice', 'data-testid': 'add-row' }, 'Add row');
  const rows = [];

  function addRow(rowInitial) {
    const members = membersOf(field.fields ?? [], rowInitial, nextId);
    const rowError = h('p', { class: 'field-error', 'data-testid': 'field-error', hidden: true });
    const legend = h('legend');
    const removeButton = h('button', { type: 'button', class: 'choice remove-row', 'data-testid': 'remove-row' }, 'Remove');
    const element = h('fieldset', { class: 'list-row', 'data-testid': 'list-row' }, legend, members.elements, rowError, h('div', { class: 'row-actions' }, removeButton));
    const row = { legend, removeButton, ...node({ element, error: rowError, read: members.read, children: members.children }) };
    removeButton.addEventListener('click', () => {
      const at = rows.indexOf(row);
      rows.splice(at, 1);
      element.remove();
      renumber();
      // Focus stays in the list: on the row that took this one's place, else on Add row.
      const next = rows[at] ?? rows[at - 1];
      if (next) next.focus();
      else addButton.focus();
    });
    rows.push(row);
    rowsElement.append(element);
    renumber();
    return row;
  }

  function renumber() {
    rows.forEach((row, i) => {
      row.legend.textContent = `Row ${i + 1}`;
      row.removeButton.setAttribute('aria-label', `Remove row ${i + 1}`);
      row.removeButton.disabled = rows.length <= fewest;
    });
    addButton.disabled = rows.length >= most;
  }

  // The rows the default gives, else as many empty ones as the list needs (a required one: one).
  for (const rowInitial of Array.isArray(initial) ? initial.slice(0, most) : []) addRow(rowInitial);
  const wanted = Math.min(Math.max(fewest, field.required ? 1 : 0), most);
  while (rows.length < wanted) addRow(undefined);
  addButton.addEventListener('click', () => addRow(undefined).focus());

  return node({
    element: h(
      'fieldset',
      { class: 'form-field form-list', 'aria-describedby': describedBy, 'data-field': field.name, 'data-kind': 'list' },
      h('legend', {}, labelOf(field), requiredMark(field)),
      help,
      rowsElement,
      error,
      h('div', { class: 'row-actions' }, addButton),
    ),
    error,
    read() {
      const values = rows.map((row) => row.read());
      return values.length === 0 && !field.required ? undefined : values;
    },
    problems: unlessAbsent(field, (values) => countProblems(field, values.length, (n) => `Add at least ${plural(n, 'row')}.`, (n) => `Keep at most ${plural(n, 'row')}.`)),
    children: () => rows.map((row, i) => [String(i), row]),
  });
}

function fieldNode(field, initial, nextId) {
  switch (field.kind) {
    case 'select':
      return selectField(field, initial, nextId);
    case 'multi_select':
      return multiSelectField(field, initial, nextId);
    case 'confirm':
      return confirmField(field, initial, nextId);
    case 'group':
      return groupField(field, initial, nextId);
    case 'list':
      return listField(field, initial, nextId);
    default:
      return inputField(field, initial, nextId);
  }
}

/** Every node under `at` (itself included) with its JSON Pointer, rows by their current index. */
function nodesUnder(at, path, out = []) {
  out.push([path, at]);
  for (const [token, child] of at.children()) nodesUnder(child, `${path}/${token}`, out);
  return out;
}

/** Whether any field, at any depth, must be filled in. */
function anyRequired(fields) {
  return fields.some((field) => field.required || anyRequired(field.fields ?? []));
}

/** What stops the value of `at` from being sent, in the order of the form: [{ at, message }].
 *  What a left-out value holds is not sent, so it is not checked either. */
function problemsUnder(at, out = []) {
  const value = at.read();
  if (value instanceof Unreadable) {
    out.push({ at, message: value.message });
    return out;
  }
  for (const message of at.problems(value)) out.push({ at, message });
  if (value !== undefined) for (const [, child] of at.children()) problemsUnder(child, out);
  return out;
}

// ---- the form -------------------------------------------------------------------------------------

/**
 * The buttons of a gate's controls, in the gate's order, each calling `onAction(action, label)`;
 * accept is the main one. `submitAction`'s button submits its form instead (Enter in a field
 * presses it), and the form's submit handler acts for it.
 */
export function controlButtons(controls, onAction, submitAction = null) {
  return controls.map((control) => {
    const label = control.label || control.action;
    const submits = control.action === submitAction;
    const button = h(
      'button',
      { type: submits ? 'submit' : 'button', class: control.action === ACCEPT ? 'send' : 'choice', 'data-testid': 'control', 'data-action': control.action },
      label,
    );
    if (!submits) button.addEventListener('click', () => onAction(control.action, label));
    return button;
  });
}

/**
 * A form gate's fields and controls in a <form>. Accept checks every field and shows each problem
 * next to its control, the first focused, and sends nothing until all pass; decline and cancel
 * send no values. `onAnswer(body, label)` sends `{action: 'accept', values}` or `{action}`.
 * Returns { element, fieldset (disable it while sending), showServerProblems(fields) }.
 */
export function formGate({ prompt, idPrefix, onAnswer }) {
  const nextId = idMaker(idPrefix);
  const fields = prompt.schema?.fields ?? [];
  const controls = prompt.controls ?? [];
  const members = membersOf(fields, undefined, nextId);
  const general = h('div', { class: 'errors', role: 'alert', 'data-testid': 'form-problems', hidden: true });
  const root = node({ element: general, error: general, read: members.read, children: members.children });
  const fieldset = h(
    'fieldset',
    {},
    h('legend', { class: 'visually-hidden' }, 'Form'),
    anyRequired(fields) && h('p', { class: 'form-note' }, 'Fields marked * are required.'),
    members.elements,
    general,
    h('div', { class: 'actions' }, controlButtons(controls, (action, label) => answer(action, label), ACCEPT)),
  );
  const element = h('form', { class: 'form-gate', novalidate: true, 'data-testid': 'form' }, fieldset);
  element.addEventListener('submit', (event) => {
    event.preventDefault();
    const accept = controls.find((control) => control.action === ACCEPT);
    if (accept) answer(ACCEPT, accept.label || ACCEPT);
  });

  function clearProblems() {
    for (const error of element.querySelectorAll('.field-error')) {
      error.hidden = true;
      error.replaceChildren();
    }
    for (const control of element.querySelectorAll('[aria-invalid]')) control.removeAttribute('aria-invalid');
    general.hidden = true;
    general.replaceChildren();
  }

  /** [{ at, message }]: what stops the form from being sent, in the order of the form. */
  function check() {
    const problems = problemsUnder(root);
    for (const [, child] of members.children()) {
      const value = child.read();
      if (value !== undefined && !(value instanceof Unreadable) && bytes(JSON.stringify(value)) > MAX_VALUE_BYTES) {
        problems.push({ at: child, message: `This answer is too long: at most ${MAX_VALUE_BYTES} bytes as JSON.` });
      }
    }
    return problems;
  }

  function show(problems, summary) {
    for (const { at, message } of problems) at.showProblem(message);
    general.prepend(h('p', {}, summary));
    general.hidden = false;
    problems[0].at.focus();
  }

  function answer(action, label) {
    clearProblems();
    if (action !== ACCEPT) {
      onAnswer({ action }, label);
      return;
    }
    const problems = check();
    if (problems.length > 0) {
      show(problems, `This form cannot be sent yet: ${plural(problems.length, 'problem')}, marked above.`);
      return;
    }
    onAnswer({ action, values: root.read() }, label);
  }

  return {
    element,
    fieldset,
    /**
     * Shows the server's field problems next to the controls at their paths (or the nearest field
     * that holds that path: an unknown key shows on its group). Returns whether there were any.
     */
    showServerProblems(problemFields) {
      clearProblems();
      if (problemFields.length === 0) return false;
      const byPath = new Map(nodesUnder(root, VALUES_PATH));
      const problems = problemFields.map((field) => {
        const path = String(field.path ?? '');
        let near = path;
        while (near && !byPath.has(near)) near = near.slice(0, near.lastIndexOf('/'));
        const rest = path.slice(near.length);
        const message = fieldMessage(field);
        return { at: byPath.get(near) ?? root, message: rest ? `${rest}: ${message}` : message };
      });
      show(problems, `The server did not accept this form: ${plural(problems.length, 'problem')}, marked above.`);
      return true;
    },
  };
}

// ---- what was answered ----------------------------------------------------------------------------

function optionLabel(field, value) {
  return field.options?.find((option) => option.value === value)?.label || String(value);
}

function valueView(field, value, path) {
  switch (field.kind) {
    case 'group':
      return isObject(value) ? valuesView(field.fields ?? [], value, path) : JSON.stringify(value);
    case 'list':
      return Array.isArray(value)
        ? h('ol', { class: 'form-rows' }, value.map((row, i) => h('li', {}, valuesView(field.fields ?? [], row, `${path}/${i}`))))
        : JSON.stringify(value);
    case 'select':
      return optionLabel(field, value);
    case 'multi_select':
      return Array.isArray(value) ? value.map((item) => optionLabel(field, item)).join(', ') || '(none)' : JSON.stringify(value);
    case 'confirm':
      return value === true ? 'Yes' : value === false ? 'No' : JSON.stringify(value);
    default:
      return typeof value === 'string' ? value : JSON.stringify(value);
  }
}

/**
 * An accepted form's values, labelled as the form asked for them: label and value pairs, nested
 * for groups and list rows; `data-path` is each value's JSON Pointer inside `values`. A member the
 * fields do not name is shown as JSON under its own name.
 */
export function valuesView(fields, values, path = '') {
  const named = new Set(fields.map((field) => field.name));
  const shown = fields.filter((field) => member(values, field.name) !== undefined && values[field.name] !== null);
  const others = isObject(values) ? Object.keys(values).filter((name) => !named.has(name)) : [];
  return h(
    'dl',
    { class: 'form-values', 'data-testid': path ? null : 'values' },
    shown.flatMap((field) => {
      const at = `${path}/${pointerToken(field.name)}`;
      return [h('dt', {}, labelOf(field)), h('dd', { 'data-path': at }, valueView(field, values[field.name], at))];
    }),
    others.flatMap((name) => [h('dt', {}, name), h('dd', { 'data-path': `${path}/${pointerToken(name)}` }, JSON.stringify(values[name]))]),
  );
}

// ---- open-URL gates -------------------------------------------------------------------------------

/** "This opens https://github.com": where the link goes, before the person follows it. */
export function originLine(prompt) {
  return h('p', { class: 'origin', 'data-testid': 'origin' }, 'This opens ', h('strong', {}, prompt.origin ?? 'an address outside gatehouse'));
}

/** The URL as a link in a new tab that learns nothing of this page; anything but http(s) stays text. */
export function urlLink(url) {
  let web = false;
  try {
    web = ['http:', 'https:'].includes(new URL(url).protocol);
  } catch {
    // not a URL at all: text
  }
  if (!web) return h('code', { 'data-testid': 'url-link' }, url);
  return h('a', { href: url, target: '_blank', rel: 'noopener noreferrer', 'data-testid': 'url-link' }, url);
}
