# pytest set-up for the Python package tests: imports llmserve from <build>/python (the package a CMake build
# assembles: its modules and links to python/llmserve/*.py), <build> being LLMSERVE_BIN's build (default: build/),
# unless an installed one is asked for (LLMSERVE_PY_INSTALLED=1, after `pip install .`).
import os
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
if os.environ.get("LLMSERVE_PY_INSTALLED") != "1":
    binary = os.environ.get("LLMSERVE_BIN")
    build = pathlib.Path(binary).resolve().parents[1] if binary else ROOT / "build"
    sys.path.insert(0, str(build / "python"))
