# `llmserve convert llama2c` + `llmserve generate` end to end: the converted stories260K model reproduces
# llama2.c's own greedy text; the built-in default runs and says so; bad input fails with a clear message.
import json
from cli_helpers import run

import pytest




def test_stories260k_text_equals_llama2c(llmserve_bin, testdata, stories_dir):
    # llama2.c: `run stories260K.bin -z tok512.bin -t 0.0 -n 200` = 200 tokens after BOS.
    expected = (testdata / "models" / "stories260K" / "expected_greedy_200steps.txt").read_text()
    r = run(llmserve_bin, "generate", "--model", str(stories_dir), "--prompt", "", "--max-tokens", "200",
            "--temperature", "0", "--ignore-eos")
    assert r.stdout.rstrip("\n") == expected.rstrip("\n")


def test_generate_json_and_prompt_ids(llmserve_bin, testdata, stories_dir):
    ids = json.loads((testdata / "models" / "stories260K" / "expected_greedy_ids_first60.json").read_text())["ids"]
    r = run(llmserve_bin, "generate", "--model", str(stories_dir), "--prompt-ids", "1", "--max-tokens", "20",
            "--output", "json")
    line = json.loads(r.stdout)
    assert line["prompt_token_ids"] == [1]
    assert line["token_ids"] == ids[:20]
    assert line["text"].startswith("Once upon a time")


@pytest.mark.parametrize("pipeline", ["transformers", "tokenizers"])
def test_converted_tokenizer_matches_its_oracle(llmserve_bin, stories_dir, pipeline):
    # The converted tokenizer (tokenizer.json + a LlamaTokenizerFast config, legacy) read by `llmserve tokenize` and
    # by the oracle of each pipeline: transformers' AutoTokenizer for the default one (it rebuilds Llama's Metaspace
    # handling, so runs of spaces differ from tokenizer.json alone), HF `tokenizers` for --tokenizer-pipeline
    # tokenizers. Same ids, same decoded text.
    texts = ["Once upon a time, there was a little girl named Lily.", "  two  spaces\nand a newline", "Zz!?"]
    if pipeline == "transformers":
        transformers = pytest.importorskip("transformers")
        tok = transformers.AutoTokenizer.from_pretrained(str(stories_dir))
        encode, decode = tok.encode, lambda ids: tok.decode(ids, skip_special_tokens=True)
    else:
        tokenizers = pytest.importorskip("tokenizers")
        tok = tokenizers.Tokenizer.from_file(str(stories_dir / "tokenizer.json"))
        encode, decode = (lambda t: tok.encode(t).ids), (lambda ids: tok.decode(ids, skip_special_tokens=True))
    flags = ("--tokenizer", str(stories_dir), "--tokenizer-pipeline", pipeline)
    requests = [{"text": t, "add_special_tokens": True} for t in texts]
    r = run(llmserve_bin, "tokenize", *flags, stdin="\n".join(map(json.dumps, requests)))
    outs = [json.loads(line) for line in r.stdout.split("\n") if line]
    assert len(outs) == len(texts)
    for text, out in zip(texts, outs):
        ids = encode(text)
        assert ids[0] == 1
        assert out["ids"] == ids, text
    dec = run(llmserve_bin, "tokenize", *flags, stdin=json.dumps({"ids": outs[0]["ids"], "skip_special_tokens": True}))
    assert json.loads(dec.stdout)["text"] == decode(outs[0]["ids"]) == texts[0]
    # The two pipelines do part here (the oracles differ): a test of the right oracle, not of either one's output.
    if pipeline == "transformers":
        assert outs[1]["ids"][:3] == [1, 410, 259]


def test_builtin_default_runs_and_says_so(llmserve_bin):
    r = run(llmserve_bin, "generate", "--prompt", "Hello", "--max-tokens", "8")
    assert "built-in default" in r.stderr
    assert r.stdout.endswith("\n")


@pytest.mark.parametrize("args, message", [
    (["--temperature", "-1"], "temperature"),
    (["--top-p", "1.5"], "top_p"),
    (["--n", "0"], "--n"),
    (["--max-tokens", "-1"], "--max-tokens"),
    (["--load-format", "pickle"], "--load-format"),
    (["--prompt-ids", "1,x"], "not a token id"),
])
def test_generate_rejects_bad_flags(llmserve_bin, args, message):
    r = run(llmserve_bin, "generate", *args, check=False)
    assert r.returncode != 0
    assert message in r.stderr


