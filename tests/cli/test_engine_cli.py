# `llmserve generate` on the engine (batches from JSONL, sampling flags, stop strings, n, json output),
# `llmserve chat` over a pipe (checked against jinja2 + HF tokenizers + generate), `llmserve bench throughput`.
import json
import shutil
from cli_helpers import run

import pytest

FIXTURE = "tests/fixtures/models/llama_gqa_f32"




def gen_json(bin_path, model, *args):
    # Greedy unless the test asks otherwise (generate samples at vLLM's temperature 1.0 by default; a later
    # --temperature in `args` wins).
    r = run(bin_path, "generate", "--model", str(model), "--output", "json", "--temperature", "0", *args)
    return [json.loads(line) for line in r.stdout.splitlines()]


PROMPTS = ["Once upon a time", "The little dog", "Lily and Tom went to the park. They"]


def test_jsonl_batch_equals_single_runs(llmserve_bin, stories_dir, tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in PROMPTS))
    batch = gen_json(llmserve_bin, stories_dir, "--input", str(path), "--max-tokens", "40")
    assert [b["index"] for b in batch] == [0, 1, 2]
    for p, b in zip(PROMPTS, batch):
        single = gen_json(llmserve_bin, stories_dir, "--prompt", p, "--max-tokens", "40")[0]
        assert b["token_ids"] == single["token_ids"]
        assert b["text"] == single["text"]
        assert b["finish_reason"] in ("length", "stop")


