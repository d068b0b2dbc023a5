# llmserve.LLM against the C++ engine: the same greedy ids and logprobs as `llmserve generate --output json` and as
# the transformers fixtures, prompt shapes, per-prompt params, Ctrl-C, bad arguments naming the field, memory.
import json
import os
import pathlib
import resource
import subprocess

import pytest

import llmserve
from llmserve import LLM, SamplingParams

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "models"


@pytest.fixture(scope="module")
def llm():
    # A fixed KV cache: on CUDA the default sizing gives the first engine of the process the memory and the next none.
    return LLM(num_threads=2, kv_cache_tokens=16384)


def test_version_and_names():
    assert llmserve.__version__.count(".") == 2
    p = SamplingParams()
    assert (p.n, p.temperature, p.top_p, p.top_k, p.max_tokens, p.logprobs) == (1, 1.0, 1.0, 0, 16, None)


def test_greedy_matches_cli_json(llm, llmserve_bin):
    cli = subprocess.run([str(llmserve_bin), "generate", "--prompt", "Hello world", "--prompt-ids", "5,6,7",
                          "--max-tokens", "8", "--logprobs", "3", "--output", "json", "--num-threads", "2",
                          "--temperature", "0",
                          "--device", llm._engine.device],
                         capture_output=True, text=True, check=True)
    want = [json.loads(line) for line in cli.stdout.splitlines()]
    got = llm.generate(["Hello world", {"prompt_token_ids": [5, 6, 7]}],
                       SamplingParams(temperature=0, max_tokens=8, logprobs=3), use_tqdm=False)
    for w, g in zip(want, got):
        out = g.outputs[0]
        assert g.prompt_token_ids == w["prompt_token_ids"] and out.token_ids == w["token_ids"]
        assert out.finish_reason == w["finish_reason"] == "length"
        for step, lp in zip(w["logprobs"], out.logprobs):
            assert lp[step["token_id"]].logprob == pytest.approx(step["logprob"], abs=1e-6)
            assert lp[step["token_id"]].rank == step["rank"]
            for rank, (tid, value) in enumerate(step["top"], start=1):
                assert lp[tid].logprob == pytest.approx(value, abs=1e-6) and lp[tid].rank in (rank, step["rank"])
        assert out.cumulative_logprob == pytest.approx(sum(s["logprob"] for s in w["logprobs"]), abs=1e-4)
    assert got[0].prompt == "Hello world" and got[1].prompt is None


@pytest.mark.parametrize("name", ["llama_gqa_f32", "qwen2_bias_f32"])
def test_greedy_matches_transformers_fixture(name):
    expected = json.loads((FIXTURES / name / "expected.json").read_text())
    model = LLM(str(FIXTURES / name), num_threads=2, kv_cache_tokens=16384)
    cases = expected["cases"]
    params = SamplingParams(temperature=0, max_tokens=expected["num_steps"], logprobs=expected["top_k"],
                            ignore_eos=True)
    outs = model.generate([{"prompt_token_ids": c["prompt"]} for c in cases], params, use_tqdm=False)
    for case, out in zip(cases, outs):
        ids, lps = out.outputs[0].token_ids, out.outputs[0].logprobs
        for s, step in enumerate(case["steps"]):
            top = step["top_logprobs"]
            assert ids[s] == step["id"], f"{name} prompt {case['prompt']} step {s}"
            assert lps[s][ids[s]].logprob == pytest.approx(top[0], abs=2e-3)
            if len(top) > 1 and top[0] - top[1] < 2e-3:
                break  # a near tie: the continuation may legitimately differ from here


def test_tensor_parallel_size_shards_and_keeps_the_output():
    # vLLM's LLM(tensor_parallel_size=N): on the CPU the ranks are threads; the greedy ids stay TP = 1's.
    prompts = [{"prompt_token_ids": [5, 17, 99, 3]}, {"prompt_token_ids": [42, 7]}]
    params = SamplingParams(temperature=0, max_tokens=8, logprobs=2, ignore_eos=True)
    path = str(FIXTURES / "llama_gqa_f32")
    one = LLM(path, num_threads=2, kv_cache_tokens=4096, device="cpu").generate(prompts, params, use_tqdm=False)
    two = LLM(path, num_threads=2, kv_cache_tokens=4096, device="cpu",
              tensor_parallel_size=2).generate(prompts, params, use_tqdm=False)
    for a, b in zip(one, two):
        assert a.outputs[0].token_ids == b.outputs[0].token_ids
        for la, lb in zip(a.outputs[0].logprobs, b.outputs[0].logprobs):
            for tid, lp in la.items():
                if tid in lb:
                    assert lb[tid].logprob == pytest.approx(lp.logprob, abs=5e-5)
    with pytest.raises(ValueError, match=r"must be divisible by tensor parallel size \(3\)"):
        LLM(path, num_threads=2, device="cpu", tensor_parallel_size=3)
    with pytest.raises(ValueError, match="tensor_parallel_size"):
        LLM(path, tensor_parallel_size=0)


