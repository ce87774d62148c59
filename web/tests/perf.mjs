// How the page keeps up with 64 threads x every size class at 10 updates a second: a benchmark,
// not a test (nothing here is asserted; shared machines are noisy). Prints the time to the
// first drawn sample, the render time per update (median, p99, max), long tasks, and the
// number of samples drawn.
//
//   node web/tests/perf.mjs --memlive build/memlive/memlive \
//        --workload build/tests/memlive/memlive_workload [--seconds 10] [--threads 64]
//        [--classes 52]   (the first N size classes per thread: 2,000 threads x 52 classes is
//                          too long a command line for the workload)
import { spawn } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const { chromium } = createRequire(import.meta.url)(path.join(here, "..", "node_modules", "playwright-core"));
const args = process.argv.slice(2);
const opt = (n, d) => (args.includes(n) ? args[args.indexOf(n) + 1] : d);
const memlive = opt("--memlive"), workload = opt("--workload");
const seconds = Number(opt("--seconds", "10")), nthreads = Number(opt("--threads", "64"));

// livealloc's class sizes (allocator/README.md): 16..128 by 16, then four per doubling.
const sizes = [];
for (let c = 1; c <= 8; ++c) sizes.push(16 * c);
for (let c = 9; c <= 52; ++c) { const k = c - 9, w = 7 + Math.floor(k / 4); sizes.push((5 + (k % 4)) * 2 ** (w - 2)); }
const plan = [];
sizes.length = Math.min(sizes.length, Number(opt("--classes", "52")));
for (let t = 0; t < nthreads; ++t) for (const s of sizes) plan.push("t" + String(t).padStart(2, "0") + ":" + s + ":2:1");

const wl = spawn(workload, plan, { stdio: ["pipe", "pipe", "inherit"] });
let wout = "";
wl.stdout.on("data", (b) => { wout += b; });
const waitFor = async (fn, what) => {
  for (let i = 0; i < 600; ++i) { const v = fn(); if (v) return v; await new Promise((r) => setTimeout(r, 50)); }
  throw new Error("gave up waiting for " + what);
};
const pid = Number((await waitFor(() => /ready (\d+)/.exec(wout), "the workload"))[1]);
const srv = spawn(memlive, ["serve", "--pid", String(pid), "--port", "0", "--interval", "100"], { stdio: ["ignore", "pipe", "inherit"] });
let sout = "";
srv.stdout.on("data", (b) => { sout += b; });
const port = Number((await waitFor(() => /127\.0\.0\.1:(\d+)/.exec(sout), "memlive serve"))[1]);

const dir = fs.mkdtempSync(path.join(os.tmpdir(), "memlive-perf-"));
const ctx = await chromium.launchPersistentContext(dir, { executablePath: "/usr/bin/chromium", headless: true,
  viewport: { width: 1400, height: 1000 },
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync"] });
try {
  const page = ctx.pages()[0] || (await ctx.newPage());
  await page.addInitScript(() => {
    window.__long = [];
    new PerformanceObserver((l) => { for (const e of l.getEntries()) window.__long.push(e.duration); })
      .observe({ type: "longtask", buffered: true });
  });
  const t0 = Date.now();
  await page.goto("http://127.0.0.1:" + port + "/");
  await page.waitForFunction(() => Number(document.body.dataset.samples || 0) > 0, null, { timeout: 30000 });
  const first = Date.now() - t0;
  const samples0 = await page.evaluate(() => Number(document.body.dataset.samples));
  await page.evaluate(() => { const s = window.memliveStats; s.renders = 0; s.totalMs = 0; s.maxMs = 0; s.last = []; s.sections = {}; window.__long = []; });
  await page.waitForTimeout(seconds * 1000);
  const r = await page.evaluate(() => {
    const s = window.memliveStats;
    const v = s.last.slice().sort((a, b) => a - b);
    const q = (p) => v.length ? v[Math.min(v.length - 1, Math.floor(p * v.length))] : 0;
    return { renders: s.renders, p50: q(0.5), p99: q(0.99), max: s.maxMs, long: window.__long.slice(),
      samples: Number(document.body.dataset.samples), sections: s.sections, rows: document.querySelectorAll("#threads tbody tr").length };
  });
  const snap = await (await fetch("http://127.0.0.1:" + port + "/api/snapshot")).text();
  console.log(`threads ${r.rows} shown, snapshot ${(snap.length / 1024).toFixed(0)} KiB, interval 100 ms, ${seconds} s`);
  console.log(`first sample drawn ${first} ms after navigation (${samples0} history samples)`);
  console.log(`samples received ${r.samples - samples0} in ${seconds} s`);
  console.log(`renders ${r.renders} (${(r.renders / seconds).toFixed(1)}/s), render ms median ${r.p50.toFixed(2)}, p99 ${r.p99.toFixed(2)}, max ${r.max.toFixed(2)}`);
  console.log("ms per update by section: " + Object.entries(r.sections).map(([k, v]) => k + " " + (v / Math.max(1, r.renders)).toFixed(2)).join(", "));
  console.log(`long tasks (>50 ms): ${r.long.length}${r.long.length ? " (" + r.long.map((x) => x.toFixed(0)).join(", ") + " ms)" : ""}`);
} finally {
  await ctx.close();
  fs.rmSync(dir, { recursive: true, force: true });
  srv.kill("SIGINT");
  wl.stdin.end("quit\n");
}
