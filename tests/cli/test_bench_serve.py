# `llmserve bench serve` end to end against the deterministic fixture server (openai_fixture_server.py): the
# printed summary and the saved JSON must agree with the fixture's schedule (TTFT ~ first delay, TPOT and ITL ~
# the token interval), with numpy recomputing every statistic from the per-request lists, and with HF
# `tokenizers` counting the prompts; error paths (refused connection, HTTP 500, dropped streams) are reported,
# never fatal.
import json
import pathlib
import re
import socket

import numpy as np
import pytest
from cli_helpers import run
from openai_fixture_server import FixtureServer

FIRST_DELAY = 0.05
INTERVAL = 0.01


def bench(llmserve_bin, tmp_path, server_url, *extra, check=True):
    out = tmp_path / "result.json"
    r = run(llmserve_bin, "bench", "serve", "--base-url", server_url, "--dataset-name", "random",
            "--save-result", str(out), *extra, check=check)
    return r, (json.loads(out.read_text()) if out.exists() else None)


def summary_value(stdout, label):
    m = re.search(re.escape(label) + r"\s+([0-9.]+)", stdout)
    assert m, f"{label!r} missing from:\n{stdout}"
    return float(m.group(1))


def check_statistics(res, percentiles=(99,)):
    """Recompute every reported statistic from the per-request lists (vLLM's definitions, numpy's maths)."""
    ok = [i for i, e in enumerate(res["errors"]) if not e]
    ttfts = [res["ttfts"][i] for i in ok]
    e2els = [res["latencies"][i] for i in ok]
    itls = [x for i in ok for x in res["itls"][i]]
    tpots = [(res["latencies"][i] - res["ttfts"][i]) / (res["output_lens"][i] - 1) for i in ok
             if res["output_lens"][i] > 1]
    for key, values in (("ttft", ttfts), ("tpot", tpots), ("itl", itls), ("e2el", e2els)):
        values = values or [0.0]
        assert res[f"mean_{key}_ms"] == pytest.approx(np.mean(values) * 1000, rel=1e-9, abs=1e-9)
        assert res[f"median_{key}_ms"] == pytest.approx(np.median(values) * 1000, rel=1e-9, abs=1e-9)
        assert res[f"std_{key}_ms"] == pytest.approx(np.std(values) * 1000, rel=1e-6, abs=1e-9)
        for p in percentiles:
            assert res[f"p{p}_{key}_ms"] == pytest.approx(np.percentile(values, p) * 1000, rel=1e-9, abs=1e-9)
    assert res["completed"] == len(ok)
    assert res["failed"] == len(res["errors"]) - len(ok)
    assert res["total_output_tokens"] == sum(res["output_lens"])
    assert res["total_input_tokens"] == sum(res["input_lens"][i] for i in ok)
    d = res["duration"]
    assert res["request_throughput"] == pytest.approx(len(ok) / d, rel=1e-9)
    assert res["output_throughput"] == pytest.approx(res["total_output_tokens"] / d, rel=1e-9)
    assert res["total_token_throughput"] == pytest.approx(
        (res["total_input_tokens"] + res["total_output_tokens"]) / d, rel=1e-9)