def test_prompt_shapes_and_per_prompt_params(llm):
    outs = llm.generate(["a", {"prompt": "b"}, {"prompt_token_ids": [1, 2]}],
                        [SamplingParams(max_tokens=1), SamplingParams(max_tokens=2), SamplingParams(max_tokens=3)],
                        use_tqdm=False)
    assert [len(o.outputs[0].token_ids) for o in outs] == [1, 2, 3]
    assert [o.prompt for o in outs] == ["a", "b", None] and all(o.finished for o in outs)
    single = llm.generate("a", SamplingParams(max_tokens=1), use_tqdm=False)
    assert len(single) == 1 and "RequestOutput(request_id=" in repr(single[0])


@pytest.mark.parametrize("kwargs, field", [({"top_p": 2.0}, "top_p"), ({"temperature": -1.0}, "temperature"),
                                           ({"n": 0}, "n"), ({"max_tokens": 0}, "max_tokens"),
                                           ({"logprobs": 100}, "logprobs"), ({"top_k": -5}, "top_k"),
                                           ({"presence_penalty": 3.0}, "presence_penalty")])
def test_bad_sampling_params_name_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        SamplingParams(**kwargs)


def test_bad_arguments_name_the_field(llm):
    with pytest.raises(TypeError, match="best_of"):
        SamplingParams(best_of=2)
    with pytest.raises(TypeError, match="swap_space"):
        LLM(swap_space=4)
    with pytest.raises(ValueError, match="dtype"):
        LLM(dtype="int3")
    with pytest.raises(ValueError, match="stop_token_ids"):
        llm.generate("x", SamplingParams(stop_token_ids=[10**6]), use_tqdm=False)
    with pytest.raises(ValueError, match="sampling_params"):
        llm.generate(["x", "y"], [SamplingParams()], use_tqdm=False)
    with pytest.raises(ValueError, match="prompt"):
        llm.generate({"prompt_token_ids": [1], "multi_modal_data": {}}, use_tqdm=False)
    # The failed calls left nothing behind.
    assert len(llm.generate("x", SamplingParams(max_tokens=1), use_tqdm=False)) == 1


def test_keyboard_interrupt_aborts_batch_and_llm_stays_usable(llm, monkeypatch):
    engine = llm._engine
    real_step, calls = engine.step_finished, []

    class Interrupting:  # a Ctrl-C arriving between two engine steps
        def __getattr__(self, name):
            return getattr(engine, name)

        def step_finished(self):
            calls.append(1)
            if len(calls) == 3:
                raise KeyboardInterrupt
            return real_step()

    monkeypatch.setattr(llm, "_engine", Interrupting())
    with pytest.raises(KeyboardInterrupt):
        llm.generate(["p"] * 8, SamplingParams(max_tokens=50, ignore_eos=True), use_tqdm=False)
    assert not engine.has_unfinished()
    monkeypatch.undo()
    outs = llm.generate(["p"] * 2, SamplingParams(temperature=0, max_tokens=4), use_tqdm=False)
    assert [len(o.outputs[0].token_ids) for o in outs] == [4, 4]


def test_progress_bar_on_stderr(llm, capsys):
    llm.generate(["a", "b"], SamplingParams(max_tokens=1))
    captured = capsys.readouterr()
    assert "Processed prompts" in captured.err and captured.out == ""


def test_tokenizer(llm):
    tok = llm.get_tokenizer()
    ids = tok.encode("héllo")
    assert tok.decode(ids, skip_special_tokens=True) == "héllo"
    template = ("{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
                "{% if add_generation_prompt %}A:{% endif %}")
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}], chat_template=template,
                                   add_generation_prompt=True, tokenize=False)
    assert text == "user: hi\nA:"
    with pytest.raises(ValueError, match="chat_template"):
        tok.apply_chat_template([{"role": "user", "content": "hi"}])


