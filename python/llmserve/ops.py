# llmserve.ops: the engine's kernels as PyTorch custom ops (torch.ops.llmserve.*, CPU / CUDA / Meta kernels),
# registered by the _torch_ops library (python/ops/torch_ops.cc) that a build with torch makes. Every op writes its
# outputs in place (`Tensor!` in its schema) and returns None. Invariant: importing this module loads the library
# once; without it, ImportError says how to build it.
from __future__ import annotations

import ctypes
import os

import torch

_LIBRARY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_torch_ops.so")
if not os.path.exists(_LIBRARY):
    raise ImportError("llmserve.ops: _torch_ops.so was not built (configure with a Python that imports torch: "
                      "-DLLMSERVE_TORCH_PYTHON=/path/to/python, then build the llmserve_torch_ops target)")
# Measured: oneDNN 2.6 (the CPU GEMM's default backend) fails with "could not execute a primitive" under the
# libgomp.so.1 that torch wheels bundle, which a process importing torch first has loaded; OpenBLAS (the documented
# LLMSERVE_GEMM alternative) runs correctly there. An explicit LLMSERVE_GEMM still wins.
os.environ.setdefault("LLMSERVE_GEMM", "openblas")
if not hasattr(torch.ops.llmserve, "rms_norm"):
    # Registration runs on this call, not at load: the op objects are static objects of the library itself.
    _register = ctypes.CDLL(_LIBRARY).llmserve_register_torch_ops
    _register.restype = ctypes.c_char_p  # null on success, else the error (e.g. an op missing from the op list)
    _error = _register()
    if _error is not None:
        raise ImportError(f"llmserve.ops: registering the torch ops failed: {_error.decode()}")


def op_names() -> list[str]:
    """The registered ops (the engine's op registry, in its order)."""
    return [s.name.split("::", 1)[1] for s in torch._C._jit_get_all_schemas() if s.name.startswith("llmserve::")]


def __getattr__(name: str):
    return getattr(torch.ops.llmserve, name)
