# Structured output and tool calling end to end, on the built-in default model (byte tokenizer, tiny random Llama)
# sampled at temperature 1: 220 JSON schemas (real function-calling schemas plus seeded random ones, shared with
# tests/structured's oracle test) through response_format / structured_outputs / guided_json, each finished output
# validated by Python `jsonschema`; regexes fullmatch with `re`; choices are one of the choices; a GBNF grammar; the
# 400s for bad schemas / regexes / grammars / conflicting fields (the server keeps serving); tool calling through
# the official openai client (required, named, auto with the hermes parser), streamed == non-streamed.
import asyncio
import importlib.util
import json
import pathlib
import re

import jsonschema
import openai
import pytest

from conftest import ServerProcess

ORACLE = pathlib.Path(__file__).resolve().parent.parent / "structured" / "test_structured_oracle.py"
QUOTE = 34  # '"' in the byte tokenizer: biased so the random model closes its strings (else ~250 tokens each)
BIAS = {str(QUOTE): 5.0}


def oracle():
    spec = importlib.util.spec_from_file_location("structured_oracle", ORACLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# Both schedulers: under async scheduling a constrained step's forward runs before its bitmask is known (deferred
# sampling), which must not change what the grammar allows.
@pytest.fixture(scope="module", params=["sync", "async"])
def server(llmserve_bin, request):
    scheduling = ["--async-scheduling"] if request.param == "async" else ["--no-async-scheduling"]
    s = ServerProcess(llmserve_bin, "--max-num-seqs", "64", "--kv-cache-tokens", "65536", "--seed", "7",
                      "--served-model-name", "default", "--enable-auto-tool-choice", "--tool-call-parser", "hermes",
                      *scheduling)
    yield s
    assert s.stop() == 0, s.log_text()[-3000:]


def run_all(server, calls, concurrency=64):
    """Runs coroutine factories `calls(client)` with at most `concurrency` in flight; returns their results."""
    async def main():
        client = openai.AsyncOpenAI(base_url=server.base_url, api_key="x", max_retries=0, timeout=120)
        sem = asyncio.Semaphore(concurrency)

        async def one(call):
            async with sem:
                return await call(client)
        try:
            return await asyncio.gather(*(one(c) for c in calls))
        finally:
            await client.close()
    return asyncio.run(main())


def validate(schema, text):
    cls = jsonschema.Draft202012Validator
    cls(schema, format_checker=cls.FORMAT_CHECKER).validate(json.loads(text))


def test_220_json_schemas_validate(server):
    schemas = oracle().schemas()
    assert len(schemas) >= 200
    # Three request fields carry a schema; each schema goes through one of them, two samples each.
    def call(i, schema):
        field = i % 3
        if field == 0:
            extra = {"response_format": {"type": "json_schema",
                                         "json_schema": {"name": f"s{i}", "schema": schema, "strict": True}}}
        elif field == 1:
            extra = {"structured_outputs": {"json": schema}}
        else:
            extra = {"guided_json": json.dumps(schema)}
        return lambda c: c.completions.create(model="default", prompt=f"item {i}:", max_tokens=300, temperature=1.0,
                                              n=2, seed=i, logit_bias=BIAS, extra_body=extra)
    results = run_all(server, [call(i, s) for i, s in enumerate(schemas)])
    finished = 0
    for schema, res in zip(schemas, results):
        for choice in res.choices:
            if choice.finish_reason != "stop":
                assert choice.finish_reason == "length"
                continue
            finished += 1
            validate(schema, choice.text)
    assert finished >= 0.8 * 2 * len(schemas), f"only {finished} of {2 * len(schemas)} outputs finished"


def test_chat_response_format_and_json_object(server):
    schemas = oracle().FUNCTION_SCHEMAS
    calls = [lambda c, s=s, i=i: c.chat.completions.create(
        model="default", messages=[{"role": "user", "content": f"give {i}"}], max_tokens=300, seed=i,
        logit_bias=BIAS, response_format={"type": "json_schema", "json_schema": {"name": "f", "schema": s}})
        for i, s in enumerate(schemas)]
    calls += [lambda c, i=i: c.chat.completions.create(
        model="default", messages=[{"role": "user", "content": "json"}], max_tokens=300, seed=100 + i,
        logit_bias=BIAS, response_format={"type": "json_object"}) for i in range(8)]
    results = run_all(server, calls)
    done = 0
    for i, res in enumerate(results):
        msg = res.choices[0].message
        if res.choices[0].finish_reason != "stop":
            continue
        done += 1
        if i < len(schemas):
            validate(schemas[i], msg.content)
        else:
            assert isinstance(json.loads(msg.content), dict), msg.content
    assert done >= 0.8 * len(results)


def test_regexes_choices_and_grammar(server):
    o = oracle()
    calls = [lambda c, r=r, i=i: c.completions.create(model="default", prompt="r", max_tokens=120, n=4, seed=i,
                                                      extra_body={"structured_outputs": {"regex": r}})
             for i, r in enumerate(o.REGEXES)]
    calls += [lambda c, ch=ch, i=i: c.completions.create(model="default", prompt="c", max_tokens=40, n=4, seed=i,
                                                         extra_body={"guided_choice": ch})
              for i, ch in enumerate(o.CHOICES)]
    grammar = 'root ::= "(" item ("," item)* ")"\nitem ::= [0-9]{1,3} | "x"'
    calls += [lambda c: c.completions.create(model="default", prompt="g", max_tokens=120, n=8, seed=5,
                                             extra_body={"guided_grammar": grammar})]
    results = run_all(server, calls)
    for r, res in zip(o.REGEXES, results):
        for ch in res.choices:
            if ch.finish_reason == "stop":
                assert re.fullmatch(r, ch.text), (r, ch.text)
    for choices, res in zip(o.CHOICES, results[len(o.REGEXES):]):
        assert all(ch.finish_reason == "stop" and ch.text in choices for ch in res.choices), (choices, res)
    for ch in results[-1].choices:
        if ch.finish_reason == "stop":
            assert re.fullmatch(r"\((\d{1,3}|x)(,(\d{1,3}|x))*\)", ch.text), ch.text


def test_streamed_constrained_output_equals_non_streamed(server):
    client = openai.OpenAI(base_url=server.base_url, api_key="x")
    schema = oracle().FUNCTION_SCHEMAS[0]
    kw = dict(model="default", prompt="s", max_tokens=200, seed=11, logit_bias=BIAS,
              extra_body={"structured_outputs": {"json": schema}})
    whole = client.completions.create(**kw).choices[0].text
    streamed = "".join(c.choices[0].text for c in client.completions.create(stream=True, **kw) if c.choices)
    assert streamed == whole
    validate(schema, whole)


BAD_REQUESTS = [
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "string",
                                                                                          "format": "hostname-x"}}}},
     "response_format", "format"),
    ({"structured_outputs": {"json": {"not": {"type": "string"}}}}, "structured_outputs", "not"),
    ({"guided_json": {"type": "array", "prefixItems": [{"type": "string"}]}}, "guided_json", "prefixItems"),
    ({"guided_regex": "(ab"}, "guided_regex", "regex"),
    ({"structured_outputs": {"grammar": "root ::= \"a\" undefined_rule"}}, "structured_outputs", "undefined_rule"),
    ({"structured_outputs": {"regex": "a", "json_object": True}}, "structured_outputs", "only one"),
    ({"guided_regex": "a", "response_format": {"type": "json_object"}}, "guided_regex", "conflicts"),
    ({"structured_outputs": {"choice": []}}, "structured_outputs", "non-empty"),
    ({"structured_outputs": {"whitespace_pattern": " "}}, "structured_outputs", "whitespace_pattern"),
    ({"response_format": {"type": "json_schema"}}, "response_format", "json_schema"),
    ({"response_format": {"type": "yaml"}}, "response_format", "yaml"),
    ({"guided_json": {"type": "object"}, "min_tokens": 2}, "min_tokens", "structured"),
]


