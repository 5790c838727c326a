"""test_constrained.py - proves constrained decoding through the pipeline
engine (`cmpserve serve --workers 3 --gpus cpu`): the coordinator computes
each constrained sequence's allowed-token mask, sends it in the STEP message
(protocol version 3) and advances the constraint with each sampled token.
json_schema requests (greedy, and seeded at temperature 1, sent
concurrently) give output that validates against the schema and equals,
character for character, the in-process engine's output for the same
request; a json_object request and a tool_choice="required" request match
too; and a constrained request that is streaming while a worker is killed
(recovery by replay, which must not advance the constraint again) still
ends with the in-process engine's text.

usage: test_constrained.py CMPSERVE_BIN WORKDIR"""
import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "api"))
from apitest import Server, vocab_path  # noqa: E402

BIN = sys.argv[1] if len(sys.argv) > 1 else "cmpserve"
WORK = sys.argv[2] if len(sys.argv) > 2 else "/tmp/cs_pipeline_constrained"
MODEL = os.path.join(WORK, "tiny-q8_0.gguf")
COMMON = ["--model", MODEL, "--gpus", "cpu", "--ctx-size", "1024", "--max-seqs", "4",
          "--prefill-chunk", "16", "--threads", "1", "--log-level", "warn"]

# The schema of tests/api/test_real.py: every path ends within max_tokens.
SCHEMA = {"type": "object", "properties": {
    "n": {"type": "integer"}, "ok": {"type": "boolean"},
    "color": {"enum": ["red", "green", 7]}, "opt": {"type": "null"},
    "xs": {"type": "array", "items": {"type": "number"}, "maxItems": 2}},
    "required": ["n", "ok", "color", "xs"], "additionalProperties": False}
FMT = {"type": "json_schema", "json_schema": {"name": "t", "schema": SCHEMA, "strict": True}}
TOOLS = [{"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}
         for n in ("get_time", "get_date")]
REQS = [
    {"temperature": 0, "response_format": FMT},
    {"temperature": 1.0, "seed": 1, "response_format": FMT},
    {"temperature": 1.0, "seed": 2, "response_format": FMT},
    {"temperature": 1.0, "seed": 3, "response_format": {"type": "json_object"},
     "max_tokens": 60},
    {"temperature": 1.0, "seed": 4, "tools": TOOLS, "tool_choice": "required",
     "parallel_tool_calls": False},
]


def check_schema_value(test, v):
    test.assertIsInstance(v, dict)
    test.assertEqual([k for k in v if k != "opt"], ["n", "ok", "color", "xs"])
    test.assertIsInstance(v["n"], int)
    test.assertIsInstance(v["ok"], bool)
    test.assertIn(v["color"], ["red", "green", 7])
    test.assertLessEqual(len(v["xs"]), 2)
    test.assertTrue(all(isinstance(x, (int, float)) for x in v["xs"]))
    if "opt" in v:
        test.assertIsNone(v["opt"])


def chat(server, body, content="Go"):
    body = dict({"max_tokens": 300}, **body, model="tiny-q8_0.gguf",
                messages=[{"role": "user", "content": content}])
    st, _, data = server.request("POST", "/v1/chat/completions", json.dumps(body),
                                 {"Content-Type": "application/json"}, timeout=90)
    return st, json.loads(data)


def result(body):
    ch = body["choices"][0]
    msg = ch["message"]
    calls = [(c["function"]["name"], c["function"]["arguments"])
             for c in msg.get("tool_calls") or []]
    return ch["finish_reason"], msg.get("content"), calls


def stream_chat(server, body, content, at_3rd):
    """Stream a chat; call at_3rd() after the 3rd content chunk. Returns the
    whole content and how many chunks came before at_3rd ran."""
    body = dict(body, model="tiny-q8_0.gguf", stream=True,
                messages=[{"role": "user", "content": content}])
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=90)
    conn.request("POST", "/v1/chat/completions", json.dumps(body),
                 {"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200, resp.read()
    text, n, fired = "", 0, 0
    for raw in resp:
        line = raw.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        ev = json.loads(line[6:])
        for ch in ev.get("choices", []):
            piece = ch.get("delta", {}).get("content") or ""
            text += piece
            n += bool(piece)
        if n >= 3 and not fired:
            fired = n
            at_3rd()
    conn.close()
    return text, fired


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


LONG = {"temperature": 0, "response_format": FMT, "max_tokens": 400}
LONG_PROMPT = "Write the JSON now, please, with care. " * 6


class PipelineConstrained(unittest.TestCase):
    def test_equal_to_in_process_and_valid(self):
        ref = Server([BIN, "serve"] + COMMON)
        try:
            want = []
            for r in REQS:
                st, body = chat(ref, r)
                self.assertEqual(st, 200, body)
                want.append(result(body))
            st, body = chat(ref, LONG, LONG_PROMPT)
            self.assertEqual(st, 200, body)
            want_long = result(body)
        finally:
            self.assertEqual(ref.stop(), 0)
        for i in range(3):
            self.assertEqual(want[i][0], "stop", want[i])
            check_schema_value(self, json.loads(want[i][1]))
        self.assertEqual(want[4][0], "tool_calls", want[4])

        srv = Server([BIN, "serve", "--workers", "3", "--run-dir", os.path.join(WORK, "rd"),
                      "--heartbeat-ms", "100", "--dead-after-ms", "1000"] + COMMON)
        try:
            got = [None] * len(REQS)

            def run(i):
                got[i] = chat(srv, REQS[i])

            ths = [threading.Thread(target=run, args=(i,)) for i in range(len(REQS))]
            for t in ths:
                t.start()
            for t in ths:
                t.join(120)
            for i, (st, body) in enumerate(got):
                self.assertEqual(st, 200, body)
                self.assertEqual(result(body), want[i], "request %d differs" % i)
            for i in range(3):
                check_schema_value(self, json.loads(result(got[i][1])[1]))

            # the last stage killed after a constrained stream's first tokens:
            # replayed (the constraint is not advanced again), same text
            workers = children(srv.proc.pid)
            victim = [p for p in workers if stage_of(p) == 2][0]
            text, n_before = stream_chat(srv, LONG, LONG_PROMPT, lambda: os.kill(victim, signal.SIGKILL))
            self.assertGreater(n_before, 0)
            self.assertEqual(text, want_long[1])
            self.assertTrue(any("stage 2" in ln for ln in srv.stderr_lines), "no recovery seen")
        finally:
            self.assertEqual(srv.stop(), 0)


if __name__ == "__main__":
    os.makedirs(WORK, exist_ok=True)
    if not os.path.exists(MODEL):
        subprocess.run([BIN, "mkmodel", "--preset", "tiny", "--type", "q8_0", "--seed", "1",
                        "--vocab", vocab_path(), "--out", MODEL], check=True, timeout=120,
                       stdout=subprocess.DEVNULL)
    unittest.main(argv=[sys.argv[0], "-v"])
