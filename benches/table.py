#!/usr/bin/env python3
"""Prints the markdown table for benches/README.md from criterion's results.

Run after `cargo bench --bench taskq`. For each group: the median time per
element and its ratio to the group's first entry (the TaskQueue)."""
import json
import os
import sys

root = os.path.join(os.path.dirname(__file__), "..", "target", "criterion")
groups = sys.argv[1:] or ["uncontended", "two_submitters_fire_and_forget"]
for group in groups:
    gdir = os.path.join(root, group)
    if not os.path.isdir(gdir):
        print(f"(no results for {group})")
        continue
    rows = []
    for bench in sorted(os.listdir(gdir)):
        est = os.path.join(gdir, bench, "new", "estimates.json")
        bjson = os.path.join(gdir, bench, "new", "benchmark.json")
        if not os.path.exists(est):
            continue
        with open(est) as f:
            median_ns = json.load(f)["median"]["point_estimate"]
        per = 1
        with open(bjson) as f:
            tp = json.load(f).get("throughput") or {}
            per = tp.get("Elements", 1)
        rows.append((bench, median_ns / per))
    if not rows:
        continue
    base = rows[0][1]
    print(f"\n### {group}\n")
    print("| variant | median per op | ops/s | time vs (a) |")
    print("|---|---:|---:|---:|")
    for name, ns in rows:
        print(f"| {name} | {ns:.1f} ns | {1e9 / ns / 1e6:.2f} M | {ns / base:.2f}x |")
