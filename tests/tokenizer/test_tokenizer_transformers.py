# Differential tests of `llmserve tokenize` (default pipeline) against transformers 5's AutoTokenizer, what vLLM
# tokenizes with: every shipped tokenizer directory (plus config variants of the Llama class), encode with and
# without special tokens, decode both ways, and apply_chat_template(tokenize=True) on the template tests' chats.
import json
import pathlib
import shutil
import subprocess
import warnings

import pytest

import hf_cases
from test_chat_templates import conversations

transformers = pytest.importorskip("transformers")  # scripts/setup pins it (pure Python, no torch)

# Variants of the shipped Llama directories: transformers' class rules beyond the shipped configs.
VARIANTS = {
    "tinyllama-legacy": ("tinyllama-1.1b-chat-v1.0", {"legacy": True}, None),
    "tinyllama-no-prefix-space": ("tinyllama-1.1b-chat-v1.0", {"add_prefix_space": False, "add_eos_token": True}, None),
    "tinyllama-eos-only": ("tinyllama-1.1b-chat-v1.0", {"add_bos_token": None, "add_eos_token": True}, None),
    # config.json's model_type phi3 makes AutoTokenizer ignore tokenizer_class (TokenizersBackend).
    "phi-3-with-model-type": ("phi-3-mini-4k-instruct", {}, {"model_type": "phi3"}),
}


def run_tokenize(llmserve_bin, path, requests, tmp_path, *flags):
    f = tmp_path / "in.jsonl"
    f.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in requests), encoding="utf-8")
    r = subprocess.run([str(llmserve_bin), "tokenize", "--tokenizer", str(path), "--input", str(f), *flags],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    outs = [json.loads(line) for line in r.stdout.split("\n") if line]
    assert len(outs) == len(requests)
    return outs


@pytest.fixture(scope="module")
def dirs(testdata, tmp_path_factory):
    out = {n: testdata / "tokenizers" / n for n in hf_cases.TOKENIZER_DIRS}
    tmp = tmp_path_factory.mktemp("variants")
    for name, (base, changes, model_config) in VARIANTS.items():
        d = tmp / name
        shutil.copytree(testdata / "tokenizers" / base, d)
        cfg = json.loads((d / "tokenizer_config.json").read_text(encoding="utf-8"))
        for k, v in changes.items():
            if v is None:
                cfg.pop(k, None)
            else:
                cfg[k] = v
        (d / "tokenizer_config.json").write_text(json.dumps(cfg), encoding="utf-8")
        if model_config is not None:
            (d / "config.json").write_text(json.dumps(model_config), encoding="utf-8")
        out[name] = d
    return out


def auto_tokenizer(path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        transformers.logging.set_verbosity_error()
        return transformers.AutoTokenizer.from_pretrained(str(path))


def strings_for(tok, testdata, n, seed):
    specials = sorted({str(t) for t in tok.added_tokens_decoder.values()})
    fixed = hf_cases.llamacpp_inputs(testdata) + hf_cases.vector_inputs(testdata)
    # Leading / trailing / repeated spaces and text right after a special token: where the pipelines part.
    spacey = [" Hello world", "Hello world", "  Hello  world  ", "\n Hello", " ", "  ", ""]
    spacey += [s + t for s in specials[:8] for t in ("You", " You", "  You", "\nYou", "▁You")]
    return fixed + spacey + hf_cases.random_strings(n, specials, seed=seed)


@pytest.mark.parametrize("name", hf_cases.TOKENIZER_DIRS + list(VARIANTS))
def test_encode_decode_match_transformers(name, dirs, llmserve_bin, testdata, tmp_path):
    tok = auto_tokenizer(dirs[name])
    n = 2000 if name in hf_cases.TOKENIZER_DIRS else 300
    texts = strings_for(tok, testdata, n, seed=len(name))
    requests = [{"text": t, "add_special_tokens": s} for t in texts for s in (True, False)]
    vocab = len(tok)
    special_ids = sorted(tok.all_special_ids)
    seqs = hf_cases.random_id_sequences(300, vocab, special_ids, seed=11)
    seqs = [[i for i in s if 0 <= i < vocab] for s in seqs] + [tok.encode(t) for t in texts[:300]]
    requests += [{"ids": s, "skip_special_tokens": skip} for s in seqs for skip in (False, True)]
    outs = run_tokenize(llmserve_bin, dirs[name], requests, tmp_path)
    bad = []
    for req, out in zip(requests, outs):
        if "text" in req:
            expected = tok.encode(req["text"], add_special_tokens=req["add_special_tokens"])
            got = out.get("ids")
        else:
            expected = tok.decode(req["ids"], skip_special_tokens=req["skip_special_tokens"])
            got = out.get("text")
        if got != expected:
            bad.append((req, got, expected))
    assert not bad, f"{len(bad)} of {len(requests)} differ; first: {bad[:3]}"


@pytest.mark.parametrize("name", hf_cases.TOKENIZER_DIRS + ["phi-3-with-model-type"])
def test_chat_template_ids_match_transformers(name, dirs, llmserve_bin, tmp_path):
    tok = auto_tokenizer(dirs[name])
    if tok.chat_template is None:
        pytest.skip("no chat template")
    convs, expected = [], []
    for conv in conversations().values():
        kwargs = dict(conv.get("kwargs", {}))
        tools = None if conv.get("omit_tools") else conv.get("tools")
        try:
            ids = tok.apply_chat_template(conv["messages"], tools=tools, tokenize=True,
                                          add_generation_prompt=conv["add_generation_prompt"], **kwargs)
        except Exception:  # the template raises: llmserve must report a line error instead
            ids = None
        if ids is not None and not isinstance(ids, list):
            ids = list(ids["input_ids"])
        line = {"messages": conv["messages"], "add_generation_prompt": conv["add_generation_prompt"]}
        if tools is not None:
            line["tools"] = tools
        if kwargs:
            line["chat_template_kwargs"] = kwargs
        convs.append(line)
        expected.append(ids)
    outs = run_tokenize(llmserve_bin, dirs[name], convs, tmp_path)
    for line, out, ids in zip(convs, outs, expected):
        if ids is None:
            assert set(out) == {"error"}, (line, out)
        else:
            assert out.get("ids") == ids, (line, out.get("text"))


def test_tokenizers_pipeline_flag_keeps_the_library_behaviour(testdata, llmserve_bin, tmp_path):
    from tokenizers import Tokenizer
    d = testdata / "tokenizers" / "phi-3-mini-4k-instruct"
    hf = Tokenizer.from_file(str(d / "tokenizer.json"))
    texts = [" Hello world", "<|system|>You are terse.<|end|>"]
    reqs = [{"text": t, "add_special_tokens": False} for t in texts]
    lib = run_tokenize(llmserve_bin, d, reqs, tmp_path, "--tokenizer-pipeline", "tokenizers")
    assert [o["ids"] for o in lib] == [hf.encode(t, add_special_tokens=False).ids for t in texts]
    assert lib[0]["ids"] == [29871, 15043, 3186]  # the example: `tokenizers` keeps the lone "▁"
    default = run_tokenize(llmserve_bin, d, reqs, tmp_path)
    assert default[0]["ids"] == [15043, 3186] and default[1]["ids"][1] == 3492  # "You", not "▁You" (887)
    r = subprocess.run([str(llmserve_bin), "tokenize", "--tokenizer", str(d), "--tokenizer-pipeline", "slow"],
                       input="", capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--tokenizer-pipeline 'slow'" in r.stderr
