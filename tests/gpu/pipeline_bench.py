#!/usr/bin/env python3
"""pipeline_bench.py - measures the pipeline on a GPU machine (pipeline issue,
item 6): aggregate decode throughput of `cmpserve serve --workers W` with 1, 2,
4 and 8 concurrent greedy streams, and the per-hop cost (a decode step with W
stages against the in-process engine's step on the same model; a long prompt's
prefill likewise, per chunk). The hop cost is the difference spread over the W
process boundaries (W - 1 edges plus the coordinator round trip). The decode
step is timed twice: from whole 64-token requests at concurrency 1 (prefill and
request costs included, spread over the tokens), and from the gaps between
streamed tokens of one longer request (decode steps alone).

usage: pipeline_bench.py --cmpserve BIN --model M [--workers 3] [--gpus 0,0,0]
                         [--tokens 64] [--conc 1,2,4,8]
Prints one BENCH line per figure. Only the standard library is needed.
"""
import argparse
import json
import subprocess
import threading
import time
import urllib.request


def wait_ready(port, proc, timeout):
    t0 = time.time()
    while time.time() - t0 < timeout:
        if proc.poll() is not None:
            raise RuntimeError("server exited with %d" % proc.returncode)
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d/health" % port, timeout=2) as r:
                if r.status == 200:
                    return
        except Exception:
            pass
        time.sleep(0.5)
    raise RuntimeError("server not ready in %d s" % timeout)


def complete(port, prompt, n):
    body = json.dumps({"prompt": prompt, "max_tokens": n, "temperature": 0,
                       "ignore_eos": True}).encode()
    req = urllib.request.Request("http://127.0.0.1:%d/v1/completions" % port, body,
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        return json.loads(r.read())["usage"]["completion_tokens"]


def decode_step_ms(port, n):
    """One streamed greedy completion of n tokens: the mean time between
    consecutive content chunks after the first (decode steps only: the
    prompt's prefill and the request's fixed costs are before the first)."""
    body = json.dumps({"prompt": "Story: once upon a time", "max_tokens": n, "temperature": 0,
                       "ignore_eos": True, "stream": True}).encode()
    req = urllib.request.Request("http://127.0.0.1:%d/v1/completions" % port, body,
                                 {"Content-Type": "application/json"})
    times = []
    with urllib.request.urlopen(req, timeout=300) as r:
        for raw in r:
            line = raw.decode("utf-8", "replace").strip()
            if line.startswith("data: {") and '"text"' in line:
                times.append(time.time())
    if len(times) < 2:
        raise RuntimeError("stream gave %d chunks" % len(times))
    return (times[-1] - times[0]) / (len(times) - 1) * 1e3


def run_conc(port, c, n):
    done = [0] * c
    def go(i):
        done[i] = complete(port, "Story number %d: once upon a time" % i, n)
    ths = [threading.Thread(target=go, args=(i,)) for i in range(c)]
    t0 = time.time()
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    return sum(done), time.time() - t0


def serve(args, extra, port):
    cmd = [args.cmpserve, "serve", "--model", args.model, "--port", str(port), "--max-seqs", "8",
           "--ctx-size", "4096", "--log-level", "info"] + extra
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open("/tmp/pb_%d.log" % port, "w"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cmpserve", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--workers", type=int, default=3)
    ap.add_argument("--gpus", default="0,0,0")
    ap.add_argument("--single", default="0", help="device of the in-process reference run")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--conc", default="1,2,4,8")
    ap.add_argument("--prefill-words", type=int, default=1800,
                    help="words of the long prompt (about as many tokens)")
    ap.add_argument("--prefill-tokens", type=int, default=2000, help="its approximate token count")
    ap.add_argument("--chunk", type=int, default=512, help="the server's prefill_chunk")
    ap.add_argument("--decode-tokens", type=int, default=256,
                    help="tokens of the streamed run that times decode steps alone")
    ap.add_argument("--worker-flags", default="", help="extra serve flags of the pipeline run")
    a = ap.parse_args()
    res = {}
    for label, extra, port in (("in-process", ["--gpus", a.single], 18080),
                               ("%d workers" % a.workers,
                                ["--workers", str(a.workers), "--gpus", a.gpus] + a.worker_flags.split(),
                               18081)):
        p = serve(a, extra, port)
        try:
            wait_ready(port, p, 240)
            complete(port, "warm up", 8)
            # prefill: a long prompt, one token out (the time is mostly the prompt's chunks)
            long_prompt = "the quick brown fox jumps over the lazy dog " * (a.prefill_words // 9)
            complete(port, long_prompt, 1)   # warm the prefill shapes
            t0 = time.time()
            complete(port, long_prompt, 1)
            res[(label, "prefill")] = time.time() - t0
            print("BENCH %s prefill of ~%d words: %.1f ms" % (label, a.prefill_words,
                                                             res[(label, "prefill")] * 1e3), flush=True)
            res[(label, "step")] = min(decode_step_ms(port, a.decode_tokens) for _ in range(2))
            print("BENCH %s decode step (streamed, %d tokens, best of 2): %.3f ms"
                  % (label, a.decode_tokens, res[(label, "step")]), flush=True)
            for c in ([1] if label == "in-process" else [int(x) for x in a.conc.split(",")]):
                toks, dt = run_conc(port, c, a.tokens)
                res[(label, c)] = toks / dt
                print("BENCH %s concurrency %d: %d tokens in %.2f s = %.1f tok/s aggregate"
                      % (label, c, toks, dt, toks / dt), flush=True)
        finally:
            p.terminate()
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
            # the pipeline engine's own account of a step (send -> STEP_DONE, per stage)
            for line in open("/tmp/pb_%d.log" % port, errors="replace"):
                if "steps over" in line or "stage" in line and "ms" in line and "pipeline" in line:
                    print("LOG %s: %s" % (label, line.strip()), flush=True)
    one = res.get(("%d workers" % a.workers, 1))
    ref = res.get(("in-process", 1))
    if one and ref:
        step_w, step_1 = 1.0 / one, 1.0 / ref
        hop = (step_w - step_1) / a.workers
        print("BENCH step: in-process %.2f ms, %d workers %.2f ms: %.2f ms per hop = %.1f%% of a step"
              % (step_1 * 1e3, a.workers, step_w * 1e3, hop * 1e3, 100 * hop / step_1))
    sw, s1 = res.get(("%d workers" % a.workers, "step")), res.get(("in-process", "step"))
    if sw and s1:
        hop = (sw - s1) / a.workers
        print("BENCH decode step alone (streamed): in-process %.3f ms, %d workers %.3f ms: %.3f ms "
              "per hop = %.1f%% of a step" % (s1, a.workers, sw, hop, 100 * hop / s1))
    pw, p1 = res.get(("%d workers" % a.workers, "prefill")), res.get(("in-process", "prefill"))
    if pw and p1:
        chunks = max(1, -(-a.prefill_tokens // a.chunk))
        print("BENCH prefill: in-process %.1f ms, %d workers %.1f ms: %.2f ms per hop per %d-token "
              "chunk (%d chunks)" % (p1 * 1e3, a.workers, pw * 1e3,
                                     (pw - p1) * 1e3 / a.workers / chunks, a.chunk, chunks))
    four = res.get(("%d workers" % a.workers, 4))
    if one and four:
        print("BENCH 4 streams / 1 stream = %.2fx (target >= 2.5x)" % (four / one))


if __name__ == "__main__":
    main()