def test_metrics_match_the_fixture_schedule(llmserve_bin, tmp_path):
    n, i_len, o_len, conc = 12, 32, 20, 4
    with FixtureServer(first_delay_s=FIRST_DELAY, token_interval_s=INTERVAL) as srv:
        r, res = bench(llmserve_bin, tmp_path, srv.base_url, "--random-input-len", str(i_len),
                       "--random-output-len", str(o_len), "--num-prompts", str(n), "--request-rate", "inf",
                       "--max-concurrency", str(conc), "--random-vocab-size", "100", "--ignore-eos", "--seed", "3")
        bodies = list(srv.bodies)
        max_active = srv.max_active
    assert "Serving Benchmark Result" in r.stdout
    assert summary_value(r.stdout, "Successful requests:") == n
    assert summary_value(r.stdout, "Failed requests:") == 0
    assert summary_value(r.stdout, "Total generated tokens:") == n * o_len
    # The model came from GET /v1/models; the initial test request plus n benchmark requests reached the server.
    assert len(bodies) == n + 1
    for b in bodies:
        assert b["model"] == "fixture-model" and b["stream"] is True and b["ignore_eos"] is True
        assert b["stream_options"] == {"include_usage": True} and b["max_tokens"] == o_len
        assert len(b["prompt"]) == i_len and all(0 <= t < 100 for t in b["prompt"])
    assert max_active <= conc
    assert res["completed"] == n and res["failed"] == 0 and res["errors"] == [""] * n
    assert res["output_lens"] == [o_len] * n and res["input_lens"] == [i_len] * n
    assert res["max_concurrency"] == conc and res["request_rate"] == "inf" and res["model_id"] == "fixture-model"
    assert 1 <= res["max_concurrent_requests"] <= conc
    check_statistics(res)
    # Timing against the fixture's schedule. Lower bounds are hard (the fixture never sends early); upper
    # bounds leave room for a loaded 2-core CI machine.
    for ttft, itl, lat in zip(res["ttfts"], res["itls"], res["latencies"]):
        assert FIRST_DELAY <= ttft < FIRST_DELAY + 0.2
        assert len(itl) == o_len - 1
        assert lat >= FIRST_DELAY + (o_len - 1) * INTERVAL - 1e-3
    assert res["mean_tpot_ms"] == pytest.approx(INTERVAL * 1000, abs=3.0)
    assert res["median_itl_ms"] == pytest.approx(INTERVAL * 1000, abs=3.0)
    assert res["mean_ttft_ms"] == pytest.approx(FIRST_DELAY * 1000, abs=40.0)
    # n / conc waves of one full request each.
    assert res["duration"] >= (n // conc) * (FIRST_DELAY + (o_len - 1) * INTERVAL)
    # The printed block carries the saved figures.
    for label, key in (("Mean TTFT (ms):", "mean_ttft_ms"), ("Median TPOT (ms):", "median_tpot_ms"),
                       ("P99 ITL (ms):", "p99_itl_ms"), ("Mean E2EL (ms):", "mean_e2el_ms"),
                       ("Request throughput (req/s):", "request_throughput"),
                       ("Output token throughput (tok/s):", "output_throughput"),
                       ("Total Token throughput (tok/s):", "total_token_throughput")):
        assert summary_value(r.stdout, label) == pytest.approx(res[key], abs=0.006)


def test_request_rate_spreads_the_arrivals(llmserve_bin, tmp_path):
    n, rate = 10, 20.0
    with FixtureServer(first_delay_s=0.01, token_interval_s=0.002) as srv:
        r, res = bench(llmserve_bin, tmp_path, srv.base_url, "--random-input-len", "4", "--random-output-len", "3",
                       "--num-prompts", str(n), "--request-rate", str(rate), "--burstiness", "0.5")
    assert res["completed"] == n and res["request_rate"] == rate and res["burstiness"] == 0.5
    starts = res["start_times"]
    assert starts == sorted(starts)
    # vLLM scales the gamma gaps so the last arrival is at n / rate.
    assert starts[-1] == pytest.approx(n / rate, abs=0.05)
    assert "Request rate configured (RPS):" in r.stdout and "Gamma distribution" in r.stdout


def test_text_prompts_have_exactly_the_input_length(llmserve_bin, tmp_path, testdata):
    tokenizers = pytest.importorskip("tokenizers")
    tok_dir = testdata / "tokenizers" / "tinyllama-1.1b-chat-v1.0"
    hf = tokenizers.Tokenizer.from_file(str(tok_dir / "tokenizer.json"))
    for endpoint in ("/v1/completions", "/v1/chat/completions"):
        with FixtureServer(first_delay_s=0.01, token_interval_s=0.002, tokenizer=hf) as srv:
            _, res = bench(llmserve_bin, tmp_path, srv.base_url, "--endpoint", endpoint, "--tokenizer", str(tok_dir),
                           "--random-input-len", "48", "--random-output-len", "5", "--num-prompts", "8",
                           "--max-concurrency", "2")
            bodies = list(srv.bodies)
        assert res["completed"] == 8, res["errors"]
        assert res["input_lens"] == [48] * 8  # the fixture counted them with HF tokenizers
        assert res["generated_texts"] == ["".join(f" t{i}" for i in range(5))] * 8
        assert res["backend"] == ("openai-chat" if endpoint.endswith("chat/completions") else "openai")
        for b in bodies:
            text = b["messages"][0]["content"] if "messages" in b else b["prompt"]
            assert isinstance(text, str) and len(hf.encode(text, add_special_tokens=False).ids) == 48
        check_statistics(res)


def test_without_usage_output_tokens_are_counted_from_chunks(llmserve_bin, tmp_path):
    with FixtureServer(first_delay_s=0.01, token_interval_s=0.002, include_usage=False) as srv:
        _, res = bench(llmserve_bin, tmp_path, srv.base_url, "--random-input-len", "6", "--random-output-len", "7",
                       "--num-prompts", "5")
    assert res["output_lens"] == [7] * 5
    assert res["input_lens"] == [6] * 5  # the dataset's lengths when the server reports none
    check_statistics(res)


def test_http_500_for_some_requests_is_reported_not_fatal(llmserve_bin, tmp_path):
    n = 9
    with FixtureServer(first_delay_s=0.01, token_interval_s=0.002, fail_every=3) as srv:
        r, res = bench(llmserve_bin, tmp_path, srv.base_url, "--random-input-len", "4", "--random-output-len", "4",
                       "--num-prompts", str(n), "--max-concurrency", "1")
    # Server request 1 is the initial test; benchmark requests are server requests 2..10, of which 3, 6, 9 fail.
    assert res["failed"] == 3 and res["completed"] == 6
    failed = [i for i, e in enumerate(res["errors"]) if e]
    assert failed == [1, 4, 7]  # sequential (concurrency 1): dataset order is server order
    for i in failed:
        assert res["errors"][i].startswith("HTTP 500") and "injected failure" in res["errors"][i]
        assert res["output_lens"][i] == 0
    assert summary_value(r.stdout, "Failed requests:") == 3
    assert "Error 0 (request 1): HTTP 500" in r.stdout
    check_statistics(res)


def test_dropped_streams_are_failures(llmserve_bin, tmp_path):
    n = 8
    with FixtureServer(first_delay_s=0.01, token_interval_s=0.002, drop_every=4) as srv:
        _, res = bench(llmserve_bin, tmp_path, srv.base_url, "--random-input-len", "4", "--random-output-len", "6",
                       "--num-prompts", str(n), "--max-concurrency", "2")
    assert res["completed"] + res["failed"] == n
    assert res["failed"] == 2  # server requests 4 and 8
    for e in res["errors"]:
        assert e == "" or "POST" in e
    check_statistics(res)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_server_gives_a_clear_error(llmserve_bin, tmp_path):
    url = f"http://127.0.0.1:{free_port()}"
    for extra in ((), ("--model", "m")):  # via GET /v1/models, and via the initial test request
        r, res = bench(llmserve_bin, tmp_path, url, "--num-prompts", "2", "--random-input-len", "4", *extra,
                       check=False)
        assert r.returncode == 1
        assert "cannot connect to " + url in r.stderr and "refused" in r.stderr.lower()
        assert res is None


def test_bad_flags(llmserve_bin, tmp_path):
    cases = [(("--request-rate", "0"), "--request-rate"), (("--random-range-ratio", "1.5"), "--random-range-ratio"),
             (("--burstiness", "-1"), "--burstiness"), (("--base-url", "https://x:1"), "--base-url"),
             (("--endpoint", "/v1/chat/completions"), "--tokenizer"), (("--dataset-name", "sharegpt"), "random"),
             (("--percentile-metrics", "ttft,foo"), "foo"), (("--num-prompts", "0"), "--num-prompts"),
             (("--floor-device", "cuda"), "need --floor-config"),
             (("--floor-config", "c.json", "--floor-device", "tpu"), "--floor-device 'tpu'"),
             (("--floor-config", "c.json", "--floor-dtype", "int3"), "--floor-dtype 'int3'"),
             (("--floor-config", "c.json", "--floor-num-threads", "-1"), "--floor-num-threads")]
    for args, needle in cases:
        r = run(llmserve_bin, "bench", "serve", "--base-url", "http://127.0.0.1:9", *args, check=False)
        assert r.returncode != 0 and needle in r.stderr, (args, r.stderr)


def test_floor_of_the_served_model(llmserve_bin, tmp_path):
    # The floor of what the run did (bench_floors.h): the completed requests' prefills and decode tokens for the
    # model named by --floor-config, at rates measured after the run; printed beside the elapsed time and TPOT.
    n, i_len, o_len, conc = 6, 16, 9, 3
    config = pathlib.Path(__file__).resolve().parents[2] / "bench" / "configs" / "llama2-110m.json"
    with FixtureServer(first_delay_s=0.01, token_interval_s=0.002, fail_every=4) as srv:
        r, res = bench(llmserve_bin, tmp_path, srv.base_url, "--random-input-len", str(i_len),
                       "--random-output-len", str(o_len), "--num-prompts", str(n), "--max-concurrency", str(conc),
                       "--ignore-eos", "--floor-config", str(config), "--floor-num-threads", "2")
    completed = res["completed"]
    assert 0 < completed < n  # server requests 4 and 8 failed: the floor counts only the completed ones
    assert "measured: read bandwidth" in r.stdout
    m = re.search(r"floor: ([0-9.]+) s = prefill ([0-9.]+) s \(bound by [^;]+; LM head on (\d+) rows\) \+ decode "
                  r"([0-9.]+) s \((\d+) steps x weights [0-9.]+ MB \+ KV [0-9.]+ MB at the read bandwidth\); "
                  r"elapsed ([0-9.]+) s: ([0-9.]+)% of the floor's speed", r.stdout)
    assert m, r.stdout
    floor_s, prefill_s, rows, decode_s, steps, elapsed, ratio = (float(g) for g in m.groups())
    assert rows == completed
    assert steps == -(-(completed * (o_len - 1)) // conc)  # ceil(decode tokens / concurrency)
    assert floor_s == pytest.approx(prefill_s + decode_s, abs=0.015)
    assert elapsed == pytest.approx(res["duration"], abs=0.006)
    assert ratio == pytest.approx(100 * floor_s / elapsed, rel=0.1)  # both printed rounded to 10 ms
    t = re.search(r"mean TPOT floor: ([0-9.]+) ms \(the floor over its (\d+) decode steps\); mean TPOT ([0-9.]+) ms",
                  r.stdout)
    assert t and int(t.group(2)) == steps
    assert float(t.group(3)) == pytest.approx(res["mean_tpot_ms"], abs=0.006)
