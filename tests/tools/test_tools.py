#!/usr/bin/env python3
"""Proves the contracts of the cmpserve tool subcommands on the CPU backend:

- mkmodel: the same arguments give a byte-identical file (whatever --threads),
  another seed a different one; bad flags are usage errors (exit 2).
- generate: identical text twice at temperature 0, identical twice with the
  same seed at temperature 1, different with another seed; the summary line.
- logits: the output file's header and layout; argmax column = argmax of each
  row; greedy decode feeds back the argmax; decode-step rows equal the rows of
  a single prefill over the same ids (within 1e-4 of the logit scale).
- bad model files (truncated at several offsets, flipped magic, architecture
  rewritten to qwen35moe, a tensor offset past the end, random header byte
  flips) make generate and logits exit with status 1 and exactly one line on
  stderr: never a signal (status > 128 or negative), never a hang (2 s timeout).

usage: test_tools.py CMPSERVE_BINARY WORKDIR
"""
import os
import random
import struct
import subprocess
import sys

import numpy as np

BIN = None
WORK = None
FAILURES = []


def check(cond, what):
    if not cond:
        FAILURES.append(what)
        print("FAIL:", what, file=sys.stderr)


def run(args, timeout=60):
    """Run the binary; returns (status, stdout bytes, stderr text). A timeout
    is reported as status 'timeout'."""
    try:
        p = subprocess.run([BIN] + args, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "timeout", b"", ""
    return p.returncode, p.stdout, p.stderr.decode("utf-8", "replace")


def mkmodel(out, seed=1, typ="q8_0", extra=()):
    rc, _, err = run(["mkmodel", "--preset", "tiny", "--type", typ, "--seed", str(seed),
                      "--out", out] + list(extra))
    check(rc == 0, f"mkmodel {typ} seed {seed} failed: {err.strip()}")
    return out


def read_file(path):
    with open(path, "rb") as f:
        return f.read()


# ---- mkmodel ----

def test_mkmodel_deterministic():
    a = mkmodel(os.path.join(WORK, "a.gguf"), 1)
    b = mkmodel(os.path.join(WORK, "b.gguf"), 1, extra=["--threads", "1"])
    c = mkmodel(os.path.join(WORK, "c.gguf"), 2)
    check(read_file(a) == read_file(b), "mkmodel: same seed gives different bytes")
    check(read_file(a) != read_file(c), "mkmodel: another seed gives the same bytes")
    f1 = mkmodel(os.path.join(WORK, "f1.gguf"), 1, "f32")
    f2 = mkmodel(os.path.join(WORK, "f2.gguf"), 1, "f32", ["--threads", "2"])
    check(read_file(f1) == read_file(f2), "mkmodel f32: same seed gives different bytes")


def test_mkmodel_usage_errors():
    out = os.path.join(WORK, "u.gguf")
    for args in (["--preset", "huge", "--type", "q8_0", "--seed", "1", "--out", out],
                 ["--preset", "tiny", "--type", "q4_0", "--seed", "1", "--out", out],
                 ["--preset", "tiny", "--type", "q8_0", "--seed", "x", "--out", out],
                 ["--preset", "tiny", "--type", "q8_0", "--out", out],
                 ["--preset", "tiny", "--type", "q8_0", "--seed", "1", "--out", out, "--bogus"],
                 ["--preset", "tiny", "--type", "q8_0", "--seed", "1", "--out", out, "--layers", "0"]):
        rc, _, err = run(["mkmodel"] + args, timeout=10)
        check(rc == 2, f"mkmodel {args}: exit {rc}, want 2")
    rc, _, err = run(["mkmodel", "--preset", "tiny", "--type", "q8_0", "--seed", "1",
                      "--out", "/nonexistent-dir/x.gguf"], timeout=10)
    check(rc == 1 and len(err.strip().splitlines()) == 1,
          f"mkmodel to a bad path: exit {rc}, stderr {err!r}")


def test_mkmodel_layers():
    out = os.path.join(WORK, "l12.gguf")
    mkmodel(out, 3, "q8_0", ["--layers", "12"])
    data = read_file(out)
    check(b"blk.11.attn_q.weight" in data and b"blk.10.attn_qkv.weight" in data
          and b"blk.12." not in data, "mkmodel --layers 12: wrong layer set")


# ---- generate ----

def generate(model, extra, n=24):
    return run(["generate", "--model", model, "--prompt", "Hello, world! The answer is",
                "-n", str(n), "--threads", "2"] + extra, timeout=120)


def test_generate_deterministic():
    model = os.path.join(WORK, "a.gguf")
    r1 = generate(model, ["--temperature", "0"])
    r2 = generate(model, ["--temperature", "0"])
    check(r1[0] == 0, f"generate T=0 failed: {r1[2].strip()}")
    check(r1[1] == r2[1] and len(r1[1]) > 0, "generate T=0: two runs differ or are empty")
    s1 = generate(model, ["--temperature", "1", "--seed", "7"])
    s2 = generate(model, ["--temperature", "1", "--seed", "7"])
    s3 = generate(model, ["--temperature", "1", "--seed", "8"])
    check(s1[0] == 0 and s2[0] == 0 and s3[0] == 0, "generate T=1 failed")
    check(s1[1] == s2[1], "generate: same seed gives different text")
    check(s1[1] != s3[1], "generate: another seed gives the same text")
    check("prompt tokens:" in r1[2] and "decode:" in r1[2] and "tok/s" in r1[2],
          f"generate: no summary on stderr: {r1[2]!r}")
    p = generate(model, ["--temperature", "0.8", "--top-k", "20", "--top-p", "0.9", "--min-p",
                         "0.05", "--presence-penalty", "1.5", "--frequency-penalty", "0.5",
                         "--repetition-penalty", "1.1", "--seed", "3"])
    check(p[0] == 0, f"generate with every sampling flag failed: {p[2].strip()}")


def test_generate_usage_errors():
    model = os.path.join(WORK, "a.gguf")
    for args in (["--prompt", "x", "-n", "4"],
                 ["--model", model, "-n", "4"],
                 ["--model", model, "--prompt", "x", "-n", "-3"],
                 ["--model", model, "--prompt", "x", "-n", "4", "--temperature", "hot"],
                 ["--model", model, "--prompt", "x", "-n", "4", "--frobnicate"]):
        rc, _, _ = run(["generate"] + args, timeout=10)
        check(rc == 2, f"generate {args}: exit {rc}, want 2")


# ---- logits ----

def read_logits(path):
    data = read_file(path)
    check(data[:4] == b"CSLG", "logits: bad magic")
    ver, n_pos, n_vocab, n_prompt, n_decode = struct.unpack_from("<5I", data, 4)
    off = 24
    ids = np.frombuffer(data, np.int32, n_pos, off)
    am = np.frombuffer(data, np.int32, n_pos, off + 4 * n_pos)
    lg = np.frombuffer(data, np.float32, n_pos * n_vocab, off + 8 * n_pos).reshape(n_pos, n_vocab)
    check(len(data) == off + 8 * n_pos + 4 * n_pos * n_vocab, "logits: file size")
    return ver, n_prompt, n_decode, ids, am, lg


def test_logits_file():
    model = os.path.join(WORK, "f1.gguf")
    prompt = [72, 101, 108, 108, 111, 44, 32, 119, 111, 114, 108, 100]
    out = os.path.join(WORK, "run.bin")
    rc, _, err = run(["logits", "--model", model, "--tokens", ",".join(map(str, prompt)),
                      "--decode", "6", "--out", out, "--threads", "2"])
    check(rc == 0, f"logits failed: {err.strip()}")
    if rc != 0:
        return
    ver, n_prompt, n_decode, ids, am, lg = read_logits(out)
    check(ver == 1 and n_prompt == len(prompt) and n_decode == 6, "logits: header")
    check(list(ids[:n_prompt]) == prompt, "logits: prompt ids")
    check(all(am == np.argmax(lg, axis=1)), "logits: argmax column")
    check(all(ids[n_prompt:] == am[n_prompt - 1:-1]), "logits: decode does not feed the argmax")
    check(np.isfinite(lg).all() and float(np.abs(lg).max()) > 0, "logits: not finite or all zero")
    # the same ids in one prefill give the same rows (up to float reordering)
    out2 = os.path.join(WORK, "run2.bin")
    rc, _, err = run(["logits", "--model", model, "--tokens", ",".join(map(str, ids)),
                      "--out", out2, "--threads", "2"])
    check(rc == 0, f"logits prefill failed: {err.strip()}")
    if rc == 0:
        lg2 = read_logits(out2)[5]
        rel = float(np.abs(lg - lg2).max() / np.abs(lg2).max())
        check(rel <= 1e-4, f"logits: decode rows differ from prefill rows (rel {rel:.2e})")
    bad = run(["logits", "--model", model, "--tokens", "1,2,99999999", "--out", out])
    check(bad[0] == 1 and len(bad[2].strip().splitlines()) == 1,
          f"logits with an id outside the vocabulary: {bad[0]} {bad[2]!r}")
    bad = run(["logits", "--model", model, "--tokens", "1,,2", "--out", out])
    check(bad[0] in (1, 2), f"logits with a malformed id list: exit {bad[0]}")


# ---- corrupted files ----

def gguf_header_end(data):
    """Parse a GGUF header; returns (offset of the tensor info list, header end,
    [(name, info_offset_of_its_offset_field)], alignment, {key: (value offset, type)})."""
    pos = 4 + 4
    n_t, n_kv = struct.unpack_from("<QQ", data, pos)
    pos += 16
    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
    kvs = {}

    def skip(t, pos):
        if t == 8:
            (n,) = struct.unpack_from("<Q", data, pos)
            return pos + 8 + n
        if t == 9:
            et, n = struct.unpack_from("<IQ", data, pos)
            pos += 12
            if et in sizes:
                return pos + sizes[et] * n
            for _ in range(n):
                pos = skip(et, pos)
            return pos
        return pos + sizes[t]

    for _ in range(n_kv):
        (kl,) = struct.unpack_from("<Q", data, pos)
        key = data[pos + 8:pos + 8 + kl].decode()
        pos += 8 + kl
        (t,) = struct.unpack_from("<I", data, pos)
        pos += 4
        kvs[key] = (pos, t)
        pos = skip(t, pos)
    tinfo = pos
    tensors = []
    for _ in range(n_t):
        (nl,) = struct.unpack_from("<Q", data, pos)
        name = data[pos + 8:pos + 8 + nl].decode()
        pos += 8 + nl
        (nd,) = struct.unpack_from("<I", data, pos)
        pos += 4 + 8 * nd + 4
        tensors.append((name, pos))
        pos += 8
    return tinfo, pos, tensors, 32, kvs


def rewrite_arch(data, arch):
    """The same file with general.architecture = arch (data section re-aligned)."""
    tinfo, hend, _, align, kvs = gguf_header_end(data)
    vpos, _ = kvs["general.architecture"]
    (old_len,) = struct.unpack_from("<Q", data, vpos)
    new = arch.encode()
    head = data[:vpos] + struct.pack("<Q", len(new)) + new + data[vpos + 8 + old_len:hend]
    data_start_old = (hend + align - 1) // align * align
    pad = (-len(head)) % align
    return head + b"\0" * pad + data[data_start_old:]


def corrupt_cases(path):
    data = read_file(path)
    tinfo, hend, tensors, _, _ = gguf_header_end(data)
    cases = {}
    for cut in (0, 3, 10, 24, tinfo // 2, tinfo + 5, hend - 1, hend + 100, len(data) // 2,
                len(data) - 1):
        cases[f"truncated at {cut}"] = data[:cut]
    cases["flipped magic"] = b"GGUX" + data[4:]
    cases["version 99"] = data[:4] + struct.pack("<I", 99) + data[8:]
    cases["architecture qwen35moe"] = rewrite_arch(data, "qwen35moe")
    cases["architecture llama"] = rewrite_arch(data, "llama")
    name, off = tensors[-1]
    cases[f"offset of {name} past the end"] = (data[:off] + struct.pack("<Q", len(data) * 4)
                                               + data[off + 8:])
    cases["kv count huge"] = data[:16] + struct.pack("<Q", 1 << 40) + data[24:]
    return cases


def check_error_exit(what, rc, err, allow_ok=False):
    lines = [l for l in err.splitlines() if l.strip()]
    if rc == "timeout":
        check(False, f"{what}: hang (no exit within the timeout)")
    elif rc == 0 and allow_ok:
        pass
    else:
        check(rc == 1, f"{what}: exit status {rc}, want 1 (negative or > 128 is a signal)")
        check(len(lines) == 1, f"{what}: {len(lines)} lines on stderr, want 1: {err!r}")


def test_corrupt_files():
    src = os.path.join(WORK, "a.gguf")
    bad = os.path.join(WORK, "bad.gguf")
    out = os.path.join(WORK, "bad.bin")
    cases = corrupt_cases(src)
    cases_ok = {}
    rnd = random.Random(5)
    data = read_file(src)
    hend = gguf_header_end(data)[1]
    for i in range(12):
        d = bytearray(data)
        for _ in range(3):
            d[rnd.randrange(8, hend)] ^= 1 << rnd.randrange(8)
        cases_ok[f"random header flips #{i}"] = bytes(d)
    missing = os.path.join(WORK, "missing.gguf")
    for label, blob, allow_ok in ([(k, v, False) for k, v in cases.items()] +
                                  [(k, v, True) for k, v in cases_ok.items()] +
                                  [("missing file", None, False)]):
        path = missing
        if blob is not None:
            with open(bad, "wb") as f:
                f.write(blob)
            path = bad
        rc, _, err = run(["generate", "--model", path, "--prompt", "hi", "-n", "2",
                          "--threads", "1"], timeout=2)
        check_error_exit(f"generate, {label}", rc, err, allow_ok)
        rc, _, err = run(["logits", "--model", path, "--tokens", "1,2", "--out", out,
                          "--threads", "1"], timeout=2)
        check_error_exit(f"logits, {label}", rc, err, allow_ok)
        if label == "architecture qwen35moe" and rc == 1:
            check("qwen35moe" in err, f"wrong-architecture message does not name it: {err!r}")


def main():
    global BIN, WORK
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    BIN, WORK = sys.argv[1], sys.argv[2]
    os.makedirs(WORK, exist_ok=True)
    tests = [test_mkmodel_deterministic, test_mkmodel_usage_errors, test_mkmodel_layers,
             test_generate_deterministic, test_generate_usage_errors, test_logits_file,
             test_corrupt_files]
    for t in tests:
        before = len(FAILURES)
        t()
        print(("ok  " if len(FAILURES) == before else "FAIL"), t.__name__, file=sys.stderr)
    print(f"{len(tests)} tests, {len(FAILURES)} failures", file=sys.stderr)
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
