#!/usr/bin/env python3
"""ncu_decode_profile.py - where a decode step's GPU time goes, from an ncu CSV.

Input: the log of
  ncu --metrics gpu__time_duration.sum,dram__bytes_read.sum --csv --log-file F \\
      cmpserve generate --model M --device 0 -n 3 --temperature 0 ...
(ncu serializes kernels, runs them at base clocks and flushes caches between
them, so small kernels read slower than they run in a CUDA graph: use the
shares and the per-call bandwidths, not the sum, as the step time.)

Steps are split at the sampler's last kernel (k_samp_choose). Prints each
step's kernel count, time and DRAM bytes, then for the last full step the
time per kernel name and every matrix launch (grid, block, us, MB, GB/s).
usage: ncu_decode_profile.py LOG.csv[.gz]
"""
import collections
import csv
import gzip
import re
import sys

SCALE = {"nsecond": 1, "usecond": 1e3, "msecond": 1e6, "second": 1e9,
         "byte": 1, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9}
T = "gpu__time_duration.sum"
D = "dram__bytes_read.sum"


def read_kernels(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        lines = [l for l in f if l.startswith('"')]
    by_id = collections.OrderedDict()
    for x in csv.DictReader(lines):
        k = by_id.setdefault(x["ID"], {"name": re.sub(r"\(.*", "", x["Kernel Name"]),
                                        "grid": x.get("Grid Size", ""),
                                        "block": x.get("Block Size", "")})
        k[x["Metric Name"]] = float(x["Metric Value"].replace(",", "")) * SCALE.get(x.get("Metric Unit", ""), 1)
    return list(by_id.values())


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    rows = read_kernels(sys.argv[1])
    steps = [[]]
    for r in rows:
        steps[-1].append(r)
        if "samp_choose" in r["name"]:
            steps.append([])
    steps = [s for s in steps if s]
    print("kernels profiled:", len(rows), "steps:", len(steps))
    for i, s in enumerate(steps):
        print("step %d: %d kernels, %.1f us, %.1f MB dram read" % (
            i, len(s), sum(r.get(T, 0) for r in s) / 1e3, sum(r.get(D, 0) for r in s) / 1e6))
    if not steps:
        return 1
    last = steps[-2] if len(steps) >= 2 and len(steps[-1]) < 10 else steps[-1]
    agg = collections.defaultdict(lambda: [0, 0.0, 0.0])
    for r in last:
        a = agg[r["name"][:60]]
        a[0] += 1
        a[1] += r.get(T, 0)
        a[2] += r.get(D, 0)
    tot = sum(a[1] for a in agg.values())
    print("last full decode step: %.1f us kernel time" % (tot / 1e3))
    for n, (c, v, d) in sorted(agg.items(), key=lambda kv: -kv[1][1]):
        print("%8.1f us %5.1f%% %4d x %8.1f MB %6.0f GB/s  %s" % (
            v / 1e3, 100 * v / tot, c, d / 1e6, d / v if v else 0, n))
    print("--- matrix launches of that step: name grid block us MB GB/s ---")
    for r in last:
        if "gemv" in r["name"] or "gemm" in r["name"]:
            v, d = r.get(T, 0), r.get(D, 0)
            print("%-30s %-14s %-12s %7.2f %8.2f %6.0f" % (r["name"][:30], r["grid"], r["block"],
                                                        v / 1e3, d / 1e6, d / v if v else 0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
