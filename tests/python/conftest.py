# pytest set-up for the Python package tests: imports llmserve from python/ (the Release build writes llmserve._C
# there) unless an installed package is asked for (LLMSERVE_PY_INSTALLED=1, after `pip install .`).
import os
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
if os.environ.get("LLMSERVE_PY_INSTALLED") != "1":
    sys.path.insert(0, str(ROOT / "python"))
