#!/usr/bin/env python3
"""Where a decode step goes inside the CUDA graph, from a kernel_trace.c CSV.

Usage: kernel_trace_report.py TRACE.csv [--top 40]

A step is delimited by the embedding kernel (its first kernel). Consecutive
steps with the same kernel count form a run (a decode at one depth; the
prefill chunks between runs have other counts); every run of 16 or more steps
is reported, skipping its first 4 steps (graph warm-up).

Per kernel: the mean duration, and its increment on the critical path: the
time by which its end extends the step's running end (kernels of one stream
finish in order, so the increments add up to the step's span, first kernel
included). Under PDL a kernel overlaps its predecessor, so its increment is
what it adds, not what it lasts."""
import argparse
import collections
import csv
import re
import sys


def short_name(mangled):
    """_Z15gemv_seg_kernelILi4EEvPKv -> gemv_seg_kernel<Li4E>."""
    if mangled.startswith('['):
        return mangled
    m = re.match(r'_Z(?:L)?(\d+)', mangled)
    if not m:
        return mangled[:60]
    n = int(m.group(1))
    start = m.end()
    name = mangled[start:start + n]
    rest = mangled[start + n:]
    if rest.startswith('I'):   # template arguments: I ... E, literals L ... E, nested N ... E
        depth, i, literal = 0, 0, False
        for i, ch in enumerate(rest):
            if literal:
                literal = ch != 'E'
            elif ch == 'L':
                literal = True
            elif ch in 'IN':
                depth += 1
            elif ch == 'E':
                depth -= 1
                if depth == 0:
                    break
        name += '<' + rest[1:i][:40] + '>'
    return name


def load(path):
    rows = []
    with open(path, newline='') as f:
        for r in csv.DictReader(f):
            try:
                rows.append((int(r['start_ns']), int(r['end_ns']), short_name(r['name'])))
            except (KeyError, ValueError):
                continue
    rows.sort()
    return rows


def steps_of(rows):
    starts = [i for i, r in enumerate(rows) if r[2].startswith('k_embed')]
    return [(starts[j], starts[j + 1]) for j in range(len(starts) - 1)]


def runs_of(steps):
    runs, cur = [], []
    for a, b in steps:
        if cur and (b - a) != (cur[-1][1] - cur[-1][0]):
            runs.append(cur)
            cur = []
        cur.append((a, b))
    if cur:
        runs.append(cur)
    return [r for r in runs if len(r) >= 16]


def critical_path(rows, run):
    """The run's steps past the first 4: (steps used, mean span in ns, {kernel: [calls a step,
    increment ns a step, mean duration ns]})."""
    use = run[4:]
    inc = collections.defaultdict(float)
    dur = collections.defaultdict(float)
    calls = collections.Counter()
    span = 0.0
    for a, b in use:
        t_end = rows[a][0]
        for i in range(a, b):
            st, en, nm = rows[i]
            inc[nm] += max(0, en - t_end)
            dur[nm] += en - st
            calls[nm] += 1
            t_end = max(t_end, en)
        span += t_end - rows[a][0]
    n = len(use)
    per = {nm: [calls[nm] / n, inc[nm] / n, dur[nm] / calls[nm]] for nm in inc}
    return n, span / n, per


def report(rows, run, top):
    n, span, per = critical_path(rows, run)
    nk = run[0][1] - run[0][0]
    print(f'run of {len(run)} steps, {nk} kernels a step; mean step span {span / 1e3:.1f} us '
          f'(first embed start to last end), {n} steps used')
    print(f'  {"kernel":44s} {"calls":>5s} {"incr us":>9s} {"share":>6s} {"dur us":>8s}')
    total = sum(v[1] for v in per.values())
    for nm in sorted(per, key=lambda x: -per[x][1])[:top]:
        c, i, d = per[nm]
        print(f'  {nm:44s} {c:5.1f} {i / 1e3:9.1f} {100 * i / total:5.1f}% {d / 1e3:8.2f}')


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('trace')
    ap.add_argument('--top', type=int, default=40)
    args = ap.parse_args()
    rows = load(args.trace)
    runs = runs_of(steps_of(rows))
    if not runs:
        print('no run of 16 or more steps delimited by k_embed kernels', file=sys.stderr)
        return 1
    for run in runs:
        report(rows, run, args.top)
    return 0


if __name__ == '__main__':
    sys.exit(main())
