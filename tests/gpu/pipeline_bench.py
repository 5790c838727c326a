#!/usr/bin/env python3
"""pipeline_bench.py - measures the pipeline on a GPU machine (pipeline issue,
item 6): aggregate decode throughput of `cmpserve serve --workers W` with 1, 2,
4 and 8 concurrent greedy streams, and the per-hop cost (a decode step with W
stages against the in-process engine's step on the same model).

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
           "--ctx-size", "1024", "--log-level", "warn"] + extra
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
    a = ap.parse_args()
    res = {}
    for label, extra, port in (("in-process", ["--gpus", a.single], 18080),
                               ("%d workers" % a.workers,
                                ["--workers", str(a.workers), "--gpus", a.gpus], 18081)):
        p = serve(a, extra, port)
        try:
            wait_ready(port, p, 240)
            complete(port, "warm up", 8)
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
    one = res.get(("%d workers" % a.workers, 1))
    ref = res.get(("in-process", 1))
    if one and ref:
        step_w, step_1 = 1.0 / one, 1.0 / ref
        hop = (step_w - step_1) / a.workers
        print("BENCH step: in-process %.2f ms, %d workers %.2f ms: %.2f ms per hop = %.1f%% of a step"
              % (step_1 * 1e3, a.workers, step_w * 1e3, hop * 1e3, 100 * hop / step_1))
    four = res.get(("%d workers" % a.workers, 4))
    if one and four:
        print("BENCH 4 streams / 1 stream = %.2fx (target >= 2.5x)" % (four / one))


if __name__ == "__main__":
    main()
