// Browser tests of the memlive page: Debian's Chromium driven by playwright-core against a real
// `memlive run` serving tests/web/web_workload (named threads, plain malloc under the preloaded
// liblivealloc.so), then tests/web/web_inapp (--inapp: memlive::start() inside the program).
//
//   node web/tests/browser.mjs --memlive PATH --workload PATH --lib PATH --inapp PATH --out DIR
//   node web/tests/browser.mjs --screenshot URL FILE      (just a screenshot of a running page)
//
// Exit status: 0 all checks passed, 1 a check failed, 77 Chromium or playwright-core missing.
// No check depends on timing; waits are bounded only so that a broken page fails instead of
// hanging.
import { spawn, execFileSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const CHROMIUM = process.env.LIVEALLOC_CHROMIUM || "/usr/bin/chromium";
const require = createRequire(import.meta.url);

function skip(why) {
  console.log("SKIP  " + why);
  process.exit(77);
}
if (!fs.existsSync(CHROMIUM)) skip(CHROMIUM + " is missing (tests/setup.sh installs Debian's chromium)");
let chromium;
try {
  ({ chromium } = require(path.join(here, "..", "node_modules", "playwright-core")));
} catch (e) {
  skip("playwright-core is missing: run `npm ci` in web/ (tests/setup.sh does)");
}

const args = process.argv.slice(2);
const opt = (name) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : undefined;
};

async function launch() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "memlive-chromium-"));
  const ctx = await chromium.launchPersistentContext(dir, {
    executablePath: CHROMIUM,
    headless: true,
    acceptDownloads: true,
    viewport: { width: 1400, height: 1000 },
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  return { ctx, dir };
}

if (opt("--screenshot")) {
  const url = opt("--screenshot");
  const file = args[args.indexOf("--screenshot") + 2];
  const { ctx, dir } = await launch();
  try {
    const page = ctx.pages()[0] || (await ctx.newPage());
    await page.goto(url);
    await page.waitForFunction(() => Number(document.body.dataset.samples || 0) > 4, null, { timeout: 20000 });
    await page.waitForTimeout(Number(opt("--wait") || 3000));
    await page.screenshot({ path: file, fullPage: true });
    console.log("wrote " + file);
  } finally {
    await ctx.close();
    fs.rmSync(dir, { recursive: true, force: true });
  }
  process.exit(0);
}

const memlive = opt("--memlive"), workload = opt("--workload"), lib = opt("--lib");
const inappPath = opt("--inapp");
const out = opt("--out") || fs.mkdtempSync(path.join(os.tmpdir(), "memlive-web-"));
if (!memlive || !workload || !lib || !inappPath) {
  console.error("usage: browser.mjs --memlive PATH --workload PATH --lib PATH --inapp PATH" +
    " [--out DIR]");
  process.exit(2);
}
fs.mkdirSync(out, { recursive: true });

let failures = 0;
function check(ok, what, detail) {
  console.log((ok ? "PASS  " : "FAIL  ") + what + (ok || detail === undefined ? "" : "\n      " + detail));
  if (!ok) failures += 1;
}
const info = (what) => console.log("      " + what);
// The page's byte format (web/README.md), to compare what it shows with a snapshot.
function fmtBytes(n) {
  const int = (x) => Math.round(x).toLocaleString("en-US");
  if (n < 1024) return int(n) + " B";
  const units = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
  let v = n, u = -1;
  while ((v >= 1024 || (u >= 0 && Math.round(v) >= 1024)) && u < units.length - 1) { v /= 1024; ++u; }
  return (v < 99.95 ? v.toFixed(1) : int(v)) + " " + units[u];
}

// --- the server and the workload -------------------------------------------------------------
const server = spawn(memlive, ["run", "--port", "0", "--interval", "100", "--lib", lib, "--", workload],
  { stdio: ["pipe", "pipe", "pipe"] });
let serverOut = "";
server.stdout.on("data", (b) => { serverOut += b; });
server.stderr.on("data", (b) => { serverOut += b; });
const serverExit = new Promise((resolve) => server.on("exit", (code, sig) => resolve({ code, sig })));

async function until(what, fn, ms = 20000) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) throw new Error("gave up waiting for " + what);
    await new Promise((r) => setTimeout(r, 50));
  }
}

