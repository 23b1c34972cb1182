// Permission gates (`harness.permission`): the approval card's parts, the editor of the call's
// input (a JSON text checked against the input's schema, then a diff the approver confirms), and
// the one line that says how a call was decided. The inbox (app.js) uses all of it; the
// answer-link page (answer.js), whose card the server renders, uses the editor and the actions.
// Gate text is untrusted: everything goes in through h(), as text.

import { checkAgainstSchema, jsonEqual } from './schema.js';
import { decidedBy, h } from './view.js';

export const APPROVE = 'Approve';
export const APPROVE_ALWAYS = 'Approve always for this workspace';
export const DENY = 'Deny';

/** Where the server reports problems of an edited input; editor paths are relative to it. */
const INPUT_PATH = '/values/tool_input';

/** The input as the approver reads and edits it: JSON, two spaces a level. */
function pretty(value) {
  return JSON.stringify(value, null, 2);
}

/** Whether the risk is one an approver must not miss: the card stands out for these. */
export function isSevere(risk) {
  return risk === 'high' || risk === 'critical';
}

/**
 * The card's body: tool name and risk, summary, requirements and the input. `headingId` names the
 * heading, for the card's aria-labelledby.
 */
export function approvalDetails(call, headingId) {
  const requirements = call.requirements ?? [];
  const saves = requirements.flatMap((requirement) => requirement.candidates ?? []).map((candidate) => candidate.description);
  return [
    h(
      'div',
      { class: 'tool-head' },
      h('h3', { id: headingId, class: 'tool-name', 'data-testid': 'tool-name' }, call.tool_name),
      call.risk && h('span', { class: `risk risk-${call.risk}`, 'data-testid': 'risk', 'data-risk': call.risk }, `${call.risk} risk`),
    ),
    call.summary && h('p', { class: 'summary', 'data-testid': 'summary' }, call.summary),
    requirements.length > 0 &&
      h(
        'div',
        { class: 'requirements' },
        h('p', { class: 'label' }, 'Needs'),
        h('ul', { 'data-testid': 'requirements' }, requirements.map((requirement) => h('li', {}, requirement.description))),
        saves.length > 0 && h('p', { class: 'saves', 'data-testid': 'saves' }, `Approve always saves: ${saves.join('; ')}`),
      ),
    call.tool_input !== undefined &&
      h('div', { class: 'input' }, h('p', { class: 'label' }, 'Input'), h('pre', { class: 'tool-input', 'data-testid': 'tool-input' }, pretty(call.tool_input))),
  ];
}

// ---- how it was decided ---------------------------------------------------------------------------

/** `approve` or `deny`: the view's decision, or its resolution's action while the full view is
 *  still being fetched. */
export function decisionEffect({ decision, resolution }) {
  return decision?.effect ?? (resolution?.action === DENY ? 'deny' : 'approve');
}

/**
 * "approved by alice", "approved by alice, edited", "denied by bob: not on main", "denied by policy
 * after 5 min": from the view's `decision`, or from its resolution alone while the full view is
 * still being fetched. Null for a gate that was closed rather than decided.
 */
export function decisionLine(view) {
  const { decision, resolution } = view;
  if (!decision && !resolution?.action) return null;
  const action = decision?.action ?? resolution.action;
  const effect = decisionEffect(view);
  let text = `${effect === 'deny' ? 'denied' : 'approved'} by ${decidedBy(view)}`;
  if (action === APPROVE_ALWAYS) text += ', always for this workspace';
  if (decision?.edited) text += ', edited';
  if (effect === 'deny' && decision?.reason) text += `: ${decision.reason}`;
  return text;
}

// ---- the diff -------------------------------------------------------------------------------------

/**
 * A line diff of two texts: [{ kind: 'same' | 'del' | 'add', text }], in order. A longest common
 * subsequence of the lines between the common head and tail, which keeps an edit of a few lines
 * in a long input cheap.
 */
function lineDiff(before, after) {
  const a = before.split('\n');
  const b = after.split('\n');
  let head = 0;
  while (head < a.length && head < b.length && a[head] === b[head]) head += 1;
  let tail = 0;
  while (tail < a.length - head && tail < b.length - head && a[a.length - 1 - tail] === b[b.length - 1 - tail]) tail += 1;
  const x = a.slice(head, a.length - tail);
  const y = b.slice(head, b.length - tail);
  // lengths[i][j]: the longest common subsequence of x[i..] and y[j..], one flat array.
  const width = y.length + 1;
  const lengths = new Uint32Array((x.length + 1) * width);
  for (let i = x.length - 1; i >= 0; i -= 1) {
    for (let j = y.length - 1; j >= 0; j -= 1) {
      lengths[i * width + j] = x[i] === y[j] ? lengths[(i + 1) * width + j + 1] + 1 : Math.max(lengths[(i + 1) * width + j], lengths[i * width + j + 1]);
    }
  }
  const lines = a.slice(0, head).map((text) => ({ kind: 'same', text }));
  let i = 0;
  let j = 0;
  while (i < x.length || j < y.length) {
    if (i < x.length && j < y.length && x[i] === y[j]) {
      lines.push({ kind: 'same', text: x[i] });
      i += 1;
      j += 1;
    } else if (i < x.length && (j === y.length || lengths[(i + 1) * width + j] >= lengths[i * width + j + 1])) {
      // On a tie the removal goes first: a changed line reads "- old" then "+ new".
      lines.push({ kind: 'del', text: x[i] });
      i += 1;
    } else {
      lines.push({ kind: 'add', text: y[j] });
      j += 1;
    }
  }
  for (const text of a.slice(a.length - tail)) lines.push({ kind: 'same', text });
  return lines;
}

