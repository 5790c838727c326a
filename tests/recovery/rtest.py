"""rtest.py - helpers of the recovery tests: the tiny model, a streaming
completion read event by event (with a hook run after each token), the
worker processes of a server and their stages, and the shared-memory edges
of a run directory. Every wait is bounded."""
import glob
import http.client
import json
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "api"))
from apitest import Server, vocab_path  # noqa: E402,F401


def tiny_model(bin_path, work):
    path = os.path.join(work, "tiny-q8_0.gguf")
    if not os.path.exists(path):
        subprocess.run([bin_path, "mkmodel", "--preset", "tiny", "--type", "q8_0", "--seed", "1",
                        "--vocab", vocab_path(), "--out", path + ".tmp"], check=True, timeout=120,
                       stdout=subprocess.DEVNULL)
        os.rename(path + ".tmp", path)
    return path


class Stream:
    """Result of one streamed completion: texts, times, errors, finish."""

    def __init__(self):
        self.status = None
        self.text = ""
        self.times = []          # arrival time of each token event
        self.errors = []         # error events (must stay empty)
        self.finish = None
        self.done = False        # saw data: [DONE]


def stream_completion(port, body, on_token=None, timeout=120):
    """POST /v1/completions with stream: true; on_token(stream) runs after
    each token event (it may kill processes). Returns a Stream."""
    st = Stream()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("POST", "/v1/completions", json.dumps(dict(body, stream=True)),
                     {"Content-Type": "application/json"})
        resp = conn.getresponse()
        st.status = resp.status
        if resp.status != 200:
            st.errors.append(resp.read().decode(errors="replace"))
            return st
        deadline = time.time() + timeout
        while time.time() < deadline:
            line = resp.readline()
            if not line:
                break
            line = line.decode().strip()
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                st.done = True
                break
            ev = json.loads(data)
            if "error" in ev:
                st.errors.append(ev["error"])
                continue
            for ch in ev.get("choices", []):
                if ch.get("text"):
                    st.text += ch["text"]
                    st.times.append(time.time())
                    if on_token:
                        on_token(st)
                if ch.get("finish_reason"):
                    st.finish = ch["finish_reason"]
    finally:
        conn.close()
    return st


def children(pid):
    out = []
    try:
        for task in os.listdir("/proc/%d/task" % pid):
            with open("/proc/%d/task/%s/children" % (pid, task)) as f:
                out += [int(x) for x in f.read().split()]
    except (FileNotFoundError, ProcessLookupError):   # a task gone meanwhile
        pass
    return out


def stage_of(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            args = f.read().split(b"\0")
    except (FileNotFoundError, ProcessLookupError):   # exited since it was listed
        return -1
    return int(args[args.index(b"--stage") + 1]) if b"--stage" in args else -1


def alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def worker_of_stage(server_pid, stage):
    """The live worker process of a stage (spawned by server_pid), or None."""
    for p in children(server_pid):
        if stage_of(p) == stage and alive(p):
            return p
    return None


def wait_new_worker(server_pid, stage, old_pid, timeout=10.0):
    """Wait for a worker of stage other than old_pid; (pid, seconds waited)."""
    t0 = time.time()
    while time.time() - t0 < timeout:
        p = worker_of_stage(server_pid, stage)
        if p and p != old_pid:
            return p, time.time() - t0
        time.sleep(0.002)
    return None, time.time() - t0


def kill_quiet(pid, sig=signal.SIGKILL):
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, TypeError):
        pass


def edge_paths(run_dir):
    """/dev/shm files of the edges of a run directory (FNV-1a 64 of its path,
    as worker/edge.c names them) that exist now."""
    h = 0xcbf29ce484222325
    for b in run_dir.encode():
        h = ((h ^ b) * 0x100000001b3) & 0xffffffffffffffff
    return sorted(glob.glob("/dev/shm/cmpserve-%016x-edge-*" % h))


def max_gap(times):
    return max((b - a for a, b in zip(times, times[1:])), default=0.0)
