"""test_api.py - proves the OpenAI-compatible HTTP API end to end with the
openai Python package as the client, against the real server code (HTTP,
request parsing, template, tokenizer, stop strings, reasoning/tool parser,
SSE) over the fake engine (tests/http/fake_engine.c): chat and completions,
streaming and not, usage, stop strings, logprobs, logit_bias, seed
determinism, n, thinking control, scripted tool calls and reasoning,
errors (400 naming the field, 401, 404, 405, 408, 413, 429 with
Retry-After, context overflow with both numbers), keep-alive and chunked
request bodies, CORS, and cancellation on client disconnect (the slot is
freed at once).

usage: test_api.py FAKE_SERVE_BIN WORKDIR"""
import json
import os
import sys
import time
import unittest

import openai

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from apitest import Server, raw_exchange, vocab_path  # noqa: E402

BIN = sys.argv[1] if len(sys.argv) > 1 else "cs_fake_serve"
WORK = sys.argv[2] if len(sys.argv) > 2 else "/tmp/cs_api_test"
KEY = "sk-test-key"
AUTH = {"Authorization": "Bearer " + KEY}
CTX = 4096

WEATHER_TOOL = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather of a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]}}}]

# The k-th request the scripted server accepts gets SCRIPTS[k]: the tests of
# ScriptedTest run in this order (one request each, n=1).
CALL = ("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
        "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call><|im_end|>")
SCRIPTS = [
    CALL,                                                   # 0: tool call, non-streaming
    CALL,                                                   # 1: tool call, streaming
    "Let me think.</think>\n\nThe answer is 4.<|im_end|>",  # 2: reasoning, non-streaming
    "Let me think.</think>\n\nThe answer is 4.<|im_end|>",  # 3: reasoning, streaming
    "<parameter=city>\nRome\n</parameter>\n</function>\n</tool_call><|im_end|>",  # 4: named
    "Hello world. STOP here<|im_end|>",                     # 5: stop string in content
]


def client(server, key=KEY):
    return openai.OpenAI(base_url=server.base + "/v1", api_key=key, timeout=30, max_retries=0)


def user(text):
    return [{"role": "user", "content": text}]


