// The answer-link confirm page: posts the chosen answer as JSON to the page's own URL (the link
// token in it is the only credential). A question's page sends one answer, with one
// Idempotency-Key for every retry of it; a permission gate's page (#decide) sends a decision:
// Approve, Approve always, Deny with an optional reason, or Approve with an edited input once the
// approver has reviewed its diff (the editor is permission.js's, as on the inbox). A form gate's
// page (#form-gate) builds the form from the prompt the server embedded as JSON (form.js, as on
// the inbox); an open-URL gate's page (#open-url) shows the link the server rendered and sends
// the control pressed.

import { newIdempotencyKey } from "./api.js";
import { FORM, OPEN_URL, actionWord, formGate } from "./form.js";
import { APPROVE, APPROVE_ALWAYS, DENY, inputEditor } from "./permission.js";

const form = document.getElementById("answer");
const decide = document.getElementById("decide");
const formSlot = document.getElementById("form-gate");
const openUrl = document.getElementById("open-url");
const result = document.getElementById("result");

/** Posts one answer body to this link with `key`, the controls of `within` disabled meanwhile
 *  (only those that were enabled: a list's "Add row" may be disabled for a reason of its own).
 *  Resolves to "accepted", "answered" or "closed" (the gate was decided elsewhere: the link never
 *  says how), or to the refusal's `{ fields, message }`. */
async function post(within, body, key) {
  const controls = [...within.querySelectorAll("button, input, select, textarea")].filter((c) => !c.disabled);
  controls.forEach((c) => (c.disabled = true));
  result.textContent = "Sending…";
  try {
    const response = await fetch(location.pathname, {
      method: "POST",
      headers: { "Content-Type": "application/json", "Idempotency-Key": key },
      body,
    });
    if (response.status === 202) return "accepted";
    const error = (await response.json().catch(() => null))?.error;
    if (error?.code === "gate_not_ready") return /closed/.test(error.message ?? "") ? "closed" : "answered";
    return { fields: error?.fields ?? [], message: error?.message || `Failed (${response.status})` };
  } catch {
    return { fields: [], message: "Could not reach gatehouse; try again." };
  } finally {
    controls.forEach((c) => (c.disabled = false));
  }
}

/** What a refusal says: its field problems, else its message. */
function refusal({ fields, message }) {
  return fields.map((f) => f.message).join("; ") || message;
}

/**
 * Sends the decisions of the controls in `within`: a retry of the same body reuses its key. Once
 * the gate is answered (here: `done` is shown; elsewhere: "`already` answered.") `within` goes.
 * Resolves to the refusal, for the caller to show, or to null.
 */
function decisions(within, already) {
  let attempt = null; // { sent, key }
  return async (body, done) => {
    const sent = JSON.stringify(body);
    if (attempt?.sent !== sent) attempt = { sent, key: newIdempotencyKey() };
    const outcome = await post(within, sent, attempt.key);
    if (typeof outcome === "string") {
      result.textContent = outcome === "accepted" ? done : `${already} ${outcome}.`;
      within.hidden = true;
      return null;
    }
    attempt = null; // refused: what is sent next is a new attempt
    return outcome;
  };
}

/** "Submitted.", "Marked done.": what the page says once its answer counted. */
function doneWords(kind, action) {
  const word = actionWord(kind, action);
  return `${word.charAt(0).toUpperCase()}${word.slice(1)}.`;
}

if (form) {
  const key = newIdempotencyKey();
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    // The button that submitted: a choice carries its value; "Send" submits the typed text
    // (Enter in the text field submits through "Send" too, never through a choice).
    const submitter = event.submitter;
    const text = form.elements.namedItem("text");
    const answer = submitter && submitter.name === "answer" ? submitter.value : text ? text.value.trim() : "";
    if (!answer) {
      result.textContent = "Type an answer first.";
      text?.focus();
      return;
    }
    const outcome = await post(form, JSON.stringify({ action: "answer", values: { answer } }), key);
    if (typeof outcome !== "string") {
      result.textContent = refusal(outcome);
      return;
    }
    const words = { accepted: `Answered: ${answer}`, answered: "Someone already answered this question." };
    result.textContent = words[outcome] ?? "This question was already closed.";
    form.hidden = true;
  });
}

if (decide) {
  // The original input and its schema, as the server put them in (attribute-escaped JSON).
  const original = decide.dataset.toolInput === undefined ? undefined : JSON.parse(decide.dataset.toolInput);
  const schema = decide.dataset.toolInputSchema === undefined ? undefined : JSON.parse(decide.dataset.toolInputSchema);
  const denyForm = document.getElementById("deny");
  const decideWith = decisions(decide, "This tool call was already");
  let editor = null;

  async function send(body, done) {
    const refused = await decideWith(body, done);
    if (!refused) return;
    if (editor?.showServerProblems(refused.fields)) result.textContent = "The server did not accept the edited input.";
    else result.textContent = refusal(refused);
  }

  const DONE = { [APPROVE]: "Approved.", [APPROVE_ALWAYS]: "Approved always for this workspace." };
  for (const button of decide.querySelectorAll(".actions button[data-action]")) {
    const action = button.dataset.action;
    button.addEventListener("click", () => send({ action }, DONE[action] ?? `${button.textContent}: sent.`));
  }

  denyForm?.addEventListener("submit", (event) => {
    event.preventDefault();
    const reason = denyForm.elements.namedItem("reason").value.trim();
    send(reason ? { action: DENY, values: { reason } } : { action: DENY }, reason ? `Denied: ${reason}` : "Denied.");
  });

  const editButton = document.getElementById("edit");
  if (editButton && original !== undefined) {
    editor = inputEditor({
      original,
      schema,
      idPrefix: "edit",
      onConfirm: (toolInput) => send({ action: APPROVE, values: { tool_input: toolInput } }, "Approved, with your edit."),
    });
    decide.querySelector(".actions").after(editor.element);
    editButton.addEventListener("click", () => editor.open());
  }
}

if (formSlot) {
  // The prompt as the server embedded it: JSON in a data block, which no browser runs.
  const prompt = JSON.parse(document.getElementById("form-prompt").textContent);
  const answerWith = decisions(formSlot, "This form was already");
  const fields = formGate({
    prompt,
    idPrefix: "form",
    onAnswer: async (body) => {
      result.textContent = "";
      const refused = await answerWith(body, doneWords(FORM, body.action));
      if (!refused) return;
      // The form shows field problems next to their controls (and says so itself).
      result.textContent = fields.showServerProblems(refused.fields) ? "" : refusal(refused);
    },
  });
  formSlot.append(fields.element);
}

if (openUrl) {
  const answerWith = decisions(openUrl, "This request was already");
  for (const button of openUrl.querySelectorAll("button[data-action]")) {
    const action = button.dataset.action;
    button.addEventListener("click", async () => {
      const refused = await answerWith({ action }, doneWords(OPEN_URL, action));
      if (refused) result.textContent = refusal(refused);
    });
  }
}
