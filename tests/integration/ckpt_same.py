#!/usr/bin/python3
"""Compares the final checkpoints of two runs (stage-*-step-N.ckpt in two directories, the
format of noderuntime/train/checkpoint.h: parameters, first and second AdamW moments):
  ckpt_same.py DIR_A DIR_B STEP PARAM_TOL MOMENT_TOL
Each set's largest difference, as a fraction of the largest magnitude, is printed; exit 1 when
the stage files differ in number or length, or a difference exceeds its tolerance."""
import glob
import struct
import sys


def stages(d, step):
    fs = sorted(glob.glob("%s/stage-*-step-%09d.ckpt" % (d, step)))
    out = []
    for f in fs:
        b = open(f, "rb").read()
        k = struct.unpack_from("<Q", b, 96)[0]
        out.append([struct.unpack_from("<%df" % k, b, 256 + 4 * k * i) for i in range(3)])
    return out


def main():
    a, b, step, ptol, mtol = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
    sa, sb = stages(a, step), stages(b, step)
    if not sa or len(sa) != len(sb):
        print("  checkpoints of step %d: %d stage files against %d" % (step, len(sa), len(sb)))
        return 1
    ok = True
    for xa, xb in zip(sa, sb):
        for i, (name, tol) in enumerate((("parameters", ptol), ("first moments", mtol), ("second moments", mtol))):
            if len(xa[i]) != len(xb[i]):
                print("  %s: %d values against %d" % (name, len(xa[i]), len(xb[i])))
                ok = False
                continue
            d = max(abs(x - y) for x, y in zip(xa[i], xb[i])) / max(abs(y) for y in xb[i])
            print("  %s: largest difference %.2g of the largest magnitude" % (name, d))
            ok = ok and d <= tol
    return 0 if ok else 1


sys.exit(main())