class ApiTest(unittest.TestCase):
    server = None

    @classmethod
    def setUpClass(cls):
        cls.server = Server([BIN, "--vocab", vocab_path(), "--api-key", KEY,
                             "--ctx-size", str(CTX), "--max-body-bytes", "65536",
                             "--header-timeout-ms", "1000", "--max-seqs", "16",
                             "--cors-origin", "https://example.test", "--log-level", "warn"])
        cls.c = client(cls.server)

    @classmethod
    def tearDownClass(cls):
        rc = cls.server.stop()
        assert rc == 0, "server exit status %r" % rc

    # ---- basics ----

    def test_models(self):
        models = self.c.models.list()
        self.assertEqual([m.id for m in models.data], ["fake-model"])
        status, _, body = self.server.request("GET", "/v1/models", headers=AUTH)
        self.assertEqual(json.loads(body)["data"][0]["max_model_len"], CTX)
        self.assertEqual(self.c.models.retrieve("fake-model").id, "fake-model")
        with self.assertRaises(openai.NotFoundError):
            self.c.models.retrieve("other-model")

    def test_chat_streaming_n2(self):
        chunks = list(self.c.chat.completions.create(
            model="fake-model", messages=user("Hi /no_think"), max_tokens=5, n=2, seed=1,
            stream=True, stream_options={"include_usage": True}))
        finals = sorted(ch.choices[0].index for ch in chunks
                        if ch.choices and ch.choices[0].finish_reason == "length")
        self.assertEqual(finals, [0, 1])
        roles = sorted(ch.choices[0].index for ch in chunks if ch.choices and ch.choices[0].delta.role)
        self.assertEqual(roles, [0, 1])
        self.assertEqual(chunks[-1].usage.completion_tokens, 10)

    def test_chat_non_streaming(self):
        r = self.c.chat.completions.create(model="fake-model", messages=user("Hi"), max_tokens=8)
        self.assertTrue(r.id.startswith("chatcmpl-"))
        self.assertEqual(r.object, "chat.completion")
        self.assertEqual(r.choices[0].finish_reason, "length")
        self.assertEqual(r.usage.completion_tokens, 8)
        self.assertEqual(r.usage.total_tokens, r.usage.prompt_tokens + 8)
        self.assertGreater(r.usage.prompt_tokens, 5)
        # thinking is on by default: a generation cut off in the think block is all reasoning
        self.assertIsNone(r.choices[0].message.content)
        d = r.model_dump()
        self.assertTrue(d["choices"][0]["message"]["reasoning_content"])
        self.assertEqual(d["usage"]["completion_tokens_details"]["reasoning_tokens"], 8)
        self.assertEqual(d["usage"]["prompt_tokens_details"]["cached_tokens"], 0)
        r2 = self.c.chat.completions.create(model="fake-model", messages=user("Hi"), max_tokens=8)
        self.assertNotEqual(r.id, r2.id)

    def test_chat_streaming_matches_non_streaming(self):
        kw = dict(model="fake-model", messages=user("Tell me"), max_tokens=12, temperature=0,
                  extra_body={"chat_template_kwargs": {"enable_thinking": False}})
        whole = self.c.chat.completions.create(**kw)
        chunks = list(self.c.chat.completions.create(stream=True,
                                                     stream_options={"include_usage": True}, **kw))
        ids = {ch.id for ch in chunks}
        self.assertEqual(len(ids), 1)
        first = chunks[0].choices[0].delta
        self.assertEqual((first.role, first.content), ("assistant", ""))
        text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
        self.assertEqual(text, whole.choices[0].message.content)
        finals = [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason]
        self.assertEqual(finals, ["length"])
        self.assertEqual(chunks[-1].choices, [])
        self.assertEqual(chunks[-1].usage.completion_tokens, 12)
        self.assertEqual(chunks[-1].usage.prompt_tokens, whole.usage.prompt_tokens)

    def test_thinking_controls(self):
        for extra, msgs in [({"chat_template_kwargs": {"enable_thinking": False}}, user("Hi")),
                            ({"reasoning_effort": "none"}, user("Hi")),
                            ({}, user("Hi /no_think"))]:
            r = self.c.chat.completions.create(model="fake-model", messages=msgs, max_tokens=4,
                                               extra_body=extra)
            d = r.model_dump()["choices"][0]["message"]
            self.assertIsNone(d["reasoning_content"], extra)
            self.assertTrue(d["content"], extra)
        # /no_think is removed from the prompt: same prompt tokens as without it, thinking off
        a = self.c.chat.completions.create(model="fake-model", messages=user("Hi /no_think"), max_tokens=1)
        b = self.c.chat.completions.create(model="fake-model", messages=user("Hi"), max_tokens=1,
                                           extra_body={"chat_template_kwargs": {"enable_thinking": False}})
        self.assertEqual(a.usage.prompt_tokens, b.usage.prompt_tokens)

    def test_completions(self):
        kw = dict(model="fake-model", prompt="Once upon a time", max_tokens=10, temperature=0)
        r = self.c.completions.create(**kw)
        self.assertEqual(r.object, "text_completion")
        self.assertTrue(r.id.startswith("cmpl-"))
        self.assertEqual(r.choices[0].finish_reason, "length")
        self.assertEqual(r.usage.completion_tokens, 10)
        chunks = list(self.c.completions.create(stream=True, stream_options={"include_usage": True}, **kw))
        text = "".join(ch.choices[0].text for ch in chunks if ch.choices)
        self.assertEqual(text, r.choices[0].text)
        self.assertEqual(chunks[-1].usage.completion_tokens, 10)

    def test_stop_strings(self):
        kw = dict(model="fake-model", prompt="Count with me", max_tokens=30, temperature=0)
        full = self.c.completions.create(**kw).choices[0].text
        stop = full[len(full) // 2: len(full) // 2 + 3]
        want = full[:full.index(stop)]
        r = self.c.completions.create(stop=[stop, "\x00never"], **kw)
        self.assertEqual(r.choices[0].text, want)
        self.assertEqual(r.choices[0].finish_reason, "stop")
        chunks = list(self.c.completions.create(stop=stop, stream=True, **kw))
        self.assertEqual("".join(ch.choices[0].text for ch in chunks if ch.choices), want)
        self.assertEqual(chunks[-1].choices[0].finish_reason, "stop")

    def test_logprobs(self):
        r = self.c.chat.completions.create(model="fake-model", messages=user("Hi"), max_tokens=6,
                                           logprobs=True, top_logprobs=3)
        content = r.choices[0].logprobs.content
        self.assertEqual(len(content), 6)
        for e in content:
            self.assertLessEqual(e.logprob, 0)
            self.assertEqual(len(e.top_logprobs), 3)
            self.assertIsInstance(e.bytes, list)
            self.assertEqual(e.top_logprobs[0].logprob, e.logprob)
        t = self.c.completions.create(model="fake-model", prompt="abc", max_tokens=5, logprobs=2)
        lp = t.choices[0].logprobs
        self.assertEqual(len(lp.tokens), 5)
        self.assertEqual(len(lp.token_logprobs), 5)
        self.assertEqual(len(lp.top_logprobs), 5)
        self.assertEqual(lp.text_offset, sorted(lp.text_offset))
        self.assertIsNone(self.c.completions.create(model="fake-model", prompt="abc",
                                                    max_tokens=2).choices[0].logprobs)

    def test_logit_bias_forces_token(self):
        t = self.c.completions.create(model="fake-model", prompt="abc", max_tokens=4,
                                      logit_bias={"1234": 100}, logprobs=0)
        self.assertEqual(len(set(t.choices[0].logprobs.tokens)), 1)

    def test_seed_determinism_and_n(self):
        kw = dict(model="fake-model", prompt="Seeded", max_tokens=10, temperature=1.0)
        a = self.c.completions.create(seed=42, **kw).choices[0].text
        b = self.c.completions.create(seed=42, **kw).choices[0].text
        c = self.c.completions.create(seed=43, **kw).choices[0].text
        self.assertEqual(a, b)
        self.assertNotEqual(a, c)
        r = self.c.completions.create(seed=42, n=2, **kw)
        self.assertEqual([ch.index for ch in r.choices], [0, 1])
        self.assertEqual(r.choices[0].text, a)
        self.assertEqual(r.choices[1].text, c)
        self.assertEqual(r.usage.completion_tokens, 20)

    # ---- errors ----

    def assertError(self, status, body, param=None, contains=None):
        err = json.loads(body)["error"]
        self.assertEqual(set(err), {"message", "type", "param", "code"})
        if param is not None:
            self.assertEqual(err["param"], param)
        if contains:
            for c in contains:
                self.assertIn(c, err["message"])
        return err

    def post(self, path, payload, headers=AUTH):
        body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        return self.server.request("POST", path, body, dict(headers, **{"Content-Type": "application/json"}))

    def test_error_bad_json_and_types(self):
        st, _, body = self.post("/v1/chat/completions", b'{"messages": [')
        self.assertEqual(st, 400)
        self.assertError(st, body)
        cases = [({"messages": user("x"), "temperature": "hot"}, "temperature"),
                 ({"messages": user("x"), "max_tokens": -1}, "max_tokens"),
                 ({"messages": "x"}, "messages"),
                 ({"messages": user("x"), "stop": 5}, "stop"),
                 ({"messages": user("x"), "n": 1.5}, "n"),
                 ({"messages": user("x"), "logit_bias": {"abc": 1}}, "logit_bias"),
                 ({"messages": user("x"), "stream": "yes"}, "stream"),
                 ({}, "messages")]
        for payload, param in cases:
            st, _, body = self.post("/v1/chat/completions", payload)
            self.assertEqual(st, 400, payload)
            self.assertError(st, body, param=param)
            self.assertIn(param, json.loads(body)["error"]["message"])
        st, _, body = self.post("/v1/completions", {"prompt": 3})
        self.assertEqual(st, 400)
        self.assertError(st, body, param="prompt")
        with self.assertRaises(openai.BadRequestError):
            self.c.chat.completions.create(model="fake-model", messages=[{"role": "user", "content": 5}])
        st, _, body = self.post("/v1/chat/completions", {"messages": user("x"),
                                "response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": {"type": "string", "pattern": "^a"}}}})
        self.assertEqual(st, 400)
        self.assertIn("json_schema", json.loads(body)["error"]["message"])

    def test_error_context_overflow_names_both_numbers(self):
        st, _, body = self.post("/v1/completions", {"prompt": "hello", "max_tokens": CTX + 10})
        self.assertEqual(st, 400)
        err = self.assertError(st, body, contains=[str(CTX), str(CTX + 10)])
        self.assertEqual(err["code"], "context_length_exceeded")
        with self.assertRaises(openai.BadRequestError):
            self.c.completions.create(model="fake-model", prompt=" word" * (CTX + 5))

    def test_error_routes_methods_auth_model(self):
        st, _, body = self.server.request("GET", "/v2/nothing", headers=AUTH)
        self.assertEqual(st, 404)
        self.assertError(st, body)
        st, h, body = self.server.request("GET", "/v1/chat/completions", headers=AUTH)
        self.assertEqual(st, 405)
        self.assertEqual(h.get("allow"), "POST")
        st, _, body = self.post("/v1/chat/completions", {"messages": user("x")}, headers={})
        self.assertEqual(st, 401)
        with self.assertRaises(openai.AuthenticationError):
            client(self.server, key="wrong").models.list()
        st, _, _ = self.server.request("GET", "/health")
        self.assertEqual(st, 200)
        with self.assertRaises(openai.NotFoundError):
            self.c.chat.completions.create(model="other-model", messages=user("x"), max_tokens=1)

    def test_error_body_too_large(self):
        st, _, body = self.post("/v1/chat/completions", {"messages": user("x" * 70000)})
        self.assertEqual(st, 413)
        # chunked body growing past the limit
        data = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                + b"".join(b"4000\r\n" + b"a" * 0x4000 + b"\r\n" for _ in range(5)) + b"0\r\n\r\n")
        self.assertTrue(raw_exchange(self.server.port, data).startswith(b"HTTP/1.1 413"))

    def test_error_slow_body_times_out(self):
        t0 = time.time()
        out = raw_exchange(self.server.port, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                           b"Content-Length: 100\r\n\r\n{\"prompt\"", timeout=5)
        self.assertTrue(out.startswith(b"HTTP/1.1 408"), out[:100])
        self.assertLess(time.time() - t0, 4)

    # ---- HTTP behaviour ----

    def test_keep_alive_pipelined_and_chunked_body(self):
        body = json.dumps({"prompt": "hi", "max_tokens": 2}).encode()
        chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
        req1 = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + KEY.encode()
                + b"\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked)
        req2 = b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        out = raw_exchange(self.server.port, req1 + req2)
        self.assertEqual(out.count(b"HTTP/1.1 200 OK"), 2, out[:300])
        self.assertIn(b"text_completion", out)

    def test_cors(self):
        st, h, _ = self.server.request("OPTIONS", "/v1/chat/completions",
                                       headers={"Origin": "https://example.test",
                                                "Access-Control-Request-Method": "POST"})
        self.assertEqual(st, 204)
        self.assertEqual(h.get("access-control-allow-origin"), "https://example.test")
        self.assertIn("Authorization", h.get("access-control-allow-headers", ""))
        st, h, _ = self.server.request("GET", "/health")
        self.assertEqual(h.get("access-control-allow-origin"), "https://example.test")

    def test_cancel_on_disconnect_frees_slot(self):
        before = self.server.metrics(AUTH).get("cmpserve_canceled_total", 0)
        stream = self.c.chat.completions.create(model="fake-model", messages=user("long"),
                                                max_tokens=3000, stream=True)
        got = 0
        for _ in stream:
            got += 1
            if got == 5:
                break
        self.assertEqual(self.server.metrics(AUTH)["cmpserve_running_sequences"], 1)
        stream.close()
        self.assertEqual(self.server.wait_metric("cmpserve_running_sequences", 0, AUTH), 0)
        self.assertEqual(self.server.metrics(AUTH)["cmpserve_canceled_total"], before + 1)
        self.assertEqual(self.server.wait_metric("cmpserve_active_requests", 0, AUTH), 0)


