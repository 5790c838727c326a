#!/bin/sh
# check_sm70.sh - proves every kernels/cuda/*.cu builds for sm_70 (the CMP
# 100-210 and V100): each file is compiled to PTX by the build's nvcc, the PTX
# is retargeted to sm_70 and assembled by ptxas of CUDA 12.x (PyPI package
# nvidia-cuda-nvcc-cu12, which ships ptxas but no nvcc driver; CUDA 13 has
# dropped sm_70). ptxas then rejects any instruction sm_70 lacks (cp.async,
# TMA, bf16 arithmetic, clusters, newer MMA shapes) and static shared memory
# over 48 KB. Self-check: a planted cp.async kernel must be rejected.
# Caveat: the front end compiles with __CUDA_ARCH__ = 750 (the lowest target
# CUDA 13 knows), so code under `#if __CUDA_ARCH__ < 750` is not seen.
# Usage: check_sm70.sh SOURCE_DIR PYTHON NVCC   (exit 77 = skipped: tools absent)
set -u
SRC=$1
PY=$2
NVCC=${3:-}
. "$(dirname "$0")/find_tool.sh"
PTXAS=""
venv=$(dirname "$(dirname "$PY")")
for f in "$venv"/lib/python3*/site-packages/nvidia/cuda_nvcc/bin/ptxas; do
    [ -x "$f" ] && PTXAS=$f
done
if [ -z "$PTXAS" ] || ! "$PTXAS" --version | grep -q 'release 12\.'; then
    echo "SKIP: no CUDA 12 ptxas (pip install nvidia-cuda-nvcc-cu12 into the test venv)"
    exit 77
fi
if [ -z "$NVCC" ] || [ ! -x "$NVCC" ]; then
    echo "SKIP: no nvcc front end"
    exit 77
fi
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
MAXV=$("$PTXAS" --version | sed -nE 's/.*release 12\.([0-9]+).*/\1/p')
PTXV="8.$MAXV"   # CUDA 12.N reads PTX ISA 8.N (12.9 reads 8.8; clamp below)
[ "$MAXV" -gt 8 ] && PTXV=8.8

build70() {   # build70 FILE.cu NAME -> 0 when ptxas accepts it for sm_70
    "$NVCC" -ptx -arch=compute_75 -O3 --use_fast_math -I"$SRC" -o "$TMP/$2.ptx" "$1" \
        2>"$TMP/$2.fe.log" || { cat "$TMP/$2.fe.log"; return 2; }
    sed -E "s/^\.version [0-9.]+/.version $PTXV/; s/^\.target sm_75/.target sm_70/" \
        "$TMP/$2.ptx" >"$TMP/$2.70.ptx"
    "$PTXAS" -arch=sm_70 -O3 -o "$TMP/$2.cubin" "$TMP/$2.70.ptx" 2>"$TMP/$2.log"
}

cat >"$TMP/plant.cu" <<'CU'
__global__ void planted(const float *src, float *dst)
{
    __shared__ float s[32];
    unsigned a = (unsigned)__cvta_generic_to_shared(&s[threadIdx.x]);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(a), "l"(src + threadIdx.x));
    asm volatile("cp.async.wait_all;");
    dst[threadIdx.x] = s[threadIdx.x];
}
CU
if build70 "$TMP/plant.cu" plant; then
    echo "FAIL: the check accepted cp.async for sm_70"
    exit 1
fi
echo "ok: planted cp.async rejected for sm_70"

# one ptxas run per file, as many at once as there are cores
ls "$SRC"/kernels/cuda/*.cu >"$TMP/files" 2>/dev/null
n=$(wc -l <"$TMP/files")
[ "$n" -gt 0 ] || { echo "FAIL: no kernels/cuda/*.cu found"; exit 1; }
export NVCC PTXAS PTXV SRC TMP
jobs=$(nproc 2>/dev/null || echo 2)
xargs -P "$jobs" -I{} sh -c '
    f={}; name=$(basename "$f" .cu)
    if "$NVCC" -ptx -arch=compute_75 -O3 --use_fast_math -I"$SRC" -o "$TMP/$name.ptx" "$f" \
           2>"$TMP/$name.log" &&
       sed -E "s/^\.version [0-9.]+/.version $PTXV/; s/^\.target sm_75/.target sm_70/" \
           "$TMP/$name.ptx" >"$TMP/$name.70.ptx" &&
       "$PTXAS" -arch=sm_70 -O3 -o "$TMP/$name.cubin" "$TMP/$name.70.ptx" 2>>"$TMP/$name.log"
    then echo "ok: $name"; else echo "FAIL: $name"; fi' <"$TMP/files" >"$TMP/results"
cat "$TMP/results"
if grep -q '^FAIL' "$TMP/results"; then
    for name in $(sed -n 's/^FAIL: //p' "$TMP/results"); do
        echo "--- $name:"
        cat "$TMP/$name.log"
    done
    exit 1
fi
echo "PASS: $n files build for sm_70"
exit 0
