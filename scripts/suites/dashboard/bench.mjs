// Page weight and time to first render of the dashboard on loopback, against the sign-in
// page (static, no data) in the same run. Prints one JSON line; BENCHMARKS.md has the method.
import { chromium } from "playwright-core";

const { BASE, READER_KEY } = process.env;
const RUNS = Number(process.env.RUNS || 15);
const CHROMIUM = process.env.CHROMIUM || "/usr/bin/chromium";
const median = (v) => { const s = [...v].sort((a, b) => a - b); return s[Math.floor(s.length / 2)]; };

const browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox", "--disable-gpu"] });
const result = {};
try {
  for (const which of ["signin", "dashboard"]) {
    const fcp = [];
    const data = [];
    let bytes = 0;
    let requests = 0;
    for (let i = 0; i < RUNS; i++) {
      const ctx = await browser.newContext({ viewport: { width: 1280, height: 1500 } });
      if (which === "dashboard") {
        const r = await fetch(BASE + "/dashboard/signin", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ key: READER_KEY }) });
        const cookie = r.headers.get("set-cookie").split(";")[0].split("=");
        const url = new URL(BASE);
        await ctx.addCookies([{ name: cookie[0], value: cookie[1], domain: url.hostname, path: "/", httpOnly: true, sameSite: "Strict" }]);
      }
      const page = await ctx.newPage();
      const sizes = [];
      page.on("response", async (res) => {
        if (res.url().includes("/dashboard/api/events")) return;
        try { sizes.push((await res.body()).length); } catch { /* navigated away */ }
      });
      await page.goto(BASE + "/");
      if (which === "dashboard") {
        await page.waitForSelector('body[data-loaded="true"]');
        data.push(await page.evaluate(() => performance.now()));
      } else {
        await page.waitForSelector("#signin");
      }
      await page.waitForLoadState("load");
      fcp.push(await page.evaluate(() => (performance.getEntriesByName("first-contentful-paint")[0] || {}).startTime || NaN));
      bytes = sizes.reduce((a, b) => a + b, 0);
      requests = sizes.length;
      await ctx.close();
    }
    result[which] = { runs: RUNS, requests, bytes, fcp_ms_median: median(fcp), first_data_ms_median: data.length ? median(data) : null };
  }
  // The data behind the first render, against the cheapest request, over plain HTTP.
  const r = await fetch(BASE + "/dashboard/signin", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ key: READER_KEY }) });
  const cookie = r.headers.get("set-cookie").split(";")[0];
  for (const [name, path] of [["healthz", "/healthz"], ["snapshot", "/dashboard/api/snapshot"]]) {
    const ms = [];
    let size = 0;
    for (let i = 0; i < RUNS; i++) {
      const t = performance.now();
      const res = await fetch(BASE + path, { headers: { cookie } });
      size = (await res.arrayBuffer()).byteLength;
      ms.push(performance.now() - t);
    }
    result[name] = { runs: RUNS, bytes: size, ms_median: median(ms) };
  }
  result.snapshot_vs_healthz = result.snapshot.ms_median / result.healthz.ms_median;
  result.fcp_ratio = result.dashboard.fcp_ms_median / result.signin.fcp_ms_median;
  result.bytes_ratio = result.dashboard.bytes / result.signin.bytes;
} finally {
  await browser.close();
}
console.log(JSON.stringify(result));