def test_generate_rejects_bad_model_inputs(llmserve_bin, stories_dir, tmp_path):
    r = run(llmserve_bin, "generate", "--model", str(stories_dir), "--prompt-ids", "1,99999", check=False)
    assert r.returncode == 1 and "outside the vocabulary" in r.stderr
    r = run(llmserve_bin, "generate", "--model", str(stories_dir), "--prompt-ids", "1", "--max-tokens", "600",
            check=False)
    assert r.returncode == 1 and "max_position_embeddings" in r.stderr
    r = run(llmserve_bin, "generate", "--model", str(tmp_path / "nope"), "--prompt-ids", "1", check=False)
    assert r.returncode == 1 and "nope: no such file or folder" in r.stderr
    (tmp_path / "empty").mkdir()
    r = run(llmserve_bin, "generate", "--model", str(tmp_path / "empty"), "--prompt-ids", "1", check=False)
    assert r.returncode == 1 and "config.json" in r.stderr


def test_tokenizer_of_another_model_is_refused_at_load(llmserve_bin, stories_dir, testdata):
    # tinyllama's tokenizer (32000 ids) with stories260K's 512-row embedding: refused before any request.
    other = testdata / "tokenizers" / "tinyllama-1.1b-chat-v1.0"
    r = run(llmserve_bin, "generate", "--model", str(stories_dir), "--tokenizer", str(other), "--prompt", "Hi",
            check=False)
    assert r.returncode == 1 and "has ids up to 31999, beyond the model's vocab_size 512" in r.stderr, r.stderr


def test_convert_names_an_unsupported_format(llmserve_bin):
    r = run(llmserve_bin, "convert", "gguf", "model.gguf", check=False)
    assert r.returncode == 2 and "convert gguf: not supported (the only format is llama2c" in r.stderr
    assert run(llmserve_bin, "convert", "--help").stdout.startswith("usage: llmserve convert llama2c")


def test_convert_reports_bad_checkpoint(llmserve_bin, testdata, tmp_path):
    bad = tmp_path / "bad.bin"
    bad.write_bytes(b"\x01\x00")
    r = run(llmserve_bin, "convert", "llama2c", "--checkpoint", str(bad), "--tokenizer",
            str(testdata / "models" / "stories260K" / "tok512.bin"), "--out", str(tmp_path / "o"), check=False)
    assert r.returncode == 1 and "bad.bin" in r.stderr


def test_generate_structured_output_flags(llmserve_bin, tmp_path):
    """--regex / --choice / --json-schema constrain every sample of the built-in default (random weights, temperature
    1): finished outputs fullmatch (Python re), are one of the choices, validate (jsonschema); two at once, a file
    that is not a schema and a bad regex are usage errors naming the flag or field."""
    import re
    import jsonschema
    def outputs(*flags):
        r = run(llmserve_bin, "generate", "--prompt", "Hi", "--max-tokens", "120", "--n", "6", "--seed", "3",
                "--output", "json", *flags)
        return [json.loads(line) for line in r.stdout.splitlines()]
    for o in outputs("--regex", r"[a-z]{3}-\d{2}"):
        assert o["finish_reason"] == "stop" and re.fullmatch(r"[a-z]{3}-\d{2}", o["text"]), o
    for o in outputs("--choice", "red,green,blue"):
        assert o["text"] in ("red", "green", "blue"), o
    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 99},
                                               "ok": {"type": "boolean"}, "c": {"enum": ["a", "b"]}},
              "required": ["n", "ok", "c"], "additionalProperties": False}
    (tmp_path / "s.json").write_text(json.dumps(schema))
    done = [o for o in outputs("--json-schema", str(tmp_path / "s.json")) if o["finish_reason"] == "stop"]
    assert len(done) >= 4
    for o in done:
        jsonschema.validate(json.loads(o["text"]), schema)
    (tmp_path / "bad.json").write_text("[1, 2]")
    for flags, message in ((["--regex", "a", "--choice", "a,b"], "give at most one"),
                           (["--json-schema", str(tmp_path / "bad.json")], "not a JSON object"),
                           (["--regex", "(a"], "structured_outputs")):
        r = run(llmserve_bin, "generate", "--prompt", "Hi", *flags, check=False)
        assert r.returncode != 0 and message in r.stderr, r.stderr
