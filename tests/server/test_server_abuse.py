# Hostile and malformed requests: each gets its status (and, for JSON errors, OpenAI's error shape naming the
# param), and a normal request right after still succeeds. Also: a client that disconnects mid-stream frees its
# KV blocks, the in-flight limit answers 429, the API key guards /v1 but not /health and /metrics, and SIGTERM
# drains in-flight requests and exits 0.
import json
import socket
import threading
import time

import openai
import pytest

from conftest import ServerProcess

OK = {"model": "default", "prompt": "ok", "max_tokens": 2, "temperature": 0}
MSG = [{"role": "user", "content": "x"}]

# (body, expected status, expected param or None). Bodies are JSON values or raw bytes.
JSON_CASES = [
    (b"{not json", 400, None),
    (b"", 400, None),
    (b"[1, 2, 3]", 400, None),
    (b"\"just a string\"", 400, None),
    (b"{\"prompt\": \"\xff\xfe invalid utf-8\"}", 400, None),
    (b"{\"prompt\": \"x\",}", 400, None),
    (b"[" * 50000, 400, None),
    ({"model": "default"}, 400, "prompt"),
    ({"prompt": 12}, 400, "prompt"),
    ({"prompt": []}, 400, "prompt"),
    ({"prompt": [[]]}, 400, "prompt"),
    ({"prompt": [1, "x"]}, 400, "prompt"),
    ({"prompt": [99999]}, 400, "prompt"),
    ({"prompt": [-3]}, 400, "prompt"),
    ({"prompt": "x", "min_tokens": 5, "max_tokens": 2}, 400, "min_tokens"),
    ({"prompt": "x", "n": 100000}, 400, "n"),
    ({"prompt": "x", "n": 0}, 400, "n"),
    ({"prompt": "x", "n": "3"}, 400, "n"),
    ({"prompt": "x", "max_tokens": -1}, 400, "max_tokens"),
    ({"prompt": "x", "max_tokens": 0}, 400, "max_tokens"),
    ({"prompt": "x", "max_tokens": 10 ** 30}, 400, "max_tokens"),
    ({"prompt": "x", "max_tokens": 100000}, 400, "max_tokens"),  # prompt + max_tokens > max_model_len
    ({"prompt": "x", "temperature": -1}, 400, "temperature"),
    ({"prompt": "x", "temperature": "warm"}, 400, "temperature"),
    ({"prompt": "x", "top_p": 7}, 400, "top_p"),
    ({"prompt": "x", "top_k": -9}, 400, "top_k"),
    ({"prompt": "x", "logprobs": 1000}, 400, "logprobs"),
    ({"prompt": "x", "logit_bias": {"zz": 1}}, 400, "logit_bias"),
    ({"prompt": "x", "logit_bias": {"1": 1e9}}, 400, "logit_bias"),
    ({"prompt": "x", "stop": [1, 2]}, 400, "stop"),
    ({"prompt": "x", "stop_token_ids": [1e10]}, 400, "stop_token_ids"),
    ({"prompt": "x", "seed": "abc"}, 400, "seed"),
    ({"prompt": "x", "presence_penalty": 9}, 400, "presence_penalty"),
    ({"prompt": "x", "stream": "yes"}, 400, "stream"),
    ({"prompt": "x", "stream_options": {"include_usage": True}}, 400, "stream_options"),
    ({"prompt": "x", "model": "gpt-4"}, 404, "model"),
    ({"prompt": "x", "suffix": "tail"}, 400, "suffix"),
    ({"prompt": "x", "prompt": "x" * 2000}, 400, "prompt"),  # longer than max_model_len
]

