# Chat templates vs Python jinja2: every template in the shared test data x every conversation below is rendered by
# jinja2 (configured as transformers' _compile_jinja_template does) and by `llmserve template render --batch`; the
# outputs must be byte-identical, or both sides must raise. strftime_now is pinned to the same instant on both sides.
import datetime
import json
import pathlib
import subprocess

import jinja2
import jinja2.ext
import pytest
from jinja2.sandbox import ImmutableSandboxedEnvironment

NOW = datetime.datetime(2024, 7, 26, 10, 30, 0)
NOW_TEXT = "2024-07-26 10:30:00"

# Templates we deliberately do not support, with the reason. Every other template must match on every conversation.
KNOWN_UNSUPPORTED: dict = {}


class _Generation(jinja2.ext.Extension):
    """transformers' AssistantTracker as the renderer sees it: {% generation %} renders its body unchanged."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_generation_support"), [], [], body).set_lineno(lineno)

    def _generation_support(self, caller):
        return caller()


def make_env() -> ImmutableSandboxedEnvironment:
    """The environment transformers.utils.chat_template_utils._compile_jinja_template builds."""

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return NOW.strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[_Generation, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city. Use it when the user asks about 'weather' & <climate>.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. Zürich"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "description": "Temperature unit"},
                "days": {"type": "integer", "description": "Forecast days", "default": 1},
            },
            "required": ["city"],
        },
    },
}
SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "web_search",
        "description": "Search the web.",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string", "description": "The query"},
                           "max_results": {"type": "number", "description": "Maximum results"}},
            "required": ["query", "max_results"],
        },
    },
}
TOOL_CALL_DICT = {"id": "call_0001", "type": "function",
                  "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}
TOOL_CALL_STR = {"id": "call_0002", "type": "function",
                 "function": {"name": "web_search", "arguments": "{\"query\": \"jinja2 sandbox\", \"max_results\": 3}"}}
TRICKY = "Привет, 世界! 🌍 café — naïve \"quotes\" 'single' <tag> & \\backslash\\\n\tindented line\n  trailing  "


def conversations():
    sys_msg = {"role": "system", "content": "You are a helpful assistant."}
    return {
        "single_user": dict(messages=[{"role": "user", "content": "Hello!"}], add_generation_prompt=True),
        "system_user_assistant": dict(messages=[sys_msg, {"role": "user", "content": "What is 2+2?"},
                                                {"role": "assistant", "content": "2+2 equals 4."},
                                                {"role": "user", "content": "And 3+3?"}], add_generation_prompt=True),
        "system_user_assistant_nogen": dict(messages=[sys_msg, {"role": "user", "content": "Hi"},
                                                      {"role": "assistant", "content": "Hello! How can I help?"}],
                                            add_generation_prompt=False),
        "multi_turn": dict(messages=[{"role": "user", "content": "one"}, {"role": "assistant", "content": "two"},
                                     {"role": "user", "content": "three"}, {"role": "assistant", "content": "four"},
                                     {"role": "user", "content": "five"}, {"role": "assistant", "content": "six"}],
                           add_generation_prompt=False, omit_tools=True),
        "non_ascii": dict(messages=[{"role": "system", "content": "Réponds en français. 日本語も可。"},
                                    {"role": "user", "content": TRICKY},
                                    {"role": "assistant", "content": "  Ответ: ✓ 😀  "},
                                    {"role": "user", "content": "¿Y ahora?"}], add_generation_prompt=True,
                          omit_tools=True),
        "empty_content": dict(messages=[{"role": "user", "content": ""}, {"role": "assistant", "content": ""},
                                        {"role": "user", "content": " "}], add_generation_prompt=True,
                              omit_tools=True),
        "tools_available": dict(messages=[sys_msg, {"role": "user", "content": "Weather in Paris?"}],
                                tools=[WEATHER_TOOL, SEARCH_TOOL], add_generation_prompt=True),
        "tool_call_roundtrip": dict(
            messages=[{"role": "user", "content": "Weather in Paris?"},
                      {"role": "assistant", "content": "", "tool_calls": [TOOL_CALL_DICT]},
                      {"role": "tool", "tool_call_id": "call_0001", "name": "get_weather",
                       "content": "{\"temperature\": 21.5, \"sky\": \"clear\"}"},
                      {"role": "assistant", "content": "It is 21.5 °C and clear in Paris."}],
            tools=[WEATHER_TOOL], add_generation_prompt=False),
        "tool_call_string_args": dict(
            messages=[sys_msg, {"role": "user", "content": "Search for jinja2 sandbox"},
                      {"role": "assistant", "content": None, "tool_calls": [TOOL_CALL_STR]},
                      {"role": "tool", "tool_call_id": "call_0002", "name": "web_search",
                       "content": "3 results found"}],
            tools=[SEARCH_TOOL, WEATHER_TOOL], add_generation_prompt=True),
        "reasoning": dict(messages=[{"role": "user", "content": "Think first: 17*3?"},
                                    {"role": "assistant",
                                     "content": "<think>\n17*3 = 51\n</think>\n\nThe answer is 51.",
                                     "reasoning_content": "17*3 = 51"},
                                    {"role": "user", "content": "Thanks"}], add_generation_prompt=True),
        "system_only": dict(messages=[{"role": "system", "content": "  System prompt with spaces.  \n"}],
                            add_generation_prompt=True),
        "consecutive_users": dict(messages=[{"role": "user", "content": "first"},
                                            {"role": "user", "content": "second"}],
                                  add_generation_prompt=True, omit_tools=True),
        "parallel_tool_calls": dict(
            messages=[sys_msg, {"role": "user", "content": "Weather in Paris and Oslo, then search news."},
                      {"role": "assistant", "content": "Let me check.",
                       "tool_calls": [TOOL_CALL_DICT,
                                      {"id": "call_0003", "type": "function",
                                       "function": {"name": "get_weather",
                                                    "arguments": {"city": "Oslo", "unit": "celsius", "days": 2,
                                                                  "verbose": True, "threshold": 0.5, "note": None,
                                                                  "tags": ["ß", "naïve"]}}}]},
                      {"role": "tool", "tool_call_id": "call_0001", "name": "get_weather", "content": "21.5 C"},
                      {"role": "tool", "tool_call_id": "call_0003", "name": "get_weather", "content": "-3 C, snow"},
                      {"role": "assistant", "content": "Paris: 21.5 °C. Oslo: -3 °C with snow."},
                      {"role": "user", "content": "Thanks!"}],
            tools=[WEATHER_TOOL, SEARCH_TOOL], add_generation_prompt=True),
        "tool_result_object": dict(
            messages=[{"role": "system", "content": "Use tools when needed. Current date: 2024-07-26."},
                      {"role": "user", "content": "Plan a trip to Zürich."},
                      {"role": "assistant", "content": "<think>Need weather first.</think>",
                       "tool_calls": [{"type": "function", "function": {
                           "name": "get_weather", "arguments": {"city": "Zürich", "filters": {"rain": True,
                                                                                           "hours": [6, 12, 18]}}}}]},
                      {"role": "tool", "name": "get_weather",
                       "content": {"temp_c": 18.25, "conditions": ["cloudy", "light rain"], "alert": None}},
                      {"role": "assistant", "content": "Pack an umbrella ☔."},
                      {"role": "user", "content": "And tomorrow?"}],
            tools=[WEATHER_TOOL], add_generation_prompt=True, kwargs={"enable_thinking": True}),
        "long_history": dict(
            messages=[sys_msg] + [m for i in range(12) for m in (
                {"role": "user", "content": f"Question {i}: what is {i} squared?"},
                {"role": "assistant", "content": f"{i} squared is {i * i}."})],
            add_generation_prompt=False),
        "thinking_disabled": dict(messages=[{"role": "user", "content": "Quick answer: capital of France?"}],
                                  add_generation_prompt=True, kwargs={"enable_thinking": False}),
        "content_parts": dict(messages=[{"role": "system", "content": [{"type": "text", "text": "Be concise."}]},
                                        {"role": "user", "content": [{"type": "text", "text": "Describe"},
                                                                     {"type": "text", "text": " this, please."}]}],
                              add_generation_prompt=True, omit_tools=True),
        "documents": dict(messages=[{"role": "user", "content": "Summarise the documents."}],
                          documents=[{"title": "Doc A", "text": "Alpha text."}, {"title": "Doc B", "text": "Beta ✓"}],
                          add_generation_prompt=True),
    }


def template_sources(testdata: pathlib.Path):
    """(id, source, special tokens) for every template in the test data."""
    default_tokens = {"bos_token": "<s>", "eos_token": "</s>"}
    out = []
    root = testdata / "chat-templates"
    for path in sorted((root / "llama.cpp").glob("*.jinja")) + sorted((root / "mistral.rs").glob("*.jinja")):
        out.append((f"{path.parent.name}/{path.name}", path.read_text(encoding="utf-8"), default_tokens))
    for path in sorted((root / "mistral.rs").glob("*.json")):
        out.append((f"mistral.rs/{path.name}", json.loads(path.read_text(encoding="utf-8"))["chat_template"],
                    default_tokens))
    for tok_dir in sorted((testdata / "tokenizers").iterdir()):
        config_path = tok_dir / "tokenizer_config.json"
        tokens = {}
        config = json.loads(config_path.read_text(encoding="utf-8")) if config_path.exists() else {}
        for key in ("bos_token", "eos_token"):
            value = config.get(key)
            if isinstance(value, dict):
                value = value.get("content")
            if isinstance(value, str):
                tokens[key] = value
        if (tok_dir / "chat_template.jinja").exists():
            out.append((f"tokenizers/{tok_dir.name}/chat_template.jinja",
                        (tok_dir / "chat_template.jinja").read_text(encoding="utf-8"), tokens))
        chat_template = config.get("chat_template")
        if isinstance(chat_template, str):
            out.append((f"tokenizers/{tok_dir.name}/tokenizer_config.json", chat_template, tokens))
        elif isinstance(chat_template, list):
            for entry in chat_template:
                out.append((f"tokenizers/{tok_dir.name}/tokenizer_config.json#{entry['name']}", entry["template"],
                            tokens))
    return out


def python_render(template, context):
    if isinstance(template, Exception):
        return {"error": f"compile: {template}"}
    try:
        return {"text": template.render(**context)}
    except Exception as e:  # noqa: BLE001 - any exception inside jinja2 is "the template raised"
        result = {"error": f"{type(e).__name__}: {e}"}
        if type(e) is jinja2.exceptions.TemplateError:  # raise_exception(): our message must carry the same text
            result["raised"] = str(e)
        return result


def test_templates_match_jinja2(llmserve_bin, testdata, tmp_path, capsys):
    env = make_env()
    templates = template_sources(testdata)
    assert len(templates) >= 70, f"expected the full template set, found {len(templates)}"
    convs = conversations()
    cases, expected = [], []
    for template_id, source, tokens in templates:
        try:
            template = env.from_string(source)
        except jinja2.exceptions.TemplateError as e:
            template = e
        for conv_id, conv in convs.items():
            context = {"messages": conv["messages"], "add_generation_prompt": conv["add_generation_prompt"], **tokens,
                       **conv.get("kwargs", {})}
            if not conv.get("omit_tools"):
                # transformers passes tools/documents explicitly (None when absent); other callers leave them out.
                context.update(tools=conv.get("tools"), documents=conv.get("documents"))
            expected.append(python_render(template, context))
            request = {"template": source, "context": context, "now": NOW_TEXT}
            cases.append((template_id, conv_id, json.dumps(request, ensure_ascii=False)))
    batch = tmp_path / "batch.jsonl"
    batch.write_text("\n".join(c[2] for c in cases) + "\n", encoding="utf-8")
    r = subprocess.run([str(llmserve_bin), "template", "render", "--batch", str(batch)], capture_output=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr.decode()
    got = [json.loads(line) for line in r.stdout.decode("utf-8").split("\n") if line]
    assert len(got) == len(cases)

    mismatches, num_both_raise, num_equal = [], 0, 0
    for (template_id, conv_id, _), want, have in zip(cases, expected, got):
        if template_id in KNOWN_UNSUPPORTED:
            continue
        if "error" in want and "error" in have and want.get("raised", "") in have["error"]:
            num_both_raise += 1
        elif want.get("text") is not None and want.get("text") == have.get("text"):
            num_equal += 1
        else:
            mismatches.append((template_id, conv_id, want, have))
    skipped = sum(1 for c in cases if c[0] in KNOWN_UNSUPPORTED)
    with capsys.disabled():  # the pair count is part of the test's report, shown even under -q
        print(f"\nchat templates: {len(templates)} templates x {len(convs)} conversations = {len(cases)} pairs; "
              f"{num_equal} byte-identical, {num_both_raise} raise in both, {skipped} skipped "
              f"(KNOWN_UNSUPPORTED: {sorted(KNOWN_UNSUPPORTED)}), {len(mismatches)} mismatches")
    report = []
    for template_id, conv_id, want, have in mismatches[:15]:
        report.append(f"--- {template_id} x {conv_id}\n  jinja2:   {json.dumps(want, ensure_ascii=False)[:600]}\n"
                      f"  llmserve: {json.dumps(have, ensure_ascii=False)[:600]}")
    assert not mismatches, f"{len(mismatches)} mismatches:\n" + "\n".join(report)
    # The comparison must be meaningful: most pairs render text rather than raising on both sides.
    assert num_equal > len(cases) // 2


def test_render_single_with_model_dir(llmserve_bin, testdata, tmp_path):
    """--model reads chat_template.jinja / tokenizer_config.json and the bos/eos strings, like transformers."""
    env = make_env()
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi ✓"}]
    (tmp_path / "m.json").write_text(json.dumps(messages), encoding="utf-8")
    for name in ("tinyllama-1.1b-chat-v1.0", "qwen2.5-instruct", "llama3-8b-instruct"):
        model_dir = testdata / "tokenizers" / name
        config = json.loads((model_dir / "tokenizer_config.json").read_text(encoding="utf-8"))
        jinja_file = model_dir / "chat_template.jinja"
        source = jinja_file.read_text(encoding="utf-8") if jinja_file.exists() else config["chat_template"]
        tokens = {k: (v["content"] if isinstance(v, dict) else v) for k in ("bos_token", "eos_token")
                  if isinstance(v := config.get(k), (str, dict))}
        want = env.from_string(source).render(messages=messages, tools=None, documents=None,
                                              add_generation_prompt=True, **tokens)
        r = subprocess.run([str(llmserve_bin), "template", "render", "--model", str(model_dir), "--messages",
                            str(tmp_path / "m.json"), "--add-generation-prompt"], capture_output=True, timeout=60)
        assert r.returncode == 0, r.stderr.decode()
        assert r.stdout.decode("utf-8") == want, name


def test_render_errors_are_clear(llmserve_bin, tmp_path):
    (tmp_path / "bad.jinja").write_text("line one\n{% if x %}\n{{ 1 + }}\n{% endif %}", encoding="utf-8")
    (tmp_path / "raise.jinja").write_text("a\nb\n{{ raise_exception('nope: ' ~ messages|length) }}", encoding="utf-8")
    (tmp_path / "m.json").write_text("[]", encoding="utf-8")
    r = subprocess.run([str(llmserve_bin), "template", "render", "--template", str(tmp_path / "bad.jinja"),
                        "--messages", str(tmp_path / "m.json")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "line 3:" in r.stderr and r.stdout == ""
    r = subprocess.run([str(llmserve_bin), "template", "render", "--template", str(tmp_path / "raise.jinja"),
                        "--messages", str(tmp_path / "m.json")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "line 3: nope: 0" in r.stderr


def test_model_dir_with_template_list_and_added_token_objects(llmserve_bin, tmp_path):
    """tokenizer_config.json may hold a list of named templates ("default" is used) and AddedToken dicts."""
    config = {
        "bos_token": {"__type": "AddedToken", "content": "<BOS>", "lstrip": False},
        "eos_token": "<EOS>",
        "chat_template": [
            {"name": "tool_use", "template": "TOOLS {{ messages | length }}"},
            {"name": "default", "template": "{{ bos_token }}{% for m in messages %}[{{ m.role }}] {{ m.content }}"
                                            "{{ eos_token }}{% endfor %}{% if add_generation_prompt %}[assistant]"
                                            "{% endif %}"},
        ],
    }
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (model_dir / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    (tmp_path / "m.json").write_text(json.dumps({"messages": [{"role": "user", "content": "ünï"}]}), encoding="utf-8")
    args = [str(llmserve_bin), "template", "render", "--model", str(model_dir), "--messages", str(tmp_path / "m.json")]
    r = subprocess.run(args, capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout.decode("utf-8") == "<BOS>[user] ünï<EOS>"
    r = subprocess.run(args + ["--add-generation-prompt", "--bos-token", "", "--eos-token", "</s>"], capture_output=True,
                       timeout=60)
    assert r.stdout.decode("utf-8") == "<BOS>[user] ünï</s>[assistant]"
    (model_dir / "tokenizer_config.json").write_text(json.dumps({"chat_template": [{"name": "rag", "template": "x"}]}))
    r = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "no \"default\" entry" in r.stderr
