# pytest fixtures shared by the end-to-end and oracle tests: the built binary and the shared test data.
import os
import pathlib

import pytest

# No test reaches the real Hugging Face Hub: a model id not in the cache fails instead of downloading (test_hub.py
# serves its own fake Hub and turns this off for its runs).
os.environ["HF_HUB_OFFLINE"] = "1"

ROOT = pathlib.Path(__file__).resolve().parent.parent
TESTDATA = pathlib.Path(os.environ.get("LLMSERVE_TESTDATA", ROOT.parent / "shared" / "testdata"))


@pytest.fixture(scope="session")
def llmserve_bin() -> pathlib.Path:
    path = pathlib.Path(os.environ.get("LLMSERVE_BIN", ROOT / "build" / "bin" / "llmserve"))
    if not path.exists():
        pytest.fail(f"{path} is missing: run scripts/build first")
    return path


@pytest.fixture(scope="session")
def testdata() -> pathlib.Path:
    if not TESTDATA.is_dir():
        pytest.fail(f"test data not found at {TESTDATA} (set LLMSERVE_TESTDATA)")
    return TESTDATA
