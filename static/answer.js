// The answer-link confirm page: posts the chosen answer as JSON to the page's own URL (the link
// token in it is the only credential). A question's page sends one answer, with one
// Idempotency-Key for every retry of it; a permission gate's page (#decide) sends a decision:
// Approve, Approve always, Deny with an optional reason, or Approve with an edited input once the
// approver has reviewed its diff (the editor is permission.js's, as on the inbox).

import { newIdempotencyKey } from "./api.js";
import { APPROVE, APPROVE_ALWAYS, DENY, inputEditor } from "./permission.js";

const form = document.getElementById("answer");
const decide = document.getElementById("decide");
const result = document.getElementById("result");

/** Posts one answer body to this link with `key`, the controls of `within` disabled meanwhile.
 *  Resolves to "accepted", "answered" or "closed" (the gate was decided elsewhere: the link never
 *  says how), or to the refusal's `{ fields, message }`. */
async function post(within, body, key) {
  const controls = within.querySelectorAll("button, input, textarea");
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
  let attempt = null; // { sent, key }: a retry of the same decision reuses its key
  let editor = null;

  async function send(body, done) {
    const sent = JSON.stringify(body);
    if (attempt?.sent !== sent) attempt = { sent, key: newIdempotencyKey() };
    const outcome = await post(decide, sent, attempt.key);
    if (typeof outcome === "string") {
      result.textContent = outcome === "accepted" ? done : `This tool call was already ${outcome}.`;
      decide.hidden = true;
      return;
    }
    attempt = null; // refused: what is sent next is a new attempt
    if (editor?.showServerProblems(outcome.fields)) result.textContent = "The server did not accept the edited input.";
    else result.textContent = refusal(outcome);
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
