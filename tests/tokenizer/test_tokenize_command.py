# `llmserve tokenize` protocol: per-line errors as JSON (never a crash), messages lines rendered through the
# model's chat template exactly as jinja2 + HF tokenizers do, and clear failures for a bad tokenizer.
import json
import subprocess

import tokenizers
from test_chat_templates import make_env


def run(llmserve_bin, *args, stdin=""):
    return subprocess.run([str(llmserve_bin), "tokenize", *args], input=stdin, capture_output=True, text=True,
                          timeout=60)


def test_per_line_errors_do_not_stop_the_stream(llmserve_bin, testdata):
    lines = [
        '{"text": "Hello world"}',
        "{not json",
        '{"text": 5}',
        '{"messages": [{"role": "user", "content": "hi"}]}',
        '{"text": "Hello", "add_special_tokens": "yes"}',
        '{"ids": [1, "x"]}',
        "[]",
        '{"other": 1}',
        '{"text": "Hello world", "add_special_tokens": false}',
        '{"ids": [15043, 3186, 99999999, -3]}',
    ]
    r = run(llmserve_bin, "--tokenizer", str(testdata / "tokenizers" / "tinyllama-1.1b-chat-v1.0"),
            stdin="\n".join(lines) + "\n")
    assert r.returncode == 0, r.stderr
    outs = [json.loads(line) for line in r.stdout.split("\n") if line]
    assert len(outs) == len(lines)
    assert outs[0] == {"ids": [1, 15043, 3186], "tokens": ["<s>", "▁Hello", "▁world"]}
    for i in (1, 2, 4, 5, 6, 7):
        assert set(outs[i]) == {"error"} and outs[i]["error"].startswith(f"line {i + 1}: ")
    assert outs[3]["text"] == "<|user|>\nhi</s>\n" and outs[3]["ids"]
    assert outs[8]["ids"] == [15043, 3186]
    assert outs[9]["text"] == "Hello world" and outs[9]["stream"] == "Hello world"  # unknown ids skipped


def test_input_file_flag(llmserve_bin, testdata, tmp_path):
    f = tmp_path / "in.jsonl"
    f.write_text('{"text": "a b"}\n', encoding="utf-8")
    r = run(llmserve_bin, "--tokenizer", str(testdata / "tokenizers" / "phi-2" / "tokenizer.json"), "--input", str(f))
    assert r.returncode == 0 and json.loads(r.stdout)["ids"] == [64, 275]


def test_missing_or_malformed_tokenizer(llmserve_bin, testdata, tmp_path):
    r = run(llmserve_bin, "--tokenizer", str(tmp_path / "nope"))
    assert r.returncode == 1 and "NOT_FOUND" in r.stderr and "tokenizer.json" in r.stderr
    (tmp_path / "tokenizer.json").write_text('{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a b"]}}')
    r = run(llmserve_bin, "--tokenizer", str(tmp_path))
    assert r.returncode == 1 and "model.merges[0]" in r.stderr
    r = run(llmserve_bin)
    assert r.returncode == 2 and "--tokenizer" in r.stderr


def test_messages_lines_match_jinja2_and_hf_tokenizers(llmserve_bin, testdata):
    tok_dir = testdata / "tokenizers" / "tinyllama-1.1b-chat-v1.0"
    template = make_env().from_string((tok_dir / "chat_template.jinja").read_text())
    hf = tokenizers.Tokenizer.from_file(str(tok_dir / "tokenizer.json"))
    conversations = [
        {"messages": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi there"}],
         "add_generation_prompt": True},
        {"messages": [{"role": "user", "content": "Привет, 世界! 🌍"}, {"role": "assistant", "content": "Hello."},
                      {"role": "user", "content": ""}], "add_generation_prompt": False},
    ]
    bad = ['{"messages": "hi"}', '{"messages": [], "add_generation_prompt": 1}',
           '{"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": 3}']
    lines = [json.dumps(c, ensure_ascii=False) for c in conversations] + bad
    # The `tokenizers` pipeline: HF tokenizers is the oracle here (test_tokenizer_transformers.py: the default).
    r = run(llmserve_bin, "--tokenizer", str(tok_dir), "--tokenizer-pipeline", "tokenizers",
            stdin="\n".join(lines) + "\n")
    assert r.returncode == 0, r.stderr
    outs = [json.loads(line) for line in r.stdout.split("\n") if line]
    for conv, out in zip(conversations, outs):
        text = template.render(messages=conv["messages"], add_generation_prompt=conv["add_generation_prompt"],
                               tools=None, documents=None, bos_token="<s>", eos_token="</s>")
        assert out["text"] == text
        assert out["ids"] == hf.encode(text, add_special_tokens=False).ids
    for i, out in enumerate(outs[len(conversations):], start=len(conversations) + 1):
        assert set(out) == {"error"} and out["error"].startswith(f"line {i}: ")


def test_messages_without_a_chat_template_is_a_line_error(llmserve_bin, testdata):
    r = run(llmserve_bin, "--tokenizer", str(testdata / "tokenizers" / "phi-2" / "tokenizer.json"),
            stdin='{"messages": [{"role": "user", "content": "hi"}]}\n{"text": "a b"}\n')
    outs = [json.loads(line) for line in r.stdout.split("\n") if line]
    assert outs[0] == {"error": "line 1: the tokenizer has no chat template"}
    assert outs[1]["ids"] == [64, 275]
