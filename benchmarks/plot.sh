#!/bin/bash
# Draws one PNG per workload from a summary CSV: one panel per metric, one group of bars per case,
# one bar per allocator, as a ratio to glibc oriented so that above 1 is better (throughput:
# alloc/glibc; time, latency, memory: glibc/alloc). Log scale, so 2x better and 2x worse sit at
# the same distance from the glibc line. Each bar is the median of the per-repetition ratios, its
# error bar their min-max (summary.csv's paired_to_glibc_min/max).
#
#   benchmarks/plot.sh [SUMMARY.csv] [OUTDIR]
#   defaults: benchmarks/results/summary.csv and <its folder>/plots/
# OUTDIR's plots of workloads that SUMMARY does not draw (an earlier summary's) are removed;
# files that plot.sh does not name (<workload>.png) stay.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
usage="usage: benchmarks/plot.sh [SUMMARY.csv] [OUTDIR]   (defaults: benchmarks/results/summary.csv, <its folder>/plots/)"
case "${1:-}" in
  -h | --help) echo "$usage"; exit 0 ;;
  -*) echo "plot.sh: unknown option $1" >&2; echo "$usage" >&2; exit 2 ;;
esac
(($# <= 2)) || { echo "plot.sh: at most two arguments" >&2; echo "$usage" >&2; exit 2; }
summary="${1:-$here/results/summary.csv}"
[[ -f "$summary" ]] || { echo "plot.sh: no $summary (run benchmarks/run.sh first)" >&2; exit 1; }
outdir="${2:-$(dirname "$summary")/plots}"
data="$(mktemp -d)"
trap 'rm -rf "$data"' EXIT

# "workload metric file colours ymin:ymax" lines, grouped by workload. Every bar is a ratio to
# glibc: a workload without glibc's results is named on stderr and skipped; with none at all,
# exit 1.
/usr/bin/python3 "$here/bench.py" plotdata "$summary" "$data" >"$data/index"
mkdir -p "$outdir"

for w in $(cut -d' ' -f1 "$data/index" | uniq); do
  panels=$(awk -v w="$w" '$1 == w' "$data/index" | wc -l)
  cols=$((panels < 3 ? panels : 3))
  rows=$(((panels + cols - 1) / cols))
  {
    echo "set terminal pngcairo size $((cols * 620)),$((rows * 420 + 40)) font 'sans,9'"
    echo "set output '$outdir/$w.png'"
    echo "set datafile missing '?'"
    echo "set style data histograms"
    echo "set style histogram errorbars gap 1 lw 1"
    echo "set style fill solid 0.85 border -1"
    echo "set logscale y 2"
    echo "set grid ytics"
    echo "set xtics rotate by -30 left noenhanced"
    echo "set key outside right top noenhanced font ',8'"
    echo "set multiplot layout $rows,$cols title '$w: ratio to glibc, above 1 is better (log scale; median of per-repetition ratios, bars min-max)' noenhanced"
    awk -v w="$w" '$1 == w {print $2, $3, $4, $5}' "$data/index" |
      while read -r metric file colours yrange; do
        columns=$(head -1 "$file" | wc -w)
        echo "set title '$metric' noenhanced"
        echo "set yrange [$yrange]"
        # The constant 1 draws the glibc line; plotdata's y range holds it and every bar.
        # Each allocator has three columns (median, min, max) and its colour, the same in every
        # panel.
        echo "colours = '${colours//,/ }'"
        bars="for [i=2:$columns:3] '$file' using i:i+1:i+2:xtic(1) title columnheader(i)"
        line="1 with lines lw 2 lc rgb 'black' title 'glibc'"
        echo "plot $bars lc (word(colours, (i+1)/3)+0), $line"
      done
    echo "unset multiplot"
  } | gnuplot
  echo "wrote $outdir/$w.png"
done

# A plot of a workload this summary does not draw, left in OUTDIR by an earlier one, would stand
# beside the new plots as if it were of this run: removed. Only the names plot.sh gives (one per
# workload of the suite, `bench.py list`); any other file in OUTDIR is not plot.sh's and stays.
drawn=" $(cut -d' ' -f1 "$data/index" | uniq | tr '\n' ' ')"
for w in $(/usr/bin/python3 "$here/bench.py" list | awk '$1 != "allocators:" {print $1}' | uniq); do
  if [[ -f "$outdir/$w.png" && $drawn != *" $w "* ]]; then
    rm -f -- "$outdir/$w.png"
    echo "removed $outdir/$w.png: $summary has no plot of $w"
  fi
done
