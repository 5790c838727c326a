"""test_attach.py - proves a coordinator restart in attach mode: three
`cmpserve worker` processes started on their own (as systemd would), a
`serve --attach` coordinator serving through them; SIGKILL of the
coordinator leaves every worker alive; a new coordinator on the same run
dir gets them back (they notice the silence after dead_after_ms and say
HELLO again) WITHOUT reloading their weights (each worker logs "reusing the
loaded weights" and none loads a second time), and serves the same text as
before.

usage: test_attach.py CMPSERVE_BIN WORKDIR"""
import os
import signal
import subprocess
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rtest  # noqa: E402

BIN = sys.argv[1] if len(sys.argv) > 1 else "cmpserve"
WORK = sys.argv[2] if len(sys.argv) > 2 else "/tmp/cs_recovery_attach"
RUN = os.path.join(WORK, "rd")
REQ = {"prompt": "The weather today is", "max_tokens": 16, "temperature": 0,
       "model": "tiny-q8_0.gguf"}


class Worker:
    def __init__(self, stage):
        self.proc = subprocess.Popen([BIN, "worker", "--run-dir", RUN, "--stage", str(stage),
                                      "--device", "cpu", "--threads", "1", "--heartbeat-ms", "100",
                                      "--log-level", "info"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.lines = []
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self):
        for line in self.proc.stderr:
            self.lines.append(line)

    def count(self, text):
        return sum(text in line for line in self.lines)


def coordinator(model):
    return rtest.Server([BIN, "serve", "--model", model, "--gpus", "cpu", "--workers", "3",
                         "--attach", "--run-dir", RUN, "--ctx-size", "256", "--max-seqs", "2",
                         "--heartbeat-ms", "100", "--dead-after-ms", "1000",
                         "--log-level", "warn"])


class Attach(unittest.TestCase):
    def test_coordinator_restart_keeps_workers(self):
        model = rtest.tiny_model(BIN, WORK)
        workers = [Worker(i) for i in range(3)]
        srv = srv2 = None
        try:
            srv = coordinator(model)
            first = rtest.stream_completion(srv.port, REQ)
            self.assertEqual(first.errors, [])
            self.assertTrue(first.done and first.text)
            self.assertEqual([w.count("ready:") for w in workers], [1, 1, 1])
            os.kill(srv.proc.pid, signal.SIGKILL)
            srv.proc.wait(10)
            srv.stop()
            time.sleep(0.3)
            self.assertTrue(all(w.proc.poll() is None for w in workers),
                            "a worker died with the coordinator")
            t0 = time.time()
            srv2 = coordinator(model)
            took = time.time() - t0
            again = rtest.stream_completion(srv2.port, REQ)
            self.assertEqual(again.errors, [])
            self.assertEqual(again.text, first.text)
            self.assertTrue(all(w.proc.poll() is None for w in workers))
            self.assertEqual([w.count("reusing the loaded weights") for w in workers], [1, 1, 1],
                             "a worker reloaded its weights")
            print("\nnew coordinator serving after %.2f s (workers rejoin after dead_after_ms)"
                  % took, file=sys.stderr)
        finally:
            for s in (srv2, srv):
                if s:
                    s.stop()
            for w in workers:
                if w.proc.poll() is None:
                    w.proc.send_signal(signal.SIGTERM)
            for w in workers:
                try:
                    w.proc.wait(10)
                except subprocess.TimeoutExpired:
                    w.proc.kill()
                    w.proc.wait(5)
                w.proc.stderr.close()


if __name__ == "__main__":
    os.makedirs(WORK, exist_ok=True)
    unittest.main(argv=[sys.argv[0], "-v"])
