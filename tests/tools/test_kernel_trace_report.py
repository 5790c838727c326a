#!/usr/bin/env python3
"""tools.kernel_trace_report: tests/gpu/kernel_trace_report.py's arithmetic on
a synthetic trace with known answers (the report runs on GPU machines only, so
this is where its logic is checked).

Proves: mangled names are shortened to the kernel name and its template
arguments; steps are cut at the embedding kernel and runs at a change of the
kernel count (a prefill between two decodes is not a run); a kernel that
overlaps its predecessor (PDL) is charged only the time its end adds; the
increments add up to the step's span; the first 4 steps of a run are left
out; rows arrive unsorted.
Usage: test_kernel_trace_report.py REPO_ROOT"""
import os
import random
import sys
import tempfile

sys.path.insert(0, os.path.join(sys.argv[1], 'tests', 'gpu'))
import kernel_trace_report as ktr  # noqa: E402

failures = 0


def check(cond, what):
    global failures
    if not cond:
        failures += 1
        print('FAIL:', what)


EMBED = '_Z12k_embed_q8_0PfPKaPK6__halfllPKi'
GEMV = '_Z15gemv_seg_kernelILi1ELb1ELb0ELb1ELb0EEv8mm_partsiiPKf'
GDN = '_Z5k_gdn8gdn_argsPKiS1_i'


def decode_step(t0, slow):
    """embed 0-2 us; GEMV 1-10 (overlaps the embed: adds 8); k_gdn 5-12 (adds 2);
    GEMV 11-20 + slow (adds 8 + slow). Span 20 + slow us."""
    us = 1000
    return [(t0, t0 + 2 * us, EMBED), (t0 + 1 * us, t0 + 10 * us, GEMV),
            (t0 + 5 * us, t0 + 12 * us, GDN), (t0 + 11 * us, t0 + (20 + slow) * us, GEMV)]


def main():
    check(ktr.short_name(GEMV) == 'gemv_seg_kernel<Li1ELb1ELb0ELb1ELb0E>',
          'template arguments kept: ' + ktr.short_name(GEMV))
    check(ktr.short_name(GDN) == 'k_gdn', 'plain name: ' + ktr.short_name(GDN))
    check(ktr.short_name('[memcpy]') == '[memcpy]', 'copies keep their tag')

    rows, t = [], 0
    for i in range(20):           # run 1: 20 decode steps, the first 4 slower (warm-up)
        rows += decode_step(t, 5 if i < 4 else 0)
        t += 100000
    rows += [(t, t + 2000, EMBED)] + [(t + 1000 * k, t + 1000 * k + 500, GEMV) for k in range(1, 9)]
    t += 100000                   # a prefill step of 9 kernels between the runs
    for i in range(18):           # run 2: 18 decode steps
        rows += decode_step(t, 0)
        t += 100000
    rows += [(t, t + 2000, EMBED)]   # the step after the last delimits it
    random.seed(1)
    random.shuffle(rows)
    with tempfile.NamedTemporaryFile('w', suffix='.csv', delete=False) as f:
        f.write('start_ns,end_ns,graph_node,stream,blocks,name\n')
        for st, en, nm in rows:
            f.write(f'{st},{en},0,7,128,{nm}\n')
        path = f.name
    loaded = ktr.load(path)
    os.unlink(path)
    runs = ktr.runs_of(ktr.steps_of(loaded))
    check(len(runs) == 2, f'two decode runs, the prefill step between them no run: {len(runs)}')
    if len(runs) == 2:
        check(len(runs[0]) == 20 and len(runs[1]) == 18,
              f'run lengths 20 and 18: {len(runs[0])}, {len(runs[1])}')
        n, span, per = ktr.critical_path(loaded, runs[0])
        check(n == 16, f'the first 4 steps left out: {n} used')
        check(abs(span - 20000) < 1e-6, f'span 20 us (warm-up steps excluded): {span}')
        gemv = per.get('gemv_seg_kernel<Li1ELb1ELb0ELb1ELb0E>')
        check(gemv is not None and gemv[0] == 2 and abs(gemv[1] - 16000) < 1e-6,
              f'two GEMVs a step adding 8 us each: {gemv}')
        check(abs(per['k_gdn'][1] - 2000) < 1e-6 and abs(per['k_gdn'][2] - 7000) < 1e-6,
              f'k_gdn adds 2 us though it lasts 7: {per["k_gdn"]}')
        check(abs(sum(v[1] for v in per.values()) - span) < 1e-6, 'increments add up to the span')
    print('kernel_trace_report:', 'FAIL' if failures else 'ok', f'({failures} failed)')
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
