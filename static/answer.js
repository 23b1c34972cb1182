// The answer-link confirm page: posts the chosen answer as JSON to the page's own URL (the link
// token in it is the only credential), with one Idempotency-Key for every retry of this answer.

const form = document.getElementById("answer");
const result = document.getElementById("result");

if (form) {
  const key = crypto.randomUUID ? crypto.randomUUID() : String(Date.now()) + Math.random();
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
