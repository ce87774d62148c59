#!/usr/bin/env python3
"""Rewrites the options table in README.md from the allocator's options table.

The table text comes from the options unit test (tests/unit/options.cpp), which prints it when
LIVEALLOC_PRINT_OPTIONS_TABLE is set (and when README.md is stale); so the README, the test and the header cannot disagree.
Usage: tests/update_options_table.py [BUILD_DIR]   (default: build)
"""
import os
import pathlib
import subprocess
import sys

root = pathlib.Path(__file__).resolve().parent.parent
build = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else root / "build")
subprocess.run(["cmake", "--build", str(build), "--target", "unit_options"], check=True,
               stdout=subprocess.DEVNULL)
env = dict(os.environ, LIVEALLOC_PRINT_OPTIONS_TABLE="1")
out = subprocess.run([str(build / "tests/unit/unit_options"), "-tc=*README*"],
                     capture_output=True, text=True, env=env).stdout
lines = out.splitlines()
start = next(i for i, l in enumerate(lines) if l.startswith("| Variable"))
table = []
for line in lines[start:]:
    if not line.startswith("|"):
        break
    table.append(line)
readme = root / "README.md"
text = readme.read_text()
a = text.index("| Variable")
b = text.index("<!-- end options table -->")
readme.write_text(text[:a] + "\n".join(table) + "\n" + text[b:])
print(f"README.md: options table rewritten ({len(table) - 2} options)")
