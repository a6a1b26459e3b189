#!/usr/bin/env python3
"""Fits the cost model's link constants to measured step times (bench-hetero's calibration).

As a module: fit(work, op, names, median) -> (constants, calibration links dict).
As a command: fit.py RUNS.tsv WORKDIR OPERATOR OUT.json NAME... fits to the named scenarios'
median step times (RUNS.tsv, lines as in results.tsv) and writes OUT.json, a calibration file for
`holmes-operator local/plan --calibration`.

Coordinate descent, minimising the sum of squared log ratios between `holmes-operator plan`
(pinned to the split that ran, with the run's --tflops) and the measured medians, over:
- compute_efficiency;
- tcp_efficiency, which rdma_efficiency follows: the emulated RDMA fabrics are the same TCP
  transport through the same TBF shapers as the Ethernet one, and the references cannot tell the
  two apart (all-RDMA is bound by compute: fitted apart on the references alone, rdma_efficiency
  took 0.49-0.68 where the fit over every scenario puts it at 1.0 beside tcp 0.96, and every
  scenario with a RoCE stage was then priced 20-30 % slow);
- intra_node_latency_us, when a fitted scenario has tensor > 1: the emulated GPUs of a worker
  are processes that all-reduce over loopback TCP on shared cores, not NVLink (the planner's
  default 5 us priced the tensor-2 runs 17-20 % fast).
FIT_KEYS (space-separated) fits those alone (run.sh's machine-speed probe: compute_efficiency).
What the network is, links.json says and the fit keeps:
the router port's speed (tcp_gbps = gateway_gbps, the shaped CROSS_MBIT) and the latency between
fabrics (tcp_latency_us, measured by run.sh with latency.py). Fitted, those two took whatever the
model missed: the latency 7.7 to 15 ms a message (36-67 us measured), which made every crossing
of a stage boundary look expensive, and the port 1 Gb/s in a fit over every scenario."""
import json, math, os, re, statistics, subprocess, sys


def plan(work, op, name, calib):
    cmd = [op, "plan", os.path.join(work, f"job-{name}.yaml"), "--json", "--partition",
           open(os.path.join(work, f"job-{name}.partition")).read().strip(),
           "--tflops", open(os.path.join(work, f"{name}.tflops")).read().strip()]
    if calib:
        cmd += ["--calibration", calib]
    r = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(r.stdout)["predicted_step_seconds"]


def medians(runs):
    meas = {}
    for line in list(open(runs))[1:]:
        name, _policy, _rep, med = line.split("\t")[:4]
        meas.setdefault(name, []).append(float(med))
    return {n: statistics.median(v) for n, v in meas.items()}


def tensor_of(work, name):
    m = re.search(r"\btensor: (\d+)", open(os.path.join(work, f"job-{name}.yaml")).read())
    return int(m.group(1)) if m else 1


def fit(work, op, names, median, only=None):
    """Returns (fitted constants, the calibration's links) for the scenarios `names`; `only`: the
    keys to fit (the others keep links.json's value or the planner's default)."""
    keys = {"compute_efficiency": (0.6, 0.001, 1.0), "tcp_efficiency": (0.8, 0.01, 1.0)}
    if any(tensor_of(work, n) > 1 for n in names):
        keys["intra_node_latency_us"] = (20.0, 1.0, 20000.0)
    if only:
        keys = {k: v for k, v in keys.items() if k in only}
    base = json.load(open(os.path.join(work, "links.json")))["links"]  # the emulated network
    path = os.path.join(work, "fit-trial.json")

    def links(vals):
        d = dict(base, **vals)
        if "tcp_efficiency" in d:
            d["rdma_efficiency"] = d["tcp_efficiency"]
        return d

    def error(vals):  # sum of squared log ratios: smooth, so coordinate descent does not stall
        with open(path, "w") as f:
            json.dump({"links": links(vals)}, f)
        return sum(math.log(plan(work, op, n, path) / median[n]) ** 2 for n in names)

    vals = {k: v[0] for k, v in keys.items()}
    best = error(vals)
    for factor in (2.0, 1.4, 1.15, 1.05):
        improved = True
        while improved:
            improved = False
            for k, (_, lo, hi) in keys.items():
                for f in (factor, 1 / factor):
                    trial = dict(vals)
                    trial[k] = min(hi, max(lo, vals[k] * f))
                    if trial[k] == vals[k]:
                        continue
                    e = error(trial)
                    if e < best - 1e-6:
                        best, vals, improved = e, trial, True
    return vals, {k: round(v, 6) for k, v in links(vals).items()}


def main():
    if len(sys.argv) < 6:
        sys.exit(__doc__)
    runs, work, op, out = sys.argv[1:5]
    names = sys.argv[5:]
    median = medians(runs)
    missing = [n for n in names if n not in median]
    if missing:
        sys.exit(f"fit.py: no measurements of {', '.join(missing)} in {runs}")
    only = os.environ.get("FIT_KEYS", "").split() or None
    vals, links = fit(work, op, names, median, only)
    with open(out, "w") as f:
        json.dump({"links": links}, f, indent=1)
        f.write("\n")
    print(", ".join(f"{k}={v:.4g}" for k, v in vals.items()))


if __name__ == "__main__":
    main()
