#!/usr/bin/python3
"""Checks plot.sh: on a real summary (the smoke run's) it draws one PNG per workload without a
gnuplot warning; on a synthetic one, an allocator measured in only one panel gets a column in
that panel alone and keeps its colour, each bar has the min-max of the paired ratios as its error
bar, and the PNGs come out the same byte for byte when drawn again; a workload without glibc's
results is named as not drawn; drawn into a folder that holds an earlier summary's plots, it
removes those of workloads it does not draw and keeps files that are not its own; without a
summary, without glibc in it, or with bad arguments, it stops with a clear error.

Exit 77 (skipped) without gnuplot; 0 when every check passes, 1 otherwise.
    test_plot.py SUMMARY.csv"""
import csv
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PLOT = os.path.join(HERE, "plot.sh")
BENCH = os.path.join(HERE, "bench.py")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

FIELDS = ["workload", "case", "threads", "metric", "unit", "better", "allocator", "n", "median",
          "min", "max", "q1", "q3", "ratio_to_glibc", "ratio_to_livealloc", "paired_to_glibc",
          "paired_to_glibc_min", "paired_to_glibc_max", "paired_to_livealloc"]


def synthetic(path):
    """Two workloads: `w` with a throughput panel for every allocator and a peak_rss panel that
    jemalloc lacks, the paired ratios from half to twice their median; `v` measured by livealloc
    and tcmalloc only, with ratios of medians alone (no paired ratios, so no spread)."""
    rows = []

    def row(workload, metric, better, allocator, ratio, paired=True):
        p = [str(ratio), str(ratio / 2), str(ratio * 2)] if paired else ["", "", ""]
        rows.append(dict(zip(FIELDS, [workload, "c", "1", metric, "x", better, allocator, "1", "1",
                                      "1", "1", "1", "1", str(ratio), "1"] + p + ["1"])))
    for a, r in [("glibc", 1), ("livealloc", 2), ("mimalloc", 1.5), ("jemalloc", 0.5),
                 ("tcmalloc", 1.8)]:
        row("w", "ops_per_s", "higher", a, r)
        if a != "jemalloc":
            row("w", "peak_rss", "lower", a, r)
    for a, r in [("glibc", 1), ("livealloc", 4), ("tcmalloc", 2)]:
        row("v", "ops_per_s", "higher", a, r, paired=False)
    with open(path, "w", newline="") as f:
        f.write("# synthetic summary for test_plot.py\n")
        w = csv.DictWriter(f, FIELDS)
        w.writeheader()
        w.writerows(rows)


