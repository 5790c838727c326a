#!/bin/sh
# run.sh - run every GPU test and benchmark of tests/gpu on a machine with a
# CUDA device, and print a summary table (test, result, error figure).
# Usage: tests/gpu/run.sh [BIN_DIR] [LOG_DIR]
#   BIN_DIR: where test_gpu_* and bench_gpu_* are (default: build/bin)
#   LOG_DIR: where each program's full output goes (default: a temp dir)
# Exit status: 0 when every test passed, 1 otherwise.
BIN=${1:-build/bin}
LOG=${2:-$(mktemp -d)}
mkdir -p "$LOG"
status=0
for t in "$BIN"/test_gpu_*; do
    [ -x "$t" ] || continue
    name=$(basename "$t")
    "$t" >"$LOG/$name.log" 2>&1
    rc=$?
    echo "$name exit=$rc" >>"$LOG/summary.txt"
    [ $rc -eq 0 ] || status=1
done
for b in "$BIN"/bench_gpu_*; do
    [ -x "$b" ] || continue
    "$b" >"$LOG/$(basename "$b").log" 2>&1 || echo "$(basename "$b") failed" >>"$LOG/summary.txt"
done
echo "== GPU tests ($(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)) =="
printf '%-16s %-40s %-6s %s\n' program check result error
for f in "$LOG"/test_gpu_*.log; do
    [ -f "$f" ] || continue
    prog=$(basename "$f" .log)
    if grep -q '^RESULT' "$f"; then
        grep '^RESULT' "$f" | sed 's/^RESULT //' | while read -r line; do
            chk=$(echo "$line" | sed -E 's/ +(PASS|FAIL) .*//')
            res=$(echo "$line" | grep -oE ' (PASS|FAIL) ' | tr -d ' ')
            err=$(echo "$line" | sed -E 's/.* (PASS|FAIL) //')
            printf '%-16s %-40s %-6s %s\n' "$prog" "$chk" "$res" "$err"
        done
    fi
    # programs using tests/test_util.h end with "N tests, N checks, N failed"
    tail -1 "$f" | sed "s/^/$prog: /"
done
cat "$LOG/summary.txt"
echo "== benchmarks =="
cat "$LOG"/bench_gpu_*.log 2>/dev/null | grep '^BENCH' | sed 's/^BENCH //'
n_fail=$(cat "$LOG"/test_gpu_*.log 2>/dev/null | grep -c '^RESULT.* FAIL ')
echo "failed checks: $n_fail; logs in $LOG"
[ "$n_fail" -eq 0 ] || status=1
exit $status
