#!/usr/bin/env python3
"""steps.py METRICS.jsonl WARMUP NAME POLICY REP PREDICTED WALL: one results.tsv line, the
median step time of the steps after WARMUP (step_ms of a row = the slowest worker's)."""
import json, statistics, sys

path, warm, name, policy, rep, pred, wall = sys.argv[1:]
rows = [json.loads(l) for l in open(path) if l.strip()]
ms = [r["step_ms"] for r in rows if r["step"] > int(warm)]
if not ms:
    sys.exit(f"{path}: no steps after the warm-up")
print(f"{name}\t{policy}\t{rep}\t{statistics.median(ms) / 1000:.4f}\t{len(ms)}\t{float(pred):.4f}\t{float(wall):.1f}")
