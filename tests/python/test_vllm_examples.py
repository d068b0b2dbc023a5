# vLLM's offline examples (examples/offline_inference: basic, chat, n > 1, logprobs, prompt_logprobs, seeded
# sampling, token-id prompts) as vLLM writes them, with only the import line changed (and the model: a local
# fixture, as no hub download happens here). Each checks what the example prints is well-formed.
import json
import pathlib

import pytest

from llmserve import LLM, SamplingParams  # was: from vllm import LLM, SamplingParams
from llmserve import _C

ROOT = pathlib.Path(__file__).resolve().parents[2]
MODEL = str(ROOT / "tests" / "fixtures" / "models" / "llama_gqa_f32")
CHAT_TEMPLATE = ("{% for message in messages %}<|begin_of_text|>{{ message['role'] }}\n{{ message['content'] }}"
                 "<|end_of_text|>\n{% endfor %}{% if add_generation_prompt %}<|begin_of_text|>assistant\n{% endif %}")


@pytest.fixture(scope="module")
def chat_model_dir(tmp_path_factory):
    """The built-in default's byte-level tokenizer with a chat template in tokenizer_config.json."""
    d = tmp_path_factory.mktemp("chat_tok")
    (d / "tokenizer.json").write_text(_C.builtin_default_tokenizer_json())
    (d / "tokenizer_config.json").write_text(json.dumps({"chat_template": CHAT_TEMPLATE}))
    return str(d)


def test_basic(capsys):
    prompts = ["Hello, my name is", "The president of the United States is", "The capital of France is",
               "The future of AI is"]
    sampling_params = SamplingParams(temperature=0.8, top_p=0.95)
    llm = LLM()  # was: LLM(model="facebook/opt-125m")
    outputs = llm.generate(prompts, sampling_params)
    print("\nGenerated Outputs:\n" + "-" * 60)
    for output in outputs:
        prompt = output.prompt
        generated_text = output.outputs[0].text
        print(f"Prompt:    {prompt!r}")
        print(f"Output:    {generated_text!r}")
        print("-" * 60)
    printed = capsys.readouterr().out
    assert printed.count("Prompt:") == 4 and all(repr(p) in printed for p in prompts)
    assert all(o.finished and o.outputs[0].finish_reason in ("length", "stop") for o in outputs)


def test_chat(chat_model_dir):
    llm = LLM(tokenizer=chat_model_dir)
    sampling_params = SamplingParams(temperature=0.5, max_tokens=8)
    conversation = [
        {"role": "system", "content": "You are a helpful assistant"},
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": "Hello! How can I assist you today?"},
        {"role": "user", "content": "Write an essay about the importance of higher education."},
    ]
    outputs = llm.chat(conversation, sampling_params, use_tqdm=False)
    assert outputs[0].prompt.endswith("<|begin_of_text|>assistant\n") and outputs[0].prompt.count("system") == 1
    conversations = [conversation for _ in range(10)]
    outputs = llm.chat(conversations, sampling_params, use_tqdm=True)
    assert len(outputs) == 10
    outputs = llm.chat(conversation, sampling_params, use_tqdm=False, chat_template="{{ messages[-1]['content'] }}")
    assert outputs[0].prompt == conversation[-1]["content"]
    tok = llm.get_tokenizer()
    assert outputs[0].prompt_token_ids == tok.encode(conversation[-1]["content"], add_special_tokens=False)


def test_n_greater_than_one():
    llm = LLM(MODEL)
    outputs = llm.generate({"prompt_token_ids": [1, 2, 3]}, SamplingParams(n=3, temperature=1.0, seed=7,
                                                                           max_tokens=6))
    assert [c.index for c in outputs[0].outputs] == [0, 1, 2]
    assert len({tuple(c.token_ids) for c in outputs[0].outputs}) > 1


def test_logprobs_and_prompt_logprobs():
    llm = LLM(MODEL)
    params = SamplingParams(temperature=0, max_tokens=4, logprobs=5, prompt_logprobs=2)
    (output,) = llm.generate({"prompt_token_ids": [251, 12, 40]}, params)
    assert output.prompt_logprobs[0] is None and len(output.prompt_logprobs) == 3
    for pos, token in ((1, 12), (2, 40)):
        entry = output.prompt_logprobs[pos]
        assert token in entry and entry[token].logprob <= 0 and entry[token].rank >= 1
    completion = output.outputs[0]
    for token, lp in zip(completion.token_ids, completion.logprobs):
        assert lp[token].rank == 1 and 5 <= len(lp) <= 6
        assert sorted(v.rank for v in lp.values())[:5] == [1, 2, 3, 4, 5]
    assert completion.cumulative_logprob == pytest.approx(
        sum(lp[t].logprob for t, lp in zip(completion.token_ids, completion.logprobs)))


def test_seeded_sampling():
    llm = LLM(MODEL)
    prompts = [{"prompt_token_ids": [5, 6, 7]}] * 2
    a = llm.generate(prompts, [SamplingParams(temperature=1.0, seed=42, max_tokens=8)] * 2)
    b = llm.generate(prompts, [SamplingParams(temperature=1.0, seed=42, max_tokens=8),
                               SamplingParams(temperature=1.0, seed=43, max_tokens=8)])
    assert a[0].outputs[0].token_ids == a[1].outputs[0].token_ids == b[0].outputs[0].token_ids
    assert b[1].outputs[0].token_ids != b[0].outputs[0].token_ids


def test_token_id_prompts():
    llm = LLM(MODEL)
    outputs = llm.generate([{"prompt_token_ids": [0]}, {"prompt_token_ids": [1, 2, 3, 4]}],
                           SamplingParams(temperature=0, max_tokens=3))
    assert [o.prompt_token_ids for o in outputs] == [[0], [1, 2, 3, 4]]
    assert all(o.prompt is None and len(o.outputs[0].token_ids) == 3 for o in outputs)
