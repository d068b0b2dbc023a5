# Starts `llmserve serve` as a subprocess on a free port (--port 0; the port is read from its log) and waits for
# /health. Servers are module- or session-scoped; `ServerProcess.rss_kb()` reads its resident memory.
# LLMSERVE_SERVE_ARGS adds flags to every server (e.g. "--device cuda": scripts/gpu-check --server-e2e).
import http.client
import json
import os
import pathlib
import re
import shlex
import signal
import subprocess
import tempfile
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "models"


class ServerProcess:
    def __init__(self, binary, *args, on_listening=None):
        self.log = tempfile.NamedTemporaryFile("w+", prefix="llmserve-serve-", suffix=".log", delete=False)
        extra = shlex.split(os.environ.get("LLMSERVE_SERVE_ARGS", ""))
        self.proc = subprocess.Popen([str(binary), "serve", "--port", "0", *args, *extra], stdout=self.log,
                                     stderr=subprocess.STDOUT)
        self.port = None
        deadline = time.time() + 60
        while time.time() < deadline:
            m = re.search(r"listening on http://[^:]+:(\d+)", self.log_text())
            if m:
                self.port = int(m.group(1))
                break
            if self.proc.poll() is not None:
                raise RuntimeError("server exited:\n" + self.log_text())
            time.sleep(0.02)
        if on_listening is not None:
            on_listening(self)
        while time.time() < deadline:
            try:
                if self.request("GET", "/health")[0] == 200:
                    break
            except OSError:
                pass
            if self.proc.poll() is not None:
                raise RuntimeError("server exited:\n" + self.log_text())
            time.sleep(0.05)
        else:
            raise RuntimeError("server did not become healthy:\n" + self.log_text())
        self.base_url = f"http://127.0.0.1:{self.port}/v1"

    def log_text(self):
        return pathlib.Path(self.log.name).read_text(errors="replace")

    def request(self, method, path, body=None, headers=None, timeout=30):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            data = body if isinstance(body, (bytes, str)) or body is None else json.dumps(body)
            hdrs = {"Content-Type": "application/json"} if data is not None else {}
            hdrs.update(headers or {})
            conn.request(method, path, body=data, headers=hdrs)
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def post_json(self, path, body, headers=None):
        status, data = self.request("POST", path, body, headers)
        return status, json.loads(data) if data else None

    def metrics(self):
        status, data = self.request("GET", "/metrics")
        assert status == 200
        out = {}
        for line in data.decode().splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                out[name] = float(value)
        return out

    def metric(self, name, **labels):
        total = 0.0
        for key, value in self.metrics().items():
            if key.split("{", 1)[0] == name and all(f'{k}="{v}"' in key for k, v in labels.items()):
                total += value
        return total

    def rss_kb(self, pid=None):
        """Resident memory of the server and its children (the engine-core process), in KiB."""
        pid = pid or self.proc.pid
        total = 0
        for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1])
        children = pathlib.Path(f"/proc/{pid}/task/{pid}/children")
        for child in (children.read_text().split() if children.exists() else []):
            total += self.rss_kb(int(child))
        return total

    def stop(self, sig=signal.SIGTERM, timeout=30):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=timeout)
        finally:
            self.log.close()


@pytest.fixture(scope="session", params=["thread", "process"])
def default_server(request, llmserve_bin):
    """The built-in default model (byte tokenizer, tiny random Llama), with the engine core on its own thread
    and, in a second pass of every test, in a child process (--engine-process)."""
    mode = ["--engine-process"] if request.param == "process" else []
    s = ServerProcess(llmserve_bin, *mode, "--max-num-seqs", "256", "--kv-cache-tokens", "65536",
                      "--request-timeout", "2", "--keep-alive-timeout", "2", "--max-request-body-bytes", "1000000",
                      "--served-model-name", "default")
    yield s
    assert s.stop() == 0, s.log_text()[-3000:]
