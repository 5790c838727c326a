"""test_recovery.py - proves recovery without loss on `cmpserve serve
--workers 3 --gpus cpu` (real worker processes, CPU backend, tiny model):

1. SIGKILL of stage 1 mid-stream: the stream completes with no error event
   and exactly the text of an uninterrupted run, greedy and seeded
   (temperature 1, seed 7); the pause (largest gap between tokens) is
   reported as the recovery time.
2. SIGKILL of stage 1, then SIGKILL of its replacement as soon as it exists
   (during the recovery): still complete and identical.
3. SIGSTOP of stage 1 (a hang): a replacement is running within
   dead_after_ms plus a margin, the stopped process is gone, and the text is
   identical; a request sent during the recovery queues and completes.
4. SIGTERM with a streamed request in flight: the request completes (all
   its tokens, finish "length"), a new request during the grace gets 503,
   the process exits 0, and neither its shared-memory edges nor its run
   subdirectory remain.
5. SIGKILL of the coordinator (its workers die with it): its edges and run
   subdirectory are left behind; a new server on the same run dir reclaims
   them and serves.

usage: test_recovery.py CMPSERVE_BIN WORKDIR"""
import json
import os
import signal
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rtest  # noqa: E402

BIN = sys.argv[1] if len(sys.argv) > 1 else "cmpserve"
WORK = sys.argv[2] if len(sys.argv) > 2 else "/tmp/cs_recovery"
RUN = os.path.join(WORK, "rd")
DEAD_MS = 1000
GREEDY = {"prompt": "The weather today is " * 4, "max_tokens": 48, "temperature": 0}
SEEDED = {"prompt": "Once upon a time", "max_tokens": 48, "temperature": 1.0, "seed": 7}
KILL_AT = 8   # tokens received before the fault


def serve_argv(model, extra=()):
    return [BIN, "serve", "--model", model, "--gpus", "cpu", "--workers", "3", "--run-dir", RUN,
            "--ctx-size", "512", "--max-seqs", "4", "--prefill-chunk", "8", "--threads", "1",
            "--heartbeat-ms", "100", "--dead-after-ms", str(DEAD_MS), "--log-level", "warn"] + \
        list(extra)


def body(req):
    return dict(req, model="tiny-q8_0.gguf")


class Recovery(unittest.TestCase):
    srv = None

    @classmethod
    def setUpClass(cls):
        cls.model = rtest.tiny_model(BIN, WORK)
        cls.srv = rtest.Server(serve_argv(cls.model))
        cls.want = {}
        for name, req in (("greedy", GREEDY), ("seeded", SEEDED)):
            st = rtest.stream_completion(cls.srv.port, body(req))
            assert st.status == 200 and not st.errors and st.done, (st.status, st.errors)
            assert len(st.times) > KILL_AT + 10, "too few tokens to kill mid-stream"
            cls.want[name] = st.text
        print("\nuninterrupted greedy run: %d characters" % len(cls.want["greedy"]), file=sys.stderr)

    @classmethod
    def tearDownClass(cls):
        if cls.srv:
            for p in rtest.children(cls.srv.proc.pid):
                rtest.kill_quiet(p, signal.SIGCONT)
            cls.srv.stop()

    def check_same(self, st, name):
        self.assertEqual(st.status, 200, st.errors)
        self.assertEqual(st.errors, [], "error events in the stream")
        self.assertTrue(st.done, "the stream did not end with [DONE]")
        self.assertEqual(st.finish, "length")
        self.assertEqual(st.text, self.want[name], "%s: the text differs from the "
                         "uninterrupted run" % name)

    def health_ok(self, timeout=10):
        deadline = time.time() + timeout
        while time.time() < deadline:
            code, _, _ = self.srv.request("GET", "/health")
            if code == 200:
                return True
            time.sleep(0.05)
        return False

    def test_1_sigkill_mid_stream(self):
        pid = self.srv.proc.pid
        for name, req in (("greedy", GREEDY), ("seeded", SEEDED)):
            victim = rtest.worker_of_stage(pid, 1)
            fired = {}

            def fault(st):
                if len(st.times) == KILL_AT:
                    fired["t"] = time.time()
                    os.kill(victim, signal.SIGKILL)

            st = rtest.stream_completion(self.srv.port, body(req), fault)
            self.assertIn("t", fired)
            self.check_same(st, name)
            gap = rtest.max_gap(st.times)
            print("\n[%s] SIGKILL stage 1: largest pause between tokens %.0f ms" %
                  (name, gap * 1000), file=sys.stderr)
            self.assertNotEqual(rtest.worker_of_stage(pid, 1), victim)
            self.assertTrue(self.health_ok(), "/health did not return to 200")

    def test_2_sigkill_again_during_recovery(self):
        pid = self.srv.proc.pid
        victim = rtest.worker_of_stage(pid, 1)
        fired = {}

        def fault(st):
            if len(st.times) == KILL_AT:
                os.kill(victim, signal.SIGKILL)
                second, _ = rtest.wait_new_worker(pid, 1, victim)
                self.assertIsNotNone(second, "no replacement for stage 1")
                os.kill(second, signal.SIGKILL)
                fired["second"] = second

        st = rtest.stream_completion(self.srv.port, body(GREEDY), fault)
        self.assertIn("second", fired)
        self.check_same(st, "greedy")
        third = rtest.worker_of_stage(pid, 1)
        self.assertNotIn(third, (victim, fired["second"], None))
        print("\n[greedy] two SIGKILLs: largest pause %.0f ms" % (rtest.max_gap(st.times) * 1000),
              file=sys.stderr)

    def test_3_sigstop_hang(self):
        pid = self.srv.proc.pid
        victim = rtest.worker_of_stage(pid, 1)
        fired = {}
        queued = {}

        def late_request():
            queued["st"] = rtest.stream_completion(self.srv.port, body(SEEDED))

        th = threading.Thread(target=late_request)

        def fault(st):
            if len(st.times) == KILL_AT:
                os.kill(victim, signal.SIGSTOP)
                t0 = time.time()
                th.start()   # sent while the stage hangs: must queue, then complete
                new, waited = rtest.wait_new_worker(pid, 1, victim, timeout=DEAD_MS / 1000 + 5)
                fired["detect_s"] = time.time() - t0
                fired["new"] = new

        st = rtest.stream_completion(self.srv.port, body(GREEDY), fault)
        th.join(120)
        self.assertIsNotNone(fired.get("new"), "the hung stage was never replaced")
        self.assertLess(fired["detect_s"], DEAD_MS / 1000 + 1.5,
                        "the hang was not detected within dead_after_ms + 1.5 s")
        self.assertFalse(rtest.alive(victim), "the hung worker is still there")
        self.check_same(st, "greedy")
        self.check_same(queued["st"], "seeded")
        print("\n[greedy] SIGSTOP stage 1: replaced after %.0f ms (dead_after_ms %d), largest "
              "pause %.0f ms" % (fired["detect_s"] * 1000, DEAD_MS, rtest.max_gap(st.times) * 1000),
              file=sys.stderr)


