# `llmserve engine-core`, the internal child of `serve --engine-process`: hidden from --help, and started by
# hand without the parent's socket addresses it fails at once with a clear message instead of waiting.
from cli_helpers import run


def test_engine_core_is_hidden(llmserve_bin):
    r = run(llmserve_bin, "--help")
    assert "engine-core" not in r.stdout


def test_engine_core_without_addresses_fails(llmserve_bin):
    r = run(llmserve_bin, "engine-core", check=False)
    if "unknown command" in r.stderr:  # a build without ZMQ / msgpack has no engine-core command
        return
    assert r.returncode == 2
    assert "--input-address and --output-address are required" in r.stderr