def test_ten_thousand_prompts_flat_memory(llm):
    params = SamplingParams(temperature=0, max_tokens=2)
    prompts = [f"p{i}" for i in range(10_000)]
    llm.generate(prompts, params, use_tqdm=False)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    outs = llm.generate(prompts, params, use_tqdm=False)
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert len(outs) == 10_000 and all(len(o.outputs[0].token_ids) == 2 for o in outs)
    assert after - before < 64 * 1024, f"peak RSS grew by {(after - before) // 1024} MiB on the second batch"


def test_console_entry_point_runs_the_cli():
    import sys

    from llmserve import _cli
    out = subprocess.run([sys.executable, "-c", "import sys; from llmserve._cli import main; sys.argv[0] = 'llmserve';"
                          " main()", "version"], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(pathlib.Path(llmserve.__file__).parent.parent)})
    assert llmserve.__version__ in out.stdout and _cli.binary_path().endswith("llmserve")


def test_real_ctrl_c_during_generate(tmp_path):
    """A real SIGINT mid-batch: generate raises KeyboardInterrupt, the engine is empty, the LLM generates again."""
    import sys
    script = tmp_path / "ctrl_c.py"
    script.write_text("""
import os, signal, threading, time
from llmserve import LLM, SamplingParams
# As at a terminal: a runner started in the background (`cmd &`) passes SIGINT on as ignored, and Python then keeps it so.
signal.signal(signal.SIGINT, signal.default_int_handler)
llm = LLM(num_threads=2, kv_cache_tokens=16384)
threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
start = time.monotonic()
try:
    llm.generate(["x"] * 512, SamplingParams(max_tokens=480, ignore_eos=True), use_tqdm=False)
    print("finished before the signal")
except KeyboardInterrupt:
    print("interrupted after %.2f s" % (time.monotonic() - start))
    assert not llm._engine.has_unfinished()
    out = llm.generate(["y"], SamplingParams(temperature=0, max_tokens=3), use_tqdm=False)
    print("usable", len(out[0].outputs[0].token_ids))
""")
    env = {**os.environ, "PYTHONPATH": str(pathlib.Path(llmserve.__file__).parent.parent)}
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=env)
    assert "usable 3" in run.stdout, run.stdout + run.stderr
    seconds = float(run.stdout.split("interrupted after ")[1].split()[0])
    assert seconds < 2.0  # the abort is prompt: one engine step after the signal


def test_structured_outputs(llm):
    """vLLM's StructuredOutputsParams through LLM.generate: regex outputs fullmatch (Python re), choices are one of the
    choices, JSON-schema outputs validate (jsonschema), n > 1 samples each constrained; a bad regex or two constraints
    are ValueErrors naming structured_outputs."""
    import re

    import jsonschema
    from llmserve import StructuredOutputsParams
    regex = r"[a-c]{2,4}-\d{1,2}"
    outs = llm.generate(["one", "two"], SamplingParams(max_tokens=60, seed=1, n=3,
                                                       structured_outputs=StructuredOutputsParams(regex=regex)),
                        use_tqdm=False)
    for o in outs:
        assert len(o.outputs) == 3
        for c in o.outputs:
            assert c.finish_reason == "stop" and re.fullmatch(regex, c.text), c.text
    [o] = llm.generate("pick", SamplingParams(max_tokens=20, seed=2, n=4, structured_outputs=StructuredOutputsParams(
        choice=["alpha", "beta"])), use_tqdm=False)
    assert all(c.text in ("alpha", "beta") for c in o.outputs)
    schema = {"type": "object", "properties": {"k": {"enum": ["x", "y"]}, "v": {"type": "integer", "maximum": 50}},
              "required": ["k", "v"], "additionalProperties": False}
    [o] = llm.generate("json", SamplingParams(max_tokens=80, seed=3, n=4, structured_outputs=StructuredOutputsParams(
        json=schema)), use_tqdm=False)
    done = [c for c in o.outputs if c.finish_reason == "stop"]
    assert done
    for c in done:
        jsonschema.validate(json.loads(c.text), schema)
    with pytest.raises(ValueError, match="structured_outputs"):
        StructuredOutputsParams(regex="a", choice=["b"])
    with pytest.raises(ValueError, match="structured_outputs"):
        llm.generate("x", SamplingParams(structured_outputs=StructuredOutputsParams(regex="(a")), use_tqdm=False)
