#!/bin/sh
# check_sass.sh - proves no kernel of the CUDA backend uses a tensor-core
# (MMA-class) instruction: dumps the SASS of every kernel compiled into the
# library (every architecture of the build, sm_90 included) with cuobjdump and
# fails on any opcode of the MMA family (HMMA, IMMA, BMMA, DMMA, QMMA, OMMA,
# HGMMA/IGMMA/QGMMA/BGMMA, UTC*MMA, ...). Self-checks first that it detects a
# planted HMMA (a tiny wmma kernel built with nvcc, when nvcc is present) and
# that the dump of the library really holds the backend's kernels, so it
# cannot pass on an empty dump.
# Usage: check_sass.sh LIBRARY PYTHON NVCC   (exit 77 = skipped: no cuobjdump)
set -u
LIB=$1
PY=$2
NVCC=${3:-}
. "$(dirname "$0")/find_tool.sh"
OBJDUMP=$(cs_find_tool cuobjdump "$PY")
if [ -z "$OBJDUMP" ]; then
    echo "SKIP: no cuobjdump (pip install nvidia-cuda-cuobjdump into the test venv)"
    exit 77
fi
# cuobjdump -sass runs nvdisasm (PyPI: nvidia-cuda-nvdisasm)
NVDISASM=$(cs_find_tool nvdisasm "$PY")
if [ -z "$NVDISASM" ]; then
    echo "SKIP: no nvdisasm (pip install nvidia-cuda-nvdisasm into the test venv)"
    exit 77
fi
PATH=$(dirname "$NVDISASM"):$PATH
export PATH
if [ ! -f "$LIB" ]; then
    echo "FAIL: $LIB not built"
    exit 1
fi
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
# Opcodes whose base name (before any .modifier) ends in MMA. HFMA2.MMA is an
# ordinary fp16 FMA issued on that pipe (the compiler's constant moves), not a
# tensor-core operation, so the base name is what counts.
mma_lines() {
    awk '/\/\*[0-9a-f]+\*\// {
        line = $0
        sub(/^[^*]*\/\*[0-9a-f]+\*\/[ \t]*/, "", line)
        sub(/^@!?U?P[0-9T]+[ \t]+/, "", line)
        split(line, f, /[ \t;]+/)
        base = f[1]
        sub(/\..*/, "", base)
        if (base ~ /^[A-Z0-9]*MMA$/) print $0
    }' "$1"
}

# 1. the detector detects (when nvcc can build the planted kernel)
if [ -n "$NVCC" ] && [ -x "$NVCC" ]; then
    cat >"$TMP/plant.cu" <<'CU'
#include <mma.h>
using namespace nvcuda;
__global__ void planted(const half *a, const half *b, float *c)
{
    wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::col_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;
    wmma::fill_fragment(fc, 0.0f);
    wmma::load_matrix_sync(fa, a, 16);
    wmma::load_matrix_sync(fb, b, 16);
    wmma::mma_sync(fc, fa, fb, fc);
    wmma::store_matrix_sync(c, fc, 16, wmma::mem_row_major);
}
CU
    if "$NVCC" -c -arch=sm_90 -o "$TMP/plant.o" "$TMP/plant.cu" 2>"$TMP/nvcc.log"; then
        "$OBJDUMP" -sass "$TMP/plant.o" >"$TMP/plant.sass"
        if [ -z "$(mma_lines "$TMP/plant.sass")" ]; then
            echo "FAIL: the check does not see the HMMA of a planted wmma kernel"
            exit 1
        fi
        echo "ok: planted wmma kernel detected"
    else
        echo "note: nvcc could not build the planted kernel; detector self-test skipped"
    fi
fi

# 2. the library's SASS
if ! "$OBJDUMP" -sass "$LIB" >"$TMP/lib.sass" 2>"$TMP/err.log"; then
    echo "FAIL: cuobjdump could not read $LIB:"
    cat "$TMP/err.log"
    exit 1
fi
n_fn=$(grep -c 'Function :' "$TMP/lib.sass")
for k in k_gdn k_attn_decode k_attn_prefill k_samp_select k_rmsnorm; do
    if ! grep -q "Function : .*$k" "$TMP/lib.sass"; then
        echo "FAIL: kernel $k missing from the SASS dump ($n_fn functions)"
        exit 1
    fi
done
archs=$(grep -oE 'arch = sm_[0-9]+a?' "$TMP/lib.sass" | sort -u | tr '\n' ' ')
bad=$(mma_lines "$TMP/lib.sass" | head -20)
if [ -n "$bad" ]; then
    echo "FAIL: MMA-class instructions in the CUDA backend:"
    echo "$bad"
    exit 1
fi
echo "PASS: $n_fn kernel functions ($archs) without MMA-class instructions"
exit 0