def main():
    summary = sys.argv[1]
    if not shutil.which("gnuplot"):
        print("skipped: gnuplot is not installed")
        return 77
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        # The real summary: every workload drawn, nothing on stderr.
        out = subprocess.run(["bash", PLOT, summary, os.path.join(tmp, "plots")],
                             capture_output=True, text=True, timeout=120)
        if out.returncode != 0:
            failures.append("plot.sh exit code %d: %s" % (out.returncode, out.stderr.strip()))
        if out.stderr.strip():
            failures.append("plot.sh wrote to stderr: " + out.stderr.strip()[:400])
        with open(summary) as f:
            workloads = {r["workload"] for r in csv.DictReader(l for l in f if not l.startswith("#"))}
        if len(workloads) < 5:
            failures.append("the summary names only %d workloads" % len(workloads))
        for w in sorted(workloads):
            png = os.path.join(tmp, "plots", w + ".png")
            if not os.path.exists(png):
                failures.append("no plot for " + w)
                continue
            with open(png, "rb") as f:
                data = f.read()
            if not data.startswith(PNG_SIGNATURE) or len(data) < 2000:
                failures.append("%s is not a drawn PNG (%d bytes)" % (png, len(data)))

        # Drawn again into the same folder from a summary without fastpath: the old fastpath.png
        # goes (it would pass for this summary's), the files plot.sh does not name stay.
        plots = os.path.join(tmp, "plots")
        for name in ("notes.txt", "mine.png"):
            with open(os.path.join(plots, name), "w") as f:
                f.write("the user's own file\n")
        fewer = os.path.join(tmp, "no-fastpath.csv")
        with open(summary) as f, open(fewer, "w") as g:
            g.writelines(l for l in f if not l.startswith("fastpath,"))
        out = subprocess.run(["bash", PLOT, fewer, plots], capture_output=True, text=True,
                             timeout=120)
        left = sorted(os.listdir(plots))
        want = sorted(["notes.txt", "mine.png"] + ["%s.png" % w for w in workloads
                                                   if w != "fastpath"])
        said = "removed %s" % os.path.join(plots, "fastpath.png")
        if (out.returncode != 0 or out.stderr.strip() or "fastpath" not in workloads or
                left != want or said not in out.stdout):
            failures.append("plot.sh into a folder with an older summary's plots: exit %d, "
                            "stderr %r, left %s (want %s)" % (
                                out.returncode, out.stderr.strip()[:300], left, want))

        # A synthetic summary: columns only where an allocator has values, colours kept.
        syn = os.path.join(tmp, "syn.csv")
        synthetic(syn)
        data = os.path.join(tmp, "data")
        out = subprocess.run([sys.executable, BENCH, "plotdata", syn, data], capture_output=True,
                             text=True, timeout=60)
        index = {tuple(l.split()[:2]): l.split()[2:] for l in out.stdout.splitlines()}
        # Allocators of the run after glibc, in the runner's order: livealloc, mimalloc,
        # jemalloc, tcmalloc, so their colours are 1, 2, 3 and 4.
        # Three columns per allocator: the median and the min and max of the error bar.
        want = {("w", "ops_per_s"): ('label "livealloc" min max "mimalloc" min max "jemalloc" min max '
                                     '"tcmalloc" min max', "1,2,3,4"),
                ("w", "peak_rss"): ('label "livealloc" min max "mimalloc" min max "tcmalloc" min max', "1,2,4"),
                ("v", "ops_per_s"): ('label "livealloc" min max "tcmalloc" min max', "1,4")}
        for key, (header, colours) in want.items():
            if key not in index:
                failures.append("plotdata wrote no file for %s %s: %s" % (key + (out.stderr,)))
                continue
            path, got_colours = index[key][0], index[key][1]
            with open(path) as f:
                lines = f.read().splitlines()
            if lines[0] != header or got_colours != colours:
                failures.append("%s %s: header %r colours %s, want %r %s" %
                                (key + (lines[0], got_colours, header, colours)))
        # peak_rss is "lower is better": drawn as glibc/allocator, so tcmalloc's 1.8 becomes 0.5556,
        # and its paired range 0.9-3.6 the error bar 0.2778-1.111.
        cells_want = {("w", "peak_rss"): "0.5 0.25 1 0.6667 0.3333 1.333 0.5556 0.2778 1.111",
                      ("w", "ops_per_s"): "2 1 4 1.5 0.75 3 0.5 0.25 1 1.8 0.9 3.6",
                      ("v", "ops_per_s"): "4 4 4 2 2 2"}  # no paired ratios: no spread
        for key, cells in cells_want.items():
            if key in index:
                with open(index[key][0]) as f:
                    got = " ".join(f.read().splitlines()[1].split()[1:])
                if got != cells:
                    failures.append("%s %s cells %s, want %s" % (key + (got, cells)))
        # The y range holds every bar, its error bar and the glibc line, with a margin: w's
        # peak_rss spans 0.25 (livealloc's low) to 1.333 (mimalloc's high).
        yrange = (index.get(("w", "peak_rss"), []) + ["", "", ""])[2]
        if yrange != "0.2083:1.6":
            failures.append("w peak_rss y range %r, want 0.2083:1.6" % yrange)
        drawn = []
        for name in ("syn-plots", "syn-plots-again"):
            out = subprocess.run(["bash", PLOT, syn, os.path.join(tmp, name)],
                                 capture_output=True, text=True, timeout=120)
            if out.returncode != 0 or out.stderr.strip():
                failures.append("plot.sh on the synthetic summary: exit %d, stderr %r" %
                                (out.returncode, out.stderr.strip()[:400]))
            with open(os.path.join(tmp, name, "w.png"), "rb") as f:
                drawn.append(f.read())
        if drawn[0] != drawn[1]:
            failures.append("plot.sh drew w.png differently from the same summary")
        with open(PLOT) as f:
            if "histogram errorbars" not in f.read():
                failures.append("plot.sh does not draw the histograms with error bars")

        # Every bar exactly 1 (a tie, as the smoke run's `true` can be): gnuplot's own y range
        # would be empty, and its warning a failure of run.sh.
        ties = os.path.join(tmp, "ties.csv")
        with open(ties, "w", newline="") as f:
            w = csv.DictWriter(f, FIELDS)
            w.writeheader()
            for a in ("glibc", "livealloc", "tcmalloc"):
                w.writerow(dict(zip(FIELDS, ["t", "c", "1", "time", "s", "lower", a, "1", "1", "1",
                                             "1", "1", "1", "1", "1", "1", "1", "1", "1"])))
        out = subprocess.run(["bash", PLOT, ties, os.path.join(tmp, "ties")],
                             capture_output=True, text=True, timeout=120)
        if out.returncode != 0 or out.stderr.strip():
            failures.append("plot.sh on a summary of ties: exit %d, stderr %r" %
                            (out.returncode, out.stderr.strip()[:400]))

        # Every bar is a ratio to glibc. A workload that glibc did not run is named as skipped;
        # a summary without glibc at all is an error, not a silent run that draws nothing.
        with open(syn) as f:
            rows = list(csv.DictReader(l for l in f if not l.startswith("#")))
        one_missing = os.path.join(tmp, "one-missing.csv")
        with open(one_missing, "w", newline="") as f:
            w = csv.DictWriter(f, FIELDS)
            w.writeheader()
            w.writerows(rows + [dict(rows[1], workload="u", ratio_to_glibc="", paired_to_glibc="",
                                     paired_to_glibc_min="", paired_to_glibc_max="")])
        out = subprocess.run(["bash", PLOT, one_missing, os.path.join(tmp, "one-missing")],
                             capture_output=True, text=True, timeout=120)
        drawn = sorted(os.listdir(os.path.join(tmp, "one-missing"))) if out.returncode == 0 else []
        if (out.returncode != 0 or drawn != ["v.png", "w.png"] or
                "no plot of u: %s has no ratio to glibc" % one_missing not in out.stderr):
            failures.append("plot.sh on a summary whose workload u lacks glibc: exit %d, drew %s, "
                            "stderr %r (want v.png, w.png and u named)"
                            % (out.returncode, drawn, out.stderr.strip()[:400]))
        no_glibc = os.path.join(tmp, "no-glibc.csv")
        with open(no_glibc, "w", newline="") as f:
            w = csv.DictWriter(f, FIELDS)
            w.writeheader()
            w.writerows(dict(r, ratio_to_glibc="", paired_to_glibc="", paired_to_glibc_min="",
                             paired_to_glibc_max="") for r in rows if r["allocator"] != "glibc")
        out = subprocess.run(["bash", PLOT, no_glibc, os.path.join(tmp, "no-glibc")],
                             capture_output=True, text=True, timeout=120)
        if out.returncode == 0 or "nothing to draw in %s" % no_glibc not in out.stderr:
            failures.append("plot.sh on a summary without glibc: exit %d, stderr %r (want an error)"
                            % (out.returncode, out.stderr.strip()[:400]))
        if os.path.exists(os.path.join(tmp, "no-glibc")):
            failures.append("plot.sh with nothing to draw created its output folder")

        # No summary: a clear error, nothing drawn.
        out = subprocess.run(["bash", PLOT, os.path.join(tmp, "missing.csv"), os.path.join(tmp, "x")],
                             capture_output=True, text=True, timeout=60)
        if out.returncode == 0 or "run benchmarks/run.sh first" not in out.stderr:
            failures.append("plot.sh without a summary: exit %d, stderr %r" %
                            (out.returncode, out.stderr.strip()))
        if os.path.exists(os.path.join(tmp, "x")):
            failures.append("plot.sh without a summary created its output folder")
        # Usage: --help prints it; an unknown option or a third argument is a usage error.
        for args, code, text in ((["--help"], 0, "usage: benchmarks/plot.sh"),
                                 (["-x"], 2, "unknown option -x"),
                                 ([summary, os.path.join(tmp, "y"), "extra"], 2, "at most two")):
            out = subprocess.run(["bash", PLOT] + args, capture_output=True, text=True, timeout=60)
            if out.returncode != code or text not in out.stdout + out.stderr:
                failures.append("plot.sh %s: exit %d, %r (want %d and %r)" % (
                    " ".join(args), out.returncode, (out.stdout + out.stderr).strip(), code, text))

    for f in failures:
        print("FAIL: " + f)
    print("%d failures" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
