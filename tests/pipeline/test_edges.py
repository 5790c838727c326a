"""test_edges.py - proves the fp16 edges of `cmpserve serve --workers 3
--gpus cpu --hidden-type f16` (the path that converts through the worker's
host buffer, while fp32 edges are copied straight into and out of their
shared-memory slots): greedy completions give the tokens of the in-process
engine with per-token logprobs within 0.02 of it but not all equal (the
hidden states really crossed as fp16), the same request twice gives the
same text, and the coordinator's shutdown summary counts exactly the steps
it ran (one prefill step and max_tokens - 1 decode steps per request) and
splits their time into compute, copies and messages.

usage: test_edges.py CMPSERVE_BIN WORKDIR"""
import json
import os
import re
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "api"))
from apitest import Server, vocab_path  # noqa: E402

BIN = sys.argv[1] if len(sys.argv) > 1 else "cmpserve"
WORK = sys.argv[2] if len(sys.argv) > 2 else "/tmp/cs_pipeline_edges"
MODEL = os.path.join(WORK, "tiny-q8_0.gguf")
COMMON = ["--model", MODEL, "--gpus", "cpu", "--ctx-size", "512", "--max-seqs", "2",
          "--threads", "1", "--log-level", "info"]
PROMPTS = ["The weather today is", "Once upon a time"]
N = 12


def complete(server, prompt):
    body = {"model": "tiny-q8_0.gguf", "prompt": prompt, "max_tokens": N, "temperature": 0,
            "logprobs": 0}
    st, _, data = server.request("POST", "/v1/completions", json.dumps(body),
                                 {"Content-Type": "application/json"}, timeout=90)
    if st != 200:
        raise AssertionError("status %d: %s" % (st, data))
    return json.loads(data)["choices"][0]


class FP16Edges(unittest.TestCase):
    def test_f16_edges_close_to_in_process(self):
        ref = Server([BIN, "serve"] + COMMON)
        try:
            want = [complete(ref, p) for p in PROMPTS]
        finally:
            self.assertEqual(ref.stop(), 0)

        srv = Server([BIN, "serve", "--workers", "3", "--run-dir", os.path.join(WORK, "rd"),
                      "--hidden-type", "f16"] + COMMON)
        try:
            got = [complete(srv, p) for p in PROMPTS]
            again = complete(srv, PROMPTS[0])
        finally:
            self.assertEqual(srv.stop(), 0)

        diffs = []
        for w, g in zip(want, got):
            self.assertEqual(g["finish_reason"], "length", g)
            wt, gt = w["logprobs"]["tokens"], g["logprobs"]["tokens"]
            self.assertEqual(len(gt), N)
            self.assertEqual(gt[0], wt[0], "the first token differs with fp16 edges")
            k = 0
            while k < N and gt[k] == wt[k]:
                diffs.append(abs(g["logprobs"]["token_logprobs"][k] -
                                 w["logprobs"]["token_logprobs"][k]))
                k += 1
        self.assertLess(max(diffs), 0.02, diffs)
        self.assertGreater(max(diffs), 0.0, "no difference at all: were the edges fp16?")
        self.assertEqual(again["text"], got[0]["text"], "fp16 edges are not deterministic")

        lines = [ln for ln in srv.stderr_lines if "steps over 3 stages" in ln]
        self.assertEqual(len(lines), 1, srv.stderr_lines[-20:])
        m = re.search(r"(\d+) steps over 3 stages: ([\d.]+) ms a step .* stages compute ([\d.]+) "
                      r"ms, edge copies ([\d.]+) ms, the rest \(4 messages, wake-ups, "
                      r"queueing\) (-?[\d.]+) ms", lines[0])
        self.assertIsNotNone(m, lines[0])
        self.assertEqual(int(m.group(1)), (len(PROMPTS) + 1) * N, lines[0])
        wall, comp, copy = float(m.group(2)), float(m.group(3)), float(m.group(4))
        self.assertGreater(comp, 0.0, lines[0])
        self.assertLessEqual(comp + copy, wall * 1.01 + 0.01, lines[0])


if __name__ == "__main__":
    os.makedirs(WORK, exist_ok=True)
    if not os.path.exists(MODEL):
        subprocess.run([BIN, "mkmodel", "--preset", "tiny", "--type", "q8_0", "--seed", "1",
                        "--vocab", vocab_path(), "--out", MODEL + ".tmp"], check=True,
                       timeout=120, stdout=subprocess.DEVNULL)
        os.rename(MODEL + ".tmp", MODEL)
    unittest.main(argv=[sys.argv[0], "-v"])
