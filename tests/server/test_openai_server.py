# End-to-end: `llmserve serve` on the built-in default model driven by the official `openai` client (sync and
# async): completions and chat, streamed and not, n > 1, stop strings, seeds, logprobs, usage, token-id
# prompts, echo. The oracles are the server's own non-streamed greedy output (streaming must concatenate to it),
# /tokenize (usage must count the same tokens) and the fixture model's HF-transformers greedy ids.
import asyncio
import json
import math

import openai
import pytest

from conftest import FIXTURES, ServerProcess

PROMPTS = ["Hello, llmserve", "The quick brown fox", "1 2 3 4", "Once upon a time", "¿Qué tal? 你好"]


@pytest.fixture(scope="module")
def client(default_server):
    return openai.OpenAI(base_url=default_server.base_url, api_key="unused", max_retries=0)


def greedy(client, prompt, max_tokens=24, **kw):
    return client.completions.create(model="default", prompt=prompt, max_tokens=max_tokens, temperature=0,
                                     **kw)


def test_models_health_version(default_server, client):
    models = client.models.list()
    assert [m.id for m in models.data] == ["default"]
    assert default_server.request("GET", "/health")[0] == 200
    status, body = default_server.request("GET", "/version")
    assert status == 200 and json.loads(body)["version"]


def test_model_by_id_ping_and_root(default_server, client):
    m = client.models.retrieve("default")
    assert m.id == "default" and m.root == "default"  # the built-in model has no path: root is its served name
    assert default_server.request("GET", "/v1/models/other")[0] == 404
    for method in ("GET", "POST"):
        assert default_server.request(method, "/ping")[0] == 200


def test_streams_carry_no_empty_text_mid_stream(client):
    # The built-in model's noise text splits UTF-8 sequences across tokens: held-back tokens join the next chunk.
    for prompt in PROMPTS:
        chunks = list(client.chat.completions.create(model="default", messages=[{"role": "user", "content": prompt}],
                                                     max_tokens=40, temperature=0, stream=True))
        assert chunks[0].choices[0].delta.role == "assistant"
        mid = [c for c in chunks[1:] if c.choices and c.choices[0].finish_reason is None]
        assert mid and all(c.choices[0].delta.content for c in mid), [c.choices[0].delta for c in mid]
        completion = list(greedy(client, prompt, max_tokens=40, stream=True))
        assert all(c.choices[0].text for c in completion if c.choices[0].finish_reason is None)
    # With logprobs every token's chunk still goes out (its logprobs cannot wait), text or not.
    chunks = list(greedy(client, PROMPTS[4], max_tokens=40, stream=True, logprobs=1, extra_body={"ignore_eos": True}))
    assert sum(len(c.choices[0].logprobs.tokens) for c in chunks) == 40


def test_fields_needing_missing_features_are_refused(client):
    messages = [{"role": "user", "content": "hi"}]
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}]
    # Tools with tool_choice "auto" (the default with tools) need --enable-auto-tool-choice (vLLM's 400).
    for extra, param in (({"tools": tools}, "tool_choice"), ({"tools": tools, "tool_choice": "auto"}, "tool_choice"),
                         ({"functions": [{"name": "f"}]}, "functions"), ({"modalities": ["text", "audio"]}, "modalities"),
                         ({"response_format": {"type": "json_schema"}}, "response_format")):
        with pytest.raises(openai.BadRequestError) as e:
            client.chat.completions.create(model="default", messages=messages, max_tokens=2, extra_body=extra)
        assert e.value.body["param"] == param, e.value.body
    # tool_choice "none": the tools only reach the template, nothing is parsed (vLLM's behaviour): served.
    r = client.chat.completions.create(model="default", messages=messages, max_tokens=2, tools=tools,
                                       tool_choice="none")
    assert not r.choices[0].message.tool_calls  # [] as vLLM sends it
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model="default", prompt="x", max_tokens=2,
                                  extra_body={"response_format": {"type": "xml"}})
    assert e.value.body["param"] == "response_format"


