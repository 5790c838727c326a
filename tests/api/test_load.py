"""test_load.py - proves that many concurrent streaming clients on loopback
are all served to the end and that nothing leaks: 32 openai-client streams
(twice the server's 16 slots, so half wait in the queue) with usage, each
checked for its exact token count and finish_reason; afterwards the running
and queued sequences, active requests and open connections are back to 0
and the server's file descriptor count is back to its starting value. A
second wave in which every client disconnects mid-stream must also leave
nothing behind. Bounded: the whole test takes a few seconds, at most 60 s.

usage: test_load.py FAKE_SERVE_BIN"""
import concurrent.futures
import os
import sys
import time
import unittest

import openai

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from apitest import Server, vocab_path  # noqa: E402

BIN = sys.argv[1] if len(sys.argv) > 1 else "cs_fake_serve"
N_CLIENTS = 32
MAX_TOKENS = 60


class LoadTest(unittest.TestCase):
    def setUp(self):
        self.server = Server([BIN, "--vocab", vocab_path(), "--max-seqs", "16",
                              "--queue-size", "64", "--fake-tick-ms", "2", "--log-level", "warn"])

    def tearDown(self):
        self.assertEqual(self.server.stop(), 0)

    def one_stream(self, i, disconnect_after=None, max_tokens=MAX_TOKENS):
        with openai.OpenAI(base_url=self.server.base + "/v1", api_key="x", timeout=30,
                           max_retries=0) as c:
            stream = c.chat.completions.create(
                model="fake-model", messages=[{"role": "user", "content": "client %d /no_think" % i}],
                max_tokens=max_tokens, stream=True, stream_options={"include_usage": True},
                temperature=0)
            finish, usage, n = None, None, 0
            for chunk in stream:
                n += 1
                if chunk.choices and chunk.choices[0].finish_reason:
                    finish = chunk.choices[0].finish_reason
                if chunk.usage:
                    usage = chunk.usage
                if disconnect_after and n >= disconnect_after:
                    stream.close()
                    return None
            return finish, usage.completion_tokens if usage else None

    def settle(self):
        s = self.server
        self.assertEqual(s.wait_metric("cmpserve_running_sequences", 0, timeout=10), 0)
        self.assertEqual(s.wait_metric("cmpserve_queue_depth", 0), 0)
        self.assertEqual(s.wait_metric("cmpserve_active_requests", 0), 0)
        # the /metrics request itself holds one connection
        self.assertEqual(s.wait_metric("cmpserve_http_connections", 1), 1)

    def fds_settle(self, want, timeout=5.0):
        """The fd count once it reaches want, or the last count after timeout: the
        server closes the last /metrics connection a moment after the client
        does, so an exact count right away would race; a real leak persists."""
        deadline = time.time() + timeout
        n = self.server.fd_count()
        while n != want and time.time() < deadline:
            time.sleep(0.05)
            n = self.server.fd_count()
        return n

    def test_many_streams_complete_and_nothing_leaks(self):
        fds_before = self.server.fd_count()
        t0 = time.time()
        with concurrent.futures.ThreadPoolExecutor(N_CLIENTS) as pool:
            results = list(pool.map(self.one_stream, range(N_CLIENTS), timeout=60))
        self.assertEqual(results, [("length", MAX_TOKENS)] * N_CLIENTS)
        self.settle()
        self.assertEqual(self.fds_settle(fds_before), fds_before)
        with concurrent.futures.ThreadPoolExecutor(N_CLIENTS) as pool:
            # long generations (10 s) so that every client leaves before its end
            list(pool.map(lambda i: self.one_stream(i, disconnect_after=3 + i % 5, max_tokens=5000),
                          range(N_CLIENTS), timeout=60))
        self.settle()
        self.assertEqual(self.fds_settle(fds_before), fds_before)
        m = self.server.metrics()
        self.assertEqual(m["cmpserve_canceled_total"], N_CLIENTS)
        self.assertLess(time.time() - t0, 60)


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0], "-v"])
