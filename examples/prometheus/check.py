#!/usr/bin/env python3
"""prometheus example check: prometheus.yml is valid and its scrape works against memlive.

  check.py --memlive PATH --program PATH [--promtool PATH]

1. prometheus.yml parses (PyYAML when installed, and always a check of the fields Prometheus
   needs: a job with metrics_path and host:port targets); `promtool check config` when installed.
2. `memlive run --port 0 --exit-when-done -- PROGRAM --rounds 1 --wait` (the ld_preload example's
   program); GET <metrics_path> the way Prometheus scrapes it (Host header, Accept of the text
   format): 200, content type version=0.0.4, every sample line well formed, the livealloc families
   present with the program's pid; `promtool check metrics` when installed.
3. End of input ends the program; memlive must exit 0.
Exit 0 only when every check passed.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import urllib.request

here = os.path.dirname(os.path.abspath(__file__))
ap = argparse.ArgumentParser()
ap.add_argument("--memlive", required=True)
ap.add_argument("--program", required=True)
ap.add_argument("--promtool", default=shutil.which("promtool"))
args = ap.parse_args()

failures = 0


def check(ok, what):
    global failures
    print("%s: %s" % ("ok" if ok else "FAILED", what))
    failures += not ok
    return ok


config_path = os.path.join(here, "prometheus.yml")
text = open(config_path).read()
try:
    import yaml  # Debian: python3-yaml
    config = yaml.safe_load(text)
    check(isinstance(config, dict), "prometheus.yml is valid YAML (PyYAML)")
    job = config["scrape_configs"][0]
    metrics_path = job["metrics_path"]
    targets = job["static_configs"][0]["targets"]
    params = job.get("params", {})
except ImportError:
    print("note: PyYAML is not installed; checking the fields line by line")
    m = re.search(r"^\s*metrics_path:\s*(\S+)\s*$", text, re.M)
    t = re.search(r"^\s*- targets:\s*\[(.*)\]\s*$", text, re.M)
    metrics_path = m.group(1) if m else None
    targets = [x.strip().strip("'\"") for x in t.group(1).split(",")] if t else []
    p = re.search(r"^\s*params:\s*\{by:\s*\[(\w+)\]\}\s*$", text, re.M)
    params = {"by": [p.group(1)]} if p else {}
    check("\t" not in text, "prometheus.yml has no tabs (YAML forbids them in indentation)")
check(metrics_path == "/metrics", "the job scrapes /metrics (%r)" % metrics_path)
# The active job must be the fleet-safe one: per class, a bounded number of series.
check(params == {"by": ["class"]}, "the job scrapes per size class, by=class (%r)" % params)
query = "?" + "&".join("%s=%s" % (k, v) for k, vs in params.items() for v in vs) if params else ""
check(len(targets) > 0 and all(re.fullmatch(r"[\w.-]+:\d+", x) for x in targets),
      "its targets are host:port (%r)" % targets)
if args.promtool:
    r = subprocess.run([args.promtool, "check", "config", config_path], capture_output=True,
                       text=True)
    check(r.returncode == 0, "promtool check config: %s%s" % (r.stdout.strip(), r.stderr.strip()))

# memlive prints its own lines (the address) on stderr, the program its "done" on stdout: one pipe.
ml = subprocess.Popen([args.memlive, "run", "--port", "0", "--exit-when-done", "--",
                       args.program, "--rounds", "1", "--wait"],
                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                      text=True)
port = pid = None
done = False
for line in ml.stdout:
    print(line.rstrip())
    m = re.search(r"serving process (\d+) .* at http://127\.0\.0\.1:(\d+)/", line)
    if m:
        pid, port = int(m.group(1)), int(m.group(2))
    if line.strip() == "text_index: done":
        done = True
    # Either line may come first: the program can finish its round before memlive, polling every
    # 10 ms, sees its segment (it waits on its input meanwhile, so the segment stays).
    if done and port is not None:
        break
if check(port is not None and done, "memlive run serves the program"):
    req = urllib.request.Request("http://127.0.0.1:%d%s%s" % (port, metrics_path, query), headers={
        "Accept": "text/plain;version=0.0.4;q=1,*/*;q=0.1",
        "User-Agent": "Prometheus/2.42.0"})
    with urllib.request.urlopen(req) as resp:
        status, ctype, body = resp.status, resp.headers.get("Content-Type", ""), resp.read().decode()
    check(status == 200, "GET %s: 200" % metrics_path)
    check("version=0.0.4" in ctype, "content type is the text format 0.0.4 (%s)" % ctype)
    sample = re.compile(r'^[a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\]|\\.)*",?)*\})?'
                        r' [-+0-9.eE]+(Inf|NaN)?( -?\d+)?$')
    bad = [l for l in body.splitlines() if l and not l.startswith("#") and not sample.match(l)]
    check(not bad, "every sample line is well formed%s" % (": %r" % bad[:3] if bad else ""))
    for family in ("livealloc_allocs_total", "livealloc_live_blocks", "livealloc_resident_bytes",
                   "livealloc_option_effective"):
        check(("# TYPE %s " % family) in body and ('%s{pid="%d"' % (family, pid)) in body,
              "family %s with pid=\"%d\"" % (family, pid))
    check(not re.search(r'\btid="', body), "no per-thread series (no tid label)")
    if args.promtool:
        r = subprocess.run([args.promtool, "check", "metrics"], input=body, capture_output=True,
                           text=True)
        check(r.returncode == 0, "promtool check metrics: %s" % r.stderr.strip())
ml.stdin.close()  # the program exits at end of input, memlive with it
rest = ml.stdout.read()
if rest:
    print(rest.rstrip())
check(ml.wait() == 0, "memlive run exits 0 with the program")
sys.exit(1 if failures else 0)