@pytest.mark.parametrize("body,param,needle", BAD_REQUESTS)
def test_bad_constraints_are_400_naming_the_field(server, body, param, needle):
    status, res = server.post_json("/v1/completions", dict({"model": "default", "prompt": "p", "max_tokens": 4},
                                                           **body))
    assert status == 400, res
    assert res["error"]["param"] == param, res
    assert needle in res["error"]["message"], res
    # The server keeps serving, constrained and free requests alike.
    status, ok = server.post_json("/v1/completions", {"model": "default", "prompt": "p", "max_tokens": 8,
                                                      "guided_choice": ["ok", "fine"]})
    assert status == 200 and ok["choices"][0]["text"] in ("ok", "fine"), ok


TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Current weather",
                                      "parameters": {"type": "object",
                                                     "properties": {"city": {"type": "string", "maxLength": 8},
                                                                    "unit": {"enum": ["c", "f"]}},
                                                     "required": ["city", "unit"], "additionalProperties": False}}},
    {"type": "function", "function": {"name": "add", "description": "Add two integers",
                                      "parameters": {"type": "object",
                                                     "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                                                     "required": ["a", "b"], "additionalProperties": False}}},
]
SCHEMA_OF = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}


def streamed_tool_calls(stream):
    content, calls, finish = "", {}, None
    for chunk in stream:
        if not chunk.choices:
            continue
        d = chunk.choices[0].delta
        content += d.content or ""
        for tc in d.tool_calls or []:
            if tc.id:
                calls[tc.index] = {"id": tc.id, "name": tc.function.name, "arguments": tc.function.arguments or ""}
            else:
                calls[tc.index]["arguments"] += tc.function.arguments or ""
        finish = chunk.choices[0].finish_reason or finish
    return content, [calls[i] for i in sorted(calls)], finish


@pytest.mark.parametrize("tool_choice", ["required", {"type": "function", "function": {"name": "add"}}])
def test_forced_tool_calls_through_the_openai_client(server, tool_choice):
    client = openai.OpenAI(base_url=server.base_url, api_key="x")
    kw = dict(model="default", messages=[{"role": "user", "content": "weather in Oslo?"}], tools=TOOLS,
              tool_choice=tool_choice, max_tokens=300, logit_bias=BIAS)
    checked = 0
    for seed in range(6):
        res = client.chat.completions.create(seed=seed, **kw)
        choice = res.choices[0]
        if choice.finish_reason == "length":
            continue
        calls = choice.message.tool_calls
        assert calls, choice
        assert choice.finish_reason == ("tool_calls" if tool_choice == "required" else "stop")
        for tc in calls:
            assert tc.type == "function" and tc.id.startswith("call_")
            if tool_choice != "required":
                assert tc.function.name == "add"
            jsonschema.validate(json.loads(tc.function.arguments), SCHEMA_OF[tc.function.name])
        content, streamed, finish = streamed_tool_calls(client.chat.completions.create(seed=seed, stream=True, **kw))
        assert finish == choice.finish_reason
        assert (content or None) == choice.message.content
        assert [(c["name"], c["arguments"]) for c in streamed] == [(c.function.name, c.function.arguments)
                                                                   for c in calls]
        checked += 1
    assert checked >= 3


def test_auto_tool_choice_parses_hermes_calls(server):
    """tool_choice auto with the hermes parser: a regex makes the random model write Qwen/Hermes tool-call text, with
    some content before it; the client gets message.tool_calls, streamed and not, and the content before them."""
    client = openai.OpenAI(base_url=server.base_url, api_key="x")
    reply = (r'Sure\. <tool_call>\n\{"name": "get_weather", "arguments": \{"city": "[a-z]{1,6}", "unit": "(c|f)"\}\}'
             r'\n</tool_call>')
    kw = dict(model="default", messages=[{"role": "user", "content": "weather?"}], tools=TOOLS, max_tokens=200,
              seed=3, extra_body={"structured_outputs": {"regex": reply}})
    res = client.chat.completions.create(**kw)
    choice = res.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    assert choice.message.content == "Sure. "
    [call] = choice.message.tool_calls
    assert call.function.name == "get_weather"
    jsonschema.validate(json.loads(call.function.arguments), SCHEMA_OF["get_weather"])
    content, streamed, finish = streamed_tool_calls(client.chat.completions.create(stream=True, **kw))
    assert (content, finish) == ("Sure. ", "tool_calls")
    assert [(c["name"], c["arguments"]) for c in streamed] == [(call.function.name, call.function.arguments)]
    # tool_choice "none": the same reply stays content.
    res = client.chat.completions.create(tool_choice="none", **kw)
    assert res.choices[0].message.tool_calls in (None, []) and res.choices[0].message.content.startswith("Sure.")


def test_tool_request_errors(server, llmserve_bin):
    bad = [({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
           ({"tool_choice": "required"}, "tool_choice"),
           ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"not": {}}}}],
             "tool_choice": "required"}, "tools"),
           ({"tools": [{"type": "function"}]}, "tools"),
           ({"tools": TOOLS, "tool_choice": "required", "response_format": {"type": "json_object"}}, "tool_choice")]
    for extra, param in bad:
        status, res = server.post_json("/v1/chat/completions", dict(
            {"model": "default", "messages": [{"role": "user", "content": "x"}], "max_tokens": 4}, **extra))
        assert status == 400 and res["error"]["param"] == param, (extra, res)
    # "auto" (the default with tools) without --enable-auto-tool-choice: vLLM's 400.
    plain = ServerProcess(llmserve_bin, "--served-model-name", "default")
    try:
        status, res = plain.post_json("/v1/chat/completions", {"model": "default", "tools": TOOLS, "max_tokens": 4,
                                                                "messages": [{"role": "user", "content": "x"}]})
        assert status == 400 and "--enable-auto-tool-choice" in res["error"]["message"], res
        status, res = plain.post_json("/v1/chat/completions", {"model": "default", "tools": TOOLS, "max_tokens": 4,
                                                                "tool_choice": "none",
                                                                "messages": [{"role": "user", "content": "x"}]})
        assert status == 200, res
    finally:
        assert plain.stop() == 0
