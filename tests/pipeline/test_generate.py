"""test_generate.py - proves that `cmpserve generate --workers N` (real worker
processes, ZeroMQ and shared-memory edges, CPU backend) gives exactly the
tokens of the in-process path and of one worker, greedy and seeded
(temperature 1, seed 7), on the tiny preset (prompts spanning several
prefill chunks included) and on the 0.8b preset (24 layers, E = 1024); and
that a worker that cannot load makes the command exit 1 with the reason
(a bad layer split, a missing model file, a
state that does not fit the worker's memory budget), leaving no socket or run
directory behind.

usage: test_generate.py CMPSERVE_BIN WORKDIR"""
import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "api"))
from apitest import vocab_path  # noqa: E402

BIN = sys.argv[1] if len(sys.argv) > 1 else "cmpserve"
WORK = sys.argv[2] if len(sys.argv) > 2 else "/tmp/cs_pipeline_gen"
RUN = os.path.join(WORK, "rd")
LONG = ("The quick brown fox jumps over the lazy dog while the weather turns cold and the "
        "river keeps running past the old mill. " * 6)


def model(preset):
    path = os.path.join(WORK, "%s-q8_0.gguf" % preset)
    if not os.path.exists(path):
        subprocess.run([BIN, "mkmodel", "--preset", preset, "--type", "q8_0", "--seed", "1",
                        "--vocab", vocab_path(), "--out", path + ".tmp"], check=True, timeout=120,
                       stdout=subprocess.DEVNULL)
        os.rename(path + ".tmp", path)
    return path


def generate(path, prompt, n, workers=0, extra=(), check=True):
    argv = [BIN, "generate", "--model", path, "--prompt", prompt, "-n", str(n), "--threads", "2"]
    if workers:
        argv += ["--workers", str(workers), "--gpus", "cpu", "--run-dir", RUN]
    p = subprocess.run(argv + list(extra), capture_output=True, text=True, timeout=120)
    if check and p.returncode != 0:
        raise AssertionError("generate failed (%d): %s" % (p.returncode, p.stderr))
    return p


def leftovers():
    socks = []
    if os.path.isdir(RUN):
        for d, _, files in os.walk(RUN):
            socks += [os.path.join(d, f) for f in files]
    return socks


class GenerateEquality(unittest.TestCase):
    def check_equal(self, path, prompt, n, sampling):
        ref = generate(path, prompt, n, 0, sampling).stdout
        self.assertTrue(ref.strip(), "the in-process run produced no text")
        for w in (1, 3):
            got = generate(path, prompt, n, w, sampling).stdout
            self.assertEqual(got, ref, "%d workers differ from the in-process run" % w)
        return ref

    def test_tiny_greedy_and_seeded(self):
        path = model("tiny")
        self.check_equal(path, "The weather is", 12, ["--temperature", "0"])
        a = self.check_equal(path, "Once upon a time", 12, ["--temperature", "1", "--seed", "7"])
        b = generate(path, "Once upon a time", 12, 3, ["--temperature", "1", "--seed", "8"]).stdout
        self.assertNotEqual(a, b, "the seed has no effect: the comparison would prove nothing")

    def test_tiny_long_prompt_many_chunks(self):
        # a prompt of ~150 tokens: a large hidden-state block through every edge
        self.check_equal(model("tiny"), LONG, 6, ["--temperature", "1", "--seed", "7"])

    def test_08b_greedy_and_seeded(self):
        path = model("0.8b")
        self.check_equal(path, "The weather is", 6, ["--temperature", "0"])
        self.check_equal(path, "Hello", 6, ["--temperature", "1", "--seed", "7"])


class LoadErrors(unittest.TestCase):
    def test_bad_layer_split(self):
        p = generate(model("tiny"), "Hi", 4, 2, ["--layer-split", "3,3"], check=False)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("bad layer split '3,3'", p.stderr)
        self.assertIn("the model has 8", p.stderr)

    def test_missing_model(self):
        p = generate(os.path.join(WORK, "missing.gguf"), "Hi", 4, 2, check=False)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("missing.gguf", p.stderr)

    def test_worker_cannot_load(self):
        # the coordinator's checks pass; the worker's state does not fit its memory budget
        p = subprocess.run([BIN, "serve", "--model", model("tiny"), "--workers", "2", "--gpus", "cpu",
                            "--mem-fraction", "0.0000001", "--run-dir", RUN, "--port", "0",
                            "--log-level", "error"], capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("cannot start the engine: stage", p.stderr)
        self.assertIn("MiB are usable", p.stderr)

    def test_no_leftovers(self):
        generate(model("tiny"), "Hi", 2, 3)
        self.assertEqual(leftovers(), [], "sockets left in the run dir")
        self.assertEqual(os.listdir(RUN), [], "the per-process run directory was not removed")


if __name__ == "__main__":
    os.makedirs(WORK, exist_ok=True)
    unittest.main(argv=[sys.argv[0], "-v"])