class QueueTest(unittest.TestCase):
    """A full queue answers 429 with Retry-After; the slots come back after."""

    def test_queue_full_429(self):
        srv = Server([BIN, "--vocab", vocab_path(), "--max-seqs", "1", "--queue-size", "1",
                      "--fake-tick-ms", "5", "--log-level", "warn"])
        try:
            c = client(srv)
            s1 = c.completions.create(model="fake-model", prompt="a", max_tokens=2000, stream=True)
            next(iter(s1))
            s2 = c.completions.create(model="fake-model", prompt="b", max_tokens=2000, stream=True)
            st, h, body = srv.request("POST", "/v1/completions", json.dumps({"prompt": "c", "max_tokens": 2}))
            self.assertEqual(st, 429)
            self.assertEqual(h.get("retry-after"), "1")
            self.assertIn("error", json.loads(body))
            s1.close()
            s2.close()
            self.assertEqual(srv.wait_metric("cmpserve_running_sequences", 0), 0)
            self.assertEqual(srv.wait_metric("cmpserve_queue_depth", 0), 0)
            r = c.completions.create(model="fake-model", prompt="c", max_tokens=2)
            self.assertEqual(r.usage.completion_tokens, 2)
        finally:
            self.assertEqual(srv.stop(), 0)


class ScriptedTest(unittest.TestCase):
    """Tool calls and reasoning through the real parser, from scripted model output."""

    @classmethod
    def setUpClass(cls):
        os.makedirs(WORK, exist_ok=True)
        path = os.path.join(WORK, "script.json")
        with open(path, "w") as f:
            json.dump({"scripts": SCRIPTS}, f)
        cls.server = Server([BIN, "--vocab", vocab_path(), "--test-script", path,
                             "--allow-test-options", "--log-level", "warn"])
        cls.c = client(cls.server)

    @classmethod
    def tearDownClass(cls):
        assert cls.server.stop() == 0

    def test_scripted_sequence(self):
        # one test so the requests reach the server in script order
        c = self.c
        # 0: tool call, non-streaming
        r = c.chat.completions.create(model="fake-model", messages=user("Weather in Paris?"),
                                      tools=WEATHER_TOOL)
        ch = r.choices[0]
        self.assertEqual(ch.finish_reason, "tool_calls")
        self.assertIsNone(ch.message.content)
        call = ch.message.tool_calls[0]
        self.assertRegex(call.id, r"^call_[0-9a-f]{24}$")
        self.assertEqual(call.function.name, "get_weather")
        self.assertEqual(json.loads(call.function.arguments), {"city": "Paris", "days": 3})
        whole_args = call.function.arguments
        # 1: the same, streaming: fragments concatenate to the same arguments
        chunks = list(c.chat.completions.create(model="fake-model", messages=user("Weather in Paris?"),
                                                tools=WEATHER_TOOL, stream=True))
        deltas = [tc for chk in chunks if chk.choices for tc in (chk.choices[0].delta.tool_calls or [])]
        self.assertEqual(deltas[0].function.name, "get_weather")
        self.assertTrue(all(d.index == 0 for d in deltas))
        self.assertEqual("".join(d.function.arguments or "" for d in deltas), whole_args)
        self.assertEqual(chunks[-1].choices[0].finish_reason, "tool_calls")
        self.assertFalse(any("<tool_call>" in (chk.choices[0].delta.content or "")
                             for chk in chunks if chk.choices))
        # 2: reasoning then content
        r = c.chat.completions.create(model="fake-model", messages=user("2+2?"))
        m = r.model_dump()["choices"][0]["message"]
        self.assertEqual(m["reasoning_content"], "Let me think.")
        self.assertEqual(m["reasoning"], "Let me think.")
        self.assertEqual(m["content"], "The answer is 4.")
        self.assertEqual(r.choices[0].finish_reason, "stop")
        # 3: the same, streaming: no think tags anywhere
        chunks = list(c.chat.completions.create(model="fake-model", messages=user("2+2?"), stream=True))
        deltas = [chk.choices[0].delta.model_dump() for chk in chunks if chk.choices]
        self.assertEqual("".join(d.get("reasoning_content") or "" for d in deltas), "Let me think.")
        self.assertEqual("".join(d.get("content") or "" for d in deltas), "The answer is 4.")
        # 4: a named tool_choice forces the call opening
        r = c.chat.completions.create(model="fake-model", messages=user("Weather in Rome?"),
                                      tools=WEATHER_TOOL,
                                      tool_choice={"type": "function", "function": {"name": "get_weather"}})
        call = r.choices[0].message.tool_calls[0]
        self.assertEqual(call.function.name, "get_weather")
        self.assertEqual(json.loads(call.function.arguments), {"city": "Rome"})
        # 5: stop string inside scripted content (thinking off)
        r = c.chat.completions.create(model="fake-model", messages=user("Say hello /no_think"), stop=["STOP"])
        self.assertEqual(r.choices[0].message.content, "Hello world.")
        self.assertEqual(r.choices[0].finish_reason, "stop")


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0], "-v"])
