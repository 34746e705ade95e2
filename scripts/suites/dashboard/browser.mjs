// The dashboard in Debian's Chromium (headless, driven by playwright-core) against a real
// `sandboxio serve` with generated traffic. Run by scripts/suites/dashboard.sh, which starts
// the server and passes BASE, the keys and OUT (the artefact directory) in the environment.
import { chromium } from "playwright-core";
import { writeFileSync } from "node:fs";

const { BASE, ADMIN_KEY, AGENT_KEY, READER_KEY, OUT } = process.env;
const CHROMIUM = process.env.CHROMIUM || "/usr/bin/chromium";
let passed = 0;
let failed = 0;
function check(name, ok, detail) {
  if (ok) { passed++; console.log(`ok: ${name}`); } else { failed++; console.log(`FAILED: ${name}${detail === undefined ? "" : ": " + JSON.stringify(detail)}`); }
}

async function api(key, method, path, body) {
  const res = await fetch(BASE + path, {
    method,
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  let json = null;
  try { json = JSON.parse(text); } catch { json = { text }; }
  return { status: res.status, json };
}

// The panels' words for a record's status.
const outcome = (s) => ({ ok: "success", replayed: "success", warning: "success", timed_out: "timeout", denied: "denied" })[s] || "failure";

async function traffic(sandbox) {
  const counts = { success: 0, failure: 0, timeout: 0, denied: 0 };
  const run = async (body, path = "exec") => {
    const r = await api(AGENT_KEY, "POST", `/v1/sandboxes/${sandbox}/${path}`, body);
    const rec = r.json.record;
    if (!rec) throw new Error(`no record for ${JSON.stringify(body)}: ${r.status} ${JSON.stringify(r.json)}`);
    counts[outcome(rec.status)]++;
    return r;
  };
  for (let i = 0; i < 6; i++) await run({ argv: ["sh", "-c", `echo run ${i}`] });
  for (let i = 0; i < 2; i++) await run({ language: "python", code: "print(6 * 7)" }, "run_code");
  for (let i = 0; i < 2; i++) await run({ argv: ["false"] });
  const t = await run({ argv: ["sleep", "10"], timeout: "1s" });
  check("a command over its timeout is recorded as timed out", t.json.record.status === "timed_out", t.json.record.status);
  for (let i = 0; i < 2; i++) {
    const d = await run({ argv: ["rm", "-rf", "/tmp/nothing"] });
    check("policy denies rm", d.status === 403 && d.json.layer === "policy", d.json);
  }
  return counts;
}

const text = (page, sel) => page.locator(sel).first().innerText();

async function main() {
  const sb = await api(AGENT_KEY, "POST", "/v1/sandboxes", { tier: "process" });
  check("a sandbox is created", sb.status === 201, sb.json);
  const sandbox = sb.json.id;
  const counts = await traffic(sandbox);
  const ran = counts.success + counts.failure + counts.timeout;
  console.log("generated:", JSON.stringify(counts));

  const browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox", "--disable-gpu"] });
  try {
    const ctx = await browser.newContext({ viewport: { width: 1280, height: 1500 } });
    const page = await ctx.newPage();
    const external = [];
    page.on("request", (r) => { if (!r.url().startsWith(BASE)) external.push(r.url()); });
    const consoleErrors = [];
    page.on("console", (m) => { if (m.type() === "error") consoleErrors.push(m.text()); });

    // Sign in through the page.
    await page.goto(BASE + "/");
    check("without a session the page is the sign-in form", await page.locator("#signin").count() === 1);
    await page.fill("#key", ADMIN_KEY);
    await page.press("#key", "Enter");
    await page.waitForSelector('body[data-loaded="true"]', { timeout: 20000 });
    const cookies = await ctx.cookies();
    const c = cookies.find((k) => k.name === "sbx_dashboard");
    check("the session cookie is HttpOnly and SameSite=Strict", c && c.httpOnly && c.sameSite === "Strict", c);

    // 1. Throughput: the last hour's counts are exactly what was generated.
    for (const k of ["success", "failure", "timeout", "denied"]) {
      const v = Number(await text(page, `#tp-${k}`));
      check(`throughput shows ${counts[k]} ${k}`, v === counts[k], v);
    }
    // 2. Budget: spend above zero, the global ceiling of the config, a projected date.
    const spent = Number((await text(page, "#budget-spent")).replace(/,/g, ""));
    check("budget spend is above zero", spent > 0, spent);
    check("budget shows the ceiling", (await text(page, "#budget-ceiling")) === "20", await text(page, "#budget-ceiling"));
    const eta = await text(page, "#budget-eta");
    check("budget projects when the ceiling is reached", eta !== "never at this rate" && !Number.isNaN(Date.parse(eta)) || /\d/.test(eta), eta);
    // 3. Latency: the execution class counted what ran, with percentiles and targets.
    const count = Number(await text(page, "#latency-execution .count"));
    check(`latency counts the ${ran} operations that ran`, count === ran, count);
    const p50 = await text(page, "#latency-execution .p50");
    check("latency shows a p50", /\d+(\.\d)? (ms|s|min)$/.test(p50), p50);
    check("latency shows the targets", (await text(page, "#latency-execution td:last-child")) === "5.0 min / 30.0 min");
    // 5. Error rate: failures and timeouts over what ran, alerting above 20 %.
    const rate = ((counts.failure + counts.timeout) / ran * 100).toFixed(1) + "%";
    check(`error rate is ${rate}`, (await text(page, "#errors-rate")) === rate, await text(page, "#errors-rate"));
    check("the error-rate alert shows above the threshold", await page.locator("#errors-alert").isVisible());
    // Recent denials with their reasons.
    const denials = await text(page, "#denials-list");
    check("denials list the policy rule and reason", denials.includes("no-rm") && denials.includes("policy"), denials);
    for (const id of ["throughput", "budget", "latency", "errors"]) {
      check(`the ${id} chart is drawn`, (await page.locator(`#${id}-chart canvas`).count()) === 1);
    }

    // Approvals: an ask waits in the server, is approved on the page, and then runs.
    const ask = await api(AGENT_KEY, "POST", `/v1/sandboxes/${sandbox}/exec`, { argv: ["sh", "-c", 'echo approved > "$SANDBOX_OUTPUT/approved-flag"'], rationale: "browser test" });
    check("the marked command asks for approval", ask.status === 202, ask.json);
    const apr = ask.json.approval_id;
    const item = page.locator(`#approvals-list li[data-id="${apr}"]`);
    await item.waitFor({ timeout: 10000 });
    check("the pending approval is listed with its command", (await item.innerText()).includes("approved-flag"));
    await item.locator("input").fill("looks fine");
    await item.locator("button.approve").click();
    const out = await api(AGENT_KEY, "GET", `/v1/approvals/${apr}/outcome?timeout=30`);
    check("the approved operation ran", out.status === 200 && out.json.record.status === "ok", out.json);
    check("the approver is recorded", (out.json.record?.approver || "").startsWith("api key "), out.json.record?.approver);
    const flag = await fetch(`${BASE}/v1/sandboxes/${sandbox}/files?path=approved-flag`, { headers: { authorization: `Bearer ${AGENT_KEY}` } });
    const written = flag.status === 200 ? (await flag.text()).trim() : flag.status;
    check("the approved command wrote its file", written === "approved", written);

    // 4. Active agents, then the kill switch stops the running sandbox.
    const long = api(AGENT_KEY, "POST", `/v1/sandboxes/${sandbox}/exec`, { argv: ["sleep", "120"], timeout: "300s" });
    await page.waitForFunction(() => document.querySelector("#agents-count").textContent === "1", null, { timeout: 15000 });
    check("the running command is an active agent", (await text(page, "#agents-rows .action")) === "exec");
    const elapsed = await text(page, "#agents-rows .elapsed");
    check("with its elapsed time", /^\d+ s$|min/.test(elapsed), elapsed);
    await page.screenshot({ path: `${OUT}/dashboard.png`, fullPage: true });
    await page.click("#kill-engage");
    await page.fill("#kill-reason", "browser test: stop everything");
    await page.click("#kill-confirm");
    const stopped = await long;
    const st = stopped.json.record?.status;
    check("the kill switch button stopped the running sandbox", st === "cancelled", { status: stopped.status, st });
    await page.waitForFunction(() => document.querySelector("#kill-state").textContent === "ENGAGED", null, { timeout: 10000 });
    check("the page shows the kill switch engaged", true);
    const after = await api(AGENT_KEY, "POST", `/v1/sandboxes/${sandbox}/exec`, { argv: ["true"] });
    check("while engaged, operations are denied at the kill switch", after.status === 503 && after.json.layer === "kill_switch", after.json);
    page.once("dialog", (d) => d.accept());
    await page.click("#kill-release");
    await page.waitForFunction(() => document.querySelector("#kill-state").textContent === "released", null, { timeout: 10000 });
    check("the kill switch is released from the page", true);

    // Keyboard: the kill switch button is reachable with Tab.
    await page.goto(BASE + "/");
    await page.waitForSelector('body[data-loaded="true"]');
    let reached = false;
    for (let i = 0; i < 12 && !reached; i++) {
      await page.keyboard.press("Tab");
      reached = await page.evaluate(() => document.activeElement && document.activeElement.id === "kill-engage");
    }
    check("the kill switch button is reachable with the keyboard", reached);
    check("no request left the server's origin", external.length === 0, external);
    check("no script error", consoleErrors.length === 0, consoleErrors);

    // A phone: one column, no horizontal scrolling.
    const phone = await browser.newContext({ viewport: { width: 390, height: 844 }, deviceScaleFactor: 2, isMobile: true, hasTouch: true });
    const pp = await phone.newPage();
    await pp.goto(BASE + "/");
    await pp.fill("#key", READER_KEY);
    await pp.press("#key", "Enter");
    await pp.waitForSelector('body[data-loaded="true"]', { timeout: 20000 });
    const width = await pp.evaluate(() => document.documentElement.scrollWidth);
    check("on a phone the page does not scroll sideways", width <= 391, width);
    await pp.screenshot({ path: `${OUT}/dashboard-phone.png`, fullPage: true });
    // A read-only key sees the data but its button is refused.
    // What succeeded since: the approved command and the read of the file it wrote (the
    // command the kill switch stopped is a failure, the one after it a denial).
    const expected = counts.success + 2;
    await pp.waitForFunction((n) => document.querySelector("#tp-success").textContent === String(n), expected, { timeout: 10000 }).catch(() => null);
    const seen = Number(await text(pp, "#tp-success"));
    check("a read-only key sees the panels", seen === expected, { seen, expected });
    check("and counts the stopped command as a failure", Number(await text(pp, "#tp-failure")) === counts.failure + 1, await text(pp, "#tp-failure"));
    await pp.click("#kill-engage");
    await pp.fill("#kill-reason", "not allowed");
    await pp.click("#kill-confirm");
    await pp.waitForSelector("#kill-error:not([hidden])", { timeout: 10000 });
    check("a read-only key's kill button is refused", (await text(pp, "#kill-error")).includes("admin"), await text(pp, "#kill-error"));
    const kill = await api(ADMIN_KEY, "GET", "/v1/kill");
    check("and the kill switch stayed released", kill.json.engaged === false, kill.json);
  } finally {
    await browser.close();
  }
}

try {
  await main();
} catch (e) {
  failed++;
  console.log("FAILED: " + (e.stack || e));
}
writeFileSync(`${OUT}/browser-result.json`, JSON.stringify({ passed, failed }));
console.log(`browser: ${passed} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);
