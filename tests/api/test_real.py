"""test_real.py - proves `cmpserve serve` end to end with the in-process
engine on a real (tiny, seeded) Qwen3.5-shaped model with the real Qwen
vocabulary, on the CPU backend, with the openai package as the client:
health and models; chat non-streaming equals streaming at temperature 0;
seeded sampling is reproducible and differs across seeds; logprobs count
the tokens; stop strings cut the text; context overflow is refused with
both numbers; a client that disconnects frees its slot at once; and the
scripted-output test hook drives tool calls and reasoning through the real
engine's last stage.

usage: test_real.py CMPSERVE_BIN WORKDIR"""
import json
import os
import subprocess
import sys
import unittest

import openai

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from apitest import Server, vocab_path  # noqa: E402

BIN = sys.argv[1] if len(sys.argv) > 1 else "cmpserve"
WORK = sys.argv[2] if len(sys.argv) > 2 else "/tmp/cs_api_real"
CTX = 1024
MODEL = os.path.join(WORK, "tiny-q8_0.gguf")

CALL = ("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
        "</function>\n</tool_call><|im_end|>")
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}}]


def setUpModule():
    os.makedirs(WORK, exist_ok=True)
    if not os.path.exists(MODEL):
        subprocess.run([BIN, "mkmodel", "--preset", "tiny", "--type", "q8_0", "--seed", "1",
                        "--vocab", vocab_path(), "--out", MODEL], check=True, timeout=120)


def client(server):
    return openai.OpenAI(base_url=server.base + "/v1", api_key="x", timeout=60, max_retries=0)


class RealModelTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server([BIN, "serve", "--model", MODEL, "--gpus", "cpu", "--ctx-size", str(CTX),
                             "--max-seqs", "4", "--threads", "2", "--log-level", "warn"])
        cls.c = client(cls.server)

    @classmethod
    def tearDownClass(cls):
        assert cls.server.stop() == 0

    def test_health_and_models(self):
        st, _, body = self.server.request("GET", "/health")
        self.assertEqual(st, 200, body)
        self.assertEqual(self.c.models.list().data[0].id, "tiny-q8_0.gguf")

    def test_stream_equals_whole_greedy(self):
        kw = dict(model="tiny-q8_0.gguf", messages=[{"role": "user", "content": "Hello"}],
                  max_tokens=8, temperature=0,
                  extra_body={"chat_template_kwargs": {"enable_thinking": False}})
        whole = self.c.chat.completions.create(**kw)
        chunks = list(self.c.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kw))
        text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
        self.assertEqual(text, whole.choices[0].message.content or "")
        self.assertEqual(chunks[-1].usage.completion_tokens, whole.usage.completion_tokens)

    def test_seed_logprobs_stop(self):
        kw = dict(model="tiny-q8_0.gguf", prompt="The weather", max_tokens=8, temperature=1.0)
        a = self.c.completions.create(seed=7, logprobs=2, **kw).choices[0]
        b = self.c.completions.create(seed=7, **kw).choices[0]
        c = self.c.completions.create(seed=8, **kw).choices[0]
        self.assertEqual(a.text, b.text)
        self.assertNotEqual(a.text, c.text)
        self.assertEqual(len(a.logprobs.tokens), 8)
        self.assertTrue(all(lp <= 0 for lp in a.logprobs.token_logprobs))
        if len(a.text) > 4:
            stop = a.text[2:4]
            cut = self.c.completions.create(seed=7, stop=[stop], **kw).choices[0]
            self.assertEqual(cut.text, a.text[:a.text.index(stop)])
            self.assertEqual(cut.finish_reason, "stop")

    def test_context_overflow(self):
        with self.assertRaises(openai.BadRequestError) as cm:
            self.c.completions.create(model="tiny-q8_0.gguf", prompt="hi", max_tokens=CTX + 1)
        self.assertIn(str(CTX), str(cm.exception))
        self.assertIn(str(CTX + 1), str(cm.exception))

    def test_disconnect_frees_slot(self):
        stream = self.c.completions.create(model="tiny-q8_0.gguf", prompt="Go", max_tokens=900,
                                           stream=True)
        for i, _ in enumerate(stream):
            if i == 2:
                break
        stream.close()
        self.assertEqual(self.server.wait_metric("cmpserve_running_sequences", 0, timeout=5), 0)
        self.assertEqual(self.server.wait_metric("cmpserve_active_requests", 0), 0)


class RealScriptedTest(unittest.TestCase):
    def test_scripted_tool_call_and_reasoning(self):
        path = os.path.join(WORK, "script.json")
        with open(path, "w") as f:
            json.dump({"scripts": [CALL, "Hmm.</think>\n\nFour.<|im_end|>"]}, f)
        srv = Server([BIN, "serve", "--model", MODEL, "--gpus", "cpu", "--ctx-size", str(CTX),
                      "--threads", "2", "--test-script", path, "--allow-test-options",
                      "--log-level", "warn"])
        try:
            c = client(srv)
            r = c.chat.completions.create(model="tiny-q8_0.gguf", tools=TOOLS,
                                          messages=[{"role": "user", "content": "Weather?"}])
            self.assertEqual(r.choices[0].finish_reason, "tool_calls")
            self.assertEqual(json.loads(r.choices[0].message.tool_calls[0].function.arguments),
                             {"city": "Paris"})
            chunks = list(c.chat.completions.create(model="tiny-q8_0.gguf", stream=True,
                                                    messages=[{"role": "user", "content": "2+2?"}]))
            deltas = [ch.choices[0].delta.model_dump() for ch in chunks if ch.choices]
            self.assertEqual("".join(d.get("reasoning_content") or "" for d in deltas), "Hmm.")
            self.assertEqual("".join(d.get("content") or "" for d in deltas), "Four.")
        finally:
            self.assertEqual(srv.stop(), 0)



