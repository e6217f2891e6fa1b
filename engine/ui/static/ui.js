// Feedback without leaving the page: the useful / not-useful forms post in the background and
// say what was recorded. Without JavaScript the same forms post and come back to the answer.
"use strict";
document.addEventListener("submit", async (event) => {
  const form = event.target;
  if (!(form instanceof HTMLFormElement) || !form.hasAttribute("data-fb")) return;
  event.preventDefault();
  const out = form.querySelector("output");
  const body = new URLSearchParams(new FormData(form, event.submitter));
  try {
    const res = await fetch(form.action, {
      method: "POST",
      body,
      headers: { Accept: "application/json" },
      credentials: "same-origin",
    });
    const data = await res.json();
    out.textContent = res.ok ? `Recorded: ${data.verdict}` : `Not recorded: ${data.message}`;
  } catch (err) {
    out.textContent = `Not recorded: ${err}`;
  }
});
