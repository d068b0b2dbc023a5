# The `llmserve` console entry point: execs the C++ `llmserve` binary that the wheel bundles (llmserve/bin/), so
# the CLI is the very program the C++ build makes, flags and exit codes included. Invariant: argv passes unchanged.
from __future__ import annotations

import os
import sys


def binary_path() -> str:
    # Every folder of the package: an editable install has two (the built files' and the sources').
    import llmserve
    folders = list(getattr(llmserve, "__path__", [])) or [os.path.dirname(os.path.abspath(__file__))]
    for folder in folders:
        bundled = os.path.join(folder, "bin", "llmserve")
        if os.path.exists(bundled):
            return bundled
        # The package a plain CMake build assembles (build/python/llmserve): that build's build/bin/llmserve.
        built = os.path.join(folder, "..", "..", "bin", "llmserve")
        if os.path.exists(built):
            return os.path.abspath(built)
    raise FileNotFoundError("llmserve: the bundled binary is missing (reinstall the package)")


def main() -> None:
    path = binary_path()
    os.execv(path, [path, *sys.argv[1:]])


if __name__ == "__main__":
    main()
