#!/usr/bin/env python3
"""Proves that coordinator/template.c renders byte-for-byte what Jinja2 renders
from the official Qwen3.5 chat template (with transformers' settings:
ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols,
tojson = json.dumps(ensure_ascii=False), raise_exception), over every
conversation of corpus.json crossed with the template variants (Qwen3.5,
Qwen3.5-small thinking opt-in, Qwen3.6 preserve_thinking) and the thinking
options; that both raise on the same inputs, with the same message for the
template's raise_exception cases; that the variant is detected from the
template text; and that every user span lies inside the text.

The variant templates are derived here from the official file by replacing
exactly the branches that differ upstream (the test fails if a replacement
does not apply), so no template text is copied into the project.

Inputs are normalised on the Python side before rendering, exactly as
template.h documents the C renderer's deliberate differences:
  1. tool-call argument values True/False/None become "true"/"false"/"null";
  2. string `arguments` are parsed with json.loads (blank -> {}), a non-object
     result is an error, `arguments: null` is dropped;
  3. role "developer" becomes "system";
  4. an assistant `reasoning` string fills a missing `reasoning_content`;
  5. every number becomes what cJSON can carry: a double, shown as an int when
     integral and below 1e16.
Cases marked "c_rejects" are shapes the C renderer refuses on purpose (6.);
for them only the C error is checked.

Usage: test_template_jinja.py --cli template_cli --template T.jinja --corpus corpus.json
Exit 0 pass, 1 fail, 77 skip (no ../shared or no jinja2).
"""
import argparse
import copy
import itertools
import json
import os
import subprocess
import sys

SKIP = 77

SMALL_FROM = ("{%- if enable_thinking is defined and enable_thinking is false %}\n"
              "        {{- '<think>\\n\\n</think>\\n\\n' }}\n"
              "    {%- else %}\n"
              "        {{- '<think>\\n' }}\n")
SMALL_TO = ("{%- if enable_thinking is defined and enable_thinking is true %}\n"
            "        {{- '<think>\\n' }}\n"
            "    {%- else %}\n"
            "        {{- '<think>\\n\\n</think>\\n\\n' }}\n")
PRESERVE_FROM = "{%- if loop.index0 > ns.last_query_index %}"
PRESERVE_TO = ("{%- if (preserve_thinking is defined and preserve_thinking is true) "
               "or (loop.index0 > ns.last_query_index) %}")


class TemplateRaise(Exception):
    """raise_exception() from the template: the message must match C's."""


def raise_exception(message):
    raise TemplateRaise(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent,
                      separators=separators, sort_keys=sort_keys)


def make_env(jinja2):
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env


def variants(official):
    if SMALL_FROM not in official or PRESERVE_FROM not in official:
        raise SystemExit("FAIL: the official template no longer has the branches the "
                         "variants replace")
    small = official.replace(SMALL_FROM, SMALL_TO)
    q36 = official.replace(PRESERVE_FROM, PRESERVE_TO)
    return {"qwen3.5": official, "qwen3.5-small": small, "qwen3.6": q36}


# ---- normalisation (template.h differences 1-5) ----

class Expected(Exception):
    """The normalisation itself fails: C must report an error."""


def norm_num(x):
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return x
    f = float(x)
    if f != f or f in (float("inf"), float("-inf")):
        return f
    return int(f) if f.is_integer() and abs(f) < 1e16 else f


def norm_numbers(v):
    if isinstance(v, dict):
        return {k: norm_numbers(x) for k, x in v.items()}
    if isinstance(v, list):
        return [norm_numbers(x) for x in v]
    return norm_num(v)


def norm_arguments(fn):
    if not isinstance(fn, dict) or "arguments" not in fn:
        return
    a = fn["arguments"]
    if a is None:
        del fn["arguments"]
        return
    if isinstance(a, str):
        if not a.strip():
            a = {}
        else:
            try:
                a = json.loads(a)
            except ValueError:
                raise Expected("arguments not JSON")
            if not isinstance(a, dict):
                raise Expected("arguments not an object")
    if isinstance(a, dict):
        lit = {True: "true", False: "false", None: "null"}
        a = {k: (lit[v] if v is None or isinstance(v, bool) else v) for k, v in a.items()}
    fn["arguments"] = a


def normalise(req):
    req = norm_numbers(copy.deepcopy(req))
    msgs = req.get("messages")
    if not isinstance(msgs, list):
        return req
    for m in msgs:
        if not isinstance(m, dict):
            continue
        if m.get("role") == "developer":
            m["role"] = "system"
        if m.get("role") == "assistant":
            if not isinstance(m.get("reasoning_content"), str) and isinstance(m.get("reasoning"), str):
                m["reasoning_content"] = m["reasoning"]
            calls = m.get("tool_calls")
            if isinstance(calls, list):
                for tc in calls:
                    if isinstance(tc, dict):
                        norm_arguments(tc["function"] if "function" in tc else tc)
    return req


