"""report.py OUT EVERY: the chaos run's faults, restarts, steps lost and loss curve against the
uninterrupted run. Exits 1 when a goal is missed: a step lost to SIGTERM, more than EVERY steps
lost to SIGKILL or to the permanent loss (re-planned on the survivors), or a step whose loss
differs from the uninterrupted run's by more than 1e-4."""
import datetime
import glob
import json
import re
import sys

out, every = sys.argv[1], int(sys.argv[2])
base = {r["step"]: r["loss"] for r in map(json.loads, open(f"{out}/base.jsonl")) if "loss" in r}
rows = [json.loads(line) for line in open(f"{out}/chaos.jsonl")]
faults = []
for line in open(f"{out}/faults.tsv"):
    t, kind, worker, step = line.rstrip("\n").split("\t")
    faults.append({"time": float(t), "kind": kind, "worker": worker, "step": int(step),
                   "restarts": 0, "lost": 0})

# Restarts: rank 0 logs "resumed from the checkpoint of step N" with an ISO time.
resumes = []
pat = re.compile(r"^(\S+Z) info .*resumed from the checkpoint of step (\d+)")
for path in glob.glob(f"{out}/run/worker-*.log"):
    for line in open(path, errors="replace"):
        m = pat.match(line)
        if m:
            t = datetime.datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S.%fZ")
            t = t.replace(tzinfo=datetime.timezone.utc).timestamp()
            resumes.append((t, int(m.group(2))))
resumes.sort()

unattributed = 0
prev = 0.0
for t, step in resumes:
    # the newest step reached since the previous resume (not before it: those were replayed)
    reached = max([r["step"] for r in rows if prev < r["time"] < t], default=step)
    prev = t
    lost = max(0, reached - step)
    before = [f for f in faults if f["time"] <= t]
    if not before:
        unattributed += 1
        continue
    before[-1]["restarts"] += 1
    before[-1]["lost"] += lost

# The loss curve: the last value the run reported for each step against the uninterrupted run.
last = {}
for r in rows:
    if "loss" in r:
        last[r["step"]] = r["loss"]
diffs = [abs(v - base[s]) for s, v in last.items() if s in base]
worst = max(diffs, default=float("inf"))
missing = sorted(set(base) - set(last))

ok = True
print(f"faults injected: {len(faults)}")
for kind in ("kill", "term", "stop", "drop", "lose"):
    fs = [f for f in faults if f["kind"] == kind]
    if not fs:
        continue
    lost = [f["lost"] for f in fs]
    print(f"  {kind:5} {len(fs):3} faults, {sum(f['restarts'] for f in fs):3} restarts, "
          f"steps lost: total {sum(lost)}, most {max(lost)}")
    if kind == "term" and max(lost) > 0:
        ok = False
        print("  GOAL MISSED: a step was lost to SIGTERM")
    if kind in ("kill", "lose") and max(lost) > every:
        ok = False
        print(f"  GOAL MISSED: more than everySteps ({every}) lost to "
              f"{'SIGKILL' if kind == 'kill' else 'the permanent loss'}")
print(f"restarts: {len(resumes)} ({unattributed} before the first fault)")
print(f"loss curve: {len(last)} steps compared, largest difference from the uninterrupted run "
      f"{worst:.2e}; steps trained but never reported: {len(missing)}")
# A step finished just before a restart may never be reported (its row was incomplete when the
# gang stopped) though it was trained and checkpointed: reported above, not a missed goal.
if worst > 1e-4:
    ok = False
    print("  GOAL MISSED: the loss curve is not the uninterrupted run's")
for f in faults:
    print(f"  {f['kind']:5} worker {f['worker']:4} at step {f['step']:5}: "
          f"{f['restarts']} restart(s), {f['lost']} step(s) lost")
replans = [l for l in open(f"{out}/chaos.out") if l.startswith("[Replanned]")]
print(f"re-plans: {len(replans)}" + "".join(f"\n  {l.strip()[:300]}" for l in replans))
if any(f["kind"] == "lose" for f in faults) and not replans:
    ok = False
    print("  GOAL MISSED: the permanent loss was not re-planned around")
print("all goals met" if ok else "goals missed")
sys.exit(0 if ok else 1)
