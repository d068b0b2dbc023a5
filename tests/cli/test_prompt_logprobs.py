# `llmserve generate --prompt-logprobs K --output json`: vLLM's shape (null for the first prompt token, then the
# token's logprob, rank and top-K), values checked against the HF-transformers fixture by teacher forcing
# (prompt + transformers' greedy continuation as the prompt); bad K values fail naming the field.
import json
from cli_helpers import run

import pytest

FIXTURE = "tests/fixtures/models/llama_gqa_f32"


def generate(llmserve_bin, ids, *args, check=True):
    return run(llmserve_bin, "generate", "--model", FIXTURE, "--prompt-ids", ",".join(map(str, ids)),
               "--output", "json", "--max-tokens", "2", *args, check=check)


@pytest.fixture(scope="module")
def case():
    expected = json.loads(open(FIXTURE + "/expected.json").read())
    c = expected["cases"][2]
    return c["prompt"], c["steps"]


def test_prompt_logprobs_json_matches_transformers(llmserve_bin, case):
    prompt, steps = case
    forced = prompt + [s["id"] for s in steps]
    out = json.loads(generate(llmserve_bin, forced, "--prompt-logprobs", "5").stdout)
    plp = out["prompt_logprobs"]
    assert len(plp) == len(forced) and plp[0] is None
    for q in range(1, len(forced)):
        entry = plp[q]
        assert entry["token_id"] == forced[q] and entry["rank"] >= 1 and entry["logprob"] <= 0
        assert len(entry["top"]) == 5
        assert [t[1] for t in entry["top"]] == sorted((t[1] for t in entry["top"]), reverse=True)
    for s, step in enumerate(steps):
        entry = plp[len(prompt) + s]
        # Greedy picked the token: its logprob is transformers' top-1 value.
        assert entry["logprob"] == pytest.approx(step["top_logprobs"][0], abs=1e-3)
        ours = {t[0]: t[1] for t in entry["top"]}
        shared = [(ours[i], lp) for i, lp in zip(step["top_ids"], step["top_logprobs"]) if i in ours]
        assert len(shared) >= 3
        for a, b in shared:
            assert a == pytest.approx(b, abs=1e-3)


def test_prompt_logprobs_zero_and_absent(llmserve_bin, case):
    prompt, _ = case
    zero = json.loads(generate(llmserve_bin, prompt, "--prompt-logprobs", "0").stdout)
    assert zero["prompt_logprobs"][0] is None
    assert all(e["top"] == [] for e in zero["prompt_logprobs"][1:])
    absent = json.loads(generate(llmserve_bin, prompt).stdout)
    assert "prompt_logprobs" not in absent
    assert absent["token_ids"] == zero["token_ids"], "asking for prompt logprobs does not change the output"


@pytest.mark.parametrize("k", ["-1", "21"])
def test_bad_prompt_logprobs_values(llmserve_bin, case, k):
    r = generate(llmserve_bin, case[0], "--prompt-logprobs", k, check=False)
    assert r.returncode == 1
    assert "prompt_logprobs" in r.stderr and k.lstrip("-") in r.stderr
