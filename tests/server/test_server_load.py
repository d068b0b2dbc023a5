# Load: 256 concurrent streaming clients (async openai client) each get exactly the greedy output their prompt
# gave when sent alone; afterwards /metrics shows nothing running and an empty KV cache. Three rounds, and the
# server's resident memory does not grow from the first round to the third.
import asyncio

import openai

NUM_CLIENTS = 256
NUM_PROMPTS = 16
MAX_TOKENS = 24


def prompts():
    return [f"client prompt {i}: " + "abcdefgh"[i % 8] * (i % 5 + 1) for i in range(NUM_PROMPTS)]


def test_256_concurrent_streams(default_server):
    client = openai.OpenAI(base_url=default_server.base_url, api_key="x", max_retries=0)
    reference = []
    for p in prompts():
        r = client.completions.create(model="default", prompt=p, max_tokens=MAX_TOKENS, temperature=0,
                                      extra_body={"ignore_eos": True})
        reference.append(r.choices[0].text)

    async def one(aclient, i):
        p = prompts()[i % NUM_PROMPTS]
        if i % 2:
            stream = await aclient.completions.create(model="default", prompt=p, max_tokens=MAX_TOKENS,
                                                      temperature=0, stream=True, extra_body={"ignore_eos": True})
            return "".join([c.choices[0].text async for c in stream if c.choices])
        stream = await aclient.chat.completions.create(
            model="default", messages=[{"role": "user", "content": p}], max_tokens=MAX_TOKENS, temperature=0,
            stream=True, extra_body={"ignore_eos": True})
        return "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])

    async def round_():
        aclient = openai.AsyncOpenAI(base_url=default_server.base_url, api_key="x", max_retries=0, timeout=120)
        try:
            return await asyncio.gather(*(one(aclient, i) for i in range(NUM_CLIENTS)))
        finally:
            await aclient.close()

    # Chat references (the template changes the prompt), sent alone.
    chat_reference = []
    for p in prompts():
        r = client.chat.completions.create(model="default", messages=[{"role": "user", "content": p}],
                                           max_tokens=MAX_TOKENS, temperature=0, extra_body={"ignore_eos": True})
        chat_reference.append(r.choices[0].message.content)

    rss = []
    for _ in range(3):
        outputs = asyncio.run(round_())
        for i, text in enumerate(outputs):
            want = reference[i % NUM_PROMPTS] if i % 2 else chat_reference[i % NUM_PROMPTS]
            assert text == want, i
        assert default_server.metric("llmserve:num_requests_running") == 0
        assert default_server.metric("llmserve:num_requests_waiting") == 0
        assert default_server.metric("llmserve:kv_cache_usage_perc") == 0
        rss.append(default_server.rss_kb())
    # Allocator noise aside, a leak per request (768 of them per round) would show here.
    assert rss[2] <= rss[0] * 1.05 + 4096, rss
