# The command line is checked before anything is printed, listened on or loaded: a wrong flag value is a usage
# error (exit 2, "error: " naming the flag and its range or choices); a model that cannot be loaded is a failed run
# (exit 1), and `serve` reports it before "listening".
import subprocess

import pytest

FIXTURE = "tests/fixtures/models/llama_gqa_f32"


def run(llmserve_bin, *args):
    return subprocess.run([str(llmserve_bin), *args], capture_output=True, text=True, timeout=60)


ENGINE_CASES = [
    (["--max-model-len", "-5"], "--max-model-len must be positive"),
    (["--max-num-seqs", "0"], "--max-num-seqs must be at least 1"),
    (["--max-num-batched-tokens", "0"], "--max-num-batched-tokens must be at least 1"),
    (["--block-size", "0"], "--block-size must be in [1, 256]"),
    (["--gpu-memory-utilization", "5"], "--gpu-memory-utilization must be in (0, 1]"),
    (["--gpu-memory-utilization", "0"], "--gpu-memory-utilization must be in (0, 1]"),
    (["--num-threads", "-1"], "--num-threads must be at least 1"),
    (["--dtype", "foo"], "--dtype 'foo': expected auto, float32, bfloat16 or float16"),
    (["--device", "tpu"], "--device 'tpu': expected cpu, cuda or cuda:N"),
    (["--load-format", "pickle"], "--load-format 'pickle': expected auto, safetensors or dummy"),
    (["--tokenizer-pipeline", "slow"], "--tokenizer-pipeline 'slow': expected transformers or tokenizers"),
    (["--scheduling-policy", "lifo"], "--scheduling-policy 'lifo': expected fcfs or priority"),
]

SERVE_CASES = ENGINE_CASES + [
    (["--port", "99999"], "--port must be in [0, 65535]"),
    (["--http-threads", "0"], "--http-threads must be in [1, 64]"),
    (["--max-in-flight-requests", "0"], "--max-in-flight-requests must be at least 1"),
    (["--max-request-body-bytes", "0"], "--max-request-body-bytes must be at least 1"),
    (["--request-timeout", "-1"], "--request-timeout must be a positive number of seconds"),
    (["--keep-alive-timeout", "0"], "--keep-alive-timeout must be a positive number of seconds"),
    (["--shutdown-timeout", "-1"], "--shutdown-timeout must be a number of seconds >= 0"),
    (["--log-level", "verbose"], "--log-level 'verbose': expected debug, info, warning or error"),
    (["a", "b"], "serve takes one MODEL"),
    (["--model", FIXTURE, FIXTURE], "give the model as MODEL or --model, not both"),
]


@pytest.mark.parametrize("args, message", SERVE_CASES)
def test_serve_usage_errors_come_before_anything_else(llmserve_bin, args, message):
    r = run(llmserve_bin, "serve", "--port", "0", *args)
    assert r.returncode == 2, r.stderr
    assert r.stderr == f"error: {message}\n" or r.stderr.startswith(f"error: {message}"), r.stderr
    assert r.stdout == "" and "listening" not in r.stderr and "built-in default" not in r.stderr


@pytest.mark.parametrize("args, message", ENGINE_CASES)
def test_generate_usage_errors(llmserve_bin, args, message):
    r = run(llmserve_bin, "generate", "--model", FIXTURE, "--prompt-ids", "1,2", "--max-tokens", "2", *args)
    assert r.returncode == 2 and r.stderr.startswith(f"error: {message}"), r.stderr
    assert r.stdout == ""


def test_serve_reports_a_missing_model_before_listening(llmserve_bin, tmp_path):
    r = run(llmserve_bin, "serve", "--port", "0", str(tmp_path / "nope"))
    assert r.returncode == 1 and "nope: no such file or folder" in r.stderr and "listening" not in r.stderr, r.stderr
    (tmp_path / "empty").mkdir()
    r = run(llmserve_bin, "serve", "--port", "0", str(tmp_path / "empty"))
    assert r.returncode == 1 and "config.json" in r.stderr and "listening" not in r.stderr, r.stderr
    # A model id that is not in the cache (tests run with HF_HUB_OFFLINE=1: no test reaches the real Hub).
    r = run(llmserve_bin, "serve", "--port", "0", "Qwen/Qwen2.5-0.5B-Instruct")
    assert r.returncode == 1 and "HF_HUB_OFFLINE forbids downloading it" in r.stderr and "listening" not in r.stderr


def test_bench_commands_take_the_model_as_an_argument(llmserve_bin):
    for command in (["bench", "latency"], ["bench", "throughput"]):
        r = run(llmserve_bin, *command, FIXTURE, "--input-len", "4", "--output-len", "2", "--num-threads", "1",
                *(["--num-iters", "1"] if command[1] == "latency" else ["--num-prompts", "2"]))
        assert r.returncode == 0, r.stderr
        both = run(llmserve_bin, *command, FIXTURE, "--model", FIXTURE)
        assert both.returncode == 2 and "give the model as MODEL or --model, not both" in both.stderr


def test_generate_and_chat_take_the_model_as_an_argument(llmserve_bin):
    r = run(llmserve_bin, "generate", FIXTURE, "--prompt-ids", "1,2", "--max-tokens", "3", "--temperature", "0")
    flag = run(llmserve_bin, "generate", "--model", FIXTURE, "--prompt-ids", "1,2", "--max-tokens", "3",
               "--temperature", "0")
    assert r.returncode == 0 and r.stdout == flag.stdout
    for command in ("generate", "chat"):
        both = run(llmserve_bin, command, FIXTURE, "--model", FIXTURE)
        assert both.returncode == 2 and "give the model as MODEL or --model, not both" in both.stderr
        two = run(llmserve_bin, command, FIXTURE, FIXTURE)
        assert two.returncode == 2 and f"{command} takes one MODEL" in two.stderr
