# pytest set-up for the Python package tests: imports llmserve from build/python (the package the Release build
# assembles: its module and links to python/llmserve/*.py) unless an installed one is asked for
# (LLMSERVE_PY_INSTALLED=1, after `pip install .`).
import os
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
if os.environ.get("LLMSERVE_PY_INSTALLED") != "1":
    sys.path.insert(0, str(ROOT / "build" / "python"))