def test_stop_string_truncates_text(llmserve_bin, stories_dir):
    full = gen_json(llmserve_bin, stories_dir, "--prompt", PROMPTS[0], "--max-tokens", "60", "--ignore-eos")[0]
    words = full["text"].split()
    stop = words[len(words) // 2]
    cut = gen_json(llmserve_bin, stories_dir, "--prompt", PROMPTS[0], "--max-tokens", "60", "--ignore-eos",
                   "--stop", "zzzz", "--stop", stop)[0]
    assert cut["text"] == full["text"][:full["text"].find(stop)]
    assert cut["finish_reason"] == "stop" and cut["stop_reason"] == stop
    kept = gen_json(llmserve_bin, stories_dir, "--prompt", PROMPTS[0], "--max-tokens", "60", "--ignore-eos",
                    "--stop", stop, "--include-stop-str-in-output")[0]
    assert kept["text"] == full["text"][:full["text"].find(stop) + len(stop)]


def test_seeded_sampling_and_n(llmserve_bin, stories_dir):
    args = ["--prompt", PROMPTS[1], "--max-tokens", "30", "--temperature", "0.9", "--top-k", "50", "--seed", "7"]
    a = gen_json(llmserve_bin, stories_dir, *args)
    b = gen_json(llmserve_bin, stories_dir, *args)
    assert a == b
    n = gen_json(llmserve_bin, stories_dir, *args, "--n", "3", "--logprobs", "2")
    assert [x["completion_index"] for x in n] == [0, 1, 2]
    assert n[0]["token_ids"] == a[0]["token_ids"], "the first of n uses the request's seed"
    assert len({tuple(x["token_ids"]) for x in n}) > 1
    lp = n[0]["logprobs"][0]
    assert lp["token_id"] == n[0]["token_ids"][0] and len(lp["top"]) == 2 and lp["logprob"] <= 0


def test_max_tokens_zero_and_stop_token_ids(llmserve_bin, stories_dir):
    full = gen_json(llmserve_bin, stories_dir, "--prompt-ids", "1", "--max-tokens", "20", "--ignore-eos")[0]
    stop_id = full["token_ids"][5]
    cut = gen_json(llmserve_bin, stories_dir, "--prompt-ids", "1", "--max-tokens", "20",
                   "--stop-token-ids", str(stop_id))[0]
    assert cut["token_ids"] == full["token_ids"][:full["token_ids"].index(stop_id) + 1]
    assert cut["finish_reason"] == "stop" and cut["stop_reason"] == stop_id
    zero = gen_json(llmserve_bin, stories_dir, "--prompt-ids", "1", "--max-tokens", "0")[0]
    assert zero["token_ids"] == []


def test_generate_rejects_bad_jsonl(llmserve_bin, stories_dir, tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"prompt": "ok"}\n{"prompt": 3}\n')
    r = run(llmserve_bin, "generate", "--model", str(stories_dir), "--input", str(path), check=False)
    assert r.returncode == 1 and "bad.jsonl line 2" in r.stderr
    r = run(llmserve_bin, "generate", "--model", str(stories_dir), "--input", str(tmp_path / "none.jsonl"),
            check=False)
    assert r.returncode == 1 and "none.jsonl" in r.stderr


@pytest.fixture(scope="module")
def chat_model(testdata, tmp_path_factory):
    # The fixture architecture with the TinyLlama tokenizer's vocabulary; weights are random (--load-format dummy).
    out = tmp_path_factory.mktemp("chatmodel")
    config = json.loads(open(FIXTURE + "/config.json").read())
    config["vocab_size"] = 32000
    config["max_position_embeddings"] = 1024
    (out / "config.json").write_text(json.dumps(config))
    return out, testdata / "tokenizers" / "tinyllama-1.1b-chat-v1.0"


def test_chat_over_a_pipe_matches_template_and_generate(llmserve_bin, chat_model):
    jinja2 = pytest.importorskip("jinja2")
    transformers = pytest.importorskip("transformers")
    model, tok_dir = chat_model
    common = ["--model", str(model), "--load-format", "dummy", "--tokenizer", str(tok_dir), "--max-tokens", "12",
              "--ignore-eos", "--temperature", "0"]
    r = run(llmserve_bin, "chat", *common, stdin="Hello there!\nTell me more.\n")
    # Oracle for turn 1: jinja2 renders the template, transformers' AutoTokenizer (what vLLM tokenizes with) encodes,
    # `generate` runs the same ids.
    tok_config = json.loads((tok_dir / "tokenizer_config.json").read_text())
    source = (tok_dir / "chat_template.jinja").read_text() if (tok_dir / "chat_template.jinja").exists() \
        else tok_config["chat_template"]
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    text = env.from_string(source).render(messages=[{"role": "user", "content": "Hello there!"}],
                                          add_generation_prompt=True, bos_token="<s>", eos_token="</s>")
    ids = transformers.AutoTokenizer.from_pretrained(str(tok_dir)).encode(text, add_special_tokens=False)
    g = run(llmserve_bin, "generate", *common, "--prompt-ids", ",".join(map(str, ids)), "--output", "json")
    reply = json.loads(g.stdout)["text"]
    assert r.stdout.startswith(reply + "\n")
    assert len(r.stdout) > len(reply) + 1, "the second turn replied too"


def test_chat_requires_a_template(llmserve_bin, stories_dir):
    r = run(llmserve_bin, "chat", "--model", str(stories_dir), check=False, stdin="hi\n")
    assert r.returncode == 1 and "chat template" in r.stderr


def test_bench_throughput_runs(llmserve_bin):
    r = run(llmserve_bin, "bench", "throughput", "--load-format", "dummy", "--config", FIXTURE + "/config.json",
            "--num-prompts", "4", "--input-len", "16", "--output-len", "8", "--ignore-eos")
    assert "output tokens/s" in r.stdout


def test_bench_throughput_reports_its_workload(llmserve_bin):
    r = run(llmserve_bin, "bench", "throughput", "--load-format", "dummy", "--config", FIXTURE + "/config.json",
            "--dataset-name", "random", "--num-prompts", "3", "--max-num-seqs", "3", "--input-len", "8",
            "--output-len", "4", "--ignore-eos", "--num-threads", "1")
    assert "3 random prompts, input 8, output 4, max_num_seqs 3, 1 threads" in r.stdout
    assert "ignore_eos: true" in r.stdout
    bad = run(llmserve_bin, "bench", "throughput", "--load-format", "dummy", "--config", FIXTURE + "/config.json",
              "--dataset-name", "sharegpt", check=False)
    assert bad.returncode == 2 and "--dataset-name" in bad.stderr  # a usage error


def test_progress_bar_on_stderr_for_batches_only(llmserve_bin, stories_dir):
    many = run(llmserve_bin, "generate", "--model", str(stories_dir), "--prompt", PROMPTS[0], "--prompt", PROMPTS[1],
               "--prompt", PROMPTS[2], "--max-tokens", "5")
    assert "Processed prompts: 3/3" in many.stderr and "Processed prompts" not in many.stdout
    assert [l for l in many.stdout.splitlines() if l.startswith("===")] == [f"=== prompt {i} ===" for i in range(3)]
    one = run(llmserve_bin, "generate", "--model", str(stories_dir), "--prompt", PROMPTS[0], "--max-tokens", "5")
    assert "Processed prompts" not in one.stderr
    off = run(llmserve_bin, "generate", "--model", str(stories_dir), "--prompt", PROMPTS[0], "--prompt", PROMPTS[1],
              "--max-tokens", "5", "--no-progress")
    assert "Processed prompts" not in off.stderr


def test_logit_bias_flag(llmserve_bin, stories_dir):
    base = gen_json(llmserve_bin, stories_dir, "--prompt-ids", "1", "--max-tokens", "8", "--ignore-eos")[0]
    # A +100 bias makes a token the argmax at every step; -100 on the greedy first token changes the first pick.
    forced = gen_json(llmserve_bin, stories_dir, "--prompt-ids", "1", "--max-tokens", "8", "--ignore-eos",
                      "--logit-bias", '{"77": 100}')[0]
    assert forced["token_ids"] == [77] * 8
    banned = gen_json(llmserve_bin, stories_dir, "--prompt-ids", "1", "--max-tokens", "8", "--ignore-eos",
                      "--logit-bias", json.dumps({str(base["token_ids"][0]): -100}))[0]
    assert banned["token_ids"][0] != base["token_ids"][0]
    # A malformed flag is a usage error (2, before loading); values are checked against the model (1).
    for bad, message, code in [("[1]", "--logit-bias", 2), ('{"x": 1}', "--logit-bias", 2),
                               ('{"5": 101}', "logit_bias", 1), ('{"99999": 1}', "logit_bias", 1)]:
        r = run(llmserve_bin, "generate", "--model", str(stories_dir), "--prompt-ids", "1", "--logit-bias", bad,
                check=False)
        assert r.returncode == code and message in r.stderr, (bad, r.stderr)


def test_priority_in_jsonl(llmserve_bin, stories_dir, tmp_path):
    path = tmp_path / "prio.jsonl"
    path.write_text("".join(json.dumps({"prompt": p, "priority": k}) + "\n" for p, k in zip(PROMPTS, [3, 0, 1])))
    plain = tmp_path / "plain.jsonl"
    plain.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in PROMPTS))
    want = gen_json(llmserve_bin, stories_dir, "--input", str(plain), "--max-tokens", "10")
    got = gen_json(llmserve_bin, stories_dir, "--input", str(path), "--max-tokens", "10", "--scheduling-policy",
                   "priority", "--max-num-seqs", "1")
    assert [g["token_ids"] for g in got] == [w["token_ids"] for w in want]
    r = run(llmserve_bin, "generate", "--model", str(stories_dir), "--input", str(path), check=False)
    assert r.returncode == 1 and "priority scheduling is not enabled" in r.stderr


