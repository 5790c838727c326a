"""test_serve.py - proves `cmpserve serve --workers 3 --gpus cpu` end to end
over HTTP with real worker processes: 4 concurrent requests (greedy and
seeded, prompts cut into several prefill chunks interleaved with decodes,
several steps in flight) each give exactly the text of the same request run
alone on the in-process engine; then a SIGSTOPped worker is detected within
dead_after_ms and replaced (recovery by replay, tests/recovery proves the
text is unchanged): the request sent meanwhile still completes, the hung
process is killed, /health is 200 again, and the server still shuts down
cleanly, leaving no worker process behind.

usage: test_serve.py CMPSERVE_BIN WORKDIR"""
import json
import os
import signal
import subprocess
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "api"))
from apitest import Server, vocab_path  # noqa: E402

BIN = sys.argv[1] if len(sys.argv) > 1 else "cmpserve"
WORK = sys.argv[2] if len(sys.argv) > 2 else "/tmp/cs_pipeline_serve"
MODEL = os.path.join(WORK, "tiny-q8_0.gguf")
COMMON = ["--model", MODEL, "--gpus", "cpu", "--ctx-size", "1024", "--max-seqs", "4",
          "--prefill-chunk", "16", "--threads", "1", "--log-level", "warn"]
REQS = [
    {"prompt": "The weather today is " * 5, "max_tokens": 10, "temperature": 0},
    {"prompt": "Once upon a time", "max_tokens": 12, "temperature": 1.0, "seed": 7},
    {"prompt": "A long list of numbers: 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12", "max_tokens": 8,
     "temperature": 1.0, "seed": 7},
    {"prompt": "Hello", "max_tokens": 14, "temperature": 0},
]


def complete(server, body):
    body = dict(body, model="tiny-q8_0.gguf")
    st, _, data = server.request("POST", "/v1/completions", json.dumps(body),
                                 {"Content-Type": "application/json"}, timeout=60)
    return st, json.loads(data)


def children(pid):
    out = []
    for task in os.listdir("/proc/%d/task" % pid):
        with open("/proc/%d/task/%s/children" % (pid, task)) as f:
            out += [int(x) for x in f.read().split()]
    return out


def stage_of(pid):
    with open("/proc/%d/cmdline" % pid, "rb") as f:
        args = f.read().split(b"\0")
    return int(args[args.index(b"--stage") + 1]) if b"--stage" in args else -1


def alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


class PipelineServe(unittest.TestCase):
    def test_concurrent_equal_then_stopped_worker(self):
        ref = Server([BIN, "serve"] + COMMON)
        try:
            want = []
            for r in REQS:
                st, body = complete(ref, r)
                self.assertEqual(st, 200, body)
                want.append(body["choices"][0]["text"])
        finally:
            self.assertEqual(ref.stop(), 0)
        self.assertTrue(all(want), want)

        srv = Server([BIN, "serve", "--workers", "3", "--run-dir", os.path.join(WORK, "rd"),
                      "--heartbeat-ms", "100", "--dead-after-ms", "1000"] + COMMON)
        workers = children(srv.proc.pid)
        try:
            self.assertEqual(len(workers), 3, workers)
            got = [None] * len(REQS)

            def run(i):
                got[i] = complete(srv, REQS[i])

            ths = [threading.Thread(target=run, args=(i,)) for i in range(len(REQS))]
            for t in ths:
                t.start()
            for t in ths:
                t.join(90)
            for i, (st, body) in enumerate(got):
                self.assertEqual(st, 200, body)
                self.assertEqual(body["choices"][0]["text"], want[i], "request %d differs" % i)

            victim = [p for p in workers if stage_of(p) == 1][0]
            os.kill(victim, signal.SIGSTOP)
            t0 = time.time()
            st, body = complete(srv, {"prompt": "Go on", "max_tokens": 64, "temperature": 0})
            took = time.time() - t0
            self.assertEqual(st, 200, body)
            self.assertLess(took, 30.0, "the stopped worker was not replaced in time")
            self.assertFalse(alive(victim), "the hung worker was not killed")
            st, _, data = srv.request("GET", "/health")
            self.assertEqual(st, 200, data)
            workers = workers + children(srv.proc.pid)
        finally:
            for p in workers:
                try:
                    os.kill(p, signal.SIGCONT)
                except ProcessLookupError:
                    pass
            self.assertEqual(srv.stop(), 0)
        deadline = time.time() + 10
        while time.time() < deadline and any(alive(p) for p in workers):
            time.sleep(0.1)
        self.assertFalse(any(alive(p) for p in workers), "worker processes left behind")


if __name__ == "__main__":
    os.makedirs(WORK, exist_ok=True)
    if not os.path.exists(MODEL):
        subprocess.run([BIN, "mkmodel", "--preset", "tiny", "--type", "q8_0", "--seed", "1",
                        "--vocab", vocab_path(), "--out", MODEL], check=True, timeout=120,
                       stdout=subprocess.DEVNULL)
    unittest.main(argv=[sys.argv[0], "-v"])
