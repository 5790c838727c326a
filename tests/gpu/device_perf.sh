#!/bin/sh
# device_perf.sh - the shorter GPU run after a kernel change: the GPU tests
# (tests/gpu/run.sh, including the graph test), the model forward on the GPU,
# CPU-vs-GPU whole-model logits, and the 9B and 27B benches.
# Usage: tests/gpu/device_perf.sh BIN_DIR VOCAB.tiktoken LOG_DIR
BIN=$1
VOCAB=$2
LOG=$3
mkdir -p "$LOG"
M=/tmp/cs_models
mkdir -p $M
step() { echo "== $* ($(date +%T))" | tee -a "$LOG/summary.txt"; }
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv >"$LOG/summary.txt" 2>&1

step "GPU tests (tests/gpu/run.sh)"
timeout 120 tests/gpu/run.sh "$BIN" "$LOG/gpu" >>"$LOG/summary.txt" 2>&1 || echo "gpu tests: FAIL or timeout" >>"$LOG/summary.txt"
grep -h "RESULT\|graph" "$LOG"/gpu/test_gpu_graph.log >>"$LOG/summary.txt" 2>/dev/null

step "model forward on the GPU (test_model_forward 0)"
timeout 60 "$BIN/test_model_forward" 0 >"$LOG/model_gpu.txt" 2>&1; tail -1 "$LOG/model_gpu.txt" >>"$LOG/summary.txt"

step "CPU (int8 path) vs GPU whole-model logits"
for p in tiny 0.8b; do
    timeout 60 "$BIN/cmpserve" mkmodel --preset $p --type q8_0 --seed 1 --vocab "$VOCAB" --out $M/$p.gguf >/dev/null 2>&1
done
timeout 60 python3 tests/gpu/compare_cpu_gpu.py --cmpserve "$BIN/cmpserve" --model $M/tiny.gguf --positions 256 --decode 64 >>"$LOG/summary.txt" 2>&1
timeout 120 python3 tests/gpu/compare_cpu_gpu.py --cmpserve "$BIN/cmpserve" --model $M/0.8b.gguf --positions 256 --decode 32 >>"$LOG/summary.txt" 2>&1

step "bench 9b"
timeout 100 "$BIN/cmpserve" mkmodel --preset 9b --type q8_0 --seed 1 --vocab "$VOCAB" --out $M/9b.gguf >>"$LOG/summary.txt" 2>&1
timeout 150 "$BIN/cmpserve" bench --model $M/9b.gguf --device 0 --prompt-lens 512,2048,8192 --gen 64 --depths 0,4096,32768 >"$LOG/bench9b.txt" 2>&1
grep -v INFO "$LOG/bench9b.txt" >>"$LOG/summary.txt"
rm -f $M/9b.gguf

step "bench 27b (one worker)"
timeout 100 "$BIN/cmpserve" mkmodel --preset 27b --type q8_0 --seed 1 --vocab "$VOCAB" --out $M/27b.gguf >>"$LOG/summary.txt" 2>&1
timeout 120 "$BIN/cmpserve" bench --model $M/27b.gguf --device 0 --prompt-lens 2048 --gen 32 --depths 0 >"$LOG/bench27b.txt" 2>&1
grep -v INFO "$LOG/bench27b.txt" >>"$LOG/summary.txt"
rm -f $M/27b.gguf
step "done"