def test_async_scheduling_flag_gives_the_same_outputs(llmserve_bin, stories_dir, tmp_path):
    # On the CPU async scheduling is off unless asked; asked, it must not change a byte of the output (stop strings
    # and stop ids seen one step late, seeded n > 1 with penalties, logprobs).
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in PROMPTS))
    words = gen_json(llmserve_bin, stories_dir, "--prompt", PROMPTS[0], "--max-tokens", "30")[0]["text"].split()
    args = ["--input", str(path), "--max-tokens", "30", "--temperature", "0.8", "--seed", "3", "--n", "2",
            "--repetition-penalty", "1.2", "--logprobs", "1", "--stop", words[len(words) // 2]]
    default = gen_json(llmserve_bin, stories_dir, *args)
    assert default == gen_json(llmserve_bin, stories_dir, *args, "--no-async-scheduling")
    assert default == gen_json(llmserve_bin, stories_dir, *args, "--async-scheduling")
    r = run(llmserve_bin, "generate", "--model", str(stories_dir), "--async-scheduling=maybe", check=False)
    assert r.returncode != 0 and "--async-scheduling" in r.stderr


def test_output_forms_agree(llmserve_bin, stories_dir):
    # text (a header per sequence when there are several), json (one object per sequence) and jsonl (one per
    # prompt, its sequences under "outputs") carry the same sequences.
    args = ["--prompt", PROMPTS[0], "--prompt", PROMPTS[1], "--max-tokens", "6", "--n", "2", "--temperature", "0.8",
            "--seed", "5"]
    per_sequence = gen_json(llmserve_bin, stories_dir, *args)
    r = run(llmserve_bin, "generate", "--model", str(stories_dir), *args, "--output", "jsonl")
    per_prompt = [json.loads(line) for line in r.stdout.splitlines()]
    assert [p["index"] for p in per_prompt] == [0, 1] and [p["prompt"] for p in per_prompt] == PROMPTS[:2]
    flat = [dict(o, index=p["index"], prompt_token_ids=p["prompt_token_ids"]) for p in per_prompt for o in p["outputs"]]
    key = lambda d: (d["index"], d["completion_index"])
    assert sorted(flat, key=key) == sorted(per_sequence, key=key)
    text = run(llmserve_bin, "generate", "--model", str(stories_dir), *args).stdout
    headers = [l for l in text.splitlines() if l.startswith("===")]
    assert headers == [f"=== prompt {i}, output {k} ===" for i in range(2) for k in range(2)]
    for s in per_sequence:
        assert f"=== prompt {s['index']}, output {s['completion_index']} ===\n{s['text']}\n" in text
    one = run(llmserve_bin, "generate", "--model", str(stories_dir), "--prompt", PROMPTS[0], "--max-tokens", "6")
    assert "===" not in one.stdout  # a single sequence prints its text alone
    bad = run(llmserve_bin, "generate", "--model", str(stories_dir), "--output", "xml", check=False)
    assert bad.returncode == 2 and "--output 'xml': expected text, json or jsonl" in bad.stderr


def test_sampling_defaults_follow_vllm(llmserve_bin, stories_dir, tmp_path):
    # No --temperature: vLLM's 1.0 (said on stderr), so --n 3 gives different sequences; a generation_config.json
    # temperature wins over it, --generation-config vllm ignores the file, and --temperature over everything.
    base = ["generate", "--model", str(stories_dir), "--prompt", PROMPTS[0], "--max-tokens", "12", "--n", "3",
            "--seed", "1", "--output", "json"]
    r = run(llmserve_bin, *base)
    assert "sampling at temperature 1 (vLLM's default); --temperature 0 for greedy" in r.stderr
    assert len({tuple(json.loads(l)["token_ids"]) for l in r.stdout.splitlines()}) > 1
    model = tmp_path / "m"
    model.mkdir()
    for f in stories_dir.iterdir():
        (model / f.name).symlink_to(f)
    (model / "generation_config.json").write_text(json.dumps({"temperature": 0.0, "top_p": 0.5}))
    greedy = run(llmserve_bin, *base[:2], str(model), *base[3:])
    assert "sampling at temperature 0 (the model's generation_config.json)" in greedy.stderr
    ids = lambda r: {tuple(json.loads(l)["token_ids"]) for l in r.stdout.splitlines()}
    assert len(ids(greedy)) == 1  # temperature 0: three identical sequences
    assert run(llmserve_bin, *base[:2], str(model), *base[3:], "--generation-config", "vllm").stdout == r.stdout
    quiet = run(llmserve_bin, *base, "--temperature", "0")
    assert "sampling at temperature" not in quiet.stderr and len(ids(quiet)) == 1
