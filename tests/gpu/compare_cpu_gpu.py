#!/usr/bin/env python3
"""compare_cpu_gpu.py - proves the CUDA backend computes the same model as the
CPU reference backend on whole mkmodel presets (GPU issue, item 9):

  * logits of a P-token prefill on --device 0 against the CPU backend's
    Q8_0 x Q8_1 integer path (--int8: the same arithmetic as the GPU's DP4A
    path): top-1 agreement >= 99.5% of positions and mean KL(cpu || gpu) <= 1e-3;
  * greedy decode: the ids of N greedy steps are identical on both devices
    (for the tiny preset the issue asks 64 tokens);
  * printed beside: how many positions' logits are bitwise identical (the
    two backends share one arithmetic between quantizations, so on the
    tiny preset all of them should be).
  The distance to the CPU fp32 reference path (weights dequantized, fp32
  activations) is printed beside it: on random-weight models it is dominated
  by the int8 activation quantization itself, which the CPU --int8 path shows
  to the same degree (0.8b: top-1 50%, KL 3.5e-2 between the two CPU paths).

usage: compare_cpu_gpu.py --cmpserve BIN --model FILE [--positions 256]
                          [--decode 64] [--seed 7]
Prints one RESULT line; exit 0 on pass, 1 on fail, 2 on a setup error.
"""
import argparse
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np


def read_logits(path):
    data = open(path, "rb").read()
    if data[:4] != b"CSLG":
        raise ValueError(f"{path}: not a cmpserve logits file")
    _, n_pos, n_vocab, n_prompt, n_decode = struct.unpack_from("<5I", data, 4)
    off = 24
    ids = np.frombuffer(data, np.int32, n_pos, off).copy()
    argmax = np.frombuffer(data, np.int32, n_pos, off + 4 * n_pos).copy()
    logits = np.frombuffer(data, np.float32, n_pos * n_vocab, off + 8 * n_pos)
    return ids, argmax, logits.reshape(n_pos, n_vocab).astype(np.float64), n_prompt


def run(binary, model, tokens, decode, device, out, int8=False):
    args = [binary, "logits", "--model", model, "--tokens", ",".join(map(str, tokens)),
            "--decode", str(decode), "--out", out, "--device", device]
    if int8:
        args.append("--int8")
    r = subprocess.run(args, capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(args[:6])} ... failed: {r.stderr.strip()}")
    return read_logits(out)


def log_softmax(x):
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cmpserve", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--positions", type=int, default=256)
    ap.add_argument("--decode", type=int, default=64)
    ap.add_argument("--seed", type=int, default=7)
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    # ids in the ordinary-text range of any vocabulary mkmodel writes (>= 256 entries)
    prompt = [int(t) for t in rng.integers(0, 256, a.positions)]
    name = os.path.basename(a.model)
    with tempfile.TemporaryDirectory() as d:
        try:
            _, am_f, lf, _ = run(a.cmpserve, a.model, prompt, 0, "cpu", f"{d}/cpu32.bin")
            _, am_c, lc, _ = run(a.cmpserve, a.model, prompt, 0, "cpu", f"{d}/cpu.bin", True)
            _, am_g, lg, _ = run(a.cmpserve, a.model, prompt, 0, "0", f"{d}/gpu.bin")
            short = prompt[:16]
            ids_c, _, _, npc = run(a.cmpserve, a.model, short, a.decode, "cpu", f"{d}/cpu_dec.bin", True)
            ids_g, _, _, npg = run(a.cmpserve, a.model, short, a.decode, "0", f"{d}/gpu_dec.bin")
        except Exception as e:  # setup error: say what
            print(f"RESULT {name} ERROR {e}")
            return 2
    def dist(la, aa, lb, ab):
        pa, pb = log_softmax(la), log_softmax(lb)
        return (float((aa == ab).mean()), float((np.exp(pa) * (pa - pb)).sum(axis=-1).mean()),
                float(np.abs(la - lb).max() / np.abs(la).max()))

    top1, kl, rel = dist(lc, am_c, lg, am_g)
    f_top1, f_kl, _ = dist(lf, am_f, lg, am_g)
    same_greedy = bool((ids_c[npc:] == ids_g[npg:]).all())
    # Bitwise: rows whose logits have the same bits on both devices, and the
    # first position where they do not (the ops between two int8
    # quantizations follow one arithmetic on both, kernels/exact_math.h).
    same_rows = (lc.astype(np.float32).view(np.uint32) == lg.astype(np.float32).view(np.uint32)).all(axis=-1)
    first_diff = int(np.argmin(same_rows)) if not same_rows.all() else -1
    print(f"bitwise identical logits rows: {int(same_rows.sum())} of {len(same_rows)}"
          + (f" (first differing position {first_diff})" if first_diff >= 0 else ""))
    # Where the top-1 differs: how close were the CPU's top two logits? On a
    # random-weight model many positions are near ties, and a one-quantum
    # difference in an int8 activation flips them.
    srt = np.sort(lc, axis=-1)
    margin = srt[:, -1] - srt[:, -2]
    spread = lc.std(axis=-1)
    dis = np.nonzero(am_c != am_g)[0]
    if len(dis):
        print(f"top-1 differs at {len(dis)} positions; cpu top-2 margin there: median "
              f"{np.median(margin[dis]):.2e} (logit std {np.median(spread):.2e}); "
              f"positions with margin below that: {(margin <= np.median(margin[dis])).mean():.1%}")
    div = np.nonzero(ids_c[npc:] != ids_g[npg:])[0]
    if len(div):
        print(f"greedy decode diverges at generated token {div[0]}")
    ok = top1 >= 0.995 and kl <= 1e-3 and same_greedy
    print(f"RESULT {name} {'PASS' if ok else 'FAIL'} vs cpu int8: positions={a.positions} "
          f"top1={top1:.4f} meanKL={kl:.2e} max|d|/max|l|={rel:.2e} "
          f"greedy{a.decode}_identical={same_greedy}; vs cpu fp32: top1={f_top1:.4f} meanKL={f_kl:.2e}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
