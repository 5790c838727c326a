#!/bin/sh
# device_all.sh - everything the GPU issue checks and measures on one machine
# with a CUDA device, in one run (device time is scarce): the kernel tests,
# the model and engine tests on the GPU, the transformers reference check,
# CPU-vs-GPU whole-model comparisons on mkmodel presets, and the 9B/27B benches.
# Usage: tests/gpu/device_all.sh BIN_DIR VOCAB.tiktoken LOG_DIR
# BIN_DIR holds cmpserve and the test_gpu_* programs (prebuilt for sm_90).
BIN=$1
VOCAB=$2
LOG=$3
mkdir -p "$LOG"
M=/tmp/cs_models
mkdir -p $M
step() { echo "== $* ($(date +%T))" | tee -a "$LOG/summary.txt"; }
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv >"$LOG/summary.txt" 2>&1

step "kernel tests (tests/gpu/run.sh)"
timeout 150 tests/gpu/run.sh "$BIN" "$LOG/gpu" >>"$LOG/summary.txt" 2>&1 || echo "gpu tests: FAIL or timeout" >>"$LOG/summary.txt"

step "model forward on the GPU (test_model_forward 0)"
timeout 60 "$BIN/test_model_forward" 0 >"$LOG/model_gpu.txt" 2>&1; tail -1 "$LOG/model_gpu.txt" >>"$LOG/summary.txt"

step "mkmodel presets"
for p in tiny 0.8b; do
    timeout 120 "$BIN/cmpserve" mkmodel --preset $p --type q8_0 --seed 1 --vocab "$VOCAB" --out $M/$p.gguf >>"$LOG/summary.txt" 2>&1
done

step "CPU vs GPU whole-model logits"
timeout 60 python3 tests/gpu/compare_cpu_gpu.py --cmpserve "$BIN/cmpserve" --model $M/tiny.gguf --positions 256 --decode 64 >>"$LOG/summary.txt" 2>&1
timeout 120 python3 tests/gpu/compare_cpu_gpu.py --cmpserve "$BIN/cmpserve" --model $M/0.8b.gguf --positions 256 --decode 32 >>"$LOG/summary.txt" 2>&1

step "generate on the GPU, twice, temperature 0 (tiny)"
for i in 1 2; do
    timeout 60 "$BIN/cmpserve" generate --model $M/tiny.gguf --device 0 --prompt "The capital of France is" -n 64 --temperature 0 >"$LOG/gen$i.txt" 2>"$LOG/gen$i.err"
done
cmp -s "$LOG/gen1.txt" "$LOG/gen2.txt" && echo "gpu greedy text identical twice" >>"$LOG/summary.txt"
timeout 60 "$BIN/cmpserve" generate --model $M/tiny.gguf --device cpu --prompt "The capital of France is" -n 64 --temperature 0 >"$LOG/gen_cpu.txt" 2>&1
cmp -s "$LOG/gen1.txt" "$LOG/gen_cpu.txt" && echo "gpu greedy text == cpu greedy text (64 tokens)" >>"$LOG/summary.txt"
tail -1 "$LOG/gen1.err" >>"$LOG/summary.txt"

step "pipeline on one GPU: 1, 2 and 3 worker processes (tiny), greedy and seeded"
for w in 1 2 3; do
    gs=$(echo 0,0,0 | cut -d, -f1-$w)
    timeout 90 "$BIN/cmpserve" generate --model $M/tiny.gguf --workers $w --gpus $gs --run-dir /tmp/csrun$w --prompt "Once upon a time" -n 48 --temperature 0 >"$LOG/pipe_g$w.txt" 2>"$LOG/pipe_g$w.err"
    timeout 90 "$BIN/cmpserve" generate --model $M/tiny.gguf --workers $w --gpus $gs --run-dir /tmp/csrun$w --prompt "Once upon a time" -n 48 --temperature 1 --seed 7 >"$LOG/pipe_s$w.txt" 2>"$LOG/pipe_s$w.err"
    tail -1 "$LOG/pipe_g$w.err" | sed "s/^/workers=$w greedy: /" >>"$LOG/summary.txt"
done
for w in 2 3; do
    cmp -s "$LOG/pipe_g1.txt" "$LOG/pipe_g$w.txt" && echo "pipeline greedy: $w workers == 1 worker" >>"$LOG/summary.txt" || echo "pipeline greedy: $w workers DIFFER from 1" >>"$LOG/summary.txt"
    cmp -s "$LOG/pipe_s1.txt" "$LOG/pipe_s$w.txt" && echo "pipeline seeded: $w workers == 1 worker" >>"$LOG/summary.txt" || echo "pipeline seeded: $w workers DIFFER from 1" >>"$LOG/summary.txt"
done

step "reference check against transformers"
timeout 240 python3 tests/reference/check_reference.py --cmpserve "$BIN/cmpserve" --cuda on --threads 16 >"$LOG/reference.txt" 2>&1
tail -15 "$LOG/reference.txt" >>"$LOG/summary.txt"

step "bench 9b"
timeout 150 "$BIN/cmpserve" mkmodel --preset 9b --type q8_0 --seed 1 --vocab "$VOCAB" --out $M/9b.gguf >>"$LOG/summary.txt" 2>&1
timeout 200 "$BIN/cmpserve" bench --model $M/9b.gguf --device 0 --prompt-lens 512,2048,8192 --gen 64 --depths 0,4096,32768 >"$LOG/bench9b.txt" 2>&1
cat "$LOG/bench9b.txt" >>"$LOG/summary.txt"
rm -f $M/9b.gguf
step "done"
