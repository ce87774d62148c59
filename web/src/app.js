// memlive's page: reads memlive.snapshot/1 objects (memlive/README.md) from /api/history and
// /api/stream, or from a file written by `memlive record`, and draws them. No framework: the
// only library is Chart.js (window.Chart), embedded in the binary with this file.
"use strict";
(() => {
  const $ = (id) => document.getElementById(id);

  // ---------------------------------------------------------------------------------------------
  // Formatting
  const intFormat = new Intl.NumberFormat("en-US");
  const oneDecimal = new Intl.NumberFormat("en-US", { maximumFractionDigits: 1, minimumFractionDigits: 1 });
  const fmtInt = (n) => intFormat.format(Math.round(n));
  // One decimal below 100 of the unit, whole numbers from 100 to 1023; a value that would round
  // to 1,024 of a unit is shown in the next one (1,048,575 B: "1.0 MiB", not "1,024 KiB").
  function fmtBytes(n) {
    const neg = n < 0;
    let v = Math.abs(n);
    if (v < 1024) return (neg ? "-" : "") + fmtInt(v) + " B";
    const units = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    let u = -1;
    while ((v >= 1024 || (u >= 0 && Math.round(v) >= 1024)) && u < units.length - 1) { v /= 1024; ++u; }
    return (neg ? "-" : "") + (v < 99.95 ? oneDecimal.format(v) : fmtInt(v)) + " " + units[u];
  }
  // A free matrix cell's key: slots are below 4,096. (A string "from>owner" per cell made the
  // matrix of a process whose threads come and go, hundreds of thousands of cells, slow to derive.)
  const cellKey = (m) => m.from * 4096 + m.owner;
  // The n items of largest score, largest first, without sorting them all (a heap of n).
  function largest(items, n, score) {
    const heap = []; // a min-heap of the best so far
    const less = (i, j) => score(heap[i]) < score(heap[j]);
    const swap = (i, j) => { const t = heap[i]; heap[i] = heap[j]; heap[j] = t; };
    for (const x of items) {
      if (heap.length === n) {
        if (score(x) <= score(heap[0])) continue;
        heap[0] = x;
        for (let i = 0; ;) { // sift down
          const l = 2 * i + 1, r = l + 1;
          let m = i;
          if (l < n && less(l, m)) m = l;
          if (r < n && less(r, m)) m = r;
          if (m === i) break;
          swap(i, m);
          i = m;
        }
      } else {
        heap.push(x);
        for (let i = heap.length - 1; i > 0 && less(i, (i - 1) >> 1); i = (i - 1) >> 1)
          swap(i, (i - 1) >> 1);
      }
    }
    return heap.sort((a, b) => score(b) - score(a));
  }
  function fmtDuration(ms) {
    if (ms < 0) ms = 0;
    const s = ms / 1000;
    if (s < 60) return (s < 10 ? oneDecimal.format(s) : fmtInt(Math.floor(s))) + " s";
    const m = Math.floor(s / 60);
    if (m < 60) return m + " min " + String(Math.floor(s % 60)).padStart(2, "0") + " s";
    const h = Math.floor(m / 60);
    return h + " h " + String(m % 60).padStart(2, "0") + " min";
  }
  const fmtSignedBytes = (n) => (n > 0 ? "+" : n < 0 ? "\u2212" : "") + fmtBytes(Math.abs(n));
  const fmtRate = (n) => (n >= 100 ? fmtInt(n) : oneDecimal.format(n));
  const fmtPercent = (x) => oneDecimal.format(100 * x) + " %";

  // ---------------------------------------------------------------------------------------------
  // The model: one snapshot turned into what the views need.
  const SCHEMA = "memlive.snapshot/1";
  let C = null; // counter name -> index in a class row (row[0] is the class)

  function checkSnapshot(s) {
    if (!s || typeof s !== "object") return "not a JSON object";
    if (s.schema !== SCHEMA) return "schema is " + JSON.stringify(s.schema) + ", expected " + SCHEMA;
    for (const k of ["counters", "class_sizes", "threads", "exited", "free_matrix", "options"])
      if (!Array.isArray(s[k])) return "field " + k + " is missing or not an array";
    if (!s.process || typeof s.process !== "object") return "field process is missing";
    return null;
  }

  function counterIndex(s) {
    const c = {};
    s.counters.forEach((name, i) => { c[name] = i + 1; });
    for (const k of ["allocs", "frees", "requested_bytes", "adopted", "large_freed_by_others",
      "handed_over", "peak_live", "reserved_blocks", "pages_taken", "pages_released",
      "pages_in_use", "pages_kept", "remote_sent"])
      if (!(k in c)) throw new Error("the snapshot has no counter " + k);
    return c;
  }

  // Live blocks of a class row, `c` its counter index. foreign_allocs (absent from older
  // allocators): allocations served with another thread's block, which stays live in its owner.
  const liveOf = (r, c) => r[c.allocs] + r[c.adopted] - r[c.frees] - r[c.large_freed_by_others] - r[c.handed_over] -
    (c.foreign_allocs ? r[c.foreign_allocs] : 0);
  const rowLive = (r) => liveOf(r, C);
  const threadKey = (t) => t.slot + ":" + t.incarnation + ":" + t.tid;
  // memlive writes "ended" for a thread that was still running when its process ended; a
  // recording made by an older memlive says "alive" there, with the process's "alive": false.
  const threadState = (s, t) => (t.state === "alive" && s.alive === false ? "ended" : t.state);

  // Turns a snapshot into per-class and per-thread figures. `prev` (the previous derived sample
  // of the same process, or null) gives rates.
  function derive(s, prev) {
    C = counterIndex(s);
    const sizes = s.class_sizes;
    const units = Array.isArray(s.class_units) ? s.class_units : []; // absent from older memlive
    const n = sizes.length;
    const cls = [];
    for (let c = 0; c < n; ++c)
      cls.push({ cls: c, size: sizes[c], units: units[c] || 0, liveBlocks: 0, live: 0, peak: 0,
        free: 0, allocs: 0, freed: 0,
        requested: 0, taken: 0, released: 0, kept: 0, inUse: 0, reserved: 0, threads: 0, maxPeak: 0, frag: null });
    const add = (r) => {
      const k = cls[r[0]];
      if (!k) return;
      k.liveBlocks += rowLive(r);
      k.allocs += r[C.allocs];
      k.freed += r[C.frees] + r[C.large_freed_by_others];  // blocks freed, whoever freed them
      k.requested += r[C.requested_bytes];
      k.taken += r[C.pages_taken];
      k.released += r[C.pages_released];
    };
    const threads = [];
    for (const t of s.threads) {
      const state = threadState(s, t);
      let live = 0, allocs = 0, frees = 0, remote = 0, large = 0;
      const cells = new Map();
      for (const r of t.classes) {
        const c = r[0];
        const k = cls[c];
        if (!k) continue;
        add(r);
        const lb = rowLive(r);
        if (c === 0) large += lb; else live += lb * k.size;
        allocs += r[C.allocs];
        frees += r[C.frees];
        remote += r[C.remote_sent];
        k.peak += r[C.peak_live] * k.size;
        k.kept += r[C.pages_kept];
        k.inUse += r[C.pages_in_use];
        k.reserved += r[C.reserved_blocks];
        if (c > 0) k.free += Math.max(0, r[C.reserved_blocks] - Math.max(0, lb)) * k.size;
        if (r[C.allocs] > 0 && (state === "alive" || state === "ended")) { // running at the sample
          k.threads += 1;
          k.maxPeak = Math.max(k.maxPeak, r[C.peak_live]);
        }
        cells.set(c, { live: c === 0 ? 0 : lb * k.size, liveBlocks: lb, allocs: r[C.allocs],
          peak: r[C.peak_live] });
      }
      // The overflow slot is shared by the threads that found no slot of their own.
      const overflow = t.state === "overflow", shared = overflow ? s.process.overflow_threads || 0 : 0;
      threads.push({ key: threadKey(t), slot: t.slot, tid: t.tid, overflow, shared,
        name: overflow ? "overflow slot (" + fmtInt(shared) + " threads)" : t.name || "(unnamed)",
        state, memlive: t.memlive === true,
        live, large, allocs, frees, remote, cells, applied: t.applied_generation, rate: 0, raw: t });
    }
    for (const r of s.exited) add(r);
    // Large blocks differ in size and a thread's row counts them: its live bytes of them are
    // estimated at the process's mean live large block (the heat map marks them so).
    const largeClass = cls[0];
    const meanLarge = largeClass && largeClass.liveBlocks > 0
      ? (s.process.large_bytes || 0) / largeClass.liveBlocks : 0;
    for (const x of threads) {
      const cell = x.cells.get(0);
      if (cell) { cell.live = Math.max(0, cell.liveBlocks) * meanLarge; cell.estimated = true; }
      // What the table sorts by and the chart draws for a thread: a thread holding 578 MiB of
      // large blocks and 16 KiB of small ones was last by live, and a flat line. (Not under a
      // baseline, whose large blocks are a change and large_bytes what they are now.)
      x.liveEst = x.live + (cell && !(s.baseline_taken_ns > 0) ? cell.live : 0);
    }
    for (const k of cls) {
      if (k.cls === 0) {
        k.live = s.process.large_bytes || 0;
        k.peak = Math.max(k.peak, k.live);
      } else {
        k.live = k.liveBlocks * k.size;
        k.peak = Math.max(k.peak, k.live);
        const usable = k.allocs * k.size;
        k.frag = usable > 0 ? Math.max(0, 1 - k.requested / usable) : null;
      }
    }
    const t = s.taken_ns / 1e6; // ms
    const dt = prev ? (t - prev.t) / 1000 : 0;
    if (prev && dt > 0) {
      const before = new Map(prev.threads.map((x) => [x.key, x]));
      for (const x of threads) {
        const p = before.get(x.key);
        if (!p) continue;
        x.rate = Math.max(0, x.allocs - p.allocs) / dt;
        for (const [c, cell] of x.cells) {
          const pc = p.cells.get(c);
          cell.rate = pc ? Math.max(0, cell.allocs - pc.allocs) / dt : 0;
        }
      }
    }
    const bySlot = new Map(threads.map((x) => [x.slot, x]));
    const matrix = s.free_matrix.map(([from, owner, blocks]) => ({ from, owner, blocks, rate: 0 }));
    if (prev && dt > 0) {
      const pm = new Map(prev.matrix.map((m) => [cellKey(m), m.blocks]));
      for (const m of matrix) {
        const b = pm.get(cellKey(m));
        if (b !== undefined) m.rate = Math.max(0, m.blocks - b) / dt;
      }
    }
    // "free in spans": blocks the threads' spans hold ready and unused; not the process's
    // cached_bytes (large and segment caches), which the header shows as "cached".
    let free = 0;
    for (const k of cls) free += k.free;
    return { s, t, uptime: (s.taken_ns - s.start_ns) / 1e6, classes: cls, threads, bySlot, matrix,
      live: s.process.live_bytes, free,
      aliveThreads: threads.filter((x) => x.state === "alive" && !x.memlive).length,
      aliveMemlive: threads.filter((x) => x.state === "alive" && x.memlive).length };
  }

  // ---------------------------------------------------------------------------------------------
  // State
  const state = {
    mode: "connecting", // live | paused | reconnecting | exited | replay | connecting
    interval: 0,          // stream interval in ms; 0: the server's (memlive --interval)
    current: null,        // derived sample on screen (live or replayed)
    last: null,           // last derived live sample (rates)
    sinceBaseline: null,  // derived ?since=baseline sample while the baseline is on
    baseline: false,
    baselineTaken: 0,
    baselineBusy: false,  // a POST /api/baseline in flight (a second press waits for it)
    needHistory: false,   // load /api/history once the first stream sample is drawn
    selection: null,      // {kind: "thread"|"class", key, label}
    logScale: false,      // the chart's y axis logarithmic (a small class beside a large total)
    series: [],           // compact samples for the chart: {x, total, threads: Map, classes: []}
    classPeaks: [],       // by class, the most live bytes seen in the samples of this process
    epoch: 0,             // bumped whenever series is replaced rather than extended
    pid: null,
    startNs: null,        // start_ns of the process charted (with pid: a new image after exec)
    pending: new Map(),   // option name -> {value, generation, posted}
    replay: null,         // {samples, pos, timer}
    rateBases: [],        // of the live samples of the last RATE_MS and one before, what rates need
    sort: { classes: { key: "live", dir: -1 }, threads: { key: "live", dir: -1 } },
    dirty: false,
  };
  const MAX_POINTS = 3000;
  // Where the time goes, per section (ms, cumulative), for web/tests/perf.mjs and the console.
  const stats = { renders: 0, tableRenders: 0, totalMs: 0, maxMs: 0, last: [], sections: {}, events: 0, samples: 0 };
  window.memliveStats = stats;

  function compact(d) {
    const threads = new Map();
    for (const x of d.threads) threads.set(x.key, x.liveEst);
    return { x: d.uptime / 1000, t: d.t, pid: d.s.pid, dead: d.s.alive === false, gen: d.s.control ? d.s.control.generation : 0,
      total: d.live, threads, classes: d.classes.map((k) => k.live),
      cls: d.classes.map((k) => [k.taken, k.released, k.kept, k.inUse, k.reserved, k.threads, k.liveBlocks]),
      large: d.s.process.large_bytes || 0, mmaps: d.s.process.mmap_calls || 0,
      largeFreed: d.classes[0] ? d.classes[0].freed : 0 };
  }

  // Appends point p to a series unless it is not newer than the last one (history and stream
  // overlap) or repeats the state of a process that exited (the server keeps sending its last
  // state: one point marks the end, the rest would draw a flat line as if it still ran).
  function appendPoint(series, p) {
    const last = series[series.length - 1];
    if (last && (p.t <= last.t || (p.dead && last.dead))) return;
    series.push(p);
  }
  // One process is one pid and one start: a program that calls exec keeps its pid, and its new
  // image's counters and uptime start again from zero (memlive/README.md, "memlive run"). Taken
  // for the same process, its samples went on the old image's chart line, back to uptime 0.
  const sameProcess = (a, b) => a.pid === b.pid && a.start_ns === b.start_ns;
  function pushSample(d) {
    const charted = { pid: state.pid, start_ns: state.startNs };
    if (state.pid !== null && !sameProcess(d.s, charted)) newProcess();
    state.pid = d.s.pid;
    state.startNs = d.s.start_ns;
    const p = compact(d);
    appendPoint(state.series, p);
    notePeaks(p);
    // Past MAX_POINTS the older half is thinned to every other point rather than dropped: the
    // chart keeps the whole run (at 80 ms it showed the last 4 minutes only, and a slow leak's
    // start was gone), at a resolution that halves with age; the newer half keeps every sample.
    if (state.series.length > MAX_POINTS) {
      const half = state.series.length >> 1;
      state.series = state.series.slice(0, half).filter((_, i) => i % 2 === 0)
        .concat(state.series.slice(half));
      state.epoch += 1; // the chart is drawn again from it
    }
  }
  // The most live bytes of each class this page has seen of the process (its history and
  // stream): the threads' peak_live counters are taken at their slow paths, drop with the threads
  // that exit, and do not count a large block's size, so a class's "peak" read below what it
  // had shown live (578 MiB of large blocks freed: peak 0 B).
  function notePeaks(p) {
    const m = state.classPeaks;
    p.classes.forEach((v, c) => { if (!(m[c] >= v)) m[c] = v; });
  }
  // Another process behind the same server (memlive restarted on the port), or a new image of
  // the same one (exec): nothing of the old one applies.
  function newProcess() {
    state.series = [];
    state.classPeaks = [];
    state.epoch += 1;
    // A thread of the process before (tid, slot) is none of this one's.
    if (state.selection && state.selection.kind === "thread") select(null, null, null);
    state.pending.clear();
    for (const row of optionRows.values()) { setMsg(row, "", ""); row.input.removeAttribute("aria-invalid"); }
  }

  // ---------------------------------------------------------------------------------------------
  // Connection
  function setMode(m, detail) {
    state.mode = m;
    const text = { live: "live", paused: "paused", reconnecting: "reconnecting…", exited: "process exited",
      replay: "replay", connecting: "connecting…" }[m] || m;
    $("conn").textContent = detail ? text + " (" + detail + ")" : text;
    $("conn-dot").className = "dot " + m;
    document.body.dataset.mode = m;
    // Tuning acts on the live process: not during a replay, nor once the process is gone.
    const off = m === "replay" || m === "exited";
    for (const row of optionRows.values()) row.input.disabled = row.fixed || off;
    $("tuning-replay").hidden = m !== "replay";
    $("tuning-exited").hidden = m !== "exited";
    $("interval").disabled = m === "replay"; // the stream's: a replay has its own pace
  }

  let noticeShownAt = 0;
  // `source` names what the notice is about, so that it is cleared only by that ("stream": the
  // connection, cleared by the next sample).
  function showNotice(text, source) {
    const n = $("notice");
    n.textContent = text || "";
    n.hidden = !text;
    n.dataset.source = text ? source || "" : "";
    noticeShownAt = performance.now();
  }
  // The connection's notices (a reconnect and its countdown) come every second while memlive is
  // down; the answer to something the user did (a key, a file) stays readable 5 s before they
  // replace it. The header's connection state says "reconnecting" meanwhile.
  function streamMayNotify() {
    const n = $("notice");
    return n.hidden || n.dataset.source === "stream" || performance.now() - noticeShownAt >= 5000;
  }
  function showStreamNotice(text) {
    if (streamMayNotify()) showNotice(text, "stream");
  }

  function acceptLive(s, raw) {
    const err = checkSnapshot(s);
    if (err) { showNotice("The server sent an unexpected snapshot: " + err); return; }
    let d;
    const t0 = performance.now();
    try { d = derive(s, rateBase(s)); }
    catch (e) { showNotice("Cannot read the snapshot: " + e.message); return; }
    d.raw = raw;
    state.last = d;
    state.rateBases.push({ s: { pid: s.pid, start_ns: s.start_ns }, t: d.t, matrix: d.matrix,
      threads: d.threads.map((x) => ({ key: x.key, allocs: x.allocs, cells: x.cells })) });
    const series = state.series, before = series[series.length - 1];
    const step = series.length > 1 ? before.t - series[series.length - 2].t : 0;
    pushSample(d);
    stats.sections.derive = (stats.sections.derive || 0) + performance.now() - t0;
    if (state.needHistory) {
      state.needHistory = false;
      loadHistory(raw.length).catch((e) => showNotice("The history could not be loaded: " + e.message));
    } else if (before && state.series === series && d.t - before.t > Math.max(GAP_MS, 3 * step)) {
      // Samples were missed (a hidden tab draws no frames, a busy one few): fill the gap from the
      // server's history rather than draw a straight line across it.
      loadHistory(raw.length, (d.t - before.t) / 1000)
        .catch((e) => showNotice("The history could not be loaded: " + e.message));
    }
    if (state.mode === "paused" || state.mode === "replay") return;
    state.current = d;
    if (stream.ctl) setMode(s.alive === false ? "exited" : "live"); // not when it came before a failure
    syncBaseline(false);
    scheduleData();
  }

  // Rates (allocations/s, blocks/s) are taken over at least RATE_MS: between one sample 80 ms
  // after another, a thread's count moves by a few allocations or none, and its rate would jump
  // between 0 and thousands. The base is the newest sample of the process RATE_MS older than `s`
  // (the oldest one kept until there is one).
  const RATE_MS = 1000;
  function rateBase(s) {
    const bases = state.rateBases;
    if (bases.length && !sameProcess(bases[bases.length - 1].s, s)) bases.length = 0;
    const t = s.taken_ns / 1e6;
    while (bases.length > 1 && t - bases[1].t >= RATE_MS) bases.shift();
    return bases.length ? bases[0] : null;
  }
  // A step between two drawn samples longer than this (and than 3 of the step before) is a gap.
  const GAP_MS = 1500;

  // Fetched after the first stream sample is drawn (and for a gap of `gapSeconds` between two
  // samples), and no more of it than about 12 MB of JSON: the server keeps up to 150 s at up to 4
  // samples a second, which for 300 threads (360 KB a sample) is 200 MB to parse and derive. The
  // chart then shows the history before the stream.
  const HISTORY_BYTES = 12e6;
  async function loadHistory(sampleBytes, gapSeconds) {
    const budget = Math.floor(HISTORY_BYTES / (4 * Math.max(1, sampleBytes)));
    const want = gapSeconds ? Math.ceil(gapSeconds) + 1 : 150;
    const seconds = Math.max(1, Math.min(150, budget, want));
    const r = await fetch("/api/history?seconds=" + seconds);
    if (!r.ok) throw new Error("GET /api/history: HTTP " + r.status);
    const samples = await r.json();
    if (state.mode === "replay" || !Array.isArray(samples)) return;
    const points = [];
    for (const s of samples)
      if (!checkSnapshot(s) && sameProcess(s, { pid: state.pid, start_ns: state.startNs }))
        points.push(compact(derive(s, null)));
    for (const p of points) notePeaks(p);
    const merged = [];
    for (const p of points.concat(state.series).sort((a, b) => a.t - b.t)) appendPoint(merged, p);
    state.series = merged.slice(-MAX_POINTS);
    state.epoch += 1;
    scheduleData();
  }

  // The stream is read with fetch, not EventSource: EventSource gives up for good on an answer
  // other than 200 (the server's 503 when 16 streams are open) without saying why. Only the
  // newest event is kept (stream.raw, its JSON text): it is parsed and derived when the page
  // draws, so events that arrive faster than the page can draw them (300 threads: 360 KB each,
  // 12 a second) are dropped unparsed instead of piling up. Rates do not suffer: they come from
  // the taken_ns of the samples that were drawn.
  const stream = { ctl: null, raw: null, retry: 0, failures: 0, tick: 0, retryAt: 0, why: "" };
  function openStream() {
    closeStream();
    const ctl = new AbortController();
    stream.ctl = ctl;
    readStream(ctl).catch((e) => streamFailed(ctl, "the stream broke: " + e.message));
  }
  function closeStream() {
    if (stream.ctl) { const ctl = stream.ctl; stream.ctl = null; ctl.abort(); }
    clearTimeout(stream.retry);
    clearInterval(stream.tick);
    stream.retry = 0;
    stream.tick = 0;
    stream.raw = null;
  }
  async function readStream(ctl) {
    let r;
    try {
      r = await fetch(state.interval ? "/api/stream?interval_ms=" + state.interval : "/api/stream",
        { signal: ctl.signal, cache: "no-store" });
    } catch (e) { return streamFailed(ctl, "cannot reach memlive"); }
    if (!r.ok) {
      let why = "HTTP " + r.status;
      try { const j = await r.json(); if (j && j.error) why = j.error; } catch (e) { /* not JSON */ }
      const after = Number(r.headers.get("Retry-After"));
      return streamFailed(ctl, (r.status === 503 ? "the server has too many viewers: " : "") + why, after > 0 ? after * 1000 : 0);
    }
    const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
    let buf = "";
    for (;;) {
      let chunk;
      try { chunk = await reader.read(); } catch (e) { return streamFailed(ctl, "the connection to memlive was lost"); }
      if (stream.ctl !== ctl) return;
      if (chunk.done) return streamFailed(ctl, "the server closed the stream");
      const from = Math.max(0, buf.length - 1); // an event's end may straddle two chunks
      buf += chunk.value;
      // Only the new text can end an event: a large event arrives in many chunks, and searching
      // the whole buffer at each was quadratic in its size.
      if (buf.indexOf("\n\n", from) < 0) continue;
      const end = buf.lastIndexOf("\n\n");
      const events = buf.slice(0, end).split("\n\n");
      buf = buf.slice(end + 2);
      for (const e of events) if (e.startsWith("data:")) stats.events += 1; // drawn: stats.samples
      for (let k = events.length - 1; k >= 0; --k) {
        const ev = sseEvent(events[k]);
        if (!ev) continue; // a comment (the server's heartbeat)
        if (ev.type === "error") {
          let why = ev.data;
          try { why = JSON.parse(ev.data).error || why; } catch (e) { /* keep the text */ }
          showStreamNotice("The server: " + why);
        } else {
          stream.raw = ev.data;
          if (stream.failures) { stream.failures = 0; if ($("notice").dataset.source === "stream") showNotice(""); }
          requestFrame();
        }
        break; // older events in this batch are superseded
      }
    }
  }
  // One Server-Sent Event's type and data (its data lines joined), or null for a comment.
  function sseEvent(text) {
    let type = "message", data = null;
    for (const line of text.split("\n")) {
      if (line.startsWith("data:")) {
        const v = line.slice(line[5] === " " ? 6 : 5);
        data = data === null ? v : data + "\n" + v;
      } else if (line.startsWith("event:")) type = line.slice(6).trim();
    }
    return data === null ? null : { type, data };
  }
  // Any end of the stream but closeStream's: say why and try again, after the server's
  // Retry-After or 1, 2, 4 ... 30 s.
  function streamFailed(ctl, why, afterMs) {
    if (stream.ctl !== ctl) return; // closed on purpose (pause, interval, replay)
    stream.ctl = null;
    stream.failures += 1;
    const wait = afterMs || Math.min(30000, 1000 * 2 ** Math.min(5, stream.failures - 1));
    setMode("reconnecting", why);
    stream.why = why;
    stream.retryAt = performance.now() + wait;
    showStreamNotice("No new samples: " + why + ". Trying again in " + fmtInt(wait / 1000) + " s.");
    clearInterval(stream.tick);
    stream.tick = setInterval(countDown, 1000); // the notice counts the seconds down
    stream.retry = setTimeout(() => {
      stream.retry = 0;
      clearInterval(stream.tick);
      stream.tick = 0;
      if (state.mode === "reconnecting") openStream();
    }, wait);
  }
  function countDown() {
    if (state.mode !== "reconnecting") return;
    const left = Math.max(1, Math.ceil((stream.retryAt - performance.now()) / 1000));
    showStreamNotice("No new samples: " + stream.why + ". Trying again in " + fmtInt(left) + " s.");
  }
  function takeSample() {
    const raw = stream.raw;
    stream.raw = null;
    let s;
    const t0 = performance.now();
    try { s = JSON.parse(raw); } catch (e) { showNotice("A stream event is not JSON: " + e.message); return; }
    stats.sections.parse = (stats.sections.parse || 0) + performance.now() - t0;
    stats.samples += 1;
    acceptLive(s, raw);
  }

  function goLive() {
    setMode("connecting");
    showNotice("");
    state.needHistory = true;
    openStream();
    syncBaseline(true);
  }

  // ---------------------------------------------------------------------------------------------
  // Pause, baseline, interval
  $("pause").addEventListener("click", togglePause);
  // Paused, the page reads no samples, and said "paused" while the process ended: /healthz,
  // every 2 s, tells it so.
  let pausedWatch = null;
  function watchWhilePaused(on) {
    clearInterval(pausedWatch);
    pausedWatch = !on ? null : setInterval(async () => {
      try {
        const h = await (await fetch("/healthz")).json();
        if (state.mode === "paused" && h.alive === false)
          setMode("paused", "the process has exited: Resume shows its end");
      } catch (e) { /* the server is gone: Resume says so */ }
    }, 2000);
  }
  function togglePause() {
    if (state.mode === "replay") return;
    if (state.mode === "paused") {
      watchWhilePaused(false);
      $("pause").textContent = "Pause";
      $("pause").setAttribute("aria-pressed", "false");
      goLive();
    } else {
      closeStream();
      setMode("paused");
      watchWhilePaused(true);
      $("pause").textContent = "Resume";
      $("pause").setAttribute("aria-pressed", "true");
    }
  }

  const postJSON = (path, body) => postText(path, JSON.stringify(body));
  async function postText(path, body) {
    const r = await fetch(path, { method: "POST", headers: { "Content-Type": "application/json" }, body });
    let j = null;
    try { j = await r.json(); } catch (e) { j = null; }
    return { status: r.status, ok: r.ok, body: j };
  }

  $("baseline").addEventListener("click", toggleBaseline);
  async function toggleBaseline() {
    if (state.mode === "replay" || state.baselineBusy) return; // a second press waits for the first
    state.baselineBusy = true;
    $("baseline").setAttribute("aria-busy", "true");
    try {
      // No answer of GET /api/baseline or ?since=baseline older than the POST may be shown
      // after it: let the one in flight finish (none starts while busy).
      await sinceDone;
      const clearing = state.baseline;
      if (!clearing) {
        // The page asks the server at most once a second while it has no baseline: another
        // client may have set one since. Show that one rather than replace it unseen.
        const j = await getBaseline().catch(() => null);
        if (j && j.baseline) {
          setBaseline(true, j.taken_ns);
          showNotice("Baseline: another client set it at " + clockTime(j.taken_ns) +
            "; b again clears it");
          await fetchSince();
          schedule();
          return;
        }
      }
      let r;
      try { r = await postJSON("/api/baseline", clearing ? { clear: true } : {}); }
      catch (e) { r = { ok: false, body: { error: "memlive does not answer (" + e.message + ")" } }; }
      if (!r.ok) {
        showNotice("Baseline: " + ((r.body && r.body.error) || "HTTP " + r.status));
        return;
      }
      if ($("notice").textContent.startsWith("Baseline: ")) showNotice("");
      setBaseline(r.body.baseline, r.body.taken_ns);
      if (state.baseline) await fetchSince();
      schedule();
    } finally {
      state.baselineBusy = false;
      $("baseline").removeAttribute("aria-busy");
    }
  }
  function setBaseline(on, taken) {
    state.baseline = !!on;
    state.baselineTaken = taken || 0;
    if (!state.baseline) state.sinceBaseline = null;
    $("baseline").setAttribute("aria-pressed", String(state.baseline));
    $("baseline").textContent = state.baseline ? "Baseline: on (change since " +
      clockTime(state.baselineTaken) + ")" : "Baseline: off";
  }
  const clockTime = (ns) => new Date(ns / 1e6).toLocaleTimeString();
  async function getBaseline() {
    const r = await fetch("/api/baseline", { cache: "no-store" });
    if (!r.ok) throw new Error("HTTP " + r.status);
    return r.json();
  }
  // The server keeps one baseline for all its clients, and another tab or a script may set or
  // clear it at any time; the stream does not say so. While the page has a baseline, each live
  // sample's ?since=baseline request says it: with if_none=plain, a baseline cleared elsewhere
  // is answered with the plain snapshot and baseline_taken_ns 0 (not a 409, which the browser
  // logs as an error), and a newer one by its own taken_ns. While it has none, the page asks
  // GET /api/baseline (a few bytes) once a second, so that one set elsewhere shows (and `b`
  // clears it, rather than replacing it).
  let sinceInFlight = false;
  let sinceDone = Promise.resolve();  // settles when the baseline requests in flight end
  let baselineAskedAt = -Infinity;    // performance.now() of the last GET /api/baseline
  const BASELINE_POLL_MS = 1000;
  function syncBaseline(now) {
    if (sinceInFlight || state.baselineBusy || state.mode === "replay") return sinceDone;
    const recent = performance.now() - baselineAskedAt < BASELINE_POLL_MS;
    if (!now && !state.baseline && recent) return sinceDone;
    sinceInFlight = true;
    sinceDone = syncBaselineOnce();
    return sinceDone;
  }
  async function syncBaselineOnce() {
    try {
      if (state.baseline) { await fetchSinceOnce(); return; }
      baselineAskedAt = performance.now();
      const j = await getBaseline();
      if (state.baselineBusy || state.mode === "replay") return; // the press decides
      if (!!j.baseline !== state.baseline || (j.baseline && j.taken_ns !== state.baselineTaken)) {
        setBaseline(j.baseline, j.taken_ns);
        scheduleData();
      }
      if (state.baseline) await fetchSinceOnce();
    } catch (e) { /* the stream reports the connection */ }
    finally { sinceInFlight = false; }
  }
  function fetchSince() {
    if (sinceInFlight) return sinceDone;
    sinceInFlight = true;
    sinceDone = fetchSinceOnce().finally(() => { sinceInFlight = false; });
    return sinceDone;
  }
  async function fetchSinceOnce() {
    try {
      // if_none=plain: a baseline another client cleared is no 409 (which the browser logs as
      // an error) but the plain snapshot, with baseline_taken_ns 0.
      const r = await fetch("/api/snapshot?since=baseline&if_none=plain");
      if (!r.ok) return;
      const raw = await r.text();
      const s = JSON.parse(raw);
      if (checkSnapshot(s) || !state.baseline) return;
      if (!s.baseline_taken_ns) { // another client cleared it
        setBaseline(false, 0);
        scheduleData();
        return;
      }
      // The server keeps one baseline for all its clients: another tab (or a script) may have
      // set a newer one, which these numbers are since. The button and the chart's line must say
      // so (they kept the time this page set).
      if (s.baseline_taken_ns !== state.baselineTaken) setBaseline(true, s.baseline_taken_ns);
      // Rates come from consecutive live samples: the change since the baseline grows at the
      // same rate as the totals.
      state.sinceBaseline = derive(s, null);
      state.sinceBaseline.raw = raw; // what the exports write under a baseline
      if (state.last) copyRates(state.last, state.sinceBaseline);
      if (state.last) copyFree(state.last, state.sinceBaseline);
      scheduleData();
    } catch (e) { /* the stream's error handler reports the connection */ }
  }

  // Free blocks in spans are reserved blocks (a gauge, the current value) less live ones (a
  // change, since the baseline): the live sample's figure is the one that means something.
  function copyFree(from, to) {
    for (const k of to.classes) k.free = from.classes[k.cls] ? from.classes[k.cls].free : 0;
    to.free = from.free;
  }
  function copyRates(from, to) {
    const threads = new Map(from.threads.map((x) => [x.key, x]));
    for (const x of to.threads) {
      const f = threads.get(x.key);
      if (!f) continue;
      x.rate = f.rate;
      for (const [c, cell] of x.cells) { const fc = f.cells.get(c); cell.rate = fc ? fc.rate : 0; }
    }
    const matrix = new Map(from.matrix.map((m) => [cellKey(m), m.rate]));
    for (const m of to.matrix) m.rate = matrix.get(cellKey(m)) || 0;
  }

  $("interval").addEventListener("change", () => {
    state.interval = Number($("interval").value);
    try { localStorage.setItem("memlive.interval", String(state.interval)); } catch (e) { /* private mode */ }
    if (state.mode !== "paused" && state.mode !== "replay") openStream();
  });

  // ---------------------------------------------------------------------------------------------
  // Export
  function download(name, type, text) {
    const url = URL.createObjectURL(new Blob([text], { type }));
    const a = document.createElement("a");
    a.href = url;
    a.download = name;
    document.body.appendChild(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 1000);
  }
  // taken_ns and start_ns are nanoseconds since the epoch, above 2^53: a JavaScript number
  // loses their last digits, so exports copy them from the sample's JSON text as received.
  const rawNs = (d, name) => {
    const m = d.raw && new RegExp('"' + name + '":(\\d+)').exec(d.raw);
    return m ? m[1] : String(d.s[name]);
  };
  // Under a baseline the exports write what the tables show, the change since it (the JSON of
  // GET /api/snapshot?since=baseline, with its baseline_taken_ns), and say so in the file's name.
  const exported = () => (state.baseline && state.sinceBaseline && state.mode !== "replay"
    ? state.sinceBaseline : state.current);
  const exportName = (d, ext) => "memlive-" + d.s.pid + "-" + rawNs(d, "taken_ns") +
    (d === state.sinceBaseline ? "-since-baseline" : "") + "." + ext;
  $("export-json").addEventListener("click", () => {
    const d = exported();
    if (!d) return showNotice("Nothing to export yet.");
    download(exportName(d, "json"), "application/json", (d.raw || JSON.stringify(d.s)) + "\n");
  });
  function csvField(v) {
    const s = String(v);
    return /[",\r\n]/.test(s) ? '"' + s.replace(/"/g, '""') + '"' : s;
  }
  // The same columns as `memlive snapshot --format csv` (memlive/README.md), whose `live` is at
  // least 0 in every row (a thread of the capture hooks that freed more than it allocated); a
  // change since the baseline keeps its sign.
  function toCSV(d) {
    const s = d.s;
    const floor = d === state.sinceBaseline ? -Infinity : 0;
    const taken = rawNs(d, "taken_ns");
    const idx = counterIndex(s);
    const lines = [["taken_ns", "pid", "slot", "tid", "thread", "state", "class", "size", ...s.counters, "live"].join(",")];
    for (const t of s.threads)
      for (const r of t.classes)
        lines.push([taken, s.pid, t.slot, t.tid, csvField(t.name), threadState(s, t), r[0], s.class_sizes[r[0]],
          ...r.slice(1), Math.max(floor, liveOf(r, idx))].join(","));
    for (const r of s.exited)
      lines.push([taken, s.pid, "exited", 0, "", "exited_totals", r[0], s.class_sizes[r[0]], ...r.slice(1),
        Math.max(floor, liveOf(r, idx))].join(","));
    return lines.join("\r\n") + "\r\n";
  }
  $("export-csv").addEventListener("click", () => {
    const d = exported();
    if (!d) return showNotice("Nothing to export yet.");
    download(exportName(d, "csv"), "text/csv", toCSV(d));
  });

  // ---------------------------------------------------------------------------------------------
  // Replay of a `memlive record` file: one snapshot per line.
  const REPLAY_MAX_BYTES = 256 * 1024 * 1024;
  $("replay-file").addEventListener("change", async (ev) => {
    const f = ev.target.files && ev.target.files[0];
    ev.target.value = "";
    if (!f) return;
    // The page holds about four times the file (its lines, parsed and derived): past this, the
    // tab runs out of memory, or Chromium cannot even read the file (NotReadableError).
    if (f.size > REPLAY_MAX_BYTES)
      return showNotice(f.name + " is " + fmtBytes(f.size) + ": the page replays files of up to " +
        fmtBytes(REPLAY_MAX_BYTES) + ". Replay a part of it (head -n 1000 " + f.name +
        " > part.jsonl) or record with a longer --interval; nothing loaded");
    let text;
    try { text = await f.text(); } catch (e) {
      return showNotice(f.name + ": cannot read it (" + e.message + "); nothing loaded");
    }
    const samples = [];
    const lines = text.split(/\r?\n/);
    for (let i = 0; i < lines.length; ++i) {
      const line = lines[i].trim();
      if (!line) continue;
      let s;
      try { s = JSON.parse(line); } catch (e) {
        return showNotice(f.name + ", line " + (i + 1) + ": not JSON (" + e.message + "); nothing loaded");
      }
      const err = checkSnapshot(s);
      if (err) return showNotice(f.name + ", line " + (i + 1) + ": " + err + "; nothing loaded");
      samples.push({ s, raw: line, line: i + 1 });
    }
    if (!samples.length) return showNotice(f.name + " holds no samples; nothing loaded");
    startReplay(f.name, samples);
  });

  // Derives every sample before anything changes: a line that cannot be read (no counter
  // "allocs", a thread without classes) is refused with its number and leaves the page as it was
  // (it threw half-way, after the stream had been closed: the page froze without a word).
  function startReplay(name, raw) {
    let prev = null;
    const samples = [];
    for (const { s, raw: text, line } of raw) {
      try { prev = derive(s, prev && sameProcess(prev.s, s) ? prev : null); }
      catch (e) {
        return showNotice(name + ", line " + line + ": cannot read it (" + e.message +
          "); nothing loaded");
      }
      prev.raw = text;
      samples.push(prev);
    }
    closeStream();
    stopReplayTimer();
    showNotice("");
    state.series = [];
    state.classPeaks = [];
    state.epoch += 1;
    state.pid = null;
    for (const d of samples) pushSample(d);
    state.replay = { name, samples, pos: samples.length - 1, timer: null };
    $("replay-controls").hidden = false;
    const pos = $("replay-pos");
    pos.max = String(samples.length - 1);
    pos.value = String(samples.length - 1);
    setMode("replay", name);
    for (const id of ["pause", "baseline"]) $(id).disabled = true;
    showReplay(samples.length - 1);
  }
  function showReplay(i) {
    const r = state.replay;
    r.pos = i;
    $("replay-pos").value = String(i);
    $("replay-info").textContent = (i + 1) + " / " + r.samples.length;
    state.current = r.samples[i];
    schedule();
  }
  function stopReplayTimer() {
    if (state.replay && state.replay.timer) { clearTimeout(state.replay.timer); state.replay.timer = null; }
    $("replay-play").textContent = "Play";
  }
  $("replay-pos").addEventListener("input", () => { stopReplayTimer(); showReplay(Number($("replay-pos").value)); });
  $("replay-play").addEventListener("click", () => {
    const r = state.replay;
    if (!r) return;
    if (r.timer) return stopReplayTimer();
    if (r.pos >= r.samples.length - 1) showReplay(0);
    $("replay-play").textContent = "Stop";
    const step = () => {
      if (r.pos >= r.samples.length - 1) return stopReplayTimer();
      const wait = Math.min(2000, Math.max(0, r.samples[r.pos + 1].t - r.samples[r.pos].t));
      r.timer = setTimeout(() => { showReplay(r.pos + 1); step(); }, wait);
    };
    step();
  });
  $("replay-exit").addEventListener("click", () => {
    stopReplayTimer();
    state.replay = null;
    $("replay-controls").hidden = true;
    for (const id of ["pause", "baseline"]) $(id).disabled = false;
    state.series = [];
    state.classPeaks = [];
    state.epoch += 1;
    state.pid = null;
    state.last = null;
    state.rateBases = [];
    goLive();
  });

  // ---------------------------------------------------------------------------------------------
  // Theme
  function applyTheme(t) {
    if (t) document.documentElement.dataset.theme = t; else delete document.documentElement.dataset.theme;
    $("theme").textContent = "Theme: " + (t || "system");
    colours = {};
    if (chart) styleChart();
    state.dirty = true;
    schedule();
  }
  // With the theme left to the system, a change of the system's scheme recolours the canvases
  // too (the CSS follows by itself; the chart and heat map kept the colours read before).
  const systemScheme = window.matchMedia ? window.matchMedia("(prefers-color-scheme: dark)") : null;
  if (systemScheme && systemScheme.addEventListener)
    systemScheme.addEventListener("change", () => {
      if (!document.documentElement.dataset.theme) applyTheme("");
    });
  $("theme").addEventListener("click", () => {
    const cur = document.documentElement.dataset.theme || "";
    const next = cur === "" ? "dark" : cur === "dark" ? "light" : "";
    try { localStorage.setItem("memlive.theme", next); } catch (e) { /* private mode */ }
    applyTheme(next);
  });
  // Theme colours, read once per theme change: getComputedStyle after the tables changed would
  // force a style recalculation on every update.
  let colours = {};
  const cssVar = (name) => {
    if (!(name in colours)) colours[name] = getComputedStyle(document.documentElement).getPropertyValue(name).trim();
    return colours[name];
  };

  // ---------------------------------------------------------------------------------------------
  // The chart
  let chart = null;
  // Y ticks at round numbers of the unit they are shown in (0, 20, 40 MiB), not at round numbers
  // of bytes (9.5, 19.1, 28.6 MiB): the step is 1, 2, 2.5 or 5 times a power of ten of the largest
  // binary unit the range reaches, or a power-of-two fraction of it (512 KiB, 1 MiB, 1.5 MiB).
  function byteTicks(lo, hi) {
    const range = Math.max(hi - lo, 6);
    let unit = 1;
    while (unit * 1024 <= range && unit < 2 ** 60) unit *= 1024;
    const raw = range / unit / 6;
    let step;
    if (raw >= 1) {
      const p = 10 ** Math.floor(Math.log10(raw));
      step = [1, 2, 2.5, 5, 10].map((m) => m * p).find((v) => v >= raw) * unit;
    } else {
      step = 2 ** Math.ceil(Math.log2(raw)) * unit;
    }
    step = Math.max(1, step);
    const max = Math.max(step, Math.ceil(hi / step) * step);
    return { step, min: Math.floor(lo / step) * step, max };
  }
  // On a log axis: powers of four (1 KiB, 4 KiB, 16 KiB ... 1 MiB), every m-th of them so that
  // there are at most 9, from the one at or below the smallest value above 0 to the one at or
  // above the largest. A 0 (a thread with nothing live) sits on the bottom line.
  function logByteTicks(lo, hi) {
    const k0 = Math.floor(Math.log2(lo) / 2), k1 = Math.max(k0 + 1, Math.ceil(Math.log2(hi) / 2));
    const m = Math.ceil((k1 - k0) / 7);
    const first = Math.floor(k0 / m) * m, last = Math.ceil(k1 / m) * m;
    const values = [];
    for (let k = first; k <= last; k += m) values.push(4 ** k);
    return { min: values[0], max: values[values.length - 1], values };
  }
  const tickDigits = new Intl.NumberFormat("en-US", { maximumFractionDigits: 3 });
  function fmtTickBytes(v) {
    const units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    let x = Math.abs(v), u = 0;
    while (x >= 1024 && u < units.length - 1) { x /= 1024; ++u; }
    return (v < 0 ? "\u2212" : "") + tickDigits.format(x) + " " + units[u];
  }
  function makeChart() {
    if (!window.Chart) { $("chart-missing").hidden = false; return; }
    chart = new window.Chart($("chart-live"), {
      type: "line",
      data: { datasets: [
        { label: "total live", data: [], borderWidth: 1.5, pointRadius: 0, tension: 0 },
        { label: "", data: [], borderWidth: 1.5, pointRadius: 0, tension: 0, hidden: true },
        { label: "at baseline", data: [], borderWidth: 1, borderDash: [4, 4], pointRadius: 0, hidden: true },
      ] },
      options: {
        animation: false, responsive: true, maintainAspectRatio: false, parsing: false, normalized: true,
        interaction: { mode: "nearest", axis: "x", intersect: false },
        scales: {
          // min and max: the first and newest samples (updateChart), not round numbers past them
          x: { type: "linear", title: { display: true, text: "uptime" },
            ticks: { callback: (v) => fmtDuration(v * 1000), maxTicksLimit: 8, maxRotation: 0,
              autoSkipPadding: 16, includeBounds: false } },
          // min, max and step: byteTicks; on a log axis, min, max and the ticks: logByteTicks
          y: { type: "linear", ticks: { callback: fmtTickBytes },
            afterBuildTicks: (scale) => {
              if (!yLogTicks || scale.type !== "logarithmic") return;
              scale.ticks = yLogTicks.map((value) => ({ value }));
            } },
        },
        plugins: {
          legend: { labels: { boxWidth: 12, filter: (item, data) => !data.datasets[item.datasetIndex].hidden } },
          tooltip: { callbacks: {
            title: (items) => items.length ? "uptime " + fmtDuration(items[0].parsed.x * 1000) : "",
            label: (c) => c.dataset.label + ": " + fmtBytes(c.parsed.y) } },
        },
      },
    });
    styleChart();
  }
  function styleChart() {
    const fg = cssVar("--muted"), line = cssVar("--line"), accent = cssVar("--accent");
    chart.options.color = fg;
    for (const ax of ["x", "y"]) {
      chart.options.scales[ax].ticks.color = fg;
      chart.options.scales[ax].grid = { color: line };
      if (chart.options.scales[ax].title) chart.options.scales[ax].title.color = fg;
    }
    chart.options.plugins.legend.labels.color = fg;
    const ds = chart.data.datasets;
    ds[0].borderColor = accent; ds[0].backgroundColor = accent;
    ds[1].borderColor = cssVar("--warn"); ds[1].backgroundColor = cssVar("--warn");
    ds[2].borderColor = fg; ds[2].backgroundColor = fg;
    chart.update("none");
  }
  // Appends the samples the chart does not have yet and drops those the series dropped; rebuilds
  // only when the series was replaced (replay, another process) or the selection changed.
  const selValue = (sel, p) => (sel.kind === "thread" ? p.threads.get(sel.key) : p.classes[sel.key] || 0);
  let drawn = { epoch: -1, sel: null, lastT: -Infinity };
  let yLogTicks = null;
  function updateChart() {
    if (!chart) return;
    const ds = chart.data.datasets;
    const sel = state.selection;
    const series = state.series;
    if (drawn.epoch !== state.epoch || drawn.sel !== sel) {
      drawn = { epoch: state.epoch, sel, lastT: -Infinity };
      ds[0].data = [];
      ds[1].data = [];
      ds[1].hidden = !sel;
      ds[1].label = sel ? sel.label : "";
    }
    let i = series.length;
    while (i > 0 && series[i - 1].t > drawn.lastT) --i;
    for (; i < series.length; ++i) {
      const p = series[i];
      ds[0].data.push({ x: p.x, y: p.total });
      if (sel) {
        const v = selValue(sel, p);
        if (v !== undefined) ds[1].data.push({ x: p.x, y: v });
      }
      drawn.lastT = p.t;
    }
    const firstX = series.length ? series[0].x : Infinity;
    for (const d of [ds[0].data, ds[1].data]) {
      let k = 0;
      while (k < d.length && d[k].x < firstX) ++k;
      if (k) d.splice(0, k);
    }
    const base = state.baseline && state.baselineTaken
      ? series.find((p) => p.t * 1e6 >= state.baselineTaken) : null;
    if (base && series.length) {
      ds[2].hidden = false;
      ds[2].data = [{ x: base.x, y: base.total }, { x: series[series.length - 1].x, y: base.total }];
    } else {
      ds[2].hidden = true;
      ds[2].data = [];
    }
    let lo = 0, hi = 0, positive = Infinity;
    for (const set of ds) {
      if (set.hidden) continue;
      for (const p of set.data) {
        if (p.y < lo) lo = p.y;
        if (p.y > hi) hi = p.y;
        if (p.y > 0 && p.y < positive) positive = p.y;
      }
    }
    const y = chart.options.scales.y;
    if (state.logScale && lo >= 0 && hi > 0) {
      const yt = logByteTicks(positive, hi);
      y.type = "logarithmic"; y.min = yt.min; y.max = yt.max; y.ticks.stepSize = undefined;
      yLogTicks = yt.values;
    } else {
      const yt = byteTicks(lo, hi);
      y.type = "linear"; y.min = yt.min; y.max = yt.max; y.ticks.stepSize = yt.step;
      yLogTicks = null;
    }
    const x = chart.options.scales.x, xs = ds[0].data;
    x.min = xs.length ? xs[0].x : undefined;
    x.max = xs.length > 1 ? xs[xs.length - 1].x : undefined;
    chart.update("none");
  }

  function setLogScale(on) {
    state.logScale = on;
    $("log-scale").checked = on;
    try { localStorage.setItem("memlive.logscale", on ? "1" : ""); } catch (e) { /* private */ }
    updateChart();
  }
  $("log-scale").addEventListener("change", () => setLogScale($("log-scale").checked));

  // Selects a thread or class for the chart; selecting it again (or kind null) clears it.
  function select(kind, key, label) {
    const same = state.selection && state.selection.kind === kind && state.selection.key === key;
    state.selection = same || kind === null ? null : { kind, key, label };
    $("selection-label").textContent = state.selection ? "total and " + state.selection.label : "total";
    $("clear-selection").hidden = !state.selection;
    state.dirty = true;
    schedule();
  }
  $("clear-selection").addEventListener("click", () => select(null, null, null));

  // ---------------------------------------------------------------------------------------------
  // Tables: rows keyed and reused, so a 10 Hz update touches only the text that changed.
  function setCell(td, text, value) {
    if (td.textContent !== text) td.textContent = text;
    if (value !== undefined) {
      const v = String(value);
      if (td.dataset.value !== v) td.dataset.value = v;
    }
  }
  // A click is a press and a release on the same row: a row that the sort moved away from under
  // a pressed pointer (4 times a second, in a busy process) made no click and selected nothing.
  // While a pointer is down in a table, its rows stay where they are (their figures still
  // update; new rows go at the end, gone ones wait for the release).
  let pressedBody = null;
  document.addEventListener("pointerdown", (e) => {
    pressedBody = e.target instanceof Element ? e.target.closest("tbody") : null;
  }, true);
  for (const type of ["pointerup", "pointercancel", "blur"]) {
    window.addEventListener(type, () => { pressedBody = null; }, true);
  }
  // Moving a row (insertBefore) takes the keyboard focus away from it: the focused row (or the
  // control in it) gets it back after the update, wherever the sort put it.
  function syncRows(tbody, items, key, make, fill) {
    const focused = tbody.contains(document.activeElement) ? document.activeElement : null;
    const held = pressedBody === tbody;
    const existing = new Map();
    for (const tr of tbody.children) existing.set(tr.dataset.key, tr);
    let i = 0;
    for (const item of items) {
      const k = key(item);
      let tr = existing.get(k);
      if (tr) existing.delete(k); else tr = make(item, k);
      fill(tr, item);
      if (held) { if (!tr.parentNode) tbody.appendChild(tr); continue; }
      if (tbody.children[i] !== tr) tbody.insertBefore(tr, tbody.children[i] || null);
      ++i;
    }
    if (!held) for (const tr of existing.values()) tr.remove();
    if (focused && focused !== document.activeElement && tbody.contains(focused)) focused.focus({ preventScroll: true });
  }
  // A row; with onSelect, one that selects (click, Enter, Space). A table of such rows is one
  // tab stop: its rows take the focus with the arrow keys, Home and End (oneTabStop).
  function makeRow(k, ncells, classes, onSelect) {
    const tr = document.createElement("tr");
    tr.dataset.key = k;
    for (let i = 0; i < ncells; ++i) {
      const td = document.createElement("td");
      if (classes[i]) td.className = classes[i];
      tr.appendChild(td);
    }
    if (!onSelect) return tr;
    tr.tabIndex = -1;
    tr.addEventListener("click", onSelect);
    tr.addEventListener("keydown", (e) => {
      const rows = tr.parentElement ? [...tr.parentElement.children] : [tr];
      const i = rows.indexOf(tr);
      const to = { ArrowDown: i + 1, ArrowUp: i - 1, Home: 0, End: rows.length - 1 }[e.key];
      if (e.key === "Enter" || e.key === " ") { e.preventDefault(); onSelect(); }
      else if (to !== undefined && rows[to]) { e.preventDefault(); focusRow(rows[to]); }
    });
    return tr;
  }
  function focusRow(tr) {
    for (const r of tr.parentElement.children) r.tabIndex = r === tr ? 0 : -1;
    tr.focus();
  }
  // The row that Tab reaches: the focused one, else the selected one, else the first.
  function oneTabStop(tbody) {
    const rows = tbody.children;
    let stop = null;
    for (const r of rows) if (r.contains(document.activeElement)) stop = r;
    if (!stop) for (const r of rows) if (r.getAttribute("aria-selected") === "true") stop = r;
    if (!stop) stop = rows[0] || null;
    for (const r of rows) {
      const t = r === stop ? 0 : -1;
      if (r.tabIndex !== t) r.tabIndex = t;
    }
  }
  function sorter(table, items) {
    const s = state.sort[table];
    const dir = s.dir;
    // A thread's live with its large blocks (estimated); large blocks as the largest class;
    // names in natural order (work-2 before work-10).
    const get = table === "threads" && s.key === "live" ? (x) => x.liveEst
      : table === "classes" && s.key === "size" ? (x) => (x.cls === 0 ? Infinity : x.size)
        : (x) => x[s.key];
    return items.sort((a, b) => {
      const x = get(a), y = get(b);
      if (x === y) return 0;
      if (x === null || x === undefined) return 1;
      if (y === null || y === undefined) return -1;
      const order =
        typeof x === "string" ? x.localeCompare(y, undefined, { numeric: true }) : x - y;
      return order * dir;
    });
  }
  for (const table of ["classes", "threads"]) {
    for (const th of document.querySelectorAll("#" + table + " th[data-key]")) {
      th.querySelector("button").addEventListener("click", () => {
        const s = state.sort[table];
        if (s.key === th.dataset.key) s.dir = -s.dir;
        else { s.key = th.dataset.key; s.dir = th.dataset.num ? -1 : 1; }
        state.dirty = true;
        schedule();
      });
    }
  }
  function markSort(table) {
    const s = state.sort[table];
    for (const th of document.querySelectorAll("#" + table + " th[data-key]")) {
      const v = th.dataset.key === s.key ? (s.dir > 0 ? "ascending" : "descending") : "none";
      if (th.getAttribute("aria-sort") !== v) th.setAttribute("aria-sort", v);
    }
  }

  const classLabel = (k) => (k.cls === 0 ? "large" : String(k.cls));
  // Under a baseline the tables show changes: signed, so that "-231 KiB" reads as a drop.
  const bytesIn = (d) => (d === state.sinceBaseline ? fmtSignedBytes : fmtBytes);
  function renderClasses(d) {
    const fb = bytesIn(d);
    // Under a baseline, live is a change and these two are what they are now: say so.
    const now = d === state.sinceBaseline ? " (now)" : "";
    for (const key of ["peak", "free"]) {
      const b = document.querySelector("#classes th[data-key='" + key + "'] button");
      const text = (key === "peak" ? "peak" : "free in spans") + now;
      if (b.textContent !== text) b.textContent = text;
    }
    // (A replay's samples are all known at once: its peaks stay the recorded ones.)
    if (state.mode !== "replay")
      for (const k of d.classes) k.peak = Math.max(k.peak, state.classPeaks[k.cls] || 0);
    const items = sorter("classes", d.classes.filter((k) => k.allocs > 0 || k.live > 0 || k.free > 0).slice());
    const tbody = document.querySelector("#classes tbody");
    syncRows(tbody, items, (k) => String(k.cls),
      (k, key) => makeRow(key, 7, ["num", "num", "num", "num", "num", "num", "num"], () =>
        select("class", k.cls, k.cls === 0 ? "large blocks" : "class " + k.cls + " (" + fmtBytes(k.size) + ")")),
      (tr, k) => {
        const td = tr.children;
        setCell(td[0], classLabel(k), k.cls);
        setCell(td[1], k.cls === 0 ? "> 256 KiB" : fmtBytes(k.size), k.size);
        setCell(td[2], fb(k.live), k.live);
        setCell(td[3], fmtBytes(k.peak), k.peak);
        setCell(td[4], k.cls === 0 ? "-" : fmtBytes(k.free), k.cls === 0 ? "" : k.free);
        setCell(td[5], fmtInt(k.allocs), k.allocs);
        setCell(td[6], k.frag === null ? "-" : fmtPercent(k.frag), k.frag === null ? "" : k.frag);
        const sel = state.selection && state.selection.kind === "class" && state.selection.key === k.cls;
        tr.setAttribute("aria-selected", String(!!sel));
      });
    markSort("classes");
    oneTabStop(tbody);
  }

  // Rows of the threads table: past them, the first by the sort in force (and the selected
  // thread). Every row in the page cost 0.1 ms a frame, 450 ms with 4,000 threads.
  const THREAD_ROWS = 250;
  function renderThreads(d) {
    const fb = bytesIn(d);
    const all = sorter("threads", d.threads.filter(shownThread).slice());
    const items = all.slice(0, THREAD_ROWS);
    const chosen = state.selection && state.selection.kind === "thread" &&
      all.find((x) => x.key === state.selection.key);
    if (chosen && !items.includes(chosen)) items.push(chosen);
    const th = document.querySelector("#threads th[data-key=\"" + state.sort.threads.key + "\"]");
    setText("threads-more", all.length <= THREAD_ROWS ? "" : "The first " + fmtInt(THREAD_ROWS) +
      " of " + fmtInt(all.length) + " threads by " + (th ? th.textContent : "") +
      (chosen && items.length > THREAD_ROWS ? ", and the selected one" : "") +
      ": sort by another column to see others.");
    const tbody = document.querySelector("#threads tbody");
    syncRows(tbody, items, (x) => x.key,
      (x, key) => {
        const classes = ["name", "num", "", "num live", "num", "num", "num", "num"];
        const tr = makeRow(key, 8, classes,
          () => select("thread", x.key, x.name + " (" + x.tid + ")"));
        const badge = document.createElement("span");
        tr.children[2].appendChild(badge);
        return tr;
      },
      (tr, x) => {
        const td = tr.children;
        setCell(td[0], x.memlive ? x.name + " [memlive]" : x.name, x.name);
        setCell(td[1], x.overflow ? "-" : String(x.tid), x.tid);
        const badge = td[2].firstChild;
        const label = x.overflow ? "shared" : x.state;
        if (badge.textContent !== label) { badge.textContent = label; badge.className = "badge " + x.state; }
        td[2].dataset.value = x.state;
        // large blocks, counted, on a line of their own (the column stays as wide as a size):
        // "+ 3 large", or under a baseline "+ 3 large" / "− 1 large"
        const large = !x.large ? ""
          : (x.large < 0 ? "\n\u2212 " : "\n+ ") + fmtInt(Math.abs(x.large)) + " large";
        setCell(td[3], fb(x.live) + large, x.liveEst);
        const est = x.liveEst !== x.live ? "about " + fmtBytes(x.liveEst) +
          " with its large blocks at the process's mean large block" : "";
        if (td[3].title !== est) td[3].title = est;
        setCell(td[4], fmtInt(x.allocs), x.allocs);
        setCell(td[5], fmtInt(x.frees), x.frees);
        setCell(td[6], fmtRate(x.rate), x.rate);
        setCell(td[7], fmtInt(x.remote), x.remote);
        tr.classList.toggle("exited", x.state !== "alive" && !x.overflow);
        const sel = state.selection && state.selection.kind === "thread" && state.selection.key === x.key;
        tr.setAttribute("aria-selected", String(!!sel));
      });
    markSort("threads");
    oneTabStop(tbody);
    const sel = state.selection;
    if (sel && sel.kind === "thread") { // say so when the charted thread is gone
      const x = d.threads.find((t) => t.key === sel.key);
      setText("selection-label", "total and " + sel.label + (!x || x.state === "alive" || x.overflow ? "" :
        " (" + (x.state === "ended" ? "ended with the process" : x.state) + ")"));
    }
  }
  // Exited threads on request; the threads of an exited process always, and the overflow slot
  // once a thread has shared it.
  const shownThread = (x) => (x.overflow ? x.shared > 0 : x.state !== "exited") || $("show-exited").checked;
  $("show-exited").addEventListener("change", () => { state.dirty = true; schedule(); });

  function threadName(d, slot) {
    const t = d.bySlot.get(slot);
    return t ? t.name + " (" + t.tid + ")" : "slot " + slot;
  }
  function renderMatrix(d) {
    const items = largest(d.matrix, 100, (m) => m.blocks);
    const tbody = document.querySelector("#matrix tbody");
    syncRows(tbody, items, (m) => String(cellKey(m)),
      (m, key) => makeRow(key, 4, ["", "", "num", "num"], null),
      (tr, m) => {
        const td = tr.children;
        setCell(td[0], threadName(d, m.from), m.from);
        setCell(td[1], threadName(d, m.owner), m.owner);
        setCell(td[2], fmtInt(m.blocks), m.blocks);
        setCell(td[3], fmtRate(m.rate), m.rate);
      });
    $("matrix-empty").hidden = items.length > 0;
  }

  // ---------------------------------------------------------------------------------------------
  // Heat map: threads x size classes on a canvas (64 x 53 cells redraw in well under a ms).
  // cursor: the cell hovered or moved to by the arrow keys, as { key: thread key, cls }, so that it
  // stays on its thread and class when rows or columns come and go; its text follows the data.
  const heat = { cols: [], rows: [], cell: 14, rowH: 16, left: 170, top: 44, cursor: null };
  const kHeatHint = "hover a cell for its numbers";
  function renderHeat(d) {
    const canvas = $("heat");
    const metric = $("heat-metric").value;
    const rows = d.threads.filter(shownThread);
    const used = new Set();
    for (const x of rows) for (const [c, cell] of x.cells) if (cell.allocs > 0 || cell.liveBlocks > 0) used.add(c);
    const cols = [...used].sort((a, b) => a - b);
    heat.cols = cols; heat.rows = rows; heat.data = d;
    const at = heatCursorAt();
    if (heat.cursor && !at) { heat.cursor = null; $("heat-hover").textContent = kHeatHint; }
    if (at) describeCell(at.i, at.j, d);
    const dpr = window.devicePixelRatio || 1;
    // room on the right for the last column's label, rotated 60 degrees (about 40 px long)
    const w = heat.left + Math.max(1, cols.length) * heat.cell + 30;
    const h = heat.top + Math.max(1, rows.length) * heat.rowH + 4;
    // The canvas is only as tall as the box shows (Chromium draws nothing on one over 65,535
    // device px: 2,046 rows at dpr 2), sticky at its top, and a spacer keeps the map's height
    // for the scroll. off: the map's y at the canvas's top, where sticky keeps it.
    const box = canvas.parentElement;
    const vh = Math.min(h, parseFloat(getComputedStyle(box).maxHeight) || window.innerHeight);
    const off = Math.max(0, Math.min(box.scrollTop, h - vh));
    heat.off = off;
    $("heat-spacer").style.height = h - vh + "px";
    if (canvas.width !== Math.round(w * dpr) || canvas.height !== Math.round(vh * dpr)) {
      canvas.width = Math.round(w * dpr); canvas.height = Math.round(vh * dpr);
      canvas.style.width = w + "px"; canvas.style.height = vh + "px";
    }
    // the rows in view, [i0, i1)
    const i0 = Math.max(0, Math.floor((off - heat.top) / heat.rowH));
    const i1 = Math.min(rows.length, Math.ceil((off + vh - heat.top) / heat.rowH));
    const g = canvas.getContext("2d");
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    // Labels change rarely: drawn once into an offscreen layer, copied on every update.
    const labelKey = [w, h, vh, off, dpr, colours["--fg"] || "",
      document.documentElement.dataset.theme || "",
      cols.join(","), rows.slice(i0, i1).map((x) => x.name + "/" + x.state).join("|")].join("#");
    if (heat.labelKey !== labelKey) {
      heat.labelKey = labelKey;
      const layer = heat.layer || (heat.layer = document.createElement("canvas"));
      layer.width = canvas.width;
      layer.height = canvas.height;
      const l = layer.getContext("2d");
      l.setTransform(dpr, 0, 0, dpr, 0, 0);
      l.fillStyle = cssVar("--card");
      l.fillRect(0, 0, w, vh);
      l.font = "11px system-ui, sans-serif";
      l.textBaseline = "middle";
      // The column labels, rotated, on a band of their own: drawn at the top of the map, and
      // again at the top of what the box shows when it scrolls down a long list of threads.
      const band = heat.band || (heat.band = document.createElement("canvas"));
      band.width = canvas.width;
      band.height = Math.round(heat.top * dpr);
      const b = band.getContext("2d");
      b.setTransform(dpr, 0, 0, dpr, 0, 0);
      b.fillStyle = cssVar("--card");
      b.fillRect(0, 0, w, heat.top);
      b.font = l.font;
      b.textBaseline = "middle";
      b.fillStyle = cssVar("--muted");
      cols.forEach((c, j) => {
        b.save();
        b.translate(heat.left + j * heat.cell + heat.cell / 2, heat.top - 4);
        b.rotate(-Math.PI / 3);
        b.fillText(c === 0 ? "large" : fmtBytes(d.classes[c].size).replace(" ", ""), 0, 0);
        b.restore();
      });
      l.setTransform(1, 0, 0, 1, 0, 0);
      l.drawImage(band, 0, -Math.round(off * dpr));
      l.setTransform(dpr, 0, 0, dpr, 0, 0);
      for (let i = i0; i < i1; ++i) {
        const x = rows[i];
        l.fillStyle = x.state === "alive" ? cssVar("--fg") : cssVar("--muted");
        const label = x.name.length > 22 ? x.name.slice(0, 21) + "…" : x.name;
        l.fillText(label, 4, heat.top + i * heat.rowH + heat.rowH / 2 - off);
      }
      // 32 shades from the card colour to the accent, as ready fillStyle strings
      const c0 = cssVar("--heat0").split(",").map(Number), c1 = cssVar("--heat1").split(",").map(Number);
      heat.shades = [];
      for (let k = 0; k < 32; ++k) {
        const f = k / 31;
        heat.shades.push("rgb(" + [0, 1, 2].map((i) => Math.round(c0[i] + (c1[i] - c0[i]) * f)).join(",") + ")");
      }
    }
    g.setTransform(1, 0, 0, 1, 0, 0);
    g.drawImage(heat.layer, 0, 0);
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    const value = (cell) => (!cell ? 0 : metric === "live" ? cell.live : metric === "rate" ? (cell.rate || 0) : cell.allocs);
    let max = 0;
    for (const x of rows) for (const c of cols) max = Math.max(max, value(x.cells.get(c)));
    // Cells grouped by shade: one fillStyle per shade instead of one per cell (log scale).
    const byShade = heat.shades.map(() => []);
    const logMax = Math.log1p(max);
    for (let i = i0; i < i1; ++i) {
      cols.forEach((c, j) => {
        const v = value(rows[i].cells.get(c));
        const k = max > 0 && v > 0 ? Math.max(1, Math.round((31 * Math.log1p(v)) / logMax)) : 0;
        byShade[k].push(i, j);
      });
    }
    byShade.forEach((cells, k) => {
      if (!cells.length) return;
      g.fillStyle = heat.shades[k];
      for (let n = 0; n < cells.length; n += 2)
        g.fillRect(heat.left + cells[n + 1] * heat.cell, heat.top + cells[n] * heat.rowH + 1 - off,
          heat.cell - 1, heat.rowH - 2);
    });
    const fg = cssVar("--fg");
    if (at) {
      g.strokeStyle = fg;
      g.strokeRect(heat.left + at.j * heat.cell - 0.5, heat.top + at.i * heat.rowH + 0.5 - off,
        heat.cell, heat.rowH - 1);
    }
    const scrolled = Math.min(box.scrollTop, h - heat.top);
    if (scrolled > 0) {
      g.setTransform(1, 0, 0, 1, 0, 0);
      g.drawImage(heat.band, 0, Math.round((scrolled - off) * dpr));
    }
  }
  $("heat").parentElement.addEventListener("scroll", () => {
    if (heat.data) renderHeat(heat.data);
  }, { passive: true });
  // The cursor's row and column in the map as drawn last, or null.
  function heatCursorAt() {
    if (!heat.cursor) return null;
    const i = heat.rows.findIndex((x) => x.key === heat.cursor.key);
    const j = heat.cols.indexOf(heat.cursor.cls);
    return i >= 0 && j >= 0 ? { i, j } : null;
  }
  function describeCell(i, j, d) {
    const x = heat.rows[i], c = heat.cols[j];
    const cell = x.cells.get(c) || { live: 0, allocs: 0, liveBlocks: 0, rate: 0 };
    const cls = c === 0 ? "large blocks" : "class " + c + " (" + fmtBytes(d.classes[c].size) + ")";
    const bytes = (cell.estimated ? "about " : "") + fmtBytes(cell.live) +
      (cell.estimated ? " at the process's mean large block" : "");
    $("heat-hover").textContent = x.name + " · " + cls + ": " +
      plural(cell.liveBlocks, "live block") + " (" + bytes + "), " +
      plural(cell.allocs, "allocation") + ", " +
      fmtRate(cell.rate || 0) + "/s";
  }
  function moveHeatCursor(i, j) {
    heat.cursor = { key: heat.rows[i].key, cls: heat.cols[j] };
    describeCell(i, j, heat.data);
    state.dirty = true;
    schedule();
  }
  $("heat").addEventListener("mousemove", (e) => {
    const r = $("heat").getBoundingClientRect();
    const j = Math.floor((e.clientX - r.left - heat.left) / heat.cell);
    const y = e.clientY - r.top + (heat.off || 0); // in the map, not the canvas
    const i = Math.floor((y - heat.top) / heat.rowH);
    if (y < $("heat").parentElement.scrollTop + heat.top) return; // on the column labels
    if (i >= 0 && j >= 0 && i < heat.rows.length && j < heat.cols.length) moveHeatCursor(i, j);
  });
  // The mouse leaving takes its cell's text with it (not the keyboard's, while the map has focus).
  $("heat").addEventListener("mouseleave", () => {
    if (document.activeElement === $("heat") || !heat.cursor) return;
    heat.cursor = null;
    $("heat-hover").textContent = kHeatHint;
    state.dirty = true;
    schedule();
  });
  $("heat").addEventListener("keydown", (e) => {
    const moves = { ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1] };
    const m = moves[e.key];
    if (!m || !heat.rows.length || !heat.cols.length) return;
    e.preventDefault();
    const cur = heatCursorAt();
    const i = cur ? Math.min(Math.max(0, cur.i + m[0]), heat.rows.length - 1) : 0;
    const j = cur ? Math.min(Math.max(0, cur.j + m[1]), heat.cols.length - 1) : 0;
    // the box scrolls to keep the cursor's row in view, under the column labels
    const box = $("heat").parentElement, y = heat.top + i * heat.rowH;
    if (y < box.scrollTop + heat.top) box.scrollTop = y - heat.top;
    else if (y + heat.rowH > box.scrollTop + box.clientHeight)
      box.scrollTop = y + heat.rowH - box.clientHeight;
    moveHeatCursor(i, j);
  });
  $("heat-metric").addEventListener("change", () => { state.dirty = true; schedule(); });

  // ---------------------------------------------------------------------------------------------
  // Tuning panel: built once from the options, then updated in place (an input being edited is
  // never overwritten).
  const optionRows = new Map();
  function buildTuning(s) {
    const form = $("tuning");
    for (const o of s.options) {
      if (optionRows.has(o.name)) continue;
      const div = document.createElement("div");
      div.className = "opt" + (o.live ? "" : " readonly");
      const id = "opt-" + o.name;
      const label = document.createElement("label");
      label.htmlFor = id;
      label.textContent = o.name;
      const input = document.createElement("input");
      input.id = id;
      input.name = o.name;
      input.type = "text";
      input.inputMode = "numeric";
      input.autocomplete = "off";
      input.value = String(o.effective);
      input.disabled = !o.live || state.mode === "replay" || state.mode === "exited";
      input.setAttribute("aria-describedby", id + "-doc " + id + "-msg");
      const msg = document.createElement("span");
      msg.className = "msg";
      msg.id = id + "-msg";
      msg.setAttribute("aria-live", "polite");
      const doc = document.createElement("div");
      doc.className = "doc";
      doc.id = id + "-doc";
      div.append(label, input, msg, doc);
      form.appendChild(div);
      const row = () => optionRows.get(o.name);
      input.addEventListener("keydown", (e) => {
        if (e.key === "Enter") { e.preventDefault(); submitOption(o.name, input.value); }
        if (e.key === "Escape") { // back to the value in force, and no stale error
          input.value = input.dataset.effective || input.value;
          input.dataset.dirty = "";
          input.removeAttribute("aria-invalid");
          setMsg(row(), "", "");
        }
      });
      input.addEventListener("input", () => {
        input.dataset.dirty = "1";
        if (row().msg.dataset.unsent) setMsg(row(), "", "");
      });
      // Only Enter sends: leaving the field (Tab through the panel) must not change the process.
      input.addEventListener("blur", () => {
        if (!input.dataset.dirty) return;
        if (input.value.trim() === input.dataset.effective) { input.dataset.dirty = ""; return; }
        setMsg(row(), "pending", "not sent: Enter sends " + input.value.trim() +
          ", Escape puts back " + input.dataset.effective);
        row().msg.dataset.unsent = "1";
      });
      optionRows.set(o.name, { div, input, msg, doc, fixed: !o.live, sending: false });
    }
  }
  function setMsg(row, kind, text) {
    row.msg.className = "msg " + kind;
    row.msg.textContent = text;
    delete row.msg.dataset.unsent;
  }
  // For messages a render repeats: the DOM is written only when the text changes.
  function setMsgOnce(row, kind, text) {
    if (row.msg.textContent !== text) setMsg(row, kind, text);
  }
  // A JSON number as typed ("8.0", "1e3", "99999999999999999999") is sent as that number, byte
  // for byte (JSON.stringify of a Number would send 1e+20); true/false as booleans; anything
  // else as a string, so that the server's own validation (and its message) decides.
  const JSON_NUMBER = /^-?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?$/;
  async function submitOption(name, text) {
    const row = optionRows.get(name);
    if (state.mode === "replay") return; // the inputs are disabled; a late change event
    const trimmed = String(text).trim();
    row.input.dataset.dirty = "";
    if (!trimmed) {
      row.input.setAttribute("aria-invalid", "true");
      setMsg(row, "error", "type a value (Escape puts back the one in force)");
      return;
    }
    const value = JSON_NUMBER.test(trimmed) ? trimmed : trimmed === "true" || trimmed === "false" ? trimmed
      : JSON.stringify(trimmed);
    // A new request supersedes the one being followed once it is accepted: a refused one leaves
    // that one pending (it was said to be another writer's).
    setMsg(row, "pending", "sending…");
    row.sending = true; // a sample arriving meanwhile must not put the old value back in the field
    let r;
    try { r = await postText("/api/options", "{" + JSON.stringify(name) + ":" + value + "}"); }
    catch (e) { setMsg(row, "error", "not sent: " + e.message); return; }
    finally { row.sending = false; }
    if (!r.ok) {
      row.input.setAttribute("aria-invalid", "true");
      setMsg(row, "error", (r.body && r.body.error) || "HTTP " + r.status);
      return;
    }
    row.input.removeAttribute("aria-invalid");
    state.pending.set(name, { value: r.body.applied ? r.body.applied[name] : Number(trimmed),
      generation: r.body.generation, posted: performance.now(),
      rejected: state.current ? state.current.s.control.rejected : null });
    setMsg(row, "pending", "sent (generation " + r.body.generation + "), waiting for the allocator…");
    if (state.current) updateTuning(state.current);
  }
  function updateTuning(d) {
    const s = d.s;
    buildTuning(s);
    const alive = d.threads.filter((x) => x.state === "alive");
    const gen = s.control.generation;
    const appliedAll = alive.filter((x) => x.applied >= gen).length;
    $("generation").textContent = "generation " + gen + " · validated " + s.control.validated_generation +
      " · rejected " + s.control.rejected + " · applied by " + appliedAll + "/" + alive.length + " live threads";
    for (const o of s.options) {
      const row = optionRows.get(o.name);
      if (!row) continue;
      const range = o.bool ? "0 or 1" : fmtInt(o.min) + " … " + fmtInt(o.max);
      const doc = (o.doc || "") + " · range " + range + " · default " + o.default +
        (o.live ? "" : " · fixed at start (LIVEALLOC_" + o.name.toUpperCase() + ")");
      if (row.doc.textContent !== doc) row.doc.textContent = doc;
      row.input.dataset.effective = String(o.effective);
      if (document.activeElement !== row.input && !row.input.dataset.dirty && row.input.value !== String(o.effective)
          && !row.sending && !state.pending.has(o.name) && row.input.getAttribute("aria-invalid") !== "true")
        row.input.value = String(o.effective);
      const p = state.pending.get(o.name);
      if (state.mode === "replay" || row.sending || row.msg.dataset.unsent) continue;
      // The error of the value typed stays until Escape puts the value back or one is accepted.
      if (row.input.getAttribute("aria-invalid") === "true") continue;
      if (!p) {  // a value another writer asked for (or this page, before a reload)
        if (o.requested !== o.effective) {
          row.foreign = true;
          setMsgOnce(row, "pending", "requested: " + o.requested + " (by memlive tune, another " +
            "page, or this page before a reload); in force: " + o.effective + " until a thread " +
            "of the process refills, where the allocator takes new values");
        } else if (row.foreign) {
          row.foreign = false;
          setMsg(row, "ok", "in effect: " + o.effective);
        }
        continue;
      }
      if (s.control.validated_generation < p.generation) {
        if (performance.now() - p.posted > 2000)
          setMsgOnce(row, "pending", "sent (generation " + p.generation + "), not taken yet: " +
            "the allocator takes new values when a thread of the process refills, and none has " +
            "since (an idle process takes them when it next allocates)");
        continue;
      }
      // Another writer (a second page, `memlive tune`) may have set it since: the allocator
      // counts what it rejects.
      if (o.effective !== p.value && o.requested !== p.value && s.control.rejected === p.rejected) {
        setMsg(row, "ok", "in effect: " + p.value + ", then changed by another writer to " + o.effective);
        state.pending.delete(o.name);
        row.input.value = String(o.effective);
        continue;
      }
      if (o.effective !== p.value) {
        setMsg(row, "error", "the allocator rejected " + p.value + " (in force: " + o.effective + ")");
        state.pending.delete(o.name);
        continue;
      }
      const applied = alive.filter((x) => x.applied >= p.generation).length;
      const ms = Math.round(performance.now() - p.posted);
      if (!p.validatedMs) p.validatedMs = ms;
      const when = "in effect: " + o.effective + " since " + new Date().toLocaleTimeString() + " (" + fmtInt(p.validatedMs) + " ms after sending)";
      if (applied === alive.length) {
        setMsg(row, "ok", when + ", applied by all " + alive.length + " threads");
        state.pending.delete(o.name);
        row.input.value = String(o.effective);
      } else {
        if (!p.when) p.when = when;
        setMsg(row, "pending", p.when + "; applied by " + applied + "/" + alive.length +
          " threads (idle threads apply it at their next refill)");
      }
    }
  }

  // ---------------------------------------------------------------------------------------------
  // Recommendations, from the samples of the last half minute.
  const REC_WINDOW_MS = 30000;
  const plural = (n, word) =>
    fmtInt(n) + " " + word + (n === 1 ? "" : word.endsWith("s") ? "es" : "s");
  const classText = (k) => k.cls + " (" + fmtBytes(k.size) + ")";
  // The classes a suggestion comes from: the first `shown`, then how many more.
  const someClasses = (items, shown) =>
    items.slice(0, shown).map((r) => classText(r.k)).join(", ") +
    (items.length > shown ? " and " + (items.length - shown) + " more" : "");
  // Empty spans a thread keeps of a class of `units` under page_recycle `v`: at least one if v > 0.
  const keptSpans = (v, units) => (v <= 0 ? 0 : Math.max(1, Math.floor(v / units)));
  function raiseRecycle(d, pr, raise, seconds) {
    raise.sort((a, b) => b.want - a.want);
    const top = raise[0], want = top.want, k = top.k;
    const back = raise.reduce((n, r) => n + r.back, 0);
    // What the new value may keep: every live thread, in every class it used, up to the spans it
    // held at its peak (no thread keeps more empty spans than it ever had), less what it may keep
    // now.
    let extra = 0;
    for (const x of d.threads) {
      if (x.state !== "alive") continue;
      for (const [c, cell] of x.cells) {
        const kc = d.classes[c];
        if (c === 0 || !kc || !kc.units || !cell.peak) continue;
        const span = kc.units * 65536;
        const peakSpans = Math.ceil(cell.peak / Math.floor(span / kc.size));
        extra += (Math.min(keptSpans(want, kc.units), peakSpans) -
          Math.min(keptSpans(pr.effective, kc.units), peakSpans)) * span;
      }
    }
    const keeps = keptSpans(want, k.units);
    return { cls: k.cls, label: someClasses(raise, 1), option: "page_recycle", now: pr.effective,
      want,
      why: plural(back, "span") + " of " + (raise.length > 1 ? plural(raise.length, "class") +
        " (" + someClasses(raise, 5) + ")" : fmtBytes(k.size) + " blocks") +
        " were released and taken again in " + fmtDuration(seconds * 1000) + " by " +
        plural(Math.max(1, top.threads), "thread") + "; the busiest peaks at " + fmtInt(k.maxPeak) +
        " blocks of " + fmtBytes(k.size) + " (" + plural(top.spans, "span") + "): " + want +
        " keeps " + plural(keeps, "empty span") + " of it per thread and avoids the round trips." +
        " The threshold is one for every class and thread: the threads may keep up to " +
        fmtBytes(extra) + " more empty spans (each in each class up to what it held at its peak)" };
  }
  function lowerRecycle(pr, lower, seconds) {
    lower.sort((a, b) => b.want - a.want); // the mildest: it still lowers the others' share
    const kept = lower.reduce((n, r) => n + r.kept, 0);
    return { cls: lower[0].k.cls, label: someClasses(lower, 1), option: "page_recycle",
      now: pr.effective,
      want: lower[0].want,
      why: fmtBytes(kept) + " of empty " + (lower.length > 1 ? "spans of " +
        plural(lower.length, "class") + " (" + someClasses(lower, 5) + ")"
        : fmtBytes(lower[0].k.size) + " spans") + " are kept and none was taken in " +
        fmtDuration(seconds * 1000) + "; a lower threshold returns half of them, each " +
        "thread's at its next refill (a thread that stays idle keeps its spans)" };
  }
  function option(s, name) { return s.options.find((o) => o.name === name); }
  function renderRecommendations(d) {
    const tbody = document.querySelector("#recommendations tbody");
    const series = state.series;
    const now = series[series.length - 1];
    const recs = [];
    // The window starts again when a tuning change is made (generation), so that a suggestion
    // is not made again from samples taken before the change it asked for.
    let first = series.length - 1;
    while (first > 0 && now.t - series[first - 1].t <= REC_WINDOW_MS && series[first - 1].gen === now.gen) --first;
    const gone = d.s.alive === false; // nothing to tune in a process that exited
    if (now && first < series.length - 1 && !gone) {
      const old = series[first];
      const seconds = Math.max(0.001, (now.t - old.t) / 1000);
      $("rec-window").textContent = fmtDuration(now.t - old.t);
      const pr = option(d.s, "page_recycle");
      if (pr && pr.live) {
        const raise = [], lower = [];
        for (let c = 1; c < now.cls.length; ++c) {
          const [taken, released, kept, , , threads] = now.cls[c];
          const [taken0, released0] = old.cls[c] || [0, 0];
          const k = d.classes[c];
          // A span of this class is k.units 64 KiB units, as the allocator publishes them;
          // page_recycle counts units, so keeping N empty spans of this class takes N * units
          // (and any value above 0 keeps one). No advice where the allocator does not say.
          if (!k.units) continue;
          const span = k.units * 65536;
          const back = Math.min(taken - taken0, released - released0); // released, then taken again
          // Not for spans that exited threads gave back (no running thread holds the class):
          // a thread's spans go back at its exit, whatever the threshold.
          if (back > 0 && k.maxPeak > 0) {
            // Keeping as many empty spans as the busiest thread holds at its peak means a
            // thread that swings between empty and its peak never gives spans back.
            const spans = Math.max(1, Math.ceil(k.maxPeak / Math.floor(span / k.size)));
            const want = Math.min(pr.max, Math.max(pr.effective + 1, spans * k.units));
            if (want > pr.effective) raise.push({ k, back, spans, want, threads });
          } else if (kept * span >= 4 * 1048576 && taken === taken0 && pr.effective > 0) {
            // Half the spans a thread keeps of this class, in units: a threshold above what the
            // threads keep would return nothing (0 once one is left).
            const perThread = Math.ceil(kept / Math.max(1, threads));
            const half = Math.floor(perThread / 2) * k.units;
            const want = Math.max(pr.min, Math.min(pr.effective - 1, half));
            lower.push({ k, kept: kept * span, want });
          }
        }
        // page_recycle is one threshold for every class and every thread: one suggestion, from
        // the class that needs the most (raising) or the least (lowering), with what it costs
        // or returns across all of them. Classes that take spans back win over idle ones.
        if (raise.length) recs.push(raiseRecycle(d, pr, raise, seconds));
        else if (lower.length) recs.push(lowerRecycle(pr, lower, seconds));
      }
      const lc = option(d.s, "large_cache");
      if (lc && lc.live) {
        let peak = 0;
        for (let i = first; i < series.length; ++i) peak = Math.max(peak, series[i].large);
        const maps = now.mmaps - old.mmaps;
        const mib = Math.ceil(peak / 1048576);
        // Mappings made while large blocks were freed: large blocks that only grow have nothing
        // to cache. (Not munmap calls: a new aligned mapping makes two, for its trimmed ends.)
        if (maps > 10 && now.largeFreed - old.largeFreed > 10 && mib > lc.effective) {
          const want = Math.min(lc.max, Math.ceil(mib * 1.25));
          recs.push({ cls: 0, option: "large_cache", now: lc.effective, want,
            why: fmtInt(maps) + " mappings in " + fmtDuration(seconds * 1000) + " while large blocks peaked at " +
              fmtBytes(peak) + "; a cache of " + want + " MiB keeps them mapped" });
        }
      }
    } else {
      $("rec-window").textContent = "-";
    }
    recs.sort((a, b) => b.want - a.want);
    syncRows(tbody, recs, (r) => r.option,
      (r, key) => {
        const tr = makeRow(key, 6, ["", "", "num", "num", "why", ""], null);
        const b = document.createElement("button");
        b.type = "button";
        b.textContent = "Apply";
        b.addEventListener("click", (e) => {
          e.stopPropagation();
          const row = optionRows.get(b.dataset.option);
          if (row) row.input.value = b.dataset.want;
          submitOption(b.dataset.option, b.dataset.want);
        });
        tr.children[5].appendChild(b);
        return tr;
      },
      (tr, r) => {
        const td = tr.children;
        setCell(td[0], r.label || (r.cls === 0 ? "large" : classText(d.classes[r.cls])), r.cls);
        setCell(td[1], r.option);
        setCell(td[2], fmtInt(r.now), r.now);
        setCell(td[3], fmtInt(r.want), r.want);
        setCell(td[4], r.why);
        const b = td[5].firstChild;
        b.dataset.option = r.option;
        b.dataset.want = String(r.want);
        b.disabled = state.mode === "replay" || state.mode === "exited";
      });
    if (!recs.length && tbody.children.length === 0) {
      // one explanatory row, not selectable
      const tr = document.createElement("tr");
      tr.dataset.key = "none";
      const td = document.createElement("td");
      td.colSpan = 6;
      td.className = "muted";
      tr.appendChild(td);
      tbody.appendChild(tr);
    }
    const none = tbody.querySelector("tr[data-key='none'] td");
    if (none) setCell(none, gone ? "Nothing to tune: the process has exited."
      : "Nothing to change: no size class returned spans and took them back, and no class " +
        "keeps idle memory.");
  }

  // ---------------------------------------------------------------------------------------------
  // Rendering: at most once per frame, whatever the rate of samples.
  // A frame takes the newest stream sample (if one came) and draws. New data is drawn at most
  // once per frame, and no sooner than twice the last frame's cost after it: with hundreds of
  // threads a frame costs tens of ms, and the page keeps two thirds of the main thread for the
  // user. What the user does (sort, select, theme, replay) is drawn at the next frame.
  let frame = 0, timer = 0, inFrame = false, wanted = false, urgent = false, nextAt = 0;
  // The chart draws every sample; the tables, maps, tuning and recommendations at most every
  // TABLES_MS (text changing 12 times a second cannot be read, and redrawing it was most of the
  // page's CPU), and at once after anything the user does or when the process changes or ends.
  const TABLES_MS = 250;
  let tablesAt = -Infinity, tablesWanted = true, tablesTimer = 0, tablesFor = "", tablesStale = false;
  function schedule() { wanted = true; urgent = true; tablesWanted = true; requestFrame(); }
  function scheduleData() { wanted = true; requestFrame(); }
  function requestFrame() {
    if (frame || inFrame) return;
    const wait = urgent ? 0 : nextAt - performance.now();
    if (wait > 1) {
      if (!timer) timer = setTimeout(() => { timer = 0; requestFrame(); }, wait);
      return;
    }
    clearTimeout(timer);
    timer = 0;
    frame = requestAnimationFrame(onFrame);
  }
  function onFrame() {
    frame = 0;
    inFrame = true;
    const t0 = performance.now();
    try {
      if (stream.raw !== null) takeSample();
      if (wanted) { wanted = false; urgent = false; render(); }
    } finally {
      inFrame = false;
    }
    const t1 = performance.now();
    nextAt = t1 + 2 * (t1 - t0);
    if (wanted || stream.raw !== null) requestFrame();
  }
  function setText(id, text) { const e = $(id); if (e.textContent !== text) e.textContent = text; }
  // Render cost, for web/tests/perf.mjs (and anyone curious, from the console).
  function timed(name, fn) {
    const t0 = performance.now();
    fn();
    stats.sections[name] = (stats.sections[name] || 0) + performance.now() - t0;
  }
  function render() {
    const t0 = performance.now();
    renderNow();
    const ms = performance.now() - t0;
    stats.renders += 1;
    stats.totalMs += ms;
    stats.maxMs = Math.max(stats.maxMs, ms);
    stats.last.push(ms);
    if (stats.last.length > 1000) stats.last.shift();
  }
  function lastAliveUptime(pid) {
    for (let i = state.series.length - 1; i >= 0; --i) {
      const p = state.series[i];
      if (p.pid === pid && !p.dead) return p.x * 1000;
    }
    return null;
  }
  function renderNow() {
    const live = state.current;
    if (!live) return;
    const d = state.baseline && state.sinceBaseline && state.mode !== "replay" ? state.sinceBaseline : live;
    const s = live.s;
    setText("f-program", s.program || "?");
    setText("f-pid", String(s.pid));
    // A process that exited: the server keeps sending its last state with a later taken_ns;
    // its uptime is the one of its last sample taken alive (unknown if none was seen).
    const uptime = s.alive === false ? lastAliveUptime(s.pid) : live.uptime;
    setText("f-uptime", uptime === null ? "-" : fmtDuration(uptime));
    const overflow = s.process.overflow_threads || 0;
    // The program's threads; memlive's own (its server inside the program, memlive::start()),
    // which the threads table marks [memlive], apart: some 25 of them made 21 threads read 46.
    // A process that is gone has no live thread, in the overflow slot neither.
    setText("f-threads", fmtInt(live.aliveThreads) +
      (live.aliveMemlive ? " (+" + fmtInt(live.aliveMemlive) + " memlive)" : "") +
      (overflow && s.alive !== false ? " + " + fmtInt(overflow) + " overflow" : ""));
    setText("threads-overflow", overflow ? "+" + fmtInt(overflow) + " thread" + (overflow > 1 ? "s" : "") +
      " (since the start) found no slot of their own and share the overflow slot" : "");
    setText("f-live", fmtBytes(s.process.live_bytes));
    setText("f-resident", s.process.resident_bytes ? fmtBytes(s.process.resident_bytes) : "-");
    setText("f-committed", fmtBytes(s.process.committed_bytes));
    setText("f-cached", fmtBytes(s.process.cached_bytes || 0));
    setText("f-free", fmtBytes(live.free));
    document.title = "memlive · " + (s.program || "") + " " + s.pid;
    const now = performance.now();
    const proc = s.pid + (s.alive === false ? " ended" : "");
    if (tablesWanted || now - tablesAt >= TABLES_MS || proc !== tablesFor) {
      tablesFor = proc;
      tablesStale = false;
      tablesWanted = false;
      tablesAt = now;
      stats.tableRenders += 1;
      timed("classes", () => renderClasses(d));
      timed("threads", () => renderThreads(d));
      timed("matrix", () => renderMatrix(d));
      timed("heat", () => renderHeat(d));
      timed("tuning", () => updateTuning(live));
      timed("recommendations", () => renderRecommendations(live));
    } else {  // the tables catch up with this sample if no other comes soon to draw them
      tablesStale = true;
      if (!tablesTimer) {
        tablesTimer = setTimeout(() => { tablesTimer = 0; if (tablesStale) scheduleData(); },
          TABLES_MS - (now - tablesAt) + 150);
      }
    }
    timed("chart", updateChart);
    document.body.dataset.takenNs = String(d.s.taken_ns);
    document.body.dataset.samples = String(state.series.length);
    state.dirty = false;
  }

  // ---------------------------------------------------------------------------------------------
  // Keyboard shortcuts (not while typing).
  document.addEventListener("keydown", (e) => {
    if (e.ctrlKey || e.metaKey || e.altKey) return;
    const t = e.target;
    if (t && (t.tagName === "INPUT" || t.tagName === "SELECT" || t.tagName === "TEXTAREA")) return;
    if (e.key === "p") togglePause();
    else if (e.key === "b") toggleBaseline();
    else if (e.key === "t") $("theme").click();
    else if (e.key === "l") setLogScale(!state.logScale);
  });

  // ---------------------------------------------------------------------------------------------
  // Start
  let savedTheme = "";
  try {
    savedTheme = localStorage.getItem("memlive.theme") || "";
    state.logScale = localStorage.getItem("memlive.logscale") === "1";
    $("log-scale").checked = state.logScale;
    const iv = Number(localStorage.getItem("memlive.interval"));
    if ([0, 50, 100, 250, 500, 1000, 5000].includes(iv)) { state.interval = iv; $("interval").value = String(iv); }
  } catch (e) { /* private mode */ }
  makeChart();
  applyTheme(savedTheme);
  goLive();
})();
