# The llmserve binary's command dispatch: help, version, and clear errors for unknown commands and flags.
import subprocess


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