def test_completion_shape_and_usage(default_server, client):
    r = greedy(client, PROMPTS[0], max_tokens=10, extra_body={"ignore_eos": True})
    assert r.object == "text_completion" and r.id.startswith("cmpl-") and r.model == "default"
    assert len(r.choices) == 1 and r.choices[0].index == 0
    assert r.choices[0].finish_reason == "length"
    # Usage: the prompt as /tokenize counts it (BOS included), and exactly max_tokens generated.
    status, tok = default_server.post_json("/tokenize", {"prompt": PROMPTS[0]})
    assert status == 200
    assert r.usage.prompt_tokens == tok["count"] == len(tok["tokens"])
    assert r.usage.completion_tokens == 10
    assert r.usage.total_tokens == r.usage.prompt_tokens + 10
    # /detokenize inverts /tokenize (minus the special BOS).
    status, detok = default_server.post_json("/detokenize", {"tokens": tok["tokens"][1:]})
    assert status == 200 and detok["prompt"] == PROMPTS[0]


@pytest.mark.parametrize("prompt", PROMPTS)
def test_streamed_completion_concatenates_to_non_streamed(client, prompt):
    full = greedy(client, prompt, max_tokens=32)
    chunks = list(greedy(client, prompt, max_tokens=32, stream=True, stream_options={"include_usage": True}))
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == full.choices[0].text
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == [full.choices[0].finish_reason]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == full.usage.completion_tokens
    assert chunks[-1].usage.prompt_tokens == full.usage.prompt_tokens


def test_chat_streamed_equals_non_streamed(client):
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi there"}]
    full = client.chat.completions.create(model="default", messages=messages, max_tokens=20, temperature=0)
    assert full.object == "chat.completion" and full.id.startswith("chatcmpl-")
    assert full.choices[0].message.role == "assistant"
    stream = client.chat.completions.create(model="default", messages=messages, max_tokens=20, temperature=0,
                                            stream=True, stream_options={"include_usage": True})
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == full.choices[0].message.content
    assert chunks[-1].usage.total_tokens == full.usage.total_tokens


def test_chat_template_is_applied(default_server, client):
    # The built-in default model's template: "<bos>role: content\n...assistant:". /tokenize renders it too.
    messages = [{"role": "user", "content": "abc"}]
    status, tok = default_server.post_json("/tokenize", {"messages": messages})
    assert status == 200
    status, detok = default_server.post_json("/detokenize", {"tokens": tok["tokens"]})
    assert detok["prompt"].endswith("user: abc\nassistant:")
    r = client.chat.completions.create(model="default", messages=messages, max_tokens=3, temperature=0)
    assert r.usage.prompt_tokens == tok["count"]
    # continue_final_message: the prompt ends with the partial assistant message, no generation prompt after it.
    status, tok2 = default_server.post_json("/tokenize", {
        "messages": messages + [{"role": "assistant", "content": "xy"}], "add_generation_prompt": False,
        "continue_final_message": True})
    status, detok2 = default_server.post_json("/detokenize", {"tokens": tok2["tokens"]})
    assert detok2["prompt"].endswith("user: abc\nassistant: xy")
    # chat_template_kwargs reach the template; a per-request template replaces the server's.
    r = client.chat.completions.create(model="default", messages=messages, max_tokens=2, temperature=0,
                                       extra_body={"chat_template": "{{ greeting }}{{ messages[0].content }}",
                                                   "chat_template_kwargs": {"greeting": "HEY "}})
    assert r.usage.prompt_tokens == len("HEY abc")


def test_n_and_seeds(client):
    r = client.completions.create(model="default", prompt="seeded", max_tokens=12, temperature=1.0, n=3, seed=1234,
                                  extra_body={"ignore_eos": True})
    assert sorted(c.index for c in r.choices) == [0, 1, 2]
    again = client.completions.create(model="default", prompt="seeded", max_tokens=12, temperature=1.0, n=3,
                                      seed=1234, extra_body={"ignore_eos": True})
    assert [c.text for c in r.choices] == [c.text for c in again.choices]
    assert r.usage.completion_tokens == 36
    # Different seeds on a random model: the texts differ (12 tokens from 258 ids).
    other = client.completions.create(model="default", prompt="seeded", max_tokens=12, temperature=1.0, seed=99,
                                      extra_body={"ignore_eos": True})
    assert other.choices[0].text != r.choices[0].text
    # Several prompts x n: choice index = prompt * n + i.
    multi = client.completions.create(model="default", prompt=["a", "b"], max_tokens=4, temperature=0, n=2)
    assert sorted(c.index for c in multi.choices) == [0, 1, 2, 3]
    a = greedy(client, "a", max_tokens=4).choices[0].text
    b = greedy(client, "b", max_tokens=4).choices[0].text
    by_index = {c.index: c.text for c in multi.choices}
    assert by_index == {0: a, 1: a, 2: b, 3: b}


