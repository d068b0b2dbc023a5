# Running the llmserve binary from the CLI tests.
import subprocess


def run(bin_path, *args, check=True, stdin=None):
    r = subprocess.run([str(bin_path), *args], capture_output=True, text=True, timeout=300, input=stdin)
    if check:
        assert r.returncode == 0, r.stderr
    return r
