#!/usr/bin/env python3
"""same_plan.py SPLIT_FILE PRED_FILE < PLAN.json: exits non-zero unless `holmes-operator plan
--json` chose the layer split the coordinator printed (SPLIT_FILE, "3,1") and predicts the step
time it printed (PRED_FILE, 3 decimals)."""
import json, sys

plan = json.load(sys.stdin)
split = ",".join(str(s["layers"][1] - s["layers"][0]) for s in plan["stages"])
pred = plan["predicted_step_seconds"]
coord_split = open(sys.argv[1]).read().strip()
coord_pred = float(open(sys.argv[2]).read())
if split != coord_split or abs(pred - coord_pred) > 0.0015:
    sys.exit(f"plan ({split}, {pred:.4f} s) and the coordinator ({coord_split}, "
             f"{coord_pred:.3f} s) disagree")