def test_stop_strings(client):
    base = greedy(client, PROMPTS[1], max_tokens=40, extra_body={"ignore_eos": True}).choices[0].text
    # A stop string taken from the middle of the greedy text: the output is the text before its first match.
    stop = base[10:12]
    cut = base[:base.find(stop)]
    r = greedy(client, PROMPTS[1], max_tokens=40, stop=[stop], extra_body={"ignore_eos": True})
    assert r.choices[0].text == cut
    assert r.choices[0].finish_reason == "stop"
    assert r.choices[0].model_extra["stop_reason"] == stop
    r = greedy(client, PROMPTS[1], max_tokens=40, stop=stop,
               extra_body={"ignore_eos": True, "include_stop_str_in_output": True})
    assert r.choices[0].text == cut + stop
    # Streaming never shows the start of a stop string that the final text omits.
    for k in range(2, 30, 3):
        for include in (False, True):
            extra = {"ignore_eos": True, "include_stop_str_in_output": include}
            stop = base[k:k + 3]
            full = greedy(client, PROMPTS[1], max_tokens=40, stop=[stop], extra_body=extra).choices[0].text
            streamed = greedy(client, PROMPTS[1], max_tokens=40, stop=[stop], stream=True, extra_body=extra)
            assert "".join(c.choices[0].text for c in streamed) == full, (stop, include)


def test_stop_token_ids(client):
    tokens = greedy(client, PROMPTS[2], max_tokens=20, logprobs=0, extra_body={"ignore_eos": True,
                                                                                "return_tokens_as_token_ids": True})
    ids = [int(t.split(":")[1]) for t in tokens.choices[0].logprobs.tokens]
    stop_id = ids[5]
    r = greedy(client, PROMPTS[2], max_tokens=20, extra_body={"stop_token_ids": [stop_id], "ignore_eos": True})
    assert r.choices[0].finish_reason == "stop"
    assert r.choices[0].model_extra["stop_reason"] == stop_id
    assert r.usage.completion_tokens == ids.index(stop_id) + 1


def test_completion_logprobs(default_server, client):
    r = greedy(client, PROMPTS[3], max_tokens=8, logprobs=3, extra_body={"ignore_eos": True})
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == 8
    # The tokens as ids detokenize to the text (single byte tokens may be partial UTF-8 on their own).
    by_id = greedy(client, PROMPTS[3], max_tokens=8, logprobs=3,
                   extra_body={"ignore_eos": True, "return_tokens_as_token_ids": True}).choices[0].logprobs
    ids = [int(t.split(":")[1]) for t in by_id.tokens]
    # The second request hits the prefix cache (its prompt's full blocks are cached), so its prompt tail runs as a
    # smaller GEMM: f32 logprobs may differ in the last bits (as in vLLM); the ids must not.
    assert by_id.token_logprobs == pytest.approx(lp.token_logprobs, abs=1e-5)
    assert default_server.post_json("/detokenize", {"tokens": ids})[1]["prompt"] == r.choices[0].text
    # Byte tokens that are partial UTF-8 all show as U+FFFD and collide as dict keys; ids do not.
    for tok, value, top in zip(by_id.tokens, by_id.token_logprobs, by_id.top_logprobs):
        assert value <= 0 and 3 <= len(top) <= 4
        # Greedy: the sampled token is the most likely one.
        assert math.isclose(value, max(top.values()), abs_tol=1e-6)
        assert tok in top
    assert lp.text_offset == sorted(lp.text_offset)


def test_chat_logprobs(client):
    r = client.chat.completions.create(model="default", messages=[{"role": "user", "content": "x"}], max_tokens=6,
                                       temperature=0, logprobs=True, top_logprobs=2)
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens
    for entry in content:
        assert len(entry.top_logprobs) == 2
        assert entry.top_logprobs[0].logprob >= entry.top_logprobs[1].logprob
        assert math.isclose(entry.logprob, entry.top_logprobs[0].logprob, abs_tol=1e-6)
        assert bytes(entry.bytes).decode("utf-8", "replace") == entry.token


