// The answer-link confirm page: posts the chosen answer as JSON to the page's own URL (the link
// token in it is the only credential), with one Idempotency-Key for every retry of this answer.

const form = document.getElementById("answer");
const result = document.getElementById("result");

if (form) {
  const key = crypto.randomUUID();
  let clicked = null;
  form.addEventListener("click", (event) => {
    if (event.target instanceof HTMLButtonElement) clicked = event.target;
  });
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const text = form.elements.namedItem("text");
    const answer = clicked && clicked.value ? clicked.value : text ? text.value : "";
    const buttons = form.querySelectorAll("button, input");
    buttons.forEach((b) => (b.disabled = true));
    result.textContent = "Sending…";
    try {
      const response = await fetch(location.pathname, {
        method: "POST",
        headers: { "Content-Type": "application/json", "Idempotency-Key": key },
        body: JSON.stringify({ action: "answer", values: { answer } }),
      });
      const body = response.status === 202 ? null : await response.json();
      if (response.status === 202) {
        result.textContent = `Answered: ${answer}`;
        form.hidden = true;
        return;
      }
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
    buttons.forEach((b) => (b.disabled = false));
    clicked = null;
  });
}