let ctx = null, userDir = null, exitCode = 1, server2 = null, inapp = null;
try {
  const port = await until("memlive run to print its URL and the workload to be ready", () => {
    const m = /http:\/\/127\.0\.0\.1:(\d+)\//.exec(serverOut);
    return m && /ready \d+/.test(serverOut) ? Number(m[1]) : null;
  });
  const pid = Number(/ready (\d+)/.exec(serverOut)[1]);
  const base = "http://127.0.0.1:" + port;
  info("memlive run serves process " + pid + " at " + base);
  const getJSON = async (p) => (await fetch(base + p)).json();
  const cliSnapshot = () => JSON.parse(execFileSync(memlive, ["snapshot", "--pid", String(pid), "--format", "json"]));

  ({ ctx, dir: userDir } = await launch());
  const page = ctx.pages()[0] || (await ctx.newPage());
  const consoleErrors = [];
  // Expected and left out: the 400s of the invalid values this test posts on purpose (Chromium
  // logs every 4xx of a fetch), and streams the page closes itself (pause, interval change).
  let expected400 = 0;
  page.on("console", (m) => {
    if (m.type() !== "error") return;
    const url = (m.location() && m.location().url) || "";
    if (expected400 > 0 && url.endsWith("/api/options") && /status of 400/.test(m.text())) { --expected400; return; }
    consoleErrors.push(m.text() + (url ? " (" + url + ")" : ""));
  });
  page.on("pageerror", (e) => consoleErrors.push(String(e)));
  page.on("requestfailed", (r) => {
    const aborted = r.failure() && r.failure().errorText === "net::ERR_ABORTED";
    if (!(aborted && r.url().includes("/api/stream"))) consoleErrors.push("request failed: " + r.url());
  });

  // 1. Loads, goes live, and the chart receives new points.
  const t0 = Date.now();
  await page.goto(base + "/");
  await page.waitForFunction(() => document.body.dataset.mode === "live", null, { timeout: 20000 });
  info("page live after " + (Date.now() - t0) + " ms (not a check: shared machines are noisy)");
  const points = () => page.evaluate(() => window.Chart.getChart("chart-live").data.datasets[0].data.length);
  const firstPoints = await points();
  const morePoints = await until("the chart to receive new points", async () => {
    const n = await points();
    return n > firstPoints + 3 ? n : null;
  }).catch(() => null);
  check(morePoints !== null, "the live chart receives new points (" + firstPoints + " -> " + morePoints + ")");
  // The y axis's labels name its ticks exactly (20 MiB is 20 x 2^20 bytes; not "19.1 MiB" for
  // 20,000,000) and the x axis ends at the newest sample.
  const axes = await page.evaluate(() => {
    const c = window.Chart.getChart("chart-live");
    const data = c.data.datasets[0].data;
    return { y: c.scales.y.ticks.map((t) => [t.value, t.label]), xMax: c.scales.x.max,
      last: data.length ? data[data.length - 1].x : null };
  });
  const exact = axes.y.every(([v, label]) => {
    const m = /^(\d+(?:\.\d+)?) (B|KiB|MiB|GiB)$/.exec(label);
    return m && Number(m[1]) * 1024 ** ["B", "KiB", "MiB", "GiB"].indexOf(m[2]) === v;
  });
  check(axes.y.length >= 3 && exact && axes.xMax === axes.last,
    "the chart's byte ticks are round in their unit and its x axis ends at the newest sample",
    JSON.stringify(axes));
  // Samples missed while the page could not draw (a busy or hidden tab) come from the history:
  // no step of more than a second is left in the chart across a 3 s stall of the page.
  const stallEnd = await page.evaluate(() => {
    const t = performance.now();
    while (performance.now() - t < 3000) { /* the page draws nothing meanwhile */ }
    const data = window.Chart.getChart("chart-live").data.datasets[0].data;
    return data[data.length - 1].x;
  });
  const filled = await until("the gap to be filled", () => page.evaluate((from) => {
    const data = window.Chart.getChart("chart-live").data.datasets[0].data;
    const after = data.filter((p) => p.x >= from - 1);
    let widest = 0;
    for (let i = 1; i < after.length; ++i) widest = Math.max(widest, after[i].x - after[i - 1].x);
    return after.length > 0 && after[after.length - 1].x > from + 3.5 && widest < 1 ? widest : null;
  }, stallEnd), 15000).catch(() => null);
  check(filled !== null, "after 3 s without frames the chart has the samples it missed, from " +
    "/api/history (widest step " + filled + " s)");
  check((await page.textContent("#f-pid")) === String(pid), "the header shows the pid");
  check((await page.textContent("#f-program")) === path.basename(workload), "the header shows the program");

  // 2. The thread view shows the named threads with the numbers of /api/snapshot.
  const names = ["ingest-0", "ingest-1", "worker-0", "cache", "ticker"];
  await page.waitForFunction((n) => {
    const shown = [...document.querySelectorAll("#threads tbody td.name")].map((td) => td.dataset.value);
    return n.every((x) => shown.includes(x));
  }, names, { timeout: 20000 }).catch(() => {});
  const rows = await page.$$eval("#threads tbody tr", (trs) => trs.map((tr) => {
    const td = tr.children;
    return { name: td[0].dataset.value, tid: Number(td[1].dataset.value), state: td[2].dataset.value,
      allocs: Number(td[4].dataset.value), allocsText: td[4].textContent, frees: Number(td[5].dataset.value),
      live: Number(td[3].dataset.value) };
  }));
  for (const n of names) check(rows.some((r) => r.name === n && r.state === "alive"), "thread view lists " + n + " as alive");
  check(!rows.some((r) => /^overflow slot/.test(r.name)), "no overflow-slot row while no thread has shared it");
  const snap = await getJSON("/api/snapshot");
  const sum = (t, c) => t.classes.reduce((a, r) => a + r[c], 0);
  const ci = (name) => snap.counters.indexOf(name) + 1;
  for (const n of ["ingest-0", "ingest-1", "worker-0", "cache"]) { // parked: their numbers hold still
    const t = snap.threads.find((x) => x.name === n && x.state === "alive");
    const r = rows.find((x) => x.name === n);
    const ok = t && r && r.tid === t.tid && r.allocs === sum(t, ci("allocs")) && r.frees === sum(t, ci("frees"));
    check(ok, n + ": tid, allocations and frees match /api/snapshot",
      JSON.stringify({ page: r, snapshot: t && { tid: t.tid, allocs: sum(t, ci("allocs")), frees: sum(t, ci("frees")) } }));
  }
  const in0 = rows.find((x) => x.name === "ingest-0");
  check(in0 && in0.allocs >= 1000 && in0.live >= 1000 * 48, "ingest-0 shows its 1,000 blocks of 48 B live", JSON.stringify(in0));
  check(in0 && in0.allocsText === in0.allocs.toLocaleString("en-US"), "numbers use thousands separators", in0 && in0.allocsText);
  const matrix = await page.$$eval("#matrix tbody tr", (trs) => trs.map((tr) => [...tr.children].map((td) => td.textContent)));
  check(matrix.some((m) => m[0].startsWith("cache") && m[1].startsWith("worker-0")),
    "the free matrix shows cache freeing worker-0's blocks", JSON.stringify(matrix.slice(0, 5)));
  const classes = await page.$$eval("#classes tbody tr", (trs) => trs.map((tr) => Number(tr.children[1].dataset.value)));
  check(classes.includes(48) && classes.includes(4096), "the size-class table lists the 48 B and 4 KiB classes", JSON.stringify(classes));
  // Served from outside (memlive run), the process has none of memlive's threads: the header's
  // count is its live threads, with no memlive part (the in-app case is section 7).
  {
    let want = null;
    const header = await until("the header's thread count", async () => {
      const alive = (await getJSON("/api/snapshot")).threads.filter((t) => t.state === "alive");
      want = String(alive.length);
      const got = await page.textContent("#f-threads");
      return got === want ? got : null;
    }).catch(async () => "(got) " + await page.textContent("#f-threads"));
    check(header === want && want === "7",
      "the header counts the program's 7 live threads, no memlive ones",
      JSON.stringify({ header, want }));
  }

  // Selecting a thread charts it.
  await page.click("#threads tbody tr:has(td.name[data-value='ingest-0'])");
  const selected = await until("the selection dataset", () => page.evaluate(() => {
    const ds = window.Chart.getChart("chart-live").data.datasets[1];
    return !ds.hidden && ds.data.length > 0 ? ds.label : null;
  })).catch(() => page.evaluate(() => { // what there was instead (it failed once in ten runs)
    const ds = window.Chart.getChart("chart-live").data.datasets[1];
    return "(got) " + JSON.stringify({ hidden: ds.hidden, points: ds.data.length, label: ds.label,
      mode: document.body.dataset.mode,
      selected: document.getElementById("selection-label").textContent,
      rows: [...document.querySelectorAll("#threads tbody tr[aria-selected=true] td.name")]
        .map((td) => td.dataset.value) });
  }));
  check(selected && selected.startsWith("ingest-0"), "selecting a thread adds its live bytes to the chart", selected);

  // The keyboard focus stays on its row when an update moves the row: `swing` goes from 0 to
  // 1 MiB live and back, so the table sorted by live bytes moves it up and down.
  await page.evaluate(() => {
    const tr = document.querySelector("#threads tbody tr:has(td.name[data-value='swing'])");
    window.__moves = 0;
    new MutationObserver((records) => {
      for (const r of records) for (const n of r.addedNodes) if (n === tr) window.__moves += 1;
    }).observe(tr.parentNode, { childList: true });
    tr.focus();
  });
  const moves = await until("the swing row to move twice", () => page.evaluate(() => (window.__moves >= 2 ? window.__moves : null))).catch(() => 0);
  const focusKept = await page.evaluate(() => {
    const a = document.activeElement;
    return a && a.tagName === "TR" && a.querySelector("td.name").dataset.value === "swing";
  });
  check(moves >= 2 && focusKept, "a focused row keeps the focus when the live sort moves it (" + moves + " moves)");
  // Each table of selectable rows is one tab stop, its rows reached with the arrow keys; the
  // rows of the free matrix select nothing and take no focus.
  const stops = await page.evaluate(() => {
    const zero = (id) => document.querySelectorAll("#" + id + " tbody tr[tabindex='0']").length;
    const before = document.activeElement;
    before.dispatchEvent(new KeyboardEvent("keydown", { key: "ArrowDown", bubbles: true }));
    const moved = document.activeElement !== before && document.activeElement.tagName === "TR";
    return { threads: zero("threads"), classes: zero("classes"), moved,
      matrix: document.querySelectorAll("#matrix tbody tr[tabindex]").length,
      matrixRows: document.querySelectorAll("#matrix tbody tr").length };
  });
  check(stops.threads === 1 && stops.classes === 1 && stops.moved && stops.matrix === 0 &&
    stops.matrixRows > 0, "a table is one tab stop whose rows the arrow keys reach; the free " +
    "matrix's rows take no focus", JSON.stringify(stops));
  await page.evaluate(() => document.activeElement && document.activeElement.blur());

  // A press on a row that the live sort moves (swing, 1 MiB for 200 ms then none) and its release
  // a second later select it: while a pointer is down in a table its rows stay put (they moved,
  // and the press and the release fell on different rows: no click, nothing selected).
  {
    const row = page.locator("#threads tbody tr:has(td.name[data-value='swing'])");
    await row.scrollIntoViewIfNeeded();
    const box = await row.boundingBox();
    const at = [box.x + box.width / 2, box.y + box.height / 2];
    const under = () => page.evaluate(([x, y]) => {
      const td = document.elementFromPoint(x, y)?.closest("tr")?.querySelector("td.name");
      return td ? td.dataset.value : null;
    }, at);
    await page.mouse.move(...at);
    await page.mouse.down();
    const seen = new Set();
    for (let i = 0; i < 10; ++i) {
      await new Promise((r) => setTimeout(r, 100));
      seen.add(await under());
    }
    await page.mouse.up();
    const label = await until("the pressed row's selection", async () => {
      const t = await page.textContent("#selection-label");
      return t.startsWith("total and swing") ? t : null;
    }).catch(async () => "(got) " + await page.textContent("#selection-label"));
    check(seen.size === 1 && seen.has("swing") && label.startsWith("total and swing"),
      "a row pressed for a second stays under the pointer, and its release selects it",
      JSON.stringify({ under: [...seen], label }));
  }

  // "log scale": the byte axis logarithmic, its ticks powers of four ("16 KiB") around every
  // value charted (swing's 0 on the bottom line), the choice kept; key l sets it back to linear.
  {
    const axis = () => page.evaluate(() => {
      const c = window.Chart.getChart("chart-live"), y = c.scales.y;
      const values = c.data.datasets.filter((d) => !d.hidden)
        .flatMap((d) => d.data.map((p) => p.y));
      const positive = values.filter((v) => v > 0);
      return { type: y.type, min: y.min, max: y.max, ticks: y.ticks.map((t) => t.value),
        labels: y.ticks.map((t) => t.label), lo: Math.min(...positive), hi: Math.max(...positive),
        saved: localStorage.getItem("memlive.logscale") };
    });
    await page.click("#log-scale");
    const log = await until("a logarithmic axis", async () => {
      const a = await axis();
      return a.type === "logarithmic" ? a : null;
    }).catch(axis);
    check(log.type === "logarithmic" && log.ticks.length >= 2 && log.ticks.length <= 9 &&
      log.ticks.every((v) => Number.isInteger(Math.log2(v) / 2)) &&
      log.labels.every((l) => /^\d+ (B|KiB|MiB|GiB)$/.test(l)) && log.min <= log.lo &&
      log.max >= log.hi && log.saved === "1",
    "log scale: ticks at powers of four around every value charted, the choice kept",
    JSON.stringify(log));
    await page.evaluate(() => document.activeElement && document.activeElement.blur());
    await page.keyboard.press("l");
    const lin = await until("a linear axis again", async () => {
      const a = await axis();
      return a.type === "linear" ? a : null;
    }).catch(axis);
    check(lin.type === "linear" && lin.saved === "" && lin.min <= 0 &&
      !(await page.isChecked("#log-scale")), "key l sets the axis back to linear",
    JSON.stringify(lin));
  }

  // The chart draws every sample (10 a second here); the tables at most every 250 ms. An upper
  // bound only: a slow machine draws less of both.
  const counts = () => page.evaluate(() => ({ r: window.memliveStats.renders, t: window.memliveStats.tableRenders,
    at: performance.now(), rows: document.querySelectorAll("#classes tbody tr").length }));
  const c0 = await counts();
  await new Promise((r) => setTimeout(r, 3000));
  const c1 = await counts();
  const tables = c1.t - c0.t, renders = c1.r - c0.r, allowed = Math.floor((c1.at - c0.at) / 250) + 2;
  check(tables >= 1 && tables <= allowed && renders >= tables && c1.rows > 0,
    "the tables are redrawn at most every 250 ms while the chart follows the stream",
    JSON.stringify({ tables, renders, allowed, rows: c1.rows }));

  // 3. Tuning: a good value reaches the process; a bad one shows the server's error and changes nothing.
  const input = page.locator("#opt-page_recycle");
  await input.fill("7");
  await input.press("Enter");
  const effective = () => cliSnapshot().options.find((o) => o.name === "page_recycle");
  const applied = await until("page_recycle = 7 in the process", () => (effective().effective === 7 ? true : null)).catch(() => false);
  check(applied, "page_recycle 7 typed in the tuning panel is in effect in the process (memlive snapshot)");
  const msgOk = await until("the panel to confirm", async () => {
    const cls = await page.getAttribute("#opt-page_recycle-msg", "class");
    return cls && !cls.includes("error") && /in effect: 7/.test(await page.textContent("#opt-page_recycle-msg")) ? true : null;
  }).catch(() => false);
  check(msgOk, "the panel shows when the value took effect", await page.textContent("#opt-page_recycle-msg"));
  const genBefore = cliSnapshot().control.generation;
  for (const bad of ["-5", "99999999", "seven"]) {
    expected400 += 1;
    await input.fill(bad);
    await input.press("Enter");
    const err = await until("the error for " + bad, async () => {
      const cls = await page.getAttribute("#opt-page_recycle-msg", "class");
      return cls && cls.includes("error") ? page.textContent("#opt-page_recycle-msg") : null;
    }).catch(() => null);
    const direct = await (await fetch(base + "/api/options", { method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ page_recycle: /^-?\d+$/.test(bad) ? Number(bad) : bad }) })).json();
    check(err !== null && err === direct.error, "invalid value '" + bad + "' shows the server's error next to the field",
      JSON.stringify({ shown: err, server: direct.error }));
  }
  const after = cliSnapshot();
  const pr = after.options.find((o) => o.name === "page_recycle");
  check(pr.effective === 7 && pr.requested === 7 && after.control.generation === genBefore,
    "the invalid values changed nothing in the process", JSON.stringify({ pr, gen: after.control.generation, genBefore }));
  // Escape after a rejected value: back to the value in force, without the error.
  const escaped = await page.evaluate(() => {
    const i = document.getElementById("opt-page_recycle");
    return { value: i.value, invalid: i.getAttribute("aria-invalid"), msg: document.getElementById("opt-page_recycle-msg").textContent };
  }).then(async (before) => {
    await input.press("Escape");
    return page.evaluate(() => {
      const i = document.getElementById("opt-page_recycle");
      return { value: i.value, invalid: i.getAttribute("aria-invalid"), msg: document.getElementById("opt-page_recycle-msg").textContent };
    }).then((now) => ({ before, now }));
  });
  // (The message that follows 7 until every thread applied it may come back: the refused values
  // did not stop the page following it.)
  const esc = escaped.now;
  check(escaped.before.invalid === "true" && esc.value === "7" && esc.invalid === null &&
    (esc.msg === "" || /^in effect: 7 /.test(esc.msg)),
    "Escape after a rejected value restores the value in force and clears the error", JSON.stringify(escaped));
  await input.fill(" ");
  await input.press("Enter");
  check(/type a value/.test(await page.textContent("#opt-page_recycle-msg")) && cliSnapshot().control.generation === genBefore,
    "an empty value is refused in the page with its own message");
  // Only Enter sends: a value typed and left with Tab changes nothing, and the field says so.
  await input.fill("6");
  await input.press("Tab");
  const unsent = await page.textContent("#opt-page_recycle-msg");
  await page.waitForTimeout(500);
  check(/^not sent: Enter sends 6/.test(unsent) && cliSnapshot().control.generation === genBefore &&
    effective().requested === 7, "a value left with Tab is not sent, and the field says so",
    unsent);
  await input.press("Escape");
  // Numbers written as the server accepts them ("8.0", a whole float) are sent as numbers.
  await input.fill("8.0");
  await input.press("Enter");
  const eight = await until("page_recycle = 8", () => (effective().effective === 8 ? true : null)).catch(() => false);
  check(eight, "'8.0' typed in the panel is sent as the number 8 and applied");
  // Another writer changes it while the page still waits for idle threads (the workload's main
  // thread sits in fgets): the page says so, not that the allocator rejected its value.
  await input.fill("9");
  await input.press("Enter");
  await until("page_recycle = 9", () => (effective().effective === 9 ? true : null)).catch(() => {});
  await fetch(base + "/api/options", { method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ page_recycle: 11 }) });
  const superseded = await until("the panel to note the other writer", async () => {
    const text = await page.textContent("#opt-page_recycle-msg");
    return /changed by another writer to 11/.test(text) ? text : null;
  }).catch(async () => "(got) " + await page.textContent("#opt-page_recycle-msg"));
  check(!superseded.startsWith("(got)") && !/rejected/.test(superseded),
    "a value another writer replaced is reported as replaced, not rejected", superseded);
  // A process that does not allocate takes no new value (the workload's ticker and swing stop):
  // the page says why the value waits; a value another writer asked for shows in its row.
  server.stdin.write("quiet\n");
  await until("the workload to go quiet", () => /^quiet$/m.test(serverOut)).catch(() => {});
  const msgOf = (name) => page.textContent("#opt-" + name + "-msg");
  await input.fill("13");
  await input.press("Enter");
  const waiting = await until("the panel to say the value waits", async () => {
    const text = await msgOf("page_recycle");
    return /not taken yet: the allocator takes new values when a thread/.test(text) ? text : null;
  }, 10000).catch(async () => "(got) " + await msgOf("page_recycle"));
  const held = effective();
  check(!waiting.startsWith("(got)") && held.effective === 11 && held.requested === 13,
    "a value sent to a process that does not allocate is shown as not taken yet, and why",
    JSON.stringify({ waiting, held }));
  // A bad value typed while the page's own value waits: its error stays (the waiting value's
  // message, which blamed "another page" for this page's 13, replaced it within 300 ms), and
  // Escape gives back the message of the value that waits.
  await input.fill("abc");
  expected400 += 1;
  await input.press("Enter");
  await page.waitForTimeout(1500);
  const kept = { msg: await msgOf("page_recycle"),
    cls: await page.getAttribute("#opt-page_recycle-msg", "class") };
  await input.press("Escape");
  const own = await until("the waiting value's message back", async () => {
    const text = await msgOf("page_recycle");
    return /^sent \(generation \d+\), not taken yet/.test(text) ? text : null;
  }, 10000).catch(async () => "(got) " + await msgOf("page_recycle"));
  check(/\berror\b/.test(kept.cls) && /abc|integer|number/.test(kept.msg) &&
    !own.startsWith("(got)"), "the error of a bad value typed while the page's value waits " +
    "stays, and Escape shows the waiting value again, as this page's",
    JSON.stringify({ kept, own }));
  const post = (body) => fetch(base + "/api/options",
    { method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body) });
  await post({ remote_batch: 5 });
  const other = await until("the remote_batch row to show the value another writer asked for",
    async () => {
      const text = await msgOf("remote_batch");
      return /^requested: 5 \(by memlive tune, .+; in force: 32 until/.test(text) ? text : null;
    }, 10000).catch(async () => "(got) " + await msgOf("remote_batch"));
  check(!other.startsWith("(got)"), "a value another writer asked for and not yet taken shows in " +
    "its row", other);
  server.stdin.write("loud\n");
  await until("page_recycle = 13", () => (effective().effective === 13 ? true : null))
    .catch(() => {});
  const taken = await until("the remote_batch row to say it took effect", async () => {
    const text = await msgOf("remote_batch");
    return text === "in effect: 5" ? text : null;
  }, 10000).catch(async () => "(got) " + await msgOf("remote_batch"));
  check(effective().effective === 13 && taken === "in effect: 5",
    "once the process allocates again both values take effect, and the row says so", taken);
  await post({ remote_batch: 32 });

  // Recommendations: with page_recycle 0 the ticker gives its 256 KiB spans back and takes them
  // again every 5 ms; the page must notice and suggest keeping them, and Apply must set it.
  await input.fill("0");
  await input.press("Enter");
  await until("page_recycle = 0", () => (effective().effective === 0 ? true : null)).catch(() => {});
  // The row of the recommendation of `option` for the class whose cell ends with `cls`, once the
  // page shows it (null if it never does).
  const recommendation = (option, cls, ms = 20000) => until(option + " recommendation", () =>
    page.evaluate(([o, c]) => {
      for (const tr of document.querySelectorAll("#recommendations tbody tr")) {
        const td = tr.children;
        if (td.length === 6 && td[1].textContent === o && td[0].textContent.includes(c))
          return { now: Number(td[2].dataset.value), want: Number(td[3].dataset.value),
            why: td[4].textContent, applyDisabled: td[5].firstChild.disabled };
      }
      return null;
    }, [option, cls]), ms).catch(() => null);
  const suggestion = await recommendation("page_recycle", "(256 KiB)", 30000);
  check(suggestion && suggestion.want >= 1 && /released and taken again/.test(suggestion.why),
    "recommendations: the 256 KiB round trips give a page_recycle suggestion with its reason", JSON.stringify(suggestion));
  const recycleRows = await page.$$eval("#recommendations tbody tr",
    (rows) => rows.filter((tr) => tr.children[1] &&
      tr.children[1].textContent === "page_recycle").length);
  const mayKeep = /the threads may keep up to [\d.,]+ [KMG]?i?B more empty spans/;
  check(suggestion && recycleRows === 1 && mayKeep.test(suggestion.why),
    "page_recycle, one threshold for every class, gets one suggestion that " +
    "says how much more the threads may keep", JSON.stringify({ recycleRows, suggestion }));
  if (suggestion) {
    const button = page.locator("#recommendations tbody tr:has(td:text-is('page_recycle')) button").first();
    // The suggestion follows the samples, so it may change between a read and the click: the
    // value to look for is the one the click sends, and it must be the button's at that moment.
    const posted = page.waitForRequest((r) => r.method() === "POST" &&
      r.url().endsWith("/api/options"), { timeout: 20000 }).catch(() => null);
    const [shown, request] = await Promise.all([
      button.evaluate((b) => { const w = b.dataset.want; b.click(); return Number(w); }),
      posted]);
    const sent = request ? JSON.parse(request.postData() || "{}").page_recycle : undefined;
    const got = sent === undefined ? false : await until("the suggestion applied",
      () => (effective().effective === sent ? true : null)).catch(() => false);
    check(got && sent === shown && sent > 0,
      "Apply sets page_recycle to the suggested " + sent + " in the process",
      JSON.stringify({ shown, sent, effective: effective() }));
  }
  await input.fill("2");
  await input.press("Enter");
  await until("page_recycle back to 2", () => (effective().effective === 2 ? true : null)).catch(() => {});

  // Baseline: the change since now; the parked threads made none.
  await page.click("#baseline");
  await until("baseline on", async () => ((await getJSON("/api/baseline")).baseline ? true : null)).catch(() => {});
  const sinceAllocs = await until("the baseline view", () => page.evaluate(() => {
    const td = document.querySelector("#threads tbody tr:has(td.name[data-value='ingest-0'])");
    return document.getElementById("baseline").getAttribute("aria-pressed") === "true" && td &&
      td.children[4].dataset.value === "0" ? "0" : null;
  })).catch(() => null);
  check(sinceAllocs === "0", "with a baseline, a thread that did nothing since shows 0 allocations");
  const baselineRate = await until("the ticker's rate under the baseline", () => page.evaluate(() => {
    const tr = document.querySelector("#threads tbody tr:has(td.name[data-value='ticker'])");
    return tr && Number(tr.children[6].dataset.value) > 0 ? tr.children[6].textContent : null;
  })).catch(() => null);
  check(baselineRate !== null, "with a baseline, the allocation rates are still computed (ticker: " + baselineRate + "/s)");
  // Exported under a baseline: what the tables show, the change since it, and named so (the
  // totals were written).
  {
    const [d] = await Promise.all([page.waitForEvent("download"), page.click("#export-json")]);
    const j = JSON.parse(fs.readFileSync(await d.path(), "utf8"));
    check(/-since-baseline\.json$/.test(d.suggestedFilename()) && j.baseline_taken_ns > 0,
      "an export under a baseline is the change since it, and its name says so",
      JSON.stringify({ name: d.suggestedFilename(), baseline_taken_ns: j.baseline_taken_ns }));
  }
  // Another client sets a newer baseline (the server keeps one for all of them): the page's
  // numbers are since that one, and its button must say so (it kept the time this page set).
  {
    const own = await getJSON("/api/baseline");
    await until("the clock to pass the second of the page's baseline", async () =>
      (Math.floor(Date.now() / 1000) > Math.floor(own.taken_ns / 1e9) ? true : null));
    const r = await fetch(base + "/api/baseline", { method: "POST",
      headers: { "Content-Type": "application/json" }, body: "{}" });
    const other = await r.json();
    const shown = await until("the page to show the newer baseline", () => page.evaluate((t) => {
      const want = "Baseline: on (change since " + new Date(t / 1e6).toLocaleTimeString() + ")";
      return document.getElementById("baseline").textContent === want ? want : null;
    }, other.taken_ns)).catch(() => null);
    check(r.ok && shown, "a baseline another client set: the button shows its time",
      JSON.stringify({ status: r.status, own: own.taken_ns, other: other.taken_ns,
        button: await page.textContent("#baseline") }));
  }
  await page.click("#baseline");
  const cleared = await until("baseline off", async () => ((await getJSON("/api/baseline")).baseline ? null : true))
    .catch(() => false);
  check(cleared === true, "the baseline button clears the baseline");
  // A second tab sets and clears the baseline: this tab, already open, must notice both. It
  // asked the server only at load: it showed "Baseline: off" under the other tab's baseline, and
  // its `b` replaced that one unseen; after a clear there, its next ?since=baseline got a 409,
  // which Chromium logs as an error.
  {
    const tab2 = await ctx.newPage();
    await tab2.goto(base + "/");
    await tab2.waitForFunction(() => document.body.dataset.mode === "live", null,
      { timeout: 20000 }).catch(() => {});
    const pressed = (p) =>
      p.evaluate(() => document.getElementById("baseline").getAttribute("aria-pressed"));
    await tab2.click("#baseline");
    const set = await until("the other tab's baseline", async () => {
      const b = await getJSON("/api/baseline");
      return b.baseline ? b : null;
    }).catch(() => null);
    const seen = set && await until("this tab to show the other tab's baseline", () =>
      page.evaluate((t) => {
        const want = "Baseline: on (change since " + new Date(t / 1e6).toLocaleTimeString() + ")";
        const b = document.getElementById("baseline");
        return b.textContent === want && b.getAttribute("aria-pressed") === "true" ? want : null;
      }, set.taken_ns)).catch(() => null);
    check(seen, "a tab already open shows the baseline another tab set",
      JSON.stringify({ set, button: await page.textContent("#baseline") }));
    // `b` here now clears the other tab's baseline, as the button says, instead of a new one.
    await page.locator("body").press("b");
    const gone = await until("b to clear the other tab's baseline", async () =>
      (!(await getJSON("/api/baseline")).baseline && (await pressed(page)) === "false"
        ? true : null)).catch(() => false);
    check(gone, "b in that tab clears the other tab's baseline rather than setting a new one over it",
      JSON.stringify({ server: await getJSON("/api/baseline"),
        button: await page.textContent("#baseline") }));
    // This tab sets a baseline and the other tab clears it while one request of this tab's waits
    // (held by a route: `held`, a pattern, and `only`, which of its requests): this tab must then
    // show the baseline off, without a 409 in the console.
    const clearWhileHeld = async (what, held, only) => {
      await page.locator("body").press("b");
      const own = await until("this tab's baseline, seen by the other tab", async () =>
        ((await getJSON("/api/baseline")).baseline && (await pressed(page)) === "true" &&
          (await pressed(tab2)) === "true" ? true : null)).catch(() => false);
      const errorsBefore = consoleErrors.length;
      let cleared = false;
      await page.route(held, async (route) => {
        if (own && !cleared && only(route.request())) {
          cleared = true;
          await tab2.click("#baseline");
          await until("the other tab to clear it", async () =>
            (!(await getJSON("/api/baseline")).baseline ? true : null)).catch(() => {});
        }
        await route.continue();
      });
      const off = await until("this tab to show the clear", async () =>
        ((await pressed(page)) === "false" ? true : null)).catch(() => false);
      await page.unroute(held);
      const conflicts = consoleErrors.slice(errorsBefore).filter((e) => /409/.test(e));
      check(own && cleared && off && conflicts.length === 0,
        "a baseline another tab cleared while this tab's " + what + " was held: shown off, " +
        "without a 409 in the console",
        JSON.stringify({ own, cleared, off, conflicts,
          button: await page.textContent("#baseline") }));
    };
    // Held: its ?since=baseline, so the request reaches the server after the clear. It got a
    // 409; the page asks with &if_none=plain now.
    await clearWhileHeld("?since=baseline",
      (u) => u.pathname === "/api/snapshot" && u.searchParams.has("since"), () => true);
    // While this tab has a baseline, each sample's ?since=baseline says whether it still holds:
    // no GET /api/baseline (the page asked one before each, twice the requests); and once it
    // has none, the GET once a second again, so that one set elsewhere shows.
    {
      let gets = 0, sinces = 0;
      const count = (req) => {
        const u = new URL(req.url());
        if (u.pathname === "/api/baseline" && req.method() === "GET") ++gets;
        if (u.pathname === "/api/snapshot" && u.searchParams.has("since")) ++sinces;
      };
      await page.locator("body").press("b");
      const own = await until("this tab's baseline", async () =>
        ((await getJSON("/api/baseline")).baseline && (await pressed(page)) === "true"
          ? true : null)).catch(() => false);
      page.on("request", count);
      await until("three ?since=baseline requests", async () => (sinces >= 3 ? true : null))
        .catch(() => {});
      const whileOn = { gets, sinces };
      await page.locator("body").press("b");
      const off = await until("this tab's baseline cleared", async () =>
        (!(await getJSON("/api/baseline")).baseline && (await pressed(page)) === "false"
          ? true : null)).catch(() => false);
      gets = 0;
      await until("a GET /api/baseline while it has none", async () => (gets > 0 ? true : null))
        .catch(() => {});
      page.off("request", count);
      check(own && off && whileOn.sinces >= 3 && whileOn.gets === 0 && gets > 0,
        "with a baseline the page asks only ?since=baseline at each sample (no GET " +
        "/api/baseline), and GET /api/baseline again once it has none",
        JSON.stringify({ own, off, whileOn, getsWhileOff: gets }));
    }
    await tab2.close();
  }

  // The heat map: the arrow keys walk its cells, and the cell's text names its thread and class
  // and follows that cell's numbers as samples come (ticker allocates 256 KiB blocks for ever).
  {
    const hover = () => page.textContent("#heat-hover");
    await page.focus("#heat");
    let text = "";
    for (let n = 0; n < 40 && !/^ticker · /.test(text); ++n) {
      await page.keyboard.press("ArrowDown");
      text = await hover();
    }
    for (let n = 0; n < 80 && !/^ticker · class \d+ \(256 KiB\)/.test(text); ++n) {
      await page.keyboard.press("ArrowRight");
      text = await hover();
    }
    const allocs = (t) => {
      const m =
        /^ticker · class \d+ \(256 KiB\): [\d,]+ live blocks? \([^)]*\), ([\d,]+) allocations, /
          .exec(t);
      return m ? Number(m[1].replace(/,/g, "")) : null;
    };
    const first = allocs(text);
    const later = first === null ? null : await until("the cell's text to follow the data",
      async () => { const a = allocs(await hover()); return a !== null && a > first ? a : null; })
      .catch(() => null);
    check(first !== null && later !== null,
      "the arrow keys reach ticker's 256 KiB blocks in the heat map, and the cell's text follows " +
      "them as they grow", JSON.stringify({ text, first, later }));
    await page.keyboard.press("ArrowLeft");
    const left = await hover();
    check(/^ticker · class \d+ \([\d.]+ [KM]?i?B\): [\d,]+ live blocks? \(/.test(left) &&
      left !== text,
      "ArrowLeft moves to another size class of the same thread", left);
    const box = await page.locator("#heat").boundingBox();
    await page.mouse.move(box.x + 170 + 7, box.y + 44 + 8);  // the first cell (app.js: heat)
    const hovered = await hover();
    check(/^.+ · (large blocks|class \d+ \(.+\)): [\d,]+ live blocks?.*, [\d,]+ allocations, /
      .test(hovered), "the mouse on the first cell names its thread, class and numbers", hovered);
    // Scrolled down a long list of threads, the column labels stay at the top of the box: the
    // band there is the one drawn above the first row (the box made short to scroll 7 rows).
    // The canvas shows only what the box does: the band is read at the box's top on it.
    const band = await page.evaluate(() => new Promise((resolve) => {
      const canvas = document.getElementById("heat"), box = canvas.parentElement;
      const dpr = window.devicePixelRatio || 1, g = canvas.getContext("2d");
      const hgt = Math.round(44 * dpr);
      const atTop = () => Math.round((box.getBoundingClientRect().top + box.clientTop -
        canvas.getBoundingClientRect().top) * dpr);
      const a = g.getImageData(0, atTop(), canvas.width, hgt).data;
      box.style.maxHeight = "60px";
      box.scrollTop = 50; // past the first band: the two do not overlap
      requestAnimationFrame(() => requestAnimationFrame(() => {
        const top = Math.round(box.scrollTop * dpr);
        const b = g.getImageData(0, atTop(), canvas.width, hgt).data;
        let same = a.length === b.length;
        for (let k = 0; same && k < a.length; ++k) same = a[k] === b[k];
        box.style.maxHeight = "";
        box.scrollTop = 0;
        resolve({ scrolled: box.scrollTop === 0 && top > 0 ? top : -1, same });
      }));
    }));
    check(band.scrolled > 0 && band.same, "the heat map's column labels stay in view when it " +
      "scrolls", JSON.stringify(band));
    await page.evaluate(() => document.activeElement && document.activeElement.blur());
    await page.mouse.move(box.x + 170 + 7, box.y + 44 + 8);
    const on = await hover();
    await page.mouse.move(1, 1);
    const off = await until("the hover text to go", async () =>
      ((await hover()) === "hover a cell for its numbers" ? true : null), 5000).catch(() => false);
    check(on !== "hover a cell for its numbers" && off, "the cell's text goes when the mouse " +
      "leaves the map", on);
  }

  // A heat map taller than the largest canvas Chromium draws (65,535 device px: 2,046 rows at
  // devicePixelRatio 2) is drawn: a replay of one snapshot with a thread repeated 2,100 times,
  // in a tab at dpr 2. The canvas is as tall as the box; scrolled to the end it shows the last
  // rows, the mouse there names the last thread, and the arrow keys scroll the box.
  {
    const snap = await getJSON("/api/snapshot");
    const t = snap.threads.find((x) => x.name === "ticker");
    snap.threads = Array.from({ length: 2100 }, (_, n) =>
      ({ ...t, slot: n + 1, tid: 100000 + n, name: "many-" + n }));
    snap.exited = []; snap.free_matrix = [];
    const file = path.join(out, "many-threads.ndjson");
    fs.writeFileSync(file, JSON.stringify(snap) + "\n");
    const tab = await ctx.newPage();
    const cdp = await ctx.newCDPSession(tab);
    await cdp.send("Emulation.setDeviceMetricsOverride",
      { width: 1400, height: 1000, deviceScaleFactor: 2, mobile: false });
    await tab.goto(base + "/");
    await tab.setInputFiles("#replay-file", file);
    await tab.waitForFunction(() => document.body.dataset.mode === "replay", null,
      { timeout: 20000 }).catch(() => {});
    const drawn = () => tab.evaluate(() => new Promise((resolve) => {
      requestAnimationFrame(() => requestAnimationFrame(() => {
        const canvas = document.getElementById("heat"), box = canvas.parentElement;
        const g = canvas.getContext("2d");
        // the cells (right of the labels) in the first 1,000 device px: the pixels that are not
        // the card's colour, as in the top left corner (a canvas too tall is blank)
        const d = g.getImageData(340, 0, canvas.width - 340, Math.min(1000, canvas.height)).data;
        const c = g.getImageData(0, 0, 1, 1).data;
        let inked = 0;
        for (let k = 0; k < d.length; k += 4)
          if (d[k] !== c[0] || d[k + 1] !== c[1] || d[k + 2] !== c[2] || d[k + 3] !== c[3]) ++inked;
        resolve({ dpr: window.devicePixelRatio, height: canvas.height, inked,
          scroll: box.scrollHeight, top: box.scrollTop, client: box.clientHeight });
      }));
    }));
    await tab.selectOption("#heat-metric", "allocs"); // every row has a cell to draw
    await tab.evaluate(() => document.getElementById("heat").parentElement.scrollIntoView());
    const first = await drawn();
    await tab.evaluate(() => { const b = document.getElementById("heat").parentElement;
      b.scrollTop = b.scrollHeight; });
    const last = await drawn();
    const r = await tab.locator("#heat").boundingBox();
    const v = await tab.evaluate(() => document.getElementById("heat").parentElement.clientHeight);
    await tab.mouse.move(r.x + 170 + 7, r.y + v - 12); // the last row (4 px of margin below)
    const hovered = await tab.textContent("#heat-hover");
    await tab.mouse.move(1, 1);
    await tab.focus("#heat");
    await tab.keyboard.press("ArrowDown"); // the cursor's first cell, in the first row
    const keyed = await tab.textContent("#heat-hover");
    const back = await drawn();
    check(first.dpr === 2 && first.scroll > 2100 * 16 && first.height < 65536 &&
      last.height < 65536 && first.inked > 5000 && last.inked > 5000 && last.top > 2000 * 16 &&
      /^many-2099 · /.test(hovered) && /^many-0 · /.test(keyed) && back.top === 0,
      "a heat map of 2,100 threads at devicePixelRatio 2 is drawn, on a canvas as tall as its " +
      "box, scrolled to its end too; the mouse on its last row names the last thread, and the " +
      "arrow keys scroll back to the first", JSON.stringify({ first, last, hovered, keyed, back }));
    await tab.close();
  }

  // Sorting: a column's header sorts its table by it (numbers largest first, text A to Z), a
  // second click reverses it, aria-sort says which; the page then keeps each update in order.
  {
    const sorted = (table, key, col, dir) => page.evaluate(([t, k, c, d]) => {
      const th = document.querySelector("#" + t + " th[data-key='" + k + "']");
      const v = [...document.querySelectorAll("#" + t + " tbody tr")]
        .map((tr) => tr.children[c].dataset.value);
      const cmp = (a, b) => (k === "name" ? a.localeCompare(b) : Number(a) - Number(b));
      const sign = d === "ascending" ? 1 : -1;
      const ok = th.getAttribute("aria-sort") === d && v.length >= 2 &&
        v.every((x, i) => i === 0 || sign * cmp(v[i - 1], x) <= 0);
      return ok ? v : null;
    }, [table, key, col, dir]);
    const results = {};
    for (const [table, key, col, first] of [["threads", "name", 0, "ascending"],
      ["classes", "size", 1, "descending"]]) {
      for (const dir of [first, first === "ascending" ? "descending" : "ascending"]) {
        await page.click("#" + table + " th[data-key='" + key + "'] button");
        results[table + " by " + key + ", " + dir] = await until(table + " sorted",
          () => sorted(table, key, col, dir)).catch(() => null);
      }
      await page.click("#" + table + " th[data-key='live'] button");  // back to live, largest first
      results[table + " by live again"] = await until(table + " by live",
        () => sorted(table, "live", table === "threads" ? 3 : 2, "descending")).catch(() => null);
    }
    check(Object.values(results).every((v) => v !== null),
      "a header click sorts its table (threads by name A-Z, then Z-A; classes by size largest " +
      "first, then smallest), aria-sort says so, and live sorts back", JSON.stringify(results));
  }

  // Pause and resume from the keyboard; the interval select reconnects the stream.
  await page.locator("body").press("p");
  await page.waitForFunction(() => document.body.dataset.mode === "paused", null, { timeout: 5000 }).catch(() => {});
  // A frame requested before the key press still draws what arrived before it: let it run.
  await page.evaluate(() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r))));
  const pausedAt = await points();
  await page.waitForTimeout(400);
  const pausedPoints = await points();
  check((await page.evaluate(() => document.body.dataset.mode)) === "paused" && pausedPoints === pausedAt,
    "key p pauses: the view stops moving", JSON.stringify({ pausedAt, pausedPoints }));
  // Paused, the header and an export show the same sample: "cached" is the process's
  // cached_bytes (as in /metrics), and the export keeps the nanosecond timestamps exact.
  {
    const [d] = await Promise.all([page.waitForEvent("download"), page.click("#export-json")]);
    const text = fs.readFileSync(await d.path(), "utf8");
    const shown = JSON.parse(text);
    const cached = await page.textContent("#f-cached");
    check(cached === fmtBytes(shown.process.cached_bytes) && (await page.textContent("#f-free")) !== "-",
      "the header's 'cached' is the process's cached_bytes; the spans' free blocks are 'free in spans'",
      JSON.stringify({ cached, cached_bytes: shown.process.cached_bytes }));
    // A double holds a nanosecond time since the epoch to 256 ns: the page's numbers would
    // round every one of these; the exported text must keep them as the server wrote them.
    const ns = [...text.matchAll(/"(?:taken|start)_ns":(\d+)/g)].map((m) => m[1]);
    const exact = ns.filter((v) => v !== "0" && BigInt(Number(v)) !== BigInt(v));
    check(ns.length > 2 && exact.length > 0 && d.suggestedFilename().includes(/"taken_ns":(\d+)/.exec(text)[1]),
      "Export JSON keeps taken_ns and start_ns exact (" + exact.length + " of " + ns.length + " beyond a double's precision)");
  }
  await page.locator("body").press("p");
  await page.waitForFunction(() => document.body.dataset.mode === "live", null, { timeout: 10000 }).catch(() => {});
  check((await page.evaluate(() => document.body.dataset.mode)) === "live", "key p resumes");
  await page.selectOption("#interval", "50");
  const p50 = await points();
  const moving = await until("points at 50 ms", async () => ((await points()) > p50 + 5 ? true : null)).catch(() => false);
  check(moving, "changing the stream interval keeps the chart moving");

  // Events arriving while the page is busy are not queued up: after 2 s of a blocked main thread
  // (40 events at 50 ms) the page parses only the newest one or two.
  const lag = await page.evaluate(async () => {
    const st = window.memliveStats;
    const before = { samples: st.samples, events: st.events };
    const end = performance.now() + 2000;
    while (performance.now() < end) { /* busy, as when drawing 300 threads */ }
    await new Promise((r) => setTimeout(r, 0));
    await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
    return { events: st.events - before.events, samples: st.samples - before.samples };
  });
  check(lag.events >= 5 && lag.samples <= 3, "a busy page skips to the newest sample instead of falling behind (" +
    lag.events + " events, " + lag.samples + " parsed)", JSON.stringify(lag));

  // 4. Export JSON and CSV.
  const [dl] = await Promise.all([page.waitForEvent("download"), page.click("#export-json")]);
  const exported = fs.readFileSync(await dl.path(), "utf8");
  fs.writeFileSync(path.join(out, "export.json"), exported);
  let parsed = null;
  try { parsed = JSON.parse(exported); } catch (e) { parsed = null; }
  check(parsed && parsed.schema === "memlive.snapshot/1" && parsed.pid === pid &&
    parsed.threads.some((t) => t.name === "ingest-0"), "Export JSON gives a valid memlive.snapshot/1 of the process");
  const [dl2] = await Promise.all([page.waitForEvent("download"), page.click("#export-csv")]);
  const csv = fs.readFileSync(await dl2.path(), "utf8").split("\r\n");
  const cliCsvHeader = execFileSync(memlive, ["snapshot", "--pid", String(pid), "--format", "csv"]).toString().split(/\r?\n/)[0];
  check(csv[0] === cliCsvHeader && csv.some((l) => l.includes(",ingest-0,")),
    "Export CSV has memlive's CSV header and the thread rows", csv[0] + " vs " + cliCsvHeader);

  // 5. A file written by `memlive record` replays; a malformed one is refused with a message.
  const rec = path.join(out, "recording.jsonl");
  execFileSync(memlive, ["record", "--pid", String(pid), "--interval", "100", "--out", rec, "--count", "5"]);
  await page.setInputFiles("#replay-file", rec);
  await page.waitForFunction(() => document.body.dataset.mode === "replay", null, { timeout: 10000 }).catch(() => {});
  check((await page.evaluate(() => document.body.dataset.mode)) === "replay", "a recorded file switches the page to replay");
  check((await page.textContent("#replay-info")) === "5 / 5", "the replay holds the 5 recorded samples",
    await page.textContent("#replay-info"));
  check(await page.isDisabled("#opt-page_recycle") && await page.isDisabled("#baseline") &&
    await page.isVisible("#tuning-replay") && await page.isDisabled("#interval"),
    "during a replay the tuning inputs, the baseline and the stream's interval are disabled, " +
    "with a note why");
  // The chart is redrawn at the next animation frame, which a loaded machine can delay.
  await page.waitForFunction(() => window.Chart.getChart("chart-live").data.datasets[0].data.length === 5,
    null, { timeout: 10000 }).catch(() => {});
  check((await points()) === 5, "the chart shows the recording's 5 points", String(await points()));
  // Play, at the last sample, starts again from the first and steps through every sample at the
  // recorded pace (100 ms), then stops.
  await page.evaluate(() => {
    const info = document.getElementById("replay-info");
    window.__replaySeen = [];
    new MutationObserver(() => window.__replaySeen.push(info.textContent))
      .observe(info, { childList: true, characterData: true, subtree: true });
  });
  await page.click("#replay-play");
  const playing = await page.textContent("#replay-play");
  const played = await until("the replay to play to its end", () => page.evaluate(() => {
    const done = document.getElementById("replay-play").textContent === "Play";
    return done ? window.__replaySeen.slice() : null;
  })).catch(() => null);
  check(playing === "Stop" && played && played.join(",") === "1 / 5,2 / 5,3 / 5,4 / 5,5 / 5",
    "Play replays the 5 samples from the first, then says Play again",
    JSON.stringify({ playing, played }));
  await page.locator("#replay-pos").fill("0");
  check((await page.textContent("#replay-info")) === "1 / 5", "the replay slider moves to the first sample");
  const bad = path.join(out, "bad.jsonl");
  fs.writeFileSync(bad, fs.readFileSync(rec, "utf8").split("\n")[0] + "\n{not json\n");
  await page.setInputFiles("#replay-file", bad);
  const notice = await until("the notice", async () => ((await page.isVisible("#notice")) ? page.textContent("#notice") : null)).catch(() => "");
  check(/line 2: not JSON/.test(notice) && (await page.textContent("#replay-info")) === "1 / 5",
    "a malformed recording is refused with its line number and the replay stays", notice);
  // A line that is a snapshot by its fields but cannot be read (no counter "allocs") is refused
  // with its number, and the replay stays.
  const unreadable = path.join(out, "unreadable.jsonl");
  const noAllocs = JSON.parse(fs.readFileSync(rec, "utf8").split("\n")[0]);
  noAllocs.counters = noAllocs.counters.map((c) => (c === "allocs" ? "allocations" : c));
  fs.writeFileSync(unreadable,
    fs.readFileSync(rec, "utf8").split("\n")[0] + "\n" + JSON.stringify(noAllocs) + "\n");
  await page.setInputFiles("#replay-file", unreadable);
  const notice2 = await until("the notice", async () => {
    const t = (await page.isVisible("#notice")) ? await page.textContent("#notice") : "";
    return t.includes("unreadable.jsonl") ? t : null;
  }).catch(() => "");
  check(/line 2: cannot read it \(.*allocs/.test(notice2) &&
    (await page.textContent("#replay-info")) === "1 / 5" &&
    (await page.evaluate(() => document.body.dataset.mode)) === "replay",
    "an unreadable recording line is refused with its line number and the replay stays", notice2);
  // A recording past 256 MiB is refused before it is read (a sparse file: no disk, no reading);
  // a 2.4 GB one left the page as it was with a NotReadableError in the console only.
  const huge = path.join(out, "huge.jsonl");
  fs.closeSync(fs.openSync(huge, "w"));
  fs.truncateSync(huge, 300 * 1048576);
  await page.setInputFiles("#replay-file", huge);
  const notice3 = await until("the notice", async () => {
    const t = (await page.isVisible("#notice")) ? await page.textContent("#notice") : "";
    return t.includes("huge.jsonl") ? t : null;
  }).catch(() => "");
  fs.unlinkSync(huge);
  check(/huge\.jsonl is 300 MiB: the page replays files of up to 256 MiB.*nothing loaded/
    .test(notice3) && (await page.textContent("#replay-info")) === "1 / 5",
    "a recording past 256 MiB is refused, with its size and what to do, and the replay stays",
    notice3);
  // A thread of the capture hooks can free more than it allocated (memlive/README.md): the CSV
  // export's live is then 0, as in `memlive snapshot --format csv`, not negative.
  const neg = JSON.parse(fs.readFileSync(rec, "utf8").split("\n")[0]);
  const negThread = neg.threads.find((t) => t.classes.length > 0);
  const negRow = negThread.classes[0];
  negRow[neg.counters.indexOf("frees") + 1] = negRow[neg.counters.indexOf("allocs") + 1] + 7;
  negRow[neg.counters.indexOf("adopted") + 1] = 0;
  const negFile = path.join(out, "negative.jsonl");
  fs.writeFileSync(negFile, JSON.stringify(neg) + "\n");
  await page.setInputFiles("#replay-file", negFile);
  await page.waitForFunction(() => document.getElementById("replay-info").textContent === "1 / 1", null,
    { timeout: 10000 }).catch(() => {});
  const [dl3] = await Promise.all([page.waitForEvent("download"), page.click("#export-csv")]);
  const negLine = fs.readFileSync(await dl3.path(), "utf8").split("\r\n")
    .find((l) => l.split(",")[2] === String(negThread.slot) && l.split(",")[6] === String(negRow[0]));
  check((await page.textContent("#replay-info")) === "1 / 1" && negLine &&
    negLine.split(",").pop() === "0",
    "Export CSV: a row with more frees than allocations has live 0, as memlive's CSV", negLine);
  // Recordings edited from `rec` (edit(sample, index) for each sample), replayed, drive the
  // recommendations the live workload never gives.
  const replayEdited = async (name, edit) => {
    const samples = fs.readFileSync(rec, "utf8").trim().split("\n").map((l, i) => {
      const j = JSON.parse(l);
      edit(j, i);
      return JSON.stringify(j);
    });
    const file = path.join(out, name);
    fs.writeFileSync(file, samples.join("\n") + "\n");
    await page.setInputFiles("#replay-file", file);
  };
  // 24 large blocks mapped in 0.4 s, and as many freed, while they peaked at 200 MiB, past the
  // 128 MiB cache: raise it to 1.25 x 200 MiB.
  await replayEdited("large_cache.jsonl", (j, i) => {
    j.process.mmap_calls = (j.process.mmap_calls || 0) + 6 * i;
    j.process.large_bytes = (i === 2 ? 200 : 50) * 1048576;
    let large = j.exited.find((r) => r[0] === 0);
    if (!large) j.exited.push(large = [0].concat(j.counters.map(() => 0)));
    large[j.counters.indexOf("allocs") + 1] += 6 * i;
    large[j.counters.indexOf("frees") + 1] += 6 * i;
  });
  const lcRec = await recommendation("large_cache", "large");
  const lcWhy = /^24 mappings in .+ while large blocks peaked at 200 MiB; a cache of 250 MiB keeps/;
  check(lcRec && lcRec.now === 128 && lcRec.want === 250 && lcWhy.test(lcRec.why) &&
    lcRec.applyDisabled, "recommendations: large blocks mapped again and again past large_cache " +
    "suggest raising it (Apply disabled in a replay)", JSON.stringify(lcRec));
  // The other way: 4 MiB of empty 1 KiB spans kept (by ingest-1), no span taken in the window
  // (in any class: one that takes spans back would ask for a higher value), under a page_recycle
  // of 4096: suggest half of what a thread keeps, not half of 4096, which would return nothing.
  // Meanwhile large blocks only grow (mapped, never unmapped): nothing for large_cache to keep.
  await replayEdited("idle_spans.jsonl", (j, i) => {
    j.process.mmap_calls = (j.process.mmap_calls || 0) + 6 * i;
    j.process.large_bytes = 50 * (i + 1) * 1048576;
    const pr = j.options.find((x) => x.name === "page_recycle");
    pr.effective = pr.requested = 4096;
    const c = j.class_sizes.indexOf(1024);
    const at = (name) => j.counters.indexOf(name) + 1;
    for (const r of j.threads.flatMap((t) => t.classes).concat(j.exited)) {
      r[at("pages_taken")] = 5;
      r[at("pages_released")] = 5;
      r[at("pages_kept")] = 0;
    }
    const row = j.threads.find((t) => t.name === "ingest-1").classes.find((r) => r[0] === c);
    row[at("pages_kept")] = (4 << 20) / (j.class_units[c] * 65536);
  });
  const prRec = await recommendation("page_recycle", "(1.0 KiB)");
  check(prRec && prRec.now === 4096 && prRec.want >= 1 && prRec.want <= 32 &&
    /^4\.0 MiB of empty 1\.0 KiB spans are kept and none was taken in .+; a lower threshold/
      .test(prRec.why),
    "recommendations: idle empty spans kept suggest a lower page_recycle, half what is kept",
    JSON.stringify(prRec));
  const growthOnly = await page.$$eval("#recommendations tbody tr",
    (trs) => trs.filter((tr) => tr.children.length === 6 &&
      tr.children[1].textContent === "large_cache").map((tr) => tr.textContent));
  check(prRec && growthOnly.length === 0,
    "recommendations: large blocks that only grow give no large_cache suggestion", growthOnly);
  // A run longer than the chart's 3,000 points (3,500 samples 80 ms apart, a thread each): the
  // chart thins its older half and still starts at the run's first sample (it dropped them).
  {
    const one = JSON.parse(fs.readFileSync(rec, "utf8").trim().split("\n")[0]);
    one.threads = one.threads.slice(0, 1);
    one.exited = [];
    one.free_matrix = [];
    const lines = [];
    for (let i = 0; i < 3500; ++i) {
      one.taken_ns = one.start_ns + (i + 1) * 80e6;
      lines.push(JSON.stringify(one));
    }
    const file = path.join(out, "long_run.jsonl");
    fs.writeFileSync(file, lines.join("\n") + "\n");
    await page.setInputFiles("#replay-file", file);
    const drawnRun = await until("the long run drawn", () => page.evaluate(() => {
      const d = window.Chart.getChart("chart-live").data.datasets[0].data;
      return d.length > 1000 && d[d.length - 1].x >= 279.9 ? { n: d.length, first: d[0].x,
        last: d[d.length - 1].x } : null;
    }), 30000).catch(() => null);
    check(drawnRun && drawnRun.n <= 3000 && drawnRun.first < 0.1,
      "a run longer than the chart's points is drawn from its first sample, thinned",
      JSON.stringify(drawnRun));
  }
  // A thread that holds 2,000 large blocks (586 MiB) and little else: its live sorts, with them
  // estimated at the process's mean large block, first (it came last: 16 KiB "+ 2,000 large").
  await replayEdited("large_thread.jsonl", (j) => {
    const t = j.threads.find((x) => x.name === "cache");
    let large = t.classes.find((r) => r[0] === 0);
    if (!large) t.classes.push(large = [0].concat(j.counters.map(() => 0)));
    large[j.counters.indexOf("allocs") + 1] += 2000;
    j.process.large_bytes = 2000 * 307200;
    for (const x of j.threads) for (const r of x.classes.filter((c) => c[0] === 0 && c !== large))
      r[j.counters.indexOf("frees") + 1] = r[j.counters.indexOf("allocs") + 1];
    for (const r of j.exited.filter((c) => c[0] === 0))
      r[j.counters.indexOf("frees") + 1] = r[j.counters.indexOf("allocs") + 1];
  });
  const firstByLive = await until("the threads sorted by live, large blocks included", () =>
    page.evaluate(() => {
      const td = document.querySelector("#threads tbody tr").children;
      return td[0].dataset.value === "cache" ? { value: Number(td[3].dataset.value),
        text: td[3].textContent, title: td[3].title } : null;
    })).catch(() => null);
  check(firstByLive && firstByLive.value >= 2000 * 307200 &&
    /\+ 2,000 large$/.test(firstByLive.text) &&
    /^about 58\d(\.\d)? MiB with its large blocks/.test(firstByLive.title),
    "a thread holding large blocks sorts first by live, with them estimated",
    JSON.stringify(firstByLive));
  await page.click("#replay-exit");
  await page.waitForFunction(() => document.body.dataset.mode === "live", null, { timeout: 10000 }).catch(() => {});
  check((await page.evaluate(() => document.body.dataset.mode)) === "live", "back to live after the replay");
  check(!(await page.isDisabled("#opt-page_recycle")) &&
    !(await page.isVisible("#tuning-replay")) && !(await page.isDisabled("#interval")),
    "back to live, the tuning inputs are enabled again");

  // Themes, then the screenshot artefact.
  await page.click("#theme");
  check((await page.evaluate(() => document.documentElement.dataset.theme)) === "dark", "the theme button switches to dark");
  await page.click("#theme");
  await page.click("#theme");
  // Left to the system (the third click), a change of the system's scheme recolours the chart
  // too: it kept the colours of the scheme it was drawn in.
  const gridOf = () => page.evaluate(() => ({
    grid: window.Chart.getChart("chart-live").options.scales.x.grid.color,
    css: getComputedStyle(document.documentElement).getPropertyValue("--line").trim() }));
  const schemes = [];
  for (const colorScheme of ["dark", "light"]) {
    await page.emulateMedia({ colorScheme });
    schemes.push(await until("the chart to take the " + colorScheme + " scheme", async () => {
      const g = await gridOf();
      return g.grid === g.css ? g : null;
    }, 5000).catch(gridOf));
  }
  await page.emulateMedia({ colorScheme: null });
  check(schemes.every((g) => g.grid === g.css) && schemes[0].css !== schemes[1].css,
    "with the system's theme, the chart follows the system switching to dark and back",
    JSON.stringify(schemes));

  // Phones: nothing wider than the screen (the tables and the heat map scroll in their cards).
  for (const width of [320, 375]) {
    await page.setViewportSize({ width, height: 800 });
    await page.evaluate(() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r))));
    const wide = await page.evaluate(() => ({ page: document.documentElement.scrollWidth,
      cards: [...document.querySelectorAll(".card, .top, .toolbar")].filter((e) => e.getBoundingClientRect().right > innerWidth + 0.5)
        .map((e) => e.querySelector("h2") ? e.querySelector("h2").textContent : e.className) }));
    check(wide.page <= width && wide.cards.length === 0, "at " + width + " px the page does not scroll sideways", JSON.stringify(wide));
  }
  // Wide screens: the cards come in pairs, so two columns, never three (a third of the screen
  // left empty and the tables cut).
  await page.setViewportSize({ width: 1920, height: 1080 });
  await page.evaluate(() => new Promise((r) => requestAnimationFrame(() =>
    requestAnimationFrame(r))));
  const columns = await page.evaluate(() => getComputedStyle(document.querySelector("main"))
    .gridTemplateColumns.split(" ").length);
  check(columns === 2, "at 1920 px the cards are in two columns", String(columns));
  await page.setViewportSize({ width: 1400, height: 1000 });
  await page.waitForTimeout(300);
  const shot = path.join(out, "page.png");
  await page.screenshot({ path: shot, fullPage: true });
  check(fs.statSync(shot).size > 10000, "a screenshot was written: " + shot);

  check(consoleErrors.length === 0, "no console errors", consoleErrors.join("\n      "));

  // Every stream slot taken (16): a new tab gets 503, says why, and goes live once slots free.
  // The responses are kept too: node's fetch cancels the body of a response it collects, which
  // gave a slot back. A stream whose client left earlier holds its slot until the server's next
  // write (a heartbeat, 1 s), so the slots are taken again after two of them.
  {
    const held = [];
    const fill = async () => {
      for (let i = 0; i < 20; ++i) {
        const ctl = new AbortController();
        const r = await fetch(base + "/api/stream?interval_ms=1000", { signal: ctl.signal });
        if (r.status === 503) { await r.text(); return; }
        held.push({ ctl, r });
      }
    };
    await fill();
    await new Promise((r) => setTimeout(r, 2500));
    await fill();
    const tab = await ctx.newPage();
    await tab.goto(base + "/");
    const busy = await until("the new tab to report the full server", () => tab.evaluate(() => {
      const n = document.getElementById("notice");
      return document.body.dataset.mode === "reconnecting" && !n.hidden ? n.textContent : null;
    })).catch(() => null);
    // The notice counts down from the server's Retry-After (5 s).
    check(busy && /too many viewers/.test(busy) && /too many streams/.test(busy) &&
      /again in [1-5] s/.test(busy),
      "with every stream slot taken, the page says the server has too many viewers and when it retries", busy);
    const counted = await until("the notice to count down", () => tab.evaluate(() => {
      const t = document.getElementById("notice").textContent;
      return /too many viewers.*again in [1-4] s/.test(t) ? t : null;
    }), 10000).catch(() => null);
    check(counted !== null, "the notice counts the seconds down to the next try", counted);
    for (const h of held) h.ctl.abort();
    const back = await until("the new tab to go live", () => tab.evaluate(() =>
      document.body.dataset.mode === "live" && document.getElementById("notice").hidden ? true : null), 30000).catch(() => false);
    check(back, "once a slot is free the page goes live by itself");
    await tab.close();
    await page.bringToFront();
  }

  // The workload execs itself: the same pid, a new image whose counters and uptime start again.
  // The page starts a new chart line for it (it drew the new samples on the old line, going back
  // to uptime 0).
  {
    const before = await getJSON("/api/snapshot");
    server.stdin.write("exec\n");
    const after = await until("memlive to follow the exec", async () => {
      const s = await getJSON("/api/snapshot");
      return s.start_ns !== before.start_ns && s.alive ? s : null;
    }).catch(() => null);
    const drawn = after && await until("the page to draw the new image", () => page.evaluate(
      (t) => (Number(document.body.dataset.takenNs) >= t ? true : null), after.taken_ns))
      .catch(() => null);
    const xs = await page.evaluate(() =>
      window.Chart.getChart("chart-live").data.datasets[0].data.map((p) => p.x));
    const back = xs.findIndex((x, i) => i > 0 && x < xs[i - 1]);
    check(after && after.pid === pid && drawn && xs.length > 0 && back < 0,
      "after an exec the chart follows the new image from its start, not on the old image's line",
      JSON.stringify({ pid: after && after.pid, drawn, points: xs.length, back,
        around: xs.slice(Math.max(0, back - 2), back + 2) }));
  }

  // 300 more threads (with 256 slots, 255 of them and the shared slot show): the table lists
  // the first 250 by the sort in force and says so (every row cost 0.1 ms a frame: 450 ms with
  // 4,000 threads); a thread selected stays listed.
  {
    server.stdin.write("threads 300\n");
    const note = () => page.evaluate(() => document.getElementById("threads-more").textContent);
    const more = await until("the table to cap its rows", async () => {
      const t = await note();
      return /^The first 250 of 2(5[1-9]|[6-9]\d) threads by live:/.test(t) ? t : null;
    }, 30000).catch(async () => "(got) " + await note());
    const rows = await page.$$eval("#threads tbody tr", (r) => r.length);
    await page.click("#threads th[data-key=name] button");
    await page.click("#threads th[data-key=name] button"); // names descending: worker-0 first
    const first = await until("the sort by name", async () => {
      const td = await page.$("#threads tbody tr td");
      const name = td && await td.textContent();
      return / by thread:/.test(await note()) && name === "worker-0" ? name : null;
    }).catch(() => null);
    await page.click("#threads tbody tr"); // select worker-0, then sort it to the end
    await page.click("#threads th[data-key=name] button");
    const kept = await until("the selected thread to stay", async () => {
      const names = await page.$$eval("#threads tbody tr td:first-child",
        (c) => c.map((x) => x.textContent));
      return names.length === 251 && names[250] === "worker-0" &&
        /, and the selected one:/.test(await note()) ? true : null;
    }).catch(async () => "(got) " + await note());
    check(!more.startsWith("(got)") && rows === 250 && first && kept === true,
      "with more than 250 threads the table shows the first 250 by the sort in force, says so, " +
      "and keeps the selected thread", JSON.stringify({ more, rows, first, kept }));
  }

  // The workload ends while the view is paused: the paused page says so (it said "paused" until
  // resumed); resumed, it shows the end. Then the server goes: reconnecting.
  await page.click("#pause");
  server.stdin.end();
  const pausedExit = await until("the paused page to say the process exited", () =>
    page.evaluate(() => document.getElementById("conn").textContent)
      .then((t) => (/^paused \(the process has exited/.test(t) ? t : null)), 10000)
    .catch(() => null);
  check(pausedExit !== null, "a paused page says when the process exits", pausedExit);
  await page.click("#pause");
  const exited = await until("the page to show the exit", () => page.evaluate(() =>
    document.body.dataset.mode === "exited" ? document.getElementById("conn").textContent : null)).catch(() => null);
  check(exited === "process exited", "when the program exits the page shows 'process exited'", exited);
  check((await page.$$("#threads tbody tr")).length > 0, "and still shows its last state");
  const closed = await until("the tuning panel to close", () => page.evaluate(() => {
    const recs = document.querySelector("#recommendations tbody").textContent;
    return document.getElementById("opt-page_recycle").disabled &&
      !document.getElementById("tuning-exited").hidden && /Nothing to tune/.test(recs)
      ? recs : null;
  }), 5000).catch(() => null);
  check(closed !== null, "once the process is gone its tuning inputs are disabled, with a note, " +
    "and nothing is recommended");
  server.kill("SIGINT");
  await serverExit;
  const gone = await until("the page to notice the server went away", () => page.evaluate(() =>
    document.body.dataset.mode === "reconnecting" ? true : null)).catch(() => false);
  check(gone, "when the server stops the page shows 'reconnecting'",
    await page.evaluate(() => document.body.dataset.mode + ": " + document.getElementById("conn").textContent));
  const pageErrors = [];
  page.on("pageerror", (e) => pageErrors.push(String(e)));
  await page.locator("body").press("b");
  const down = await until("the baseline error", async () => {
    const t = (await page.isVisible("#notice")) ? await page.textContent("#notice") : "";
    return /^Baseline: memlive does not answer/.test(t) ? t : null;
  }).catch(() => null);
  check(down && pageErrors.length === 0, "key b while memlive is down shows an error (no unhandled rejection)", down || pageErrors.join("; "));
  // The reconnect countdown leaves the answer to the key readable (5 s), then takes the line back.
  const back = await until("the reconnect notice again", async () => {
    const t = (await page.isVisible("#notice")) ? await page.textContent("#notice") : "";
    return /^No new samples: .*Trying again in \d+ s\.$/.test(t) ? t : null;
  }, 20000).catch(() => null);
  check(back !== null, "then the reconnect countdown shows again", back);

  // 6. More threads than telemetry slots, then a program killed: the same workload with 4 slots
  // (3 threads and the overflow slot) for its 7 threads.
  server2 = spawn(memlive, ["run", "--port", "0", "--interval", "100", "--lib", lib, "--", workload],
    { stdio: ["pipe", "pipe", "pipe"], env: { ...process.env, LIVEALLOC_TELEMETRY_SLOTS: "4" } });
  let out2 = "";
  server2.stdout.on("data", (b) => { out2 += b; });
  server2.stderr.on("data", (b) => { out2 += b; });
  const port2 = await until("the second memlive run", () => {
    const m = /http:\/\/127\.0\.0\.1:(\d+)\//.exec(out2);
    return m && /ready \d+/.test(out2) ? Number(m[1]) : null;
  });
  const pid2 = Number(/ready (\d+)/.exec(out2)[1]);
  const overflowed = (await (await fetch("http://127.0.0.1:" + port2 + "/api/snapshot")).json()).process.overflow_threads;
  await page.goto("http://127.0.0.1:" + port2 + "/");
  await page.waitForFunction(() => document.body.dataset.mode === "live", null, { timeout: 20000 }).catch(() => {});
  const ov = await until("the overflow shown", () => page.evaluate(() => {
    const row = [...document.querySelectorAll("#threads tbody td.name")].find((td) => /^overflow slot/.test(td.textContent));
    const note = document.getElementById("threads-overflow").textContent;
    return row && note ? { row: row.textContent, note, header: document.getElementById("f-threads").textContent,
      exitedShown: document.getElementById("show-exited").checked } : null;
  })).catch(() => null);
  check(overflowed > 0 && ov && !ov.exitedShown && ov.note.startsWith("+" + overflowed + " thread") &&
    ov.header.endsWith("+ " + overflowed + " overflow") && ov.row === "overflow slot (" + overflowed + " threads)",
    "threads beyond the slots: the overflow count in the header and the threads card, and the overflow slot's row",
    JSON.stringify({ overflowed, ov }));
  process.kill(pid2, "SIGKILL");
  const ended = await until("the page to show the exit", () => page.evaluate(() =>
    document.body.dataset.mode === "exited" ? { uptime: document.getElementById("f-uptime").textContent,
      taken: document.body.dataset.takenNs, points: window.Chart.getChart("chart-live").data.datasets[0].data.length } : null)).catch(() => null);
  // The server keeps sending the last state: wait for two more samples on screen.
  let later = null;
  if (ended) {
    later = await until("two more samples", () => page.evaluate((t0) => {
      const taken = document.body.dataset.takenNs;
      if (taken === t0) return null;
      window.__seen = (window.__seen || new Set()).add(taken);
      return window.__seen.size >= 2 ? { uptime: document.getElementById("f-uptime").textContent,
        points: window.Chart.getChart("chart-live").data.datasets[0].data.length } : null;
    }, ended.taken)).catch(() => null);
  }
  const rowsAfter = await page.$$eval("#threads tbody tr", (trs) => trs.map((tr) => tr.children[2].dataset.value));
  check(ended && later && later.uptime === ended.uptime && later.points === ended.points &&
    (await page.textContent("#f-threads")) === "0" && rowsAfter.length > 0 && !rowsAfter.includes("alive"),
    "a killed program shows as gone: no live threads, uptime frozen, no new chart points",
    JSON.stringify({ ended, later, rowsAfter, threads: await page.textContent("#f-threads") }));
  // Its exported last state says what the page says: the threads running at the kill ended with
  // it, none alive (memlive's JSON said "alive" for them, and so did the page's CSV).
  const [dlEndJson] = await Promise.all([page.waitForEvent("download"), page.click("#export-json")]);
  const endJson = JSON.parse(fs.readFileSync(await dlEndJson.path(), "utf8"));
  const [dlEndCsv] = await Promise.all([page.waitForEvent("download"), page.click("#export-csv")]);
  const endCsv = new Set(fs.readFileSync(await dlEndCsv.path(), "utf8").split("\r\n").slice(1)
    .filter((l) => l).map((l) => l.split(",")[5]));
  const endJsonStates = new Set(endJson.threads.map((t) => t.state));
  check(endJson.alive === false && endJsonStates.has("ended") && !endJsonStates.has("alive") &&
    endCsv.has("ended") && !endCsv.has("alive"),
    "the killed program's exported JSON and CSV: its running threads ended, none alive",
    JSON.stringify({ alive: endJson.alive, json: [...endJsonStates], csv: [...endCsv] }));

  // 7. memlive inside the program (memlive::start()): its own threads (civetweb's, the history
  // sampler) allocate through livealloc and take slots next to the program's. The header counts
  // the program's live threads (main and app-0..2) and memlive's apart, as the table marks them
  // (it added them up: 46 live threads for a program of 21).
  {
    inapp = spawn(inappPath, [], { stdio: ["pipe", "pipe", "pipe"] });
    let out3 = "";
    inapp.stdout.on("data", (b) => { out3 += b; });
    inapp.stderr.on("data", (b) => { out3 += b; });
    const port3 = await until("the in-app workload", () => {
      const m = /ready \d+ (\d+)/.exec(out3);
      return m ? Number(m[1]) : null;
    });
    const base3 = "http://127.0.0.1:" + port3;
    await page.goto(base3 + "/");
    await page.waitForFunction(() => document.body.dataset.mode === "live", null,
      { timeout: 20000 }).catch(() => {});
    // memlive's count grows while idle civetweb workers take their first request: compare with a
    // snapshot until the two agree.
    let mine = 0, theirs = 0, marked = 0;
    const header = await until("the header to count the program's, memlive's apart", async () => {
      const snap3 = await (await fetch(base3 + "/api/snapshot")).json();
      const alive = snap3.threads.filter((t) => t.state === "alive");
      mine = alive.filter((t) => !t.memlive).length;
      theirs = alive.length - mine;
      const got = await page.evaluate(() => ({
        text: document.getElementById("f-threads").textContent,
        marked: [...document.querySelectorAll("#threads tbody td.name")].filter((td) =>
          td.textContent.endsWith(" [memlive]") &&
          td.parentNode.children[2].dataset.value === "alive").length }));
      marked = got.marked;
      const want = mine + " (+" + theirs + " memlive)";
      return got.text === want && marked === theirs ? got.text : null;
    }).catch(async () => "(got) " + await page.textContent("#f-threads"));
    check(mine === 4 && theirs > 0 && header === mine + " (+" + theirs + " memlive)",
      "memlive::start() in the program: the header shows its 4 live threads and memlive's " +
      theirs + " apart", JSON.stringify({ header, mine, theirs, marked }));
    inapp.stdin.end();
  }
  exitCode = failures ? 1 : 0;
} catch (e) {
  console.log("FAIL  " + (e && e.stack ? e.stack : e));
  console.log("memlive run said:\n" + serverOut);
  exitCode = 1;
} finally {
  if (ctx) await ctx.close().catch(() => {});
  if (userDir) fs.rmSync(userDir, { recursive: true, force: true });
  if (server2) server2.kill("SIGINT");
  if (inapp) inapp.kill("SIGTERM");
  server.stdin.end();
  server.kill("SIGINT");
  const done = await Promise.race([serverExit, new Promise((r) => setTimeout(() => r(null), 5000))]);
  if (!done) { server.kill("SIGKILL"); check(false, "memlive run stops on SIGINT"); exitCode = 1; }
}
console.log(failures ? failures + " check(s) failed" : exitCode ? "failed" : "all checks passed");
process.exit(exitCode);