def test_token_id_prompts_and_echo(default_server, client):
    status, tok = default_server.post_json("/tokenize", {"prompt": PROMPTS[4]})
    by_text = greedy(client, PROMPTS[4], max_tokens=12)
    by_ids = greedy(client, tok["tokens"], max_tokens=12)
    assert by_ids.choices[0].text == by_text.choices[0].text
    both = greedy(client, [tok["tokens"], tok["tokens"]], max_tokens=12)
    assert [c.text for c in both.choices] == [by_text.choices[0].text] * 2
    echo = greedy(client, PROMPTS[4], max_tokens=12, echo=True)
    assert echo.choices[0].text == PROMPTS[4] + by_text.choices[0].text
    stream = greedy(client, PROMPTS[4], max_tokens=12, echo=True, stream=True)
    assert "".join(c.choices[0].text for c in stream) == echo.choices[0].text


def test_async_client(default_server):
    async def main():
        client = openai.AsyncOpenAI(base_url=default_server.base_url, api_key="unused", max_retries=0)
        r = await client.completions.create(model="default", prompt="async", max_tokens=5, temperature=0)
        s = await client.chat.completions.create(model="default", messages=[{"role": "user", "content": "a"}],
                                                 max_tokens=5, temperature=0, stream=True)
        parts = [c.choices[0].delta.content or "" async for c in s if c.choices]
        whole = await client.chat.completions.create(model="default", messages=[{"role": "user", "content": "a"}],
                                                     max_tokens=5, temperature=0)
        await client.close()
        return r, "".join(parts), whole

    r, streamed, whole = asyncio.run(main())
    assert r.usage.completion_tokens >= 1 and r.choices[0].text
    # Greedy: the streamed deltas join to the same reply as the non-streamed request.
    assert whole.usage.completion_tokens >= 1 and whole.choices[0].message.content
    assert streamed == whole.choices[0].message.content


def test_fixture_model_matches_hf_greedy(llmserve_bin):
    """The server on an HF-transformers fixture (no tokenizer: token-id prompts, ids via logprobs) reproduces the
    fixture's greedy ids by vLLM's rule (at the first difference each side's pick is in the other's top-k)."""
    model = FIXTURES / "llama_gqa_f32"
    expected = json.loads((model / "expected.json").read_text())
    s = ServerProcess(llmserve_bin, str(model), "--served-model-name", "fx")
    try:
        client = openai.OpenAI(base_url=s.base_url, api_key="unused", max_retries=0)
        for case in expected["cases"]:
            steps = case["steps"]
            r = client.completions.create(model="fx", prompt=case["prompt"], max_tokens=len(steps), temperature=0,
                                          logprobs=5, extra_body={"return_tokens_as_token_ids": True,
                                                                  "ignore_eos": True})
            lp = r.choices[0].logprobs
            got = [int(t.split(":")[1]) for t in lp.tokens]
            want = [st["id"] for st in steps]
            for i, (g, w) in enumerate(zip(got, want)):
                if g != w:
                    top_got = [int(k.split(":")[1]) for k in lp.top_logprobs[i]]
                    assert w in top_got and g in steps[i]["top_ids"], (i, got, want)
                    break
                assert math.isclose(lp.token_logprobs[i], steps[i]["top_logprobs"][0], abs_tol=1e-3)
            assert len(got) == len(want)
    finally:
        assert s.stop() == 0


@pytest.fixture(scope="module")
def gqa_fixture(llmserve_bin):
    """The llama_gqa_f32 HF fixture served as "fx": (server, client, prompt ids + transformers' greedy continuation as
    one token list, the prompt's length, the continuation's steps with transformers' logprob of each token)."""
    model = FIXTURES / "llama_gqa_f32"
    case = json.loads((model / "expected.json").read_text())["cases"][0]
    steps = case["steps"]
    s = ServerProcess(llmserve_bin, str(model), "--served-model-name", "fx")
    try:
        client = openai.OpenAI(base_url=s.base_url, api_key="unused", max_retries=0)
        yield s, client, list(case["prompt"]) + [st["id"] for st in steps], len(case["prompt"]), steps
    finally:
        assert s.stop() == 0


