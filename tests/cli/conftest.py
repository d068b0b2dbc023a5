# Shared by the CLI tests: stories260K converted once per session into a HF directory.
import pytest
from cli_helpers import run


@pytest.fixture(scope="session")
def stories_dir(llmserve_bin, testdata, tmp_path_factory):
    src = testdata / "models" / "stories260K"
    out = tmp_path_factory.mktemp("stories260K")
    run(llmserve_bin, "convert", "llama2c", "--checkpoint", str(src / "stories260K.bin"),
        "--tokenizer", str(src / "tok512.bin"), "--out", str(out))
    return out