class Lifecycle(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.model = rtest.tiny_model(BIN, WORK)

    def test_4_sigterm_finishes_in_flight(self):
        srv = rtest.Server(serve_argv(self.model, ["--shutdown-grace-ms", "20000"]))
        pid = srv.proc.pid
        sub = os.path.join(RUN, "p%d" % pid)
        self.assertTrue(os.path.isdir(sub))
        self.assertTrue(rtest.edge_paths(sub), "no edges while running")
        late = {}

        def on_token(st):
            if len(st.times) == 4:
                os.kill(pid, signal.SIGTERM)
                time.sleep(0.2)
                try:
                    code, _, data = srv.request("POST", "/v1/completions",
                                                json.dumps(body(GREEDY)),
                                                {"Content-Type": "application/json"}, timeout=10)
                    late["code"] = code
                except OSError as e:   # the listener may already be closed: also a refusal
                    late["code"] = str(e)

        st = rtest.stream_completion(srv.port, body(GREEDY), on_token)
        self.assertEqual(st.errors, [])
        self.assertTrue(st.done)
        self.assertEqual(st.finish, "length", "the in-flight request was cut short")
        self.assertEqual(len(st.times), GREEDY["max_tokens"])
        self.assertEqual(late.get("code"), 503, "a request during the grace was not refused")
        srv.proc.wait(30)
        rc = srv.stop()
        self.assertEqual(rc, 0)
        self.assertEqual(rtest.edge_paths(sub), [], "shared-memory edges left behind")
        self.assertFalse(os.path.exists(sub), "run subdirectory left behind")

    def test_5_stale_shm_reclaimed(self):
        srv = rtest.Server(serve_argv(self.model))
        pid = srv.proc.pid
        workers = rtest.children(pid)
        sub = os.path.join(RUN, "p%d" % pid)
        os.kill(pid, signal.SIGKILL)
        srv.proc.wait(10)
        deadline = time.time() + 10
        while time.time() < deadline and any(rtest.alive(p) for p in workers):
            time.sleep(0.05)
        self.assertFalse(any(rtest.alive(p) for p in workers), "workers outlived the coordinator")
        stale = rtest.edge_paths(sub)
        self.assertTrue(stale, "the crash left no edges: the test would prove nothing")
        self.assertTrue(os.path.isdir(sub))
        srv.stop()
        srv2 = rtest.Server(serve_argv(self.model))
        try:
            self.assertEqual(rtest.edge_paths(sub), [], "stale edges not reclaimed")
            self.assertFalse(os.path.exists(sub), "stale run subdirectory not removed")
            st = rtest.stream_completion(srv2.port, body(dict(GREEDY, max_tokens=8)))
            self.assertEqual(st.errors, [])
            self.assertTrue(st.done)
        finally:
            self.assertEqual(srv2.stop(), 0)


if __name__ == "__main__":
    os.makedirs(WORK, exist_ok=True)
    unittest.main(argv=[sys.argv[0], "-v"])
