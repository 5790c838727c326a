"""test_attach_worker.py - proves the main attach-mode scenario: systemd
restarting ONE crashed worker while the coordinator keeps every request
alive. Three `cmpserve worker` processes started on their own (as
cmpserve-worker@N units are) and a `serve --attach` coordinator; a streamed
completion of 48 tokens, greedy and then seeded (temperature 1, seed 7); at
its 8th token the worker of stage 1 is SIGKILLed, and 1 s later a NEW
`cmpserve worker` process for the same stage is started (what Restart=always,
RestartSec=1 does). Required: the stream ends with [DONE], finish "length",
no error event, and exactly the text of an uninterrupted run; the
coordinator took the new process (it logs "stage 1 is back (pid <new>)"),
the pause the client saw covers the restart delay (so the fault really hit
the stream), and /health answers 200 again. Every wait is bounded; the
whole test takes well under 60 s.

usage: test_attach_worker.py CMPSERVE_BIN WORKDIR"""
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
WORK = sys.argv[2] if len(sys.argv) > 2 else "/tmp/cs_recovery_attach_worker"
RUN = os.path.join(WORK, "rd")
DEAD_MS = 1000
RESTART_S = 1.0          # systemd's RestartSec
STREAM_TIMEOUT = 20      # a stream silent this long fails the test (no hang)
KILL_AT = 8              # tokens received before the fault
GREEDY = {"prompt": "The weather today is " * 4, "max_tokens": 48, "temperature": 0,
          "model": "tiny-q8_0.gguf"}
SEEDED = {"prompt": "Once upon a time", "max_tokens": 48, "temperature": 1.0, "seed": 7,
          "model": "tiny-q8_0.gguf"}


class Worker:
    """One `cmpserve worker --stage N` process started on its own."""

    def __init__(self, stage):
        self.stage = stage
        self.proc = subprocess.Popen([BIN, "worker", "--run-dir", RUN, "--stage", str(stage),
                                      "--device", "cpu", "--threads", "1", "--heartbeat-ms", "100",
                                      "--log-level", "info"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.lines = []
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self):
        for line in self.proc.stderr:
            self.lines.append(line)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)


def coordinator(model):
    return rtest.Server([BIN, "serve", "--model", model, "--gpus", "cpu", "--workers", "3",
                         "--attach", "--run-dir", RUN, "--ctx-size", "512", "--max-seqs", "4",
                         "--prefill-chunk", "8", "--heartbeat-ms", "100",
                         "--dead-after-ms", str(DEAD_MS), "--log-level", "info"])


def stream(port, req, on_token=None):
    """rtest.stream_completion, bounded: a silent stream becomes an error."""
    try:
        return rtest.stream_completion(port, req, on_token, timeout=STREAM_TIMEOUT)
    except OSError as e:   # socket.timeout, connection reset
        st = rtest.Stream()
        st.errors.append("stream broken: %r" % e)
        return st


class AttachWorkerRestart(unittest.TestCase):
    def setUp(self):
        self.t_start = time.time()
        self.model = rtest.tiny_model(BIN, WORK)
        self.workers = [Worker(i) for i in range(3)]
        self.old = []         # killed workers (their logs are reported on failure)
        self.srv = coordinator(self.model)

    def tearDown(self):
        if self.srv:
            self.srv.stop()
        for w in self.workers + self.old:
            w.stop()
            w.proc.stderr.close()

    def logs(self):
        out = ["--- coordinator (last 40 lines) ---"] + self.srv.stderr_lines[-40:]
        for w in self.old + self.workers:
            out += ["--- worker stage %d pid %d (last 15 lines) ---\n" % (w.stage, w.proc.pid)]
            out += w.lines[-15:]
        return "".join(x if x.endswith("\n") else x + "\n" for x in out)

    def health_ok(self, timeout=10):
        deadline = time.time() + timeout
        while time.time() < deadline:
            code, _, _ = self.srv.request("GET", "/health", timeout=5)
            if code == 200:
                return True
            time.sleep(0.05)
        return False

    def replacement_seen(self, pid, timeout=5):
        want = "stage 1 is back (pid %d)" % pid
        deadline = time.time() + timeout
        while time.time() < deadline:
            if any(want in line for line in self.srv.stderr_lines):
                return True
            time.sleep(0.05)
        return False

    def kill_and_restart_mid_stream(self, req):
        """Stream req; at the KILL_AT-th token SIGKILL stage 1's worker and,
        RESTART_S later, start a new one for stage 1. (Stream, new Worker)."""
        fired = {}
        done = threading.Event()

        def restart():
            fired["new"] = Worker(1)
            self.workers[1] = fired["new"]
            done.set()

        def fault(st):
            if len(st.times) == KILL_AT:
                victim = self.workers[1]
                os.kill(victim.proc.pid, signal.SIGKILL)
                victim.proc.wait(5)
                self.old.append(victim)
                fired["t"] = time.time()
                threading.Timer(RESTART_S, restart).start()

        st = stream(self.srv.port, req, fault)
        self.assertIn("t", fired, "the fault never fired (too few tokens)\n" + self.logs())
        self.assertTrue(done.wait(RESTART_S + 5), "the replacement was never started")
        return st, fired["new"]

    def check_same(self, st, want, name):
        msg = "%s:\n%s" % (name, self.logs())
        self.assertEqual(st.errors, [], "error events in the stream; " + msg)
        self.assertEqual(st.status, 200, msg)
        self.assertTrue(st.done, "the stream did not end with [DONE]; " + msg)
        self.assertEqual(st.finish, "length", msg)
        self.assertEqual(st.text, want, "the text differs from the uninterrupted run; " + msg)

    def test_worker_killed_and_restarted_by_its_unit(self):
        want = {}
        for name, req in (("greedy", GREEDY), ("seeded", SEEDED)):
            st = stream(self.srv.port, req)
            self.assertTrue(st.status == 200 and not st.errors and st.done, (st.errors,
                                                                             self.logs()))
            self.assertGreater(len(st.times), KILL_AT + 10, "too few tokens to kill mid-stream")
            want[name] = st.text
        for name, req in (("greedy", GREEDY), ("seeded", SEEDED)):
            st, new = self.kill_and_restart_mid_stream(req)
            self.check_same(st, want[name], name)
            self.assertIsNone(new.proc.poll(), "the replacement worker exited\n" + self.logs())
            self.assertTrue(self.replacement_seen(new.proc.pid),
                            "the coordinator never took the new stage-1 worker\n" + self.logs())
            gap = rtest.max_gap(st.times)
            self.assertGreater(gap, RESTART_S * 0.9,
                               "no pause covering the restart: the fault missed the stream")
            self.assertTrue(self.health_ok(), "/health did not return to 200\n" + self.logs())
            print("\n[%s] SIGKILL stage 1, new worker after %.1f s: largest pause %.0f ms" %
                  (name, RESTART_S, gap * 1000), file=sys.stderr)
        took = time.time() - self.t_start
        self.assertLess(took, 60, "the scenario took %.0f s" % took)


if __name__ == "__main__":
    os.makedirs(WORK, exist_ok=True)
    unittest.main(argv=[sys.argv[0], "-v"])
