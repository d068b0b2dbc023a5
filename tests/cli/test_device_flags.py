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
])
def test_generate_rejects_bad_device_flags(llmserve_bin, args, message):
    r = run(llmserve_bin, "generate", "--model", FIXTURE, "--prompt-ids", "1,2", "--max-tokens", "2", *args,
            check=False)
    assert r.returncode != 0
    assert message in r.stderr


def test_bench_latency_cpu_prints_floors(llmserve_bin):
    r = run(llmserve_bin, "bench", "latency", "--load-format", "dummy", "--config", FIXTURE + "/config.json",
            "--batch-size", "3", "--input-len", "9", "--output-len", "4", "--num-iters", "1", "--num-threads", "1")
    lines = r.stdout.splitlines()
    assert any(l.startswith("prefill") and l.endswith("%") for l in lines), r.stdout
    assert any(l.startswith("decode") and l.endswith("%") for l in lines), r.stdout
    assert "floors:" in r.stdout


def test_bench_latency_rejects_bad_device(llmserve_bin):
    r = run(llmserve_bin, "bench", "latency", "--load-format", "dummy", "--config", FIXTURE + "/config.json",
            "--device", "gpu", check=False)
    assert r.returncode == 1 and "--device" in r.stderr
