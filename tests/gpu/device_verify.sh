#!/bin/sh
# device_verify.sh - after a kernel change, in one device call (~7 min on an
# H200): correctness first, then every figure docs/PERF.md quotes.
#   1. tests/gpu/run.sh (kernel tests against the CPU, CUDA graphs);
#   2. the same tokens from the in-process engine and 1, 2, 3 worker
#      processes on the 9B preset, greedy and seeded (compared, not just
#      printed);
#   3. the transformers reference check on the CUDA backend;
#   4. cmpserve bench on the 9B and 27B presets and bench --kernels; the 9B
#      decode at batch sizes 1 to 16, and 24 to 64 at depth 0 (tokens equal at every size,
#      compared);
#   5. the pipeline bench (27B, 3 workers on GPU 0);
#   6. where ncu exists, a decode-step profile (tests/gpu/ncu_decode_profile.py).
# Usage: tests/gpu/device_verify.sh BIN_DIR VOCAB.tiktoken LOG_DIR [quick]
# quick: skip steps 5 and 6 (about two minutes less).
# Models: /tmp/cs_models/9b.gguf and 27b.gguf, made by mkmodel unless a
# caller of this script left them there (it removes them when done).
# BIN_DIR holds cmpserve and the test_gpu_* programs built for this GPU; set
# LD_LIBRARY_PATH first where they need carried libraries. The sm_70-75
# code paths (no PDL, clusters or cp.async) run on a newer GPU from a build
# configured with -DCS_CUDA_ARCHS=75-virtual (PTX the driver compiles; the
# log says "kernels compiled for sm_75"); its texts must equal the native
# build's (docs/VALIDATION.md, twenty-fifth session). Prints
# LOG_DIR/summary.txt; exit 1 when a test or an equality failed.
BIN=$1
VOCAB=$2
LOG=$3
QUICK=$4
if [ -z "$BIN" ] || [ -z "$VOCAB" ] || [ -z "$LOG" ]; then
    echo "usage: tests/gpu/device_verify.sh BIN_DIR VOCAB.tiktoken LOG_DIR" >&2
    exit 2
fi
mkdir -p "$LOG"
M=/tmp/cs_models
mkdir -p $M
S=$LOG/summary.txt
status=0
step() { echo "== $* ($(date +%T))" >>"$S"; }
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv >"$S" 2>&1

step "GPU tests"
timeout 300 tests/gpu/run.sh "$BIN" "$LOG/gpu" >"$LOG/gpu_run.txt" 2>&1 || status=1
grep -E "FAIL|failed checks|tests,|exit=" "$LOG/gpu_run.txt" >>"$S"
grep -E "attn|gdn" "$LOG/gpu/bench_gpu_launch.log" >>"$S" 2>/dev/null
grep -vE "^RESULT|checks" "$LOG/gpu/test_gpu_gdn_chunked.log" >>"$S" 2>/dev/null

# gen LABEL ARGS...: writes LOG/LABEL.txt (the text) and one summary line
gen() {
    lab=$1
    shift
    timeout 120 "$BIN/cmpserve" generate --prompt "The quick brown fox" --log-level info "$@" \
        >"$LOG/$lab.out" 2>"$LOG/$lab.err"
    rc=$?
    echo $rc >"$LOG/$lab.rc"
    cp "$LOG/$lab.out" "$LOG/$lab.txt"   # stdout is the text; the rates go to stderr
    echo "$lab: rc=$rc md5 $(md5sum <"$LOG/$lab.txt" | cut -c1-8) $(grep -a 'prompt tokens' \
        "$LOG/$lab.err")" >>"$S"
    grep -a "steps over" "$LOG/$lab.err" | sed 's/.*INFO //' | cut -c1-200 >>"$S"
}
same() {   # same A B: both runs succeeded with some text, and the texts are byte-identical
    if [ "$(cat "$LOG/$1.rc")" = 0 ] && [ "$(cat "$LOG/$2.rc")" = 0 ] && [ -s "$LOG/$1.txt" ] &&
        cmp -s "$LOG/$1.txt" "$LOG/$2.txt"; then
        echo "equal: $1 == $2" >>"$S"
    else
        echo "DIFFER: $1 != $2" >>"$S"
        status=1
    fi
}
step "same tokens across process counts (9B)"
[ -s $M/9b.gguf ] || timeout 150 "$BIN/cmpserve" mkmodel --preset 9b --type q8_0 --seed 1 --vocab "$VOCAB" --out $M/9b.gguf >/dev/null 2>&1
G="-n 128 --temperature 0"
R="-n 64 --temperature 0.8 --top-p 0.9 --seed 5"
gen greedy_inproc --model $M/9b.gguf --device 0 $G
gen greedy_1w --model $M/9b.gguf --workers 1 --gpus 0 $G
gen greedy_2w --model $M/9b.gguf --workers 2 --gpus 0,0 $G
gen greedy_3w --model $M/9b.gguf --workers 3 --gpus 0,0,0 $G
gen seeded_inproc --model $M/9b.gguf --device 0 $R
gen seeded_3w --model $M/9b.gguf --workers 3 --gpus 0,0,0 $R
same greedy_inproc greedy_1w
same greedy_inproc greedy_2w
same greedy_inproc greedy_3w
same seeded_inproc seeded_3w

