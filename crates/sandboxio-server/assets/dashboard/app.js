// The dashboard: one EventSource for the panels' data, and the buttons. Every request
// that changes something carries the session's CSRF token.
"use strict";
(() => {
  const $ = (id) => document.getElementById(id);
  const csrf = document.querySelector('meta[name="csrf-token"]').content;
  const charts = {
    throughput: Charts.throughput($("throughput-chart")),
    budget: Charts.budget($("budget-chart")),
    latency: Charts.latency($("latency-chart")),
    errors: Charts.errors($("errors-chart")),
  };
  let last = null;
  let receivedAt = Date.now();

  const fmtMs = (v) => {
    if (v === null || v === undefined) return "–";
    if (v < 1000) return Math.round(v) + " ms";
    if (v < 60000) return (v / 1000).toFixed(1) + " s";
    return (v / 60000).toFixed(1) + " min";
  };
  const fmtSecs = (s) => (s < 60 ? s + " s" : s < 3600 ? Math.floor(s / 60) + " min " + (s % 60) + " s" : (s / 3600).toFixed(1) + " h");
  const fmtMoney = (v) => Number(v).toLocaleString(undefined, { maximumFractionDigits: 6 });
  const text = (id, v) => { const el = $(id); if (el.textContent !== String(v)) el.textContent = v; };
  const el = (tag, props, ...kids) => {
    const e = document.createElement(tag);
    Object.assign(e, props || {});
    for (const k of kids) e.append(k);
    return e;
  };

  async function send(method, path, body) {
    const res = await fetch(path, {
      method,
      credentials: "same-origin",
      headers: { "content-type": "application/json", "x-csrf-token": csrf },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    if (res.status === 401) { location.reload(); return null; }
    const answer = await res.json().catch(() => ({}));
    if (!res.ok) throw new Error(answer.detail || res.statusText);
    return answer;
  }
  const showError = (id, e) => { const p = $(id); p.textContent = "Refused: " + e.message; p.hidden = false; };

  function renderKill(k) {
    const s = $("kill-state");
    s.dataset.state = k.engaged ? "engaged" : "released";
    text("kill-state", k.engaged ? "ENGAGED" : "released");
    text("kill-detail", k.engaged ? "by " + k.by + ": " + k.reason : "operations run normally");
    $("kill-engage").hidden = k.engaged;
    $("kill-release").hidden = !k.engaged;
  }

  function renderThroughput(t) {
    for (const k of ["success", "failure", "timeout", "denied"]) text("tp-" + k, t.last_hour[k]);
    charts.throughput.set(t);
  }

  function renderBudget(b) {
    text("budget-spent", b.spent ? fmtMoney(b.spent) : "0");
    text("budget-ceiling", b.ceiling ? fmtMoney(b.ceiling) : "no ceiling");
    text("budget-currency", b.currency || "");
    text("budget-burn", fmtMoney(b.burn_per_hour || 0));
    text("budget-eta", b.exhausted_at ? new Date(b.exhausted_at).toLocaleString() : "never at this rate");
    if (b.t && b.t.length) charts.budget.set(b);
  }

  function renderLatency(list) {
    const rows = list.map((l) => el("tr", { id: "latency-" + l.class },
      el("th", { scope: "row", textContent: l.class }),
      el("td", { className: "count", textContent: String(l.count) }),
      el("td", { className: "p50", textContent: fmtMs(l.p50_ms) }),
      el("td", { className: "p99", textContent: fmtMs(l.p99_ms) }),
      el("td", { textContent: fmtMs(l.target_p50_ms) + " / " + fmtMs(l.target_p99_ms) })));
    $("latency-rows").replaceChildren(...rows);
    const chosen = list.find((l) => l.class === $("latency-class").value) || list[0];
    if (chosen) charts.latency.set(chosen);
  }

  function renderAgents(agents, sandboxes) {
    text("agents-count", agents.length);
    text("sandboxes-count", sandboxes);
    const gone = (Date.now() - receivedAt) / 1000;
    $("agents-rows").replaceChildren(...agents.map((a) => el("tr", {},
      el("td", { textContent: a.sandbox || a.agent || "–" }),
      el("td", { textContent: a.tenant }),
      el("td", { className: "action", textContent: a.action }),
      el("td", { className: "elapsed", textContent: fmtSecs(Math.round(a.elapsed_s + gone)) }))));
  }

  function renderErrors(e) {
    text("errors-rate", e.rate === null ? "–" : (e.rate * 100).toFixed(1) + "%");
    text("errors-window", e.window_min);
    text("errors-count", e.errors);
    text("errors-ran", e.ran);
    text("errors-threshold", Math.round(e.threshold * 100) + "%");
    $("errors-alert").hidden = !e.alert;
    $("errors").classList.toggle("alerting", e.alert);
    charts.errors.set(e);
  }

  // Lists are rebuilt only when their items change, so keyboard focus stays put.
  let approvalIds = "";
  function renderApprovals(list) {
    text("approvals-count", list.length);
    const ids = list.map((a) => a.id).join(",");
    if (ids === approvalIds) return;
    approvalIds = ids;
    $("approvals-list").replaceChildren(...list.map((a) => {
      const reason = el("input", { type: "text", placeholder: "reason (optional)", maxLength: 500 });
      reason.setAttribute("aria-label", "reason for " + a.id);
      const err = el("p", { className: "error", hidden: true });
      err.setAttribute("role", "alert");
      const decide = (verb) => async () => {
        err.hidden = true;
        try {
          await send("POST", "/dashboard/api/approvals/" + encodeURIComponent(a.id) + "/" + verb, { reason: reason.value || null });
          approvalIds = "";
        } catch (e) { err.textContent = "Refused: " + e.message; err.hidden = false; }
      };
      const approve = el("button", { type: "button", className: "approve", textContent: "Approve" });
      approve.addEventListener("click", decide("approve"));
      const deny = el("button", { type: "button", className: "deny", textContent: "Deny" });
      deny.addEventListener("click", decide("deny"));
      const li = el("li", { className: "approval" },
        el("strong", { textContent: a.kind }), " ",
        el("code", { textContent: a.summary }),
        el("p", { className: "hint", textContent: a.reason + (a.rationale ? " · rationale: " + a.rationale : "") }),
        reason, approve, deny, err);
      li.dataset.id = a.id;
      return li;
    }));
  }

  let denialKeys = "";
  function renderDenials(list) {
    const keys = list.map((d) => d.at + d.event).join(",");
    if (keys === denialKeys) return;
    denialKeys = keys;
    $("denials-list").replaceChildren(...list.map((d) => el("li", { className: "denial" },
      el("time", { dateTime: d.at, textContent: new Date(d.at).toLocaleTimeString() }), " ",
      el("strong", { textContent: d.event }), " at ",
      el("span", { className: "layer", textContent: d.layer }),
      d.rule ? el("span", { className: "rule", textContent: " (" + d.rule + ")" }) : "",
      ": ", el("span", { className: "reason", textContent: d.reason }))));
  }

  function render(s) {
    last = s;
    receivedAt = Date.now();
    text("who", (s.tenant ? "tenant " + s.tenant : "all tenants") + " · " + s.scopes.join(", "));
    renderKill(s.kill);
    renderThroughput(s.throughput);
    renderBudget(s.budget);
    renderLatency(s.latency);
    renderAgents(s.agents, s.sandboxes);
    renderErrors(s.errors);
    renderApprovals(s.approvals);
    renderDenials(s.denials);
    document.body.dataset.loaded = "true";
  }

  function connect() {
    const es = new EventSource("/dashboard/api/events");
    es.addEventListener("snapshot", (m) => { text("live", "live"); render(JSON.parse(m.data)); });
    es.addEventListener("problem", (m) => { text("live", "error: " + JSON.parse(m.data).detail); });
    es.onerror = async () => {
      text("live", "reconnecting…");
      if (es.readyState === EventSource.CLOSED) {
        const r = await fetch("/dashboard/api/snapshot", { credentials: "same-origin" });
        if (r.status === 401) { location.reload(); return; }
        setTimeout(connect, 2000);
      }
    };
  }

  $("latency-class").addEventListener("change", () => last && renderLatency(last.latency));
  setInterval(() => last && renderAgents(last.agents, last.sandboxes), 1000);

  const dialog = $("kill-dialog");
  $("kill-engage").addEventListener("click", () => {
    $("kill-error").hidden = true;
    $("kill-reason").value = "";
    dialog.showModal();
  });
  $("kill-cancel").addEventListener("click", () => dialog.close("cancel"));
  $("kill-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const reason = $("kill-reason").value.trim();
    if (!reason) return;
    dialog.close("confirm");
    try { renderKill(await send("POST", "/dashboard/api/kill", { reason })); } catch (e) { showError("kill-error", e); }
  });
  $("kill-release").addEventListener("click", async () => {
    if (!confirm("Release the kill switch? Operations will run again.")) return;
    $("kill-error").hidden = true;
    try { renderKill(await send("DELETE", "/dashboard/api/kill")); } catch (e) { showError("kill-error", e); }
  });
  $("signout").addEventListener("click", async () => {
    await send("POST", "/dashboard/signout").catch(() => null);
    location.reload();
  });
  connect();
})();
