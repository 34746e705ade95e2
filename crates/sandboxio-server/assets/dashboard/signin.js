// Exchanges an API key for a session cookie, then loads the dashboard.
"use strict";
document.getElementById("signin").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const err = document.getElementById("signin-error");
  const key = document.getElementById("key");
  err.hidden = true;
  try {
    // The key in a header: the server knows it before any body, so sign-ins by others
    // that never finish sending theirs cannot hold this one up.
    const res = await fetch("/dashboard/signin", {
      method: "POST",
      headers: { authorization: "Bearer " + key.value.trim() },
      credentials: "same-origin",
    });
    if (!res.ok) {
      const p = await res.json().catch(() => ({}));
      throw new Error(p.detail || res.statusText);
    }
    key.value = "";
    location.reload();
  } catch (e) {
    err.textContent = "Sign-in refused: " + e.message;
    err.hidden = false;
  }
});