step "transformers reference (CUDA)"
timeout 240 python3 tests/reference/check_reference.py --cmpserve "$BIN/cmpserve" --cuda on --threads 16 \
    >"$LOG/reference.txt" 2>&1 || status=1
grep -E "^f32|^q8_0|RESULT" "$LOG/reference.txt" >>"$S"

step "bench 9B"
timeout 240 "$BIN/cmpserve" bench --model $M/9b.gguf --device 0 --prompt-lens 2048,8192,32768 --gen 64 \
    --depths 0,4096,32768 >"$LOG/bench9b.txt" 2>&1
grep -iE "probe|model|prefill|decode" "$LOG/bench9b.txt" >>"$S"
step "bench 9B, batched decode (every sequence's tokens equal the first row's)"
timeout 150 "$BIN/cmpserve" bench --model $M/9b.gguf --device 0 --prompt-lens 512 --gen 32 \
    --depths 0,4096,32768 --batch 1,2,4,8,16 >"$LOG/bench9b_batch.txt" 2>&1 || status=1
grep -iE "decode|batched" "$LOG/bench9b_batch.txt" >>"$S"
# 24-64 sequences at depth 0 only (64 sequences at depth 32,768 would not fit the KV cache): the
# calls whose kernel the per-shape timing picks (kernels/cuda/matmul_tune.h)
timeout 120 "$BIN/cmpserve" bench --model $M/9b.gguf --device 0 --prompt-lens 512 --gen 32 \
    --depths 0 --batch 1,24,32,48,64 >"$LOG/bench9b_batch64.txt" 2>&1 || status=1
grep -iE "decode at" "$LOG/bench9b_batch64.txt" >>"$S"
step "bench --kernels"
timeout 120 "$BIN/cmpserve" bench --kernels --device 0 >"$LOG/bench_kernels.txt" 2>&1
grep -iE "matmul only" "$LOG/bench_kernels.txt" >>"$S"

step "bench 27B (one worker) and the pipeline bench (3 workers)"
[ -s $M/27b.gguf ] || timeout 150 "$BIN/cmpserve" mkmodel --preset 27b --type q8_0 --seed 1 --vocab "$VOCAB" --out $M/27b.gguf >/dev/null 2>&1
timeout 200 "$BIN/cmpserve" bench --model $M/27b.gguf --device 0 --prompt-lens 2048 --gen 32 --depths 0 \
    >"$LOG/bench27b.txt" 2>&1
grep -iE "probe|model|prefill|decode" "$LOG/bench27b.txt" >>"$S"
[ "$QUICK" = quick ] || timeout 300 python3 tests/gpu/pipeline_bench.py --cmpserve "$BIN/cmpserve" --model $M/27b.gguf --workers 3 \
    --gpus 0,0,0 >"$LOG/pipeline_bench.txt" 2>&1
grep -a "^BENCH" "$LOG/pipeline_bench.txt" >>"$S" 2>/dev/null
rm -f $M/27b.gguf

if [ "$QUICK" != quick ] && command -v ncu >/dev/null 2>&1; then
    step "ncu decode profile (9B)"
    timeout 150 ncu --metrics gpu__time_duration.sum,dram__bytes_read.sum --csv --log-file "$LOG/ncu.csv" \
        "$BIN/cmpserve" generate --model $M/9b.gguf --prompt "hello world" -n 3 --temperature 0 --device 0 \
        >"$LOG/ncu_run.txt" 2>&1
    python3 tests/gpu/ncu_decode_profile.py "$LOG/ncu.csv" >"$LOG/ncu_profile.txt" 2>&1
    sed -n '1,25p' "$LOG/ncu_profile.txt" >>"$S"
    gzip -f "$LOG/ncu.csv"
fi
rm -f $M/9b.gguf
step "done (status $status)"
cat "$S"
exit $status
