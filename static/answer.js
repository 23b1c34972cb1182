// The answer-link confirm page: posts the chosen answer as JSON to the page's own URL (the link
// token in it is the only credential). A question's page sends one answer, with one
// Idempotency-Key for every retry of it; a permission gate's page (#decide) sends a decision:
// Approve, Approve always, Deny with an optional reason, or Approve with an edited input once the
// approver has reviewed its diff (the editor is permission.js's, as on the inbox).

import { APPROVE, APPROVE_ALWAYS, DENY, inputEditor } from "./permission.js";

const form = document.getElementById("answer");
const decide = document.getElementById("decide");
const result = document.getElementById("result");

function newKey() {
  return crypto.randomUUID ? crypto.randomUUID() : String(Date.now()) + Math.random();
}

if (form) {
  const key = newKey();
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
    const controls = form.querySelectorAll("button, input");
    controls.forEach((c) => (c.disabled = true));
    result.textContent = "Sending…";
    try {
      const response = await fetch(location.pathname, {
        method: "POST",
        headers: { "Content-Type": "application/json", "Idempotency-Key": key },
        body: JSON.stringify({ action: "answer", values: { answer } }),
      });
      if (response.status === 202) {
        result.textContent = `Answered: ${answer}`;
        form.hidden = true;
        return;
      }
      const body = await response.json();
      if (body?.error?.code === "gate_not_ready") {
        result.textContent = "Someone already answered this question.";
        form.hidden = true;
        return;
      }
      const fields = (body?.error?.fields ?? []).map((f) => f.message).join("; ");
      result.textContent = fields || body?.error?.message || `Failed (${response.status})`;
    } catch {
      result.textContent = "Could not reach gatehouse; try again.";
    }
    controls.forEach((c) => (c.disabled = false));
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
    if (attempt?.sent !== sent) attempt = { sent, key: newKey() };
    const controls = decide.querySelectorAll("button, input, textarea");
    controls.forEach((c) => (c.disabled = true));
    result.textContent = "Sending…";
    try {
      const response = await fetch(location.pathname, {
        method: "POST",
        headers: { "Content-Type": "application/json", "Idempotency-Key": attempt.key },
        body: sent,
      });
      if (response.status === 202) {
        result.textContent = done;
        decide.hidden = true;
        return;
      }
      const error = (await response.json().catch(() => null))?.error;
      attempt = null; // refused: what is sent next is a new attempt
      if (error?.code === "gate_not_ready") {
        // The link answers; it never says how someone else decided.
        result.textContent = /closed/.test(error.message ?? "") ? "This tool call was already closed." : "This tool call was already answered.";
        decide.hidden = true;
        return;
      }
      const fields = error?.fields ?? [];
      if (editor?.showServerProblems(fields)) result.textContent = "The server did not accept the edited input.";
      else result.textContent = fields.map((f) => f.message).join("; ") || error?.message || `Failed (${response.status})`;
    } catch {
      result.textContent = "Could not reach gatehouse; try again.";
    }
    controls.forEach((c) => (c.disabled = false));
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