def render_jinja(template, req):
    """("ok", text) or ("raise", message) or ("error", repr)."""
    try:
        nreq = normalise(req)
    except Expected as e:
        return ("error", str(e))
    kwargs = {"messages": nreq.get("messages"), "tools": nreq.get("tools"),
              "add_generation_prompt": nreq.get("add_generation_prompt", False)}
    for k in ("enable_thinking", "preserve_thinking", "add_vision_id"):
        if k in nreq:
            kwargs[k] = nreq[k]
    try:
        return ("ok", template.render(**kwargs))
    except TemplateRaise as e:
        return ("raise", str(e))
    except Exception as e:  # TypeError, UndefinedError, ...: any error counts
        return ("error", f"{type(e).__name__}: {e}")


def option_grid(case):
    """The option sets a case runs under: its own, or the full grid."""
    if "options" in case:
        return [case["options"]]
    grid = []
    for think, preserve in itertools.product([None, True, False], [None, True]):
        o = {"add_generation_prompt": True}
        if think is not None:
            o["enable_thinking"] = think
        if preserve is not None:
            o["preserve_thinking"] = preserve
        grid.append(o)
    return grid


def check_spans(res):
    text = res["text"].encode("utf-8")
    last_end = -1
    for off, ln in res["spans"]:
        if ln <= 0 or off <= last_end or off + ln > len(text):
            return f"bad span {off},{ln} (text {len(text)} bytes)"
        last_end = off + ln
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    ap.add_argument("--template", required=True)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()
    if not os.path.exists(args.template):
        print(f"SKIP: {args.template} is absent (../shared not checked out)")
        return SKIP
    try:
        import jinja2
    except ImportError:
        print("SKIP: jinja2 is not installed in this Python")
        return SKIP
    env = make_env(jinja2)
    with open(args.template, encoding="utf-8") as f:
        texts = variants(f.read())
    compiled = {name: env.from_string(t) for name, t in texts.items()}
    with open(args.corpus, encoding="utf-8") as f:
        corpus = json.load(f)

    jobs = []  # (label, case, variant name, request)
    for case in corpus:
        names = case.get("variants", list(texts))
        for vname, opts in itertools.product(names, option_grid(case)):
            req = {"messages": case.get("messages")}
            if "tools" in case:
                req["tools"] = case["tools"]
            req.update(opts)
            req["chat_template"] = texts[vname]
            label = f"{case['name']} [{vname} {json.dumps(opts, sort_keys=True)}]"
            jobs.append((label, case, vname, req))

    proc = subprocess.run([args.cli], input=json.dumps([j[3] for j in jobs]).encode(),
                          stdout=subprocess.PIPE, check=True)
    results = json.loads(proc.stdout)
    assert len(results) == len(jobs)

    failures = 0
    counts = {"ok": 0, "raise": 0, "error": 0}
    for (label, case, vname, req), res in zip(jobs, results):
        problem = None
        if res["variant"] != vname or not res["recognised"]:
            problem = f"variant detected as {res['variant']} (recognised={res['recognised']})"
        elif case.get("c_rejects"):
            if "error" not in res:
                problem = "C rendered a shape it must reject"
        else:
            kind, py = render_jinja(compiled[vname], req)
            counts[kind] += 1
            if kind == "ok":
                if "error" in res:
                    problem = f"C failed ({res['error']}) where Jinja rendered"
                elif res["text"] != py:
                    problem = ("text differs\n--- jinja\n" + repr(py) + "\n--- C\n" +
                               repr(res["text"]))
                else:
                    problem = check_spans(res)
            elif "error" not in res:
                problem = f"C rendered where Jinja failed with {kind}: {py}"
            elif kind == "raise" and res["error"] != py:
                problem = f"error message differs: jinja {py!r}, C {res['error']!r}"
        if problem:
            failures += 1
            print(f"FAIL {label}: {problem}")
        elif args.verbose:
            print(f"ok   {label}")
    names = {c["name"] for c in corpus}
    print(f"{len(jobs)} renderings of {len(names)} conversations: {failures} failed "
          f"(jinja ok {counts['ok']}, raise {counts['raise']}, error {counts['error']})")
    if len(names) < 40:
        print("FAIL: the corpus must hold at least 40 conversations")
        return 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