const MARKS = { same: '  ', del: '- ', add: '+ ' };

function diffView(lines) {
  return h(
    'pre',
    { class: 'diff', 'data-testid': 'diff' },
    lines.map(({ kind, text }) => h('span', { class: `diff-line diff-${kind}`, 'data-kind': kind }, `${MARKS[kind]}${text}\n`)),
  );
}

// ---- the editor -----------------------------------------------------------------------------------

/**
 * The editor of an editable call's input. Review checks the text (JSON, an object, the schema)
 * and shows what changed; only then can the approver confirm, and `onConfirm(toolInput)` sends it.
 * Typing again withdraws the review, so what is confirmed is always what the diff showed.
 * Returns { element, open, close, showServerProblems } (see there).
 */
export function inputEditor({ original, schema, idPrefix, onConfirm }) {
  const textareaId = `${idPrefix}-input`;
  const problemsId = `${idPrefix}-problems`;
  const textarea = h('textarea', {
    id: textareaId,
    class: 'json-input',
    rows: 10,
    spellcheck: 'false',
    autocapitalize: 'off',
    autocomplete: 'off',
    'aria-describedby': problemsId,
    'data-testid': 'editor-input',
  });
  const problems = h('div', { id: problemsId, class: 'errors', role: 'alert', 'data-testid': 'editor-problems', hidden: true });
  const reviewButton = h('button', { type: 'button', 'data-testid': 'editor-review' }, 'Review changes');
  const cancelButton = h('button', { type: 'button', 'data-testid': 'editor-cancel' }, 'Cancel');
  const diffSlot = h('div');
  const confirmButton = h('button', { type: 'button', class: 'send', 'data-testid': 'editor-confirm' }, 'Approve with these changes');
  const backButton = h('button', { type: 'button', 'data-testid': 'editor-back' }, 'Keep editing');
  const review = h(
    'div',
    { class: 'review', tabindex: -1, 'data-testid': 'editor-review-panel', hidden: true },
    h('p', { class: 'label' }, 'Your changes (- removed, + added):'),
    diffSlot,
    h('div', { class: 'actions' }, confirmButton, backButton),
  );
  const element = h(
    'div',
    { class: 'editor', 'data-testid': 'editor', hidden: true },
    h('label', { for: textareaId }, 'Edit the input (JSON)'),
    textarea,
    problems,
    h('div', { class: 'actions' }, reviewButton, cancelButton),
    review,
  );
  let reviewed = null; // the input the shown diff is of

  function showProblems(list) {
    problems.replaceChildren(
      h('p', {}, 'This input cannot be sent:'),
      h('ul', {}, list.map(({ path, message }) => h('li', { 'data-testid': 'editor-problem' }, path ? `${path}: ${message}` : message))),
    );
    problems.hidden = false;
    textarea.setAttribute('aria-invalid', 'true');
    withdrawReview();
  }

  function clearProblems() {
    problems.hidden = true;
    problems.replaceChildren();
    textarea.removeAttribute('aria-invalid');
  }

  function withdrawReview() {
    reviewed = null;
    review.hidden = true;
    diffSlot.replaceChildren();
  }

  function check() {
    clearProblems();
    let value;
    try {
      value = JSON.parse(textarea.value);
    } catch (error) {
      showProblems([{ path: '', message: `not valid JSON (${error.message})` }]);
      return;
    }
    if (typeof value !== 'object' || value === null || Array.isArray(value)) {
      showProblems([{ path: '', message: 'the input must be a JSON object' }]);
      return;
    }
    const found = schema === undefined ? [] : checkAgainstSchema(value, schema);
    if (found.length > 0) {
      showProblems(found);
      return;
    }
    if (jsonEqual(value, original)) {
      showProblems([{ path: '', message: 'nothing changed: use Approve to run the call as it is' }]);
      return;
    }
    reviewed = value;
    diffSlot.replaceChildren(diffView(lineDiff(pretty(original), pretty(value))));
    review.hidden = false;
    review.focus();
  }

  textarea.addEventListener('input', () => {
    if (reviewed !== null) withdrawReview();
  });
  reviewButton.addEventListener('click', check);
  backButton.addEventListener('click', () => {
    withdrawReview();
    textarea.focus();
  });
  confirmButton.addEventListener('click', () => {
    if (reviewed !== null) onConfirm(reviewed);
  });

  const editor = {
    element,
    /** Shows the editor with the original input in it (or what was typed before, if reopened). */
    open() {
      if (!textarea.value) textarea.value = pretty(original);
      element.hidden = false;
      textarea.focus();
    },
    close() {
      withdrawReview();
      clearProblems();
      element.hidden = true;
    },
    /**
     * Shows the server's problems with the edited input next to the editor (paths relative to the
     * input). Returns whether there were any: other problems are the caller's to show.
     */
    showServerProblems(fields) {
      const mine = fields.filter((field) => field.path === INPUT_PATH || field.path?.startsWith(`${INPUT_PATH}/`));
      if (mine.length === 0) return false;
      element.hidden = false;
      showProblems(mine.map((field) => ({ path: field.path.slice(INPUT_PATH.length), message: field.message || field.code })));
      return true;
    },
  };
  cancelButton.addEventListener('click', () => editor.close());
  return editor;
}