def test_prompt_logprobs_match_hf_fixture(gqa_fixture):
    """vLLM's prompt_logprobs extension: the prompt + the fixture's greedy continuation sent as the prompt scores
    each continuation token with HF transformers' logprob for that step (the token is rank 1 where it was greedy)."""
    s, client, ids, prompt_len, steps = gqa_fixture
    r = client.completions.create(model="fx", prompt=ids, max_tokens=1, temperature=0,
                                  extra_body={"prompt_logprobs": 3})
    plp = r.choices[0].model_extra["prompt_logprobs"]
    assert len(plp) == len(ids) and plp[0] is None
    for s_i, st in enumerate(steps):
        entry = plp[prompt_len + s_i]
        got = entry[str(st["id"])]
        assert math.isclose(got["logprob"], st["top_logprobs"][0], abs_tol=1e-3), (s_i, got, st)
        assert got["rank"] == 1
        assert len(entry) <= 4  # the prompt token and the top 3
    status, body = s.post_json("/v1/completions", {"prompt": ids, "max_tokens": 1, "prompt_logprobs": 21})
    assert status == 400 and body["error"]["param"] == "prompt_logprobs"


def test_echo_with_logprobs_scores_the_prompt(gqa_fixture):
    """echo + logprobs (what lm-evaluation-harness sends for loglikelihoods): the prompt's tokens lead the choice's
    logprobs, the first null, each next one with HF transformers' logprob (the fixture's greedy continuation sent as
    the prompt); streamed chunks concatenate to the same lists."""
    _, client, ids, prompt_len, steps = gqa_fixture
    args = dict(model="fx", prompt=ids, max_tokens=2, temperature=0, echo=True, logprobs=2,
                extra_body={"return_tokens_as_token_ids": True})
    r = client.completions.create(**args)
    choice = r.choices[0]
    lp = choice.logprobs
    got = [int(t.split(":")[1]) for t in lp.tokens]
    assert got[:len(ids)] == ids and len(got) == len(ids) + 2
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    assert all(x is not None for x in lp.token_logprobs[1:])
    for s_i, st in enumerate(steps):
        q = prompt_len + s_i
        assert math.isclose(lp.token_logprobs[q], st["top_logprobs"][0], abs_tol=1e-3), (s_i, lp.token_logprobs[q])
        assert f"token_id:{st['id']}" in lp.top_logprobs[q] and len(lp.top_logprobs[q]) <= 3
    assert lp.text_offset[0] == 0 and lp.text_offset == sorted(lp.text_offset)
    assert "prompt_logprobs" not in (choice.model_extra or {})
    assert r.usage.prompt_tokens == len(ids) and r.usage.completion_tokens == 2

    tokens, token_logprobs = [], []
    for c in client.completions.create(stream=True, **args):
        if c.choices and c.choices[0].logprobs:
            tokens += c.choices[0].logprobs.tokens
            token_logprobs += c.choices[0].logprobs.token_logprobs
    assert tokens == lp.tokens
    assert token_logprobs[0] is None
    assert all(math.isclose(a, b, abs_tol=1e-6) for a, b in zip(token_logprobs[1:], lp.token_logprobs[1:]))


def test_streams_without_a_tokenizer_send_a_chunk_per_token(gqa_fixture):
    # No tokenizer, so no token ever has text: its chunk is the only sign of progress (what ITL and TPOT measure),
    # so these empty-text chunks are kept, one per token.
    _, client, ids, prompt_len, _ = gqa_fixture
    chunks = list(client.completions.create(model="fx", prompt=ids[:prompt_len], max_tokens=6, temperature=0,
                                            stream=True, extra_body={"ignore_eos": True}))
    assert [c.choices[0].text for c in chunks if c.choices] == [""] * 6


def test_several_served_model_names(llmserve_bin):
    # vLLM's `--served-model-name a b`: every name is listed and accepted, a response names the model the request
    # named, any other name is a 404; the first name is the one metrics carry.
    s = ServerProcess(llmserve_bin, "--served-model-name", "alpha", "beta", "--max-num-seqs", "4")
    try:
        client = openai.OpenAI(base_url=s.base_url, api_key="unused", max_retries=0)
        assert [m.id for m in client.models.list().data] == ["alpha", "beta"]
        assert client.models.retrieve("beta").id == "beta"
        for name in ("alpha", "beta"):
            r = client.completions.create(model=name, prompt="hi", max_tokens=2, temperature=0)
            assert r.model == name
        with pytest.raises(openai.NotFoundError):
            client.completions.create(model="gamma", prompt="hi", max_tokens=2)
        assert 'model_name="alpha"' in s.request("GET", "/metrics")[1].decode()
    finally:
        assert s.stop() == 0
