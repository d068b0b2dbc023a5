# --device / --dtype / --gpu-memory-utilization on the CPU-only CI machine: bad values are clear errors naming the
# flag, and `bench latency` (now driven through the engine's ModelRunner) prints each figure beside its floor.
import pytest
from cli_helpers import run

FIXTURE = "tests/fixtures/models/llama_gqa_f32"


@pytest.mark.parametrize("args, message", [
    (["--device", "tpu"], "--device"),
    (["--device", "cuda:x"], "--device"),
    (["--dtype", "float16"], "--dtype float16 needs --device cuda"),
    (["--dtype", "int8"], "--dtype"),
    (["--cuda-graph-mode", "piecewise"], "PIECEWISE graphs (between attention calls) are not built yet"),
    (["--compilation-config", '{"cudagraph_mode": "PIECEWISE"}'], "cudagraph_mode piecewise"),
    (["--cuda-graph-mode", "full", "--enforce-eager"], "--enforce-eager contradicts"),
    (["--cuda-graph-mode", "fast"], "--cuda-graph-mode"),
    # vLLM's flags: values that need a missing feature are refused, naming it.
    (["--tensor-parallel-size", "3"], "Total number of attention heads (4) must be divisible by tensor parallel size"),
    (["--pipeline-parallel-size", "0"], "--pipeline-parallel-size must be at least 1"),
    (["--kv-cache-dtype", "fp8"], "--kv-cache-dtype fp8: an FP8 KV cache is not built yet"),
    (["--kv-cache-dtype", "int4"], "--kv-cache-dtype 'int4': expected auto"),
    (["--quantization", "gguf"], "--quantization gguf: not supported (supported: fp8, compressed-tensors, gptq, awq)"),
    (["--enable-auto-tool-choice"], "--enable-auto-tool-choice: tool calls are parsed by `llmserve serve` only"),
    (["--tool-call-parser", "hermes"], "--tool-call-parser: tool calls are parsed by `llmserve serve` only"),
])
def test_generate_rejects_bad_device_flags(llmserve_bin, args, message):
    r = run(llmserve_bin, "generate", "--model", FIXTURE, "--prompt-ids", "1,2", "--max-tokens", "2", *args,
            check=False)
    assert r.returncode != 0
    assert message in r.stderr


def test_vllm_flags_that_change_nothing_are_accepted_and_logged(llmserve_bin):
    base = ["generate", "--model", FIXTURE, "--prompt-ids", "1,2", "--max-tokens", "2", "--temperature", "0"]
    plain = run(llmserve_bin, *base)
    r = run(llmserve_bin, *base, "--tensor-parallel-size", "1", "--pipeline-parallel-size", "1",
            "--data-parallel-size", "1", "--trust-remote-code", "--kv-cache-dtype", "auto")
    assert r.stdout == plain.stdout
    assert r.stderr.count("vLLM flags accepted, changing nothing here") == 1
    assert "vLLM flags accepted" not in plain.stderr


def test_bench_latency_cpu_prints_floors(llmserve_bin):
    r = run(llmserve_bin, "bench", "latency", "--load-format", "dummy", "--config", FIXTURE + "/config.json",
            "--batch-size", "3", "--input-len", "9", "--output-len", "4", "--num-iters", "1", "--num-threads", "1")
    lines = r.stdout.splitlines()
    assert any(l.startswith("prefill") and l.endswith("%") for l in lines), r.stdout
    assert any(l.startswith("decode") and l.endswith("%") for l in lines), r.stdout
    assert "floors:" in r.stdout


def test_bench_latency_chunks_the_prefill(llmserve_bin):
    # 3 x 9 prompt tokens in steps of 4: chunks that end mid-prompt and steps that finish one prompt and start the
    # next (the runner CHECKs every step's tokens and blocks against the requests' state).
    args = ["bench", "latency", "--load-format", "dummy", "--config", FIXTURE + "/config.json", "--batch-size", "3",
            "--input-len", "9", "--output-len", "3", "--num-iters", "1", "--num-threads", "1"]
    r = run(llmserve_bin, *args, "--max-num-batched-tokens", "4")
    assert "prefill: 7 steps of up to 4 tokens (--max-num-batched-tokens)" in r.stdout
    assert any(l.startswith("decode") and l.endswith("%") for l in r.stdout.splitlines()), r.stdout
    assert "prefill:" not in run(llmserve_bin, *args, "--max-num-batched-tokens", "27").stdout
    bad = run(llmserve_bin, *args, "--max-num-batched-tokens", "2", check=False)
    assert bad.returncode == 2 and "--max-num-batched-tokens must be at least --batch-size" in bad.stderr


@pytest.mark.parametrize("model, experts", [("qwen3_moe_f32", 4), ("deepseek_v3_f32", 8)])
def test_bench_latency_counts_the_experts_touched(llmserve_bin, model, experts):
    # An MoE decode floor counts the experts the steps read (moe_align's running count over the fastest decode
    # phase; one timed iteration, so the same prompts each run): exactly top-k (2) per MoE layer at batch 1; at
    # batch 3 between k and min(E, 3 k), the same count with the steps queued one ahead (async scheduling), and the
    # uniform-routing estimate printed beside it.
    args = ["bench", "latency", "--load-format", "dummy", "--config", f"tests/fixtures/models/{model}/config.json",
            "--input-len", "5", "--output-len", "4", "--num-iters", "1", "--num-threads", "1"]
    measured = f" of {experts} experts per MoE layer (measured"
    assert "2.00" + measured in run(llmserve_bin, *args, "--batch-size", "1").stdout

    def touched(out):
        line = next(l for l in out.splitlines() if measured in l)
        return float(line.split(measured)[0].rsplit(" ", 1)[1])

    sync = run(llmserve_bin, *args, "--batch-size", "3").stdout
    assert 2 <= touched(sync) <= min(experts, 6), sync
    assert "uniform independent routing would touch" in sync
    assert touched(run(llmserve_bin, *args, "--batch-size", "3", "--async-scheduling").stdout) == touched(sync)


def test_bench_latency_async_scheduling_is_a_flag(llmserve_bin):
    # CPU default off, as the engine; on, the decode steps go through execute_async / wait one step apart.
    args = ["bench", "latency", "--load-format", "dummy", "--config", FIXTURE + "/config.json", "--batch-size", "2",
            "--input-len", "5", "--output-len", "6", "--num-iters", "1", "--num-threads", "1"]
    assert "async scheduling: off" in run(llmserve_bin, *args).stdout
    on = run(llmserve_bin, *args, "--async-scheduling")
    assert "async scheduling: on" in on.stdout
    assert any(l.startswith("decode") and l.endswith("%") for l in on.stdout.splitlines()), on.stdout


def test_bench_latency_kernel_breakdown_needs_cuda(llmserve_bin):
    r = run(llmserve_bin, "bench", "latency", "--load-format", "dummy", "--config", FIXTURE + "/config.json",
            "--kernel-breakdown", "5", check=False)
    assert r.returncode == 2 and "--kernel-breakdown needs --device cuda" in r.stderr


def test_bench_latency_rejects_bad_device(llmserve_bin):
    r = run(llmserve_bin, "bench", "latency", "--load-format", "dummy", "--config", FIXTURE + "/config.json",
            "--device", "gpu", check=False)
    assert r.returncode == 2 and "--device 'gpu'" in r.stderr  # a usage error
