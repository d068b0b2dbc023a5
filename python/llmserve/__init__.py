# llmserve: a C++ LLM inference engine modelled on vLLM V1, with vLLM's offline and asyncio Python API.
# Invariant: every public name here has vLLM's name and meaning; names load lazily, so `import llmserve.ops` needs
# only torch and its own library, not the engine extension.
import importlib

_NAMES = {
    "LLM": ".llm", "AsyncLLM": ".async_llm", "EngineArgs": ".engine_args", "AsyncEngineArgs": ".engine_args",
    "SamplingParams": ".sampling_params", "StructuredOutputsParams": ".sampling_params",
    "RequestOutputKind": ".sampling_params", "RequestOutput": ".outputs",
    "CompletionOutput": ".outputs", "Logprob": ".outputs", "Tokenizer": ".tokenizer",
}

__all__ = [*_NAMES, "__version__"]


def __getattr__(name: str):
    if name == "__version__":
        return importlib.import_module("._C", __name__).__version__
    if name in _NAMES:
        return getattr(importlib.import_module(_NAMES[name], __name__), name)
    raise AttributeError(f"module 'llmserve' has no attribute {name!r}")


def __dir__():
    return sorted(__all__)
