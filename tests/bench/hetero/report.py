#!/usr/bin/env python3
"""bench-hetero report: per-scenario median and spread of the measured step time, tokens/s,
ratios, the coordinator's prediction for the placement it ran (with the constants it planned
with: links.json for the references, the references' fit for the others), the prediction after
the in-sample calibration over every scenario (fit.py), a markdown table and a gnuplot PNG.
usage: report.py WORKDIR OPERATOR OUTDIR WALL_S LOAD_BEFORE LOAD_AFTER IB_MBIT ROCE_MBIT CROSS_MBIT TOKENS"""
import json, os, statistics, subprocess, sys

work, op, out, wall, load0, load1, ib, roce, cross, tokens = sys.argv[1:11]
tokens = int(tokens)
rows = [l.rstrip("\n").split("\t") for l in open(os.path.join(work, "results.tsv"))][1:]
order, meas, pred0 = [], {}, {}
for name, policy, rep, med, steps, pred, w in rows:
    if name not in meas:
        order.append(name)
        meas[name] = []
    meas[name].append(float(med))
    pred0[name] = float(pred)


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fit import fit, plan  # noqa: E402

median = {n: statistics.median(meas[n]) for n in order}
# The in-sample fit over every scenario: how well the cost model can describe these runs.
vals, links = fit(work, op, order, median)
calib_path = os.path.join(work, "calibration.json")
with open(calib_path, "w") as f:
    json.dump({"links": links}, f)
pred1 = {n: plan(work, op, n, calib_path) for n in order}
worst = max(abs(pred1[n] / median[n] - 1) for n in order)
with open(os.path.join(out, "hetero-calibration.json"), "w") as f:
    json.dump({"links": links}, f, indent=1)
    f.write("\n")

ref = median.get("all-rdma")
lat = json.load(open(os.path.join(work, "links.json")))["links"].get("tcp_latency_us")
lat = f" Latency between fabrics {lat:.0f} us (measured, one way)." if lat is not None else ""
lines = [f"Links shaped: InfiniBand fabric {ib} Mbit/s, RoCE fabric {roce} Mbit/s, between "
         f"fabrics (and the all-Ethernet fabric) {cross} Mbit/s ({os.environ.get('LINK_NOTE', 'rates as given')})."
         f"{lat} {tokens} tokens per step. "
         f"{len(meas[order[0]])} runs per scenario; whole run {wall} s; load average before "
         f"{load0}, after {load1}.", "",
         "| scenario | policy | step s (median) | spread (min-max) | tokens/s | vs all-RDMA (same workers) | "
         "predicted s (as planned) | error as planned | predicted s (calibrated) | error calibrated |",
         "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
for n in order:
    m = median[n]
    pol = next(r[1] for r in rows if r[0] == n)
    # the same workers (and GPUs per worker)
    r = (median.get("all-rdma6") if n.startswith("3fab6") or n.endswith("6")
         else median.get("all-rdma-t2") if n.endswith("-t2") else ref)
    rel = f"{r / m:.2f}" if r else "-"
    lines.append(f"| {n} | {pol} | {m:.3f} | {min(meas[n]):.3f}-{max(meas[n]):.3f} | "
                 f"{tokens / m:.0f} | {rel} | {pred0[n]:.3f} | {100 * (pred0[n] / m - 1):+.1f} % | "
                 f"{pred1[n]:.3f} | {100 * (pred1[n] / m - 1):+.1f} % |")
lines.append("")


def ratio(a, b):
    return median[a] and median[b] and median[b] / median[a]


goals = []
for cl, sfx, tsfx in (("2fab", "", ""), ("3fab", "", ""), ("3fab6", "6", ""), ("2fab", "", "-t2")):
    h, nv = f"{cl}-holmes{tsfx}", f"{cl}-naive{tsfx}"
    rd, et = f"all-rdma{sfx}{tsfx}", f"all-ethernet{sfx}{tsfx}"
    if all(n in median for n in (h, nv, rd, et)):
        # holmes / all-Ethernet is bounded by the cluster's own all-RDMA / all-Ethernet (what any
        # placement on RDMA everywhere reaches); the share of that gap holmes closes, beside it
        tr, te, th = 1 / median[rd], 1 / median[et], 1 / median[h]
        gap = f"{(th - te) / (tr - te):.2f}" if tr > te else "-"
        goals.append(f"- {cl}{tsfx}: holmes = {ratio(h, rd):.2f} x {rd} throughput (goal >= 0.90), "
                     f"{ratio(h, et):.2f} x {et} (goal >= 2; {rd} itself is "
                     f"{ratio(rd, et):.2f} x {et}, holmes closes {gap} of that gap), "
                     f"{ratio(h, nv):.2f} x naive (goal >= 1.37)")
goals.append(f"- calibration (fitted {', '.join(f'{k}={v:.4g}' for k, v in vals.items())}): "
             f"largest error {100 * worst:.1f} % (goal <= 15 %)")
planned = [n for n in order if not n.startswith("all-")]
refs = os.path.join(out, "hetero-links-refs.json")
if planned and os.path.exists(refs):
    worst0 = max(abs(pred0[n] / median[n] - 1) for n in planned)
    goals.append(f"- as planned: the clusters with several fabrics were placed with the constants "
                 f"fitted to the references alone (hetero-links-refs.json); largest error of "
                 f"those predictions {100 * worst0:.1f} %")
lines += goals
table = "\n".join(lines) + "\n"
with open(os.path.join(out, "hetero-table.md"), "w") as f:
    f.write(table)
print(table)

dat = os.path.join(work, "plot.dat")
with open(dat, "w") as f:
    for i, n in enumerate(order):
        f.write(f"{i} {n} {tokens / median[n]:.1f} {tokens / max(meas[n]):.1f} "
                f"{tokens / min(meas[n]):.1f} {tokens / pred1[n]:.1f}\n")
gp = f"""set terminal pngcairo size 900,480 noenhanced
set output '{os.path.join(out, "hetero.png")}'
set title 'bench-hetero: tokens/s per scenario (median of runs, bars = min-max)'
set ylabel 'tokens/s'
set style fill solid 0.5
set boxwidth 0.4
set xtics rotate by -20
set yrange [0:*]
set key top right
plot '{dat}' using ($1-0.2):3:xtic(2) with boxes title 'measured', \\
     '' using ($1-0.2):3:4:5 with yerrorbars lc rgb 'black' pt 0 notitle, \\
     '' using ($1+0.2):6 with boxes title 'planner (calibrated)'
"""
try:
    subprocess.run(["gnuplot"], input=gp, text=True, check=True)
    print(f"plot: {os.path.join(out, 'hetero.png')}")
except (OSError, subprocess.CalledProcessError) as e:
    print(f"no plot ({e}); install gnuplot-nox", file=sys.stderr)
