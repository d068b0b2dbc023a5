# EngineArgs / AsyncEngineArgs: the engine's construction arguments with vLLM's names and defaults, shared by LLM
# and AsyncLLM. Invariant: every field reaches the C++ loader (the CLI's flag checks) or is refused here.
from __future__ import annotations

import dataclasses
from typing import Any, Optional


@dataclasses.dataclass
class EngineArgs:
    model: Optional[str] = None  # a Hugging Face model directory; None: the built-in default (random tiny Llama)
    tokenizer: Optional[str] = None
    dtype: str = "auto"
    device: str = "auto"  # auto: cuda when built with CUDA and a GPU is present, else cpu
    seed: int = 0
    max_model_len: Optional[int] = None
    max_num_seqs: int = 256
    max_num_batched_tokens: Optional[int] = None
    gpu_memory_utilization: float = 0.9
    enable_prefix_caching: bool = True
    load_format: str = "auto"
    enforce_eager: bool = False  # True: no CUDA graphs (vLLM's meaning; the CPU always runs eagerly)
    block_size: int = 16
    kv_cache_tokens: Optional[int] = None  # KV-cache capacity; None: the engine's sizing
    scheduling_policy: str = "fcfs"
    num_threads: Optional[int] = None  # CPU threads; None: all
    tensor_parallel_size: int = 1  # ranks the model is sharded over (cuda: one GPU each, NCCL; cpu: threads)
    trust_remote_code: bool = False

    def _c_kwargs(self) -> dict[str, Any]:
        """Validated keywords for _C.Engine.create / _C.AsyncEngine.create."""
        if not isinstance(self.tensor_parallel_size, int) or self.tensor_parallel_size < 1:
            raise ValueError(f"tensor_parallel_size must be a positive integer, got {self.tensor_parallel_size!r}")
        for name in ("enforce_eager", "enable_prefix_caching", "trust_remote_code"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be a bool")
        for name in ("max_model_len", "max_num_batched_tokens", "kv_cache_tokens", "num_threads"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value <= 0):
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        for name in ("max_num_seqs", "block_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization!r}")
        return dict(model=self.model or "", tokenizer=self.tokenizer or "", load_format=self.load_format,
                    dtype=self.dtype, device=self.device, seed=self.seed, num_threads=self.num_threads or 0,
                    max_model_len=self.max_model_len or 0, max_num_seqs=self.max_num_seqs,
                    max_num_batched_tokens=self.max_num_batched_tokens or 4096, block_size=self.block_size,
                    kv_cache_tokens=self.kv_cache_tokens or 0, gpu_memory_utilization=self.gpu_memory_utilization,
                    enable_prefix_caching=self.enable_prefix_caching, scheduling_policy=self.scheduling_policy,
                    enforce_eager=self.enforce_eager, tensor_parallel_size=self.tensor_parallel_size)


@dataclasses.dataclass
class AsyncEngineArgs(EngineArgs):
    pass
