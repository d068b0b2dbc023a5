# TEST FIXTURE, not a server: a deterministic OpenAI-compatible streaming endpoint for `llmserve bench serve`.
# Every completion streams exactly max_tokens chunks on a fixed schedule (the first `first_delay_s` after the
# request arrived, then one every `token_interval_s`, by absolute deadlines so jitter does not accumulate), so
# the benchmark's TTFT / TPOT / ITL can be checked against known values. Optional faults: HTTP 500 on every
# k-th request, a connection dropped mid-stream, no usage chunk, events split across TCP writes.
import json
import socket
import threading
import time

from loopback_server import LoopbackServer, QuietHandler


class FixtureServer(LoopbackServer):
    def __init__(self, model="fixture-model", first_delay_s=0.05, token_interval_s=0.01, fail_every=0,
                 drop_every=0, include_usage=True, split_events=True, tokenizer=None):
        super().__init__(_Handler)
        self.model = model
        self.first_delay_s = first_delay_s
        self.token_interval_s = token_interval_s
        self.fail_every = fail_every
        self.drop_every = drop_every
        self.include_usage = include_usage
        self.split_events = split_events
        self.tokenizer = tokenizer  # an HF `tokenizers.Tokenizer` to count text prompts, or None
        self.lock = threading.Lock()
        self.num_requests = 0
        self.bodies = []
        self.active = 0
        self.max_active = 0

    @property
    def base_url(self):
        return self.url


class _Handler(QuietHandler):

    def _send_json(self, status, obj):
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _chunk(self, data: bytes):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def do_GET(self):
        if self.path == "/v1/models":
            self._send_json(200, {"object": "list", "data": [{"id": self.server.model, "object": "model",
                                                              "root": self.server.model}]})
        else:
            self._send_json(404, {"error": {"message": "not found", "type": "NotFoundError", "code": 404}})

    def do_POST(self):
        s = self.server
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with s.lock:
            s.num_requests += 1
            n = s.num_requests
            s.bodies.append(body)
        chat = self.path == "/v1/chat/completions"
        if self.path not in ("/v1/completions", "/v1/chat/completions"):
            return self._send_json(404, {"error": {"message": "no such endpoint", "code": 404}})
        if body.get("model") != s.model:
            return self._send_json(404, {"error": {"message": f"model {body.get('model')!r} not found", "code": 404}})
        if s.fail_every and n % s.fail_every == 0:
            return self._send_json(500, {"error": {"message": f"injected failure {n}", "code": 500}})
        if chat:
            prompt = body["messages"][0]["content"]
            max_tokens = body["max_completion_tokens"]
        else:
            prompt = body["prompt"]
            max_tokens = body["max_tokens"]
        if isinstance(prompt, list):
            prompt_tokens = len(prompt)
        elif s.tokenizer is not None:
            prompt_tokens = len(s.tokenizer.encode(prompt, add_special_tokens=False).ids)
        else:
            prompt_tokens = len(prompt.split())
        with s.lock:
            s.active += 1
            s.max_active = max(s.max_active, s.active)
        try:
            self._stream(n, chat, max_tokens, prompt_tokens)
        finally:
            with s.lock:
                s.active -= 1

    def _stream(self, n, chat, max_tokens, prompt_tokens):
        s = self.server
        start = time.monotonic()
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()
        for i in range(max_tokens):
            delay = start + s.first_delay_s + i * s.token_interval_s - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            if s.drop_every and n % s.drop_every == 0 and i == max_tokens // 2:
                self.connection.shutdown(socket.SHUT_RDWR)
                self.close_connection = True
                return
            piece = f" t{i}"
            choice = {"index": 0, "delta": {"content": piece}} if chat else {"index": 0, "text": piece}
            choice["finish_reason"] = None if i + 1 < max_tokens else "length"
            event = f"data: {json.dumps({'id': f'cmpl-{n}', 'choices': [choice], 'usage': None})}\n\n".encode()
            if s.split_events and i % 2 == 1:
                cut = len(event) // 2  # one event in two HTTP chunks (and usually two TCP segments)
                self._chunk(event[:cut])
                time.sleep(0.001)
                self._chunk(event[cut:])
            else:
                self._chunk(event)
        if s.include_usage:
            usage = {"prompt_tokens": prompt_tokens, "completion_tokens": max_tokens,
                     "total_tokens": prompt_tokens + max_tokens}
            self._chunk(f"data: {json.dumps({'id': f'cmpl-{n}', 'choices': [], 'usage': usage})}\n\n".encode())
        self._chunk(b"data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()
