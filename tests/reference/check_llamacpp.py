#!/usr/bin/env python3
"""check_llamacpp.py - proves that a GGUF written by `cmpserve mkmodel` loads in
llama.cpp and that llama.cpp computes the same logits as cmpserve on it
(foundation issue, item 8: "the files must also load in llama.cpp").

It loads MODEL with the llama-cpp-python bindings (which build llama.cpp from
source: `CMAKE_ARGS="-DGGML_CUDA=off" pip install llama-cpp-python`; 0.3.36 was
used), tokenizes a fixed English text with llama.cpp's tokenizer (from the
GGUF's embedded vocabulary), evaluates it, then runs `cmpserve logits` on the
same ids (CPU backend, fp32 path and --int8 path) and prints top-1 agreement
and mean KL(llama.cpp || cmpserve) over the positions. Not run by ctest: it
needs llama.cpp, whose build takes ~15 minutes on 2 cores.

usage: check_llamacpp.py MODEL.gguf PATH/TO/cmpserve
"""
import struct
import subprocess
import sys

import numpy as np
from llama_cpp import Llama


def main():
    model, binary = sys.argv[1], sys.argv[2]
    m = Llama(model_path=model, n_ctx=512, logits_all=True, verbose=False, n_threads=2)
    text = (b"The quick brown fox jumps over the lazy dog. In 2026, inference servers ran on "
            b"old mining cards; ") * 2
    toks = m.tokenize(text, add_bos=False, special=False)[:64]
    m.eval(toks)
    ref = np.array(m.scores[:len(toks)], dtype=np.float64)

    def ours(extra):
        subprocess.run([binary, "logits", "--model", model, "--tokens", ",".join(map(str, toks)),
                        "--out", "/tmp/check_llamacpp.bin"] + extra, check=True)
        d = open("/tmp/check_llamacpp.bin", "rb").read()
        _, n, v, _, _ = struct.unpack_from("<5I", d, 4)
        return np.frombuffer(d, np.float32, n * v, 24 + 8 * n).reshape(n, v).astype(np.float64)

    def log_softmax(x):
        mx = x.max(-1, keepdims=True)
        return x - mx - np.log(np.exp(x - mx).sum(-1, keepdims=True))

    for name, extra in (("cpu fp32", []), ("cpu int8", ["--int8"])):
        o = ours(extra)
        p, q = log_softmax(ref), log_softmax(o)
        print(f"{model}: llama.cpp vs cmpserve {name}: {len(toks)} positions, "
              f"top-1 {(o.argmax(-1) == ref.argmax(-1)).mean():.3f}, "
              f"mean KL {(np.exp(p) * (p - q)).sum(-1).mean():.2e}")


if __name__ == "__main__":
    main()
