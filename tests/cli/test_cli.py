# The llmserve binary's command dispatch: help, version, and clear errors for unknown commands and flags.
import subprocess

import pytest


def run(bin_path, *args):
    return subprocess.run([str(bin_path), *args], capture_output=True, text=True, timeout=60)


def test_help_lists_commands(llmserve_bin):
    r = run(llmserve_bin, "--help")
    assert r.returncode == 0
    assert "version" in r.stdout


def test_version(llmserve_bin):
    r = run(llmserve_bin, "version")
    assert r.returncode == 0 and r.stdout.startswith("llmserve ")
    for flag in ("--version", "-V"):
        assert run(llmserve_bin, flag).stdout == r.stdout


def test_unknown_command_and_flag_fail_clearly(llmserve_bin):
    r = run(llmserve_bin, "frobnicate")
    assert r.returncode == 2 and "unknown command 'frobnicate'" in r.stderr
    r = run(llmserve_bin, "version", "--bogus")
    assert r.returncode == 2 and "unknown flag --bogus" in r.stderr


@pytest.mark.parametrize("command", [["serve"], ["generate"], ["chat"], ["bench", "throughput"]])
def test_help_shows_defaults_and_no_forms(llmserve_bin, command):
    r = run(llmserve_bin, *command, "--help")
    assert r.returncode == 0
    flags = [line for line in r.stdout.splitlines() if line.startswith("  --")]
    assert flags
    for line in flags:  # a switch shows both forms; every other flag shows its value's kind
        assert line.startswith("  --[no-]") or line.split()[1] in ("N", "X", "VALUE", "VALUE..."), line
    assert any(line.startswith("  --[no-]enable-prefix-caching") and "(default on)" in line for line in flags)
    assert any(line.startswith("  --max-num-batched-tokens N") and "(default 4096)" in line for line in flags)


def test_chat_offers_only_the_flags_it_acts_on(llmserve_bin):
    # One reply, no logprobs shown: chat has no --n and no --logprobs (generate has both).
    chat = run(llmserve_bin, "chat", "--help").stdout
    assert "--n N" not in chat and "--logprobs" not in chat
    generate = run(llmserve_bin, "generate", "--help").stdout
    assert "--n N" in generate and "--logprobs N" in generate
    r = run(llmserve_bin, "chat", "--n", "2")
    assert r.returncode == 2 and "unknown flag --n" in r.stderr
