# TEST FIXTURE, not a server: the parts of the Hugging Face Hub's HTTP API a model download uses, on loopback, over
# a folder of files. GET /api/models/{repo}/revision/{rev} answers the commit sha and the file list; HEAD and GET
# /{repo}/resolve/{rev}/{file} answer as the Hub does: small files in place with their git blob SHA-1 as ETag, LFS
# files (*.safetensors) with a 302 to /lfs/{sha256} and X-Linked-Etag / X-Linked-Size; X-Repo-Commit on both.
# The LFS route honours Range. Faults for tests: a gated repo (401 without the token), a transfer cut in the middle
# once, corrupted bytes, unknown repos and revisions (404).
import hashlib
import json
import pathlib
import re
import threading

from loopback_server import LoopbackServer, QuietHandler


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class FakeHub(LoopbackServer):
    def __init__(self, repos, gated_token=None, cut_once=False, corrupt=None):
        """repos: {repo_id: folder}; every file of the folder (and a README.md the client must skip) is served at
        commit sha1(repo_id). gated_token: requests without "Bearer <it>" get 401. cut_once: the first LFS GET stops
        after half the bytes. corrupt: a file name whose body is served with one byte changed."""
        super().__init__(_Handler)
        self.repos = {}
        for repo_id, folder in repos.items():
            files = {p.name: p.read_bytes() for p in sorted(pathlib.Path(folder).iterdir()) if p.is_file()}
            files["README.md"] = b"# not a weight\n"
            self.repos[repo_id] = (hashlib.sha1(repo_id.encode()).hexdigest(), files)
        self.gated_token = gated_token
        self.cut_once = cut_once
        self.corrupt = corrupt
        self.lock = threading.Lock()
        self.requests = []  # (method, path, Range header)


class _Handler(QuietHandler):

    def _send(self, status, headers=None, body=b"", head=False):
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _not_found(self, head, code="RepoNotFound"):
        self._send(404, {"X-Error-Code": code, "Content-Type": "application/json"},
                   json.dumps({"error": code}).encode(), head)

    def _authorized(self, head):
        hub = self.server
        if hub.gated_token and self.headers.get("Authorization") != f"Bearer {hub.gated_token}":
            self._send(401, {"X-Error-Code": "GatedRepo"}, b'{"error": "gated"}', head)
            return False
        return True

    def _repo(self, head, repo_id, revision):
        """(sha, files) of an authorized request for a known repo and revision; else None, the error sent."""
        if not self._authorized(head):
            return None
        entry = self.server.repos.get(repo_id)
        if entry is None or revision not in ("main", entry[0]):
            self._not_found(head)
            return None
        return entry

    def _serve(self, head):
        hub = self.server
        with hub.lock:
            hub.requests.append((self.command, self.path, self.headers.get("Range")))
        m = re.fullmatch(r"/api/models/(.+)/revision/([^/]+)", self.path)
        if m:
            entry = self._repo(head, m.group(1), m.group(2))
            if entry is None:
                return
            sha, files = entry
            body = json.dumps({"id": m.group(1), "sha": sha, "siblings": [{"rfilename": f} for f in files]}).encode()
            return self._send(200, {"Content-Type": "application/json"}, body, head)
        m = re.fullmatch(r"/lfs/([0-9a-f]{64})", self.path)
        if m:
            return self._serve_lfs(m.group(1), head)
        m = re.fullmatch(r"/(.+)/resolve/([^/]+)/([^/]+)", self.path)
        if not m:
            return self._not_found(head, "EntryNotFound")
        entry = self._repo(head, m.group(1), m.group(2))
        if entry is None:
            return
        sha, files = entry
        name = m.group(3)
        if name not in files:
            return self._not_found(head, "EntryNotFound")
        data = files[name]
        if name.endswith(".safetensors"):
            digest = hashlib.sha256(data).hexdigest()
            return self._send(302, {"Location": f"/lfs/{digest}", "X-Repo-Commit": sha,
                                    "X-Linked-Etag": f'"{digest}"', "X-Linked-Size": str(len(data))}, b"", head)
        if name == hub.corrupt:
            data = bytes([data[0] ^ 1]) + data[1:]
        return self._send(200, {"ETag": f'"{git_blob_sha1(files[name])}"', "X-Repo-Commit": sha}, data, head)

    def _serve_lfs(self, digest, head):
        hub = self.server
        data = next((d for _, files in hub.repos.values() for d in files.values()
                     if hashlib.sha256(d).hexdigest() == digest), None)
        if data is None:
            return self._not_found(head, "EntryNotFound")
        start = 0
        rng = self.headers.get("Range")
        if rng:
            start = int(re.fullmatch(r"bytes=(\d+)-", rng).group(1))
        body = data[start:]
        self.send_response(206 if rng else 200)
        if rng:
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("ETag", f'"{digest}"')
        self.end_headers()
        if head:
            return
        with hub.lock:
            cut = hub.cut_once and not rng
            if cut:
                hub.cut_once = False
        if cut:  # half the bytes, then the connection drops: the client must resume with a Range request
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(2)
            return
        self.wfile.write(body)

    def do_GET(self):
        self._serve(head=False)

    def do_HEAD(self):
        self._serve(head=True)