# Constrained decoding (coordinator/json_constrain.h) on the random-weight
# tiny model: the constraint alone must make the output valid. The schemas
# and tools are chosen so every path ends within max_tokens (bounded numbers,
# bounded whitespace, enums, no free strings), so the tests cannot flake.
SCHEMA = {"type": "object", "properties": {
    "n": {"type": "integer"}, "ok": {"type": "boolean"},
    "color": {"enum": ["red", "green", 7]}, "opt": {"type": "null"},
    "xs": {"type": "array", "items": {"type": "number"}, "maxItems": 2}},
    "required": ["n", "ok", "color", "xs"], "additionalProperties": False}
NOARG_TOOLS = [{"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}
               for n in ("get_time", "get_date")]


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


class RealConstrainedTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server([BIN, "serve", "--model", MODEL, "--gpus", "cpu", "--ctx-size", str(CTX),
                             "--max-seqs", "4", "--threads", "2", "--log-level", "warn"])
        cls.c = client(cls.server)

    @classmethod
    def tearDownClass(cls):
        assert cls.server.stop() == 0

    def chat(self, **kw):
        kw.setdefault("max_tokens", 300)
        return self.c.chat.completions.create(model="tiny-q8_0.gguf",
                                              messages=[{"role": "user", "content": "Go"}], **kw)

    def test_json_schema_output_validates(self):
        for seed in range(4):
            r = self.chat(seed=seed, temperature=1.0, response_format={
                "type": "json_schema", "json_schema": {"name": "t", "schema": SCHEMA, "strict": True}})
            ch = r.choices[0]
            self.assertEqual(ch.finish_reason, "stop", ch.message.content)
            check_schema_value(self, json.loads(ch.message.content))

    def test_json_schema_stream_and_greedy(self):
        kw = dict(temperature=0, response_format={"type": "json_schema",
                                                  "json_schema": {"name": "t", "schema": SCHEMA}})
        whole = self.chat(**kw).choices[0].message.content
        chunks = list(self.chat(stream=True, **kw))
        text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
        self.assertEqual(text, whole)
        check_schema_value(self, json.loads(whole))

    def test_json_object_output_parses(self):
        done = 0
        for seed in range(3):
            r = self.chat(seed=seed, temperature=1.0, response_format={"type": "json_object"},
                          max_completion_tokens=120)
            ch = r.choices[0]
            self.assertTrue(ch.message.content.lstrip().startswith("{"), ch.message.content)
            if ch.finish_reason == "stop":
                self.assertIsInstance(json.loads(ch.message.content), dict)
                done += 1
            else:  # cut by the length: still a valid prefix of an object
                self.assertEqual(ch.finish_reason, "length")
        print("json_object: %d of 3 finished within 120 tokens" % done, file=sys.stderr)

    def test_json_schema_unsupported_keyword(self):
        with self.assertRaises(openai.BadRequestError) as cm:
            self.chat(response_format={"type": "json_schema", "json_schema": {
                "name": "t", "schema": {"type": "string", "pattern": "^a"}}})
        self.assertIn("pattern", str(cm.exception))

    def test_tool_choice_required_and_named(self):
        names = {"get_time", "get_date"}
        for seed in range(3):
            r = self.chat(seed=seed, temperature=1.0, tools=NOARG_TOOLS, tool_choice="required",
                          parallel_tool_calls=False)
            ch = r.choices[0]
            self.assertEqual(ch.finish_reason, "tool_calls")
            self.assertEqual(len(ch.message.tool_calls), 1)
            self.assertIn(ch.message.tool_calls[0].function.name, names)
            self.assertEqual(json.loads(ch.message.tool_calls[0].function.arguments), {})
        r = self.chat(seed=1, temperature=1.0, tools=NOARG_TOOLS,
                      tool_choice={"type": "function", "function": {"name": "get_date"}})
        ch = r.choices[0]
        self.assertEqual(ch.finish_reason, "tool_calls")
        self.assertTrue(all(tc.function.name in names for tc in ch.message.tool_calls))
        self.assertEqual(ch.message.tool_calls[0].function.name, "get_date")

    def test_tool_choice_with_parameters_parses(self):
        r = self.chat(seed=3, temperature=1.0, tools=TOOLS, tool_choice="required",
                      parallel_tool_calls=False, max_tokens=60)
        ch = r.choices[0]
        self.assertIn(ch.finish_reason, ("tool_calls", "length"))
        self.assertEqual(ch.message.tool_calls[0].function.name, "get_weather")
        if ch.finish_reason == "tool_calls":
            args = json.loads(ch.message.tool_calls[0].function.arguments)
            self.assertTrue(set(args) <= {"city"})


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0], "-v"])
