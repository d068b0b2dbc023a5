# llmserve: a C++ LLM inference engine modelled on vLLM V1, with vLLM's offline Python API.
# Invariant: every public name here has vLLM's name and meaning.
from . import _C
from .async_llm import AsyncLLM
from .engine_args import AsyncEngineArgs, EngineArgs
from .llm import LLM
from .outputs import CompletionOutput, Logprob, RequestOutput
from .sampling_params import RequestOutputKind, SamplingParams
from .tokenizer import Tokenizer

__version__ = _C.__version__

__all__ = ["LLM", "AsyncLLM", "EngineArgs", "AsyncEngineArgs", "SamplingParams", "RequestOutputKind", "RequestOutput", "CompletionOutput", "Logprob", "Tokenizer",
           "__version__"]
