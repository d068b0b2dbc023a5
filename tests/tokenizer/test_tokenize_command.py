# `llmserve tokenize` protocol: per-line errors as JSON (never a crash), messages lines answered with the
# not-in-this-build error, and clear failures for a missing or malformed tokenizer.
import json
import subprocess


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
    assert outs[3] == {"error": "line 4: chat templates not available in this build"}
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