CHAT_CASES = [
    ({"messages": "hello"}, 400, "messages"),
    ({"messages": []}, 400, "messages"),
    ({"messages": [{"content": "no role"}]}, 400, "messages"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]}, 400, "messages"),
    ({"messages": MSG, "top_logprobs": 3}, 400, "top_logprobs"),
    ({"messages": MSG, "max_completion_tokens": -4}, 400, "max_completion_tokens"),
    ({"messages": MSG, "chat_template": "{% for %}"}, 400, "chat_template"),
    ({"messages": MSG, "chat_template": "{{ raise_exception('no') }}"}, 400, "messages"),
    ({"messages": MSG, "continue_final_message": True, "add_generation_prompt": False}, 400,
     "continue_final_message"),
    ({"messages": MSG, "model": "nope"}, 404, "model"),
]


def assert_healthy(server):
    status, body = server.post_json("/v1/completions", OK)
    assert status == 200, body
    assert body["usage"]["completion_tokens"] >= 1


@pytest.mark.parametrize("body,status,param", JSON_CASES)
def test_bad_completion_request(default_server, body, status, param):
    got_status, got = default_server.request("POST", "/v1/completions", body)
    assert got_status == status, got
    err = json.loads(got)["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["code"] == status and err["message"]
    assert err["param"] == param
    assert_healthy(default_server)


@pytest.mark.parametrize("body,status,param", CHAT_CASES)
def test_bad_chat_request(default_server, body, status, param):
    got_status, got = default_server.post_json("/v1/chat/completions", body)
    assert got_status == status, got
    assert got["error"]["param"] == param, got
    assert_healthy(default_server)


def raw_exchange(server, data, read_timeout=10, close_after_send=False):
    s = socket.create_connection(("127.0.0.1", server.port))
    s.settimeout(read_timeout)
    try:
        s.sendall(data)
        if close_after_send:
            return None
        out = b""
        while b"\r\n\r\n" not in out:
            chunk = s.recv(4096)
            if not chunk:
                break
            out += chunk
        return int(out.split(b" ", 2)[1]) if out.startswith(b"HTTP/1.1") else None
    finally:
        s.close()


HTTP_CASES = [
    (b"GET /v1/nothing HTTP/1.1\r\nHost: x\r\n\r\n", 404),
    (b"GET /../../etc/passwd HTTP/1.1\r\nHost: x\r\n\r\n", 404),
    (b"GET /v1/completions HTTP/1.1\r\nHost: x\r\n\r\n", 405),
    (b"DELETE /v1/models HTTP/1.1\r\nHost: x\r\n\r\n", 405),
    (b"POST /health HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n", 405),
    (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 999999999\r\n\r\n{", 413),
    (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2000000\r\n\r\n" + b"a" * 2000000, 413),
    (b"GET /health HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"p" * 100000 + b"\r\n\r\n", 431),
    (b"THIS IS NOT HTTP\r\n\r\n", 400),
    (b"GET /health HTTP/9.9\r\n\r\n", 400),
    (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n", 400),
    (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400),
    (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n\r\n{\"prompt\"", 408),  # slowloris
    (b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: aaaa", 408),  # headers never finish
]


@pytest.mark.parametrize("data,status", HTTP_CASES)
def test_hostile_http(default_server, data, status):
    try:
        got = raw_exchange(default_server, data)
    except (ConnectionResetError, BrokenPipeError):
        got = status if status == 413 else None  # the server may close before a huge body is sent
    assert got == status
    assert_healthy(default_server)


def test_half_sent_then_closed(default_server):
    raw_exchange(default_server, b"POST /v1/completions HTTP/1.1\r\nContent-Length: 100\r\n\r\n{", close_after_send=True)
    assert_healthy(default_server)


def test_disconnect_mid_stream_frees_blocks(default_server):
    before = default_server.metric("llmserve:request_success_total", finished_reason="abort")
    body = json.dumps({"model": "default", "prompt": "long one", "max_tokens": 400, "temperature": 0,
                       "stream": True, "ignore_eos": True}).encode()
    s = socket.create_connection(("127.0.0.1", default_server.port))
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "
              + str(len(body)).encode() + b"\r\n\r\n" + body)
    got = b""
    while got.count(b"data: ") < 3:
        got += s.recv(4096)
    s.close()
    deadline = time.time() + 10
    while time.time() < deadline:
        if default_server.metric("llmserve:request_success_total", finished_reason="abort") > before:
            break
        time.sleep(0.05)
    assert default_server.metric("llmserve:request_success_total", finished_reason="abort") == before + 1
    assert_healthy(default_server)  # one more step, so the gauges are fresh
    assert default_server.metric("llmserve:num_requests_running") == 0
    assert default_server.metric("llmserve:kv_cache_usage_perc") == 0


def test_api_key_and_in_flight_limit(llmserve_bin):
    s = ServerProcess(llmserve_bin, "--api-key", "sekrit", "--max-in-flight-requests", "1", "--served-model-name",
                      "m")
    try:
        assert s.request("GET", "/health")[0] == 200
        assert s.request("GET", "/metrics")[0] == 200
        assert s.request("GET", "/v1/models")[0] == 401
        assert s.request("GET", "/v1/models", headers={"Authorization": "Bearer wrong"})[0] == 401
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=s.base_url, api_key="bad", max_retries=0).models.list()
        client = openai.OpenAI(base_url=s.base_url, api_key="sekrit", max_retries=0)
        assert client.models.list().data[0].id == "m"
        # One long stream holds the only slot: the next request gets 429.
        stream = client.completions.create(model="m", prompt="x", max_tokens=450, stream=True,
                                           extra_body={"ignore_eos": True})
        next(iter(stream))
        with pytest.raises(openai.RateLimitError):
            client.completions.create(model="m", prompt="y", max_tokens=2)
        stream.close()
        deadline = time.time() + 10
        while time.time() < deadline:
            try:
                client.completions.create(model="m", prompt="y", max_tokens=2)
                break
            except openai.RateLimitError:
                time.sleep(0.05)
        else:
            pytest.fail("the slot was never freed")
    finally:
        assert s.stop() == 0


def test_sigterm_drains_in_flight_requests(llmserve_bin):
    s = ServerProcess(llmserve_bin, "--served-model-name", "m")
    result = {}

    def run():
        client = openai.OpenAI(base_url=s.base_url, api_key="x", max_retries=0)
        result["r"] = client.completions.create(model="m", prompt="drain", max_tokens=200, temperature=0,
                                                extra_body={"ignore_eos": True})

    t = threading.Thread(target=run)
    t.start()
    time.sleep(0.3)
    assert s.stop() == 0
    t.join(timeout=30)
    assert result["r"].usage.completion_tokens == 200  # finished, not cut off
    assert "shutting down" in s.log_text()


def test_health_is_503_while_loading(llmserve_bin, tmp_path):
    # A dummy-weight model big enough that loading takes a moment (random init of ~100M parameters).
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 32000, "hidden_size": 768,
              "intermediate_size": 2048, "num_hidden_layers": 12, "num_attention_heads": 12,
              "num_key_value_heads": 12, "max_position_embeddings": 256, "rms_norm_eps": 1e-5,
              "hidden_act": "silu", "torch_dtype": "float32"}
    (tmp_path / "config.json").write_text(json.dumps(config))
    seen = {}

    def probe(server):
        status, body = server.request("GET", "/health")
        seen["health"] = status
        seen["completion"] = server.post_json("/v1/completions", {"prompt": [1], "max_tokens": 1})[0]

    s = ServerProcess(llmserve_bin, "--config", str(tmp_path / "config.json"), "--load-format", "dummy",
                      "--kv-cache-tokens", "512", on_listening=probe)
    try:
        assert seen == {"health": 503, "completion": 503}
        assert s.post_json("/v1/completions", {"prompt": [1], "max_tokens": 1})[0] == 200
    finally:
        assert s.stop() == 0
