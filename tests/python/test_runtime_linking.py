# The extensions share the process's C++ runtime: each module must need libstdc++.so.6 rather than carry a static
# copy (a private copy's locale facets crashed the first formatted log line inside a torch process, 2026-11-25).
import pathlib
import subprocess

import pytest

import llmserve


def _modules():
    package = pathlib.Path(llmserve.__file__).resolve().parent
    # __file__ may be a link into the sources: the modules sit next to the link, in the package folder imported.
    folder = pathlib.Path(llmserve.__file__).parent
    return sorted(set(folder.glob("*.so")) | set(package.glob("*.so")))


def test_every_extension_needs_the_shared_libstdcxx():
    modules = _modules()
    if not modules:
        pytest.fail("no extension module next to the llmserve package")
    for module in modules:
        dynamic = subprocess.run(["readelf", "-d", str(module)], capture_output=True, text=True, check=True).stdout
        needed = [line for line in dynamic.splitlines() if "(NEEDED)" in line]
        assert any("libstdc++.so" in line for line in needed), f"{module.name} does not need libstdc++.so: {needed}"
