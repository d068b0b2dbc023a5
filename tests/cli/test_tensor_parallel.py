# --tensor-parallel-size / -tp through the CLI on the CPU (ranks are threads): generate's greedy ids and logprobs
# under TP = 2 and 4 equal TP = 1's (ids exactly here: a tiny f32 model far from ties; logprobs within the fixture
# tolerance), the divisibility errors are vLLM's, and the multi-node flags refuse the CPU with a clear error.
import json

import pytest
from cli_helpers import run

FIXTURE = "tests/fixtures/models/llama_gqa_f32"
BASE = ["generate", "--model", FIXTURE, "--prompt-ids", "1,2,3,4,5", "--max-tokens", "8", "--temperature", "0",
        "--logprobs", "3", "--output", "json"]


def outputs(llmserve_bin, *extra):
    r = run(llmserve_bin, *BASE, *extra)
    return [json.loads(line) for line in r.stdout.splitlines()]  # one object per completion


@pytest.mark.parametrize("tp", [["--tensor-parallel-size", "2"], ["-tp", "4"], ["-tp=2"]])
def test_generate_under_tensor_parallel_equals_one_rank(llmserve_bin, tp):
    want, got = outputs(llmserve_bin), outputs(llmserve_bin, *tp)
    assert [o["token_ids"] for o in got] == [o["token_ids"] for o in want]
    for a, b in zip(want, got):
        for la, lb in zip(a["logprobs"], b["logprobs"]):
            assert abs(la["logprob"] - lb["logprob"]) < 5e-5


@pytest.mark.parametrize("args, message", [
    (["--tensor-parallel-size", "3"], "Total number of attention heads (4) must be divisible by tensor parallel size (3)."),
    (["-tp", "0"], "--tensor-parallel-size must be at least 1"),
    (["-tp", "2", "--nnodes", "2"], "--nnodes 2: several nodes run tensor parallelism over NCCL between CUDA devices"),
    (["--nnodes", "2", "--node-rank", "2"], "--node-rank 2 outside [0, --nnodes 2)"),
    (["--master-port", "70000"], "--master-port must be in [0, 65535]"),
])
def test_parallel_flag_errors(llmserve_bin, args, message):
    r = run(llmserve_bin, *BASE, *args, check=False)
    assert r.returncode != 0
    assert message in r.stderr, r.stderr


def test_bench_latency_runs_tensor_parallel(llmserve_bin):
    r = run(llmserve_bin, "bench", "latency", "--load-format", "dummy", "--config", FIXTURE + "/config.json", "-tp",
            "2", "--batch-size", "2", "--input-len", "9", "--output-len", "3", "--num-iters", "1", "--num-threads", "1")
    assert "tensor parallel: 2 ranks" in r.stdout
    assert any(l.startswith("decode") and l.endswith("%") for l in r.stdout.splitlines()), r.stdout
