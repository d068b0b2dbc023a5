# AsyncLLM: vLLM's asyncio API (`async for out in engine.generate(prompt, params, request_id)`) over the C++
# AsyncLLM, whose engine core runs on its own thread. Outputs cross to the event loop through a pipe the loop
# watches (add_reader), so neither the loop nor the engine's output thread ever waits on the other. Invariant: a
# stream that ends early (break, cancel, error) aborts its request, and every live stream gets a final output.
from __future__ import annotations

import asyncio
import itertools
from typing import Any, AsyncGenerator, Optional

from . import _C
from .engine_args import AsyncEngineArgs
from .llm import _parse_prompt
from .outputs import RequestOutput, convert_request_output
from .sampling_params import RequestOutputKind, SamplingParams
from .tokenizer import Tokenizer


class _Stream:
    def __init__(self, prompt: Optional[str], params: SamplingParams) -> None:
        self.queue: asyncio.Queue = asyncio.Queue()
        self.prompt, self.params = prompt, params


class AsyncLLM:
    def __init__(self, engine_args: Optional[AsyncEngineArgs] = None) -> None:
        self._engine = _C.AsyncEngine.create(**(engine_args or AsyncEngineArgs())._c_kwargs())
        c_tok = self._engine.tokenizer
        self._tokenizer = Tokenizer(c_tok, owner=self._engine) if c_tok is not None else None
        self._streams: dict[str, _Stream] = {}
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._counter = itertools.count()
        self._decode_cache: dict[int, str] = {}

    @classmethod
    def from_engine_args(cls, engine_args: AsyncEngineArgs) -> "AsyncLLM":
        return cls(engine_args)

    async def get_tokenizer(self) -> Optional[Tokenizer]:
        return self._tokenizer

    async def generate(self, prompt: Any, sampling_params: SamplingParams, request_id: Optional[str] = None,
                       priority: int = 0) -> AsyncGenerator[RequestOutput, None]:
        """Streams the request's outputs: cumulative, delta or final only (sampling_params.output_kind)."""
        if priority != 0:
            raise ValueError("priority: not supported by AsyncLLM.generate")
        if not isinstance(sampling_params, SamplingParams):
            raise TypeError("sampling_params must be a SamplingParams")
        self._attach(asyncio.get_running_loop())
        request_id = str(next(self._counter)) if request_id is None else request_id
        if request_id in self._streams:
            raise ValueError(f"request_id: {request_id!r} is already running")
        text, token_ids = _parse_prompt(prompt)
        stream = self._streams[request_id] = _Stream(text, sampling_params)
        try:
            self._engine.add_request(request_id, text if not token_ids else "", token_ids, sampling_params._c)
        except BaseException:
            del self._streams[request_id]
            raise
        kind, finished = sampling_params.output_kind, False
        try:
            while not finished:
                c_out = await stream.queue.get()
                finished = c_out.finished
                if kind == RequestOutputKind.FINAL_ONLY and not finished:
                    continue
                yield convert_request_output(c_out, text, sampling_params.logprobs is not None,
                                             sampling_params.prompt_logprobs is not None, self._decode,
                                             delta=kind == RequestOutputKind.DELTA)
        finally:
            self._streams.pop(request_id, None)
            if not finished:  # the caller stopped listening: free the request's sequences now
                self._engine.abort(request_id)

    async def abort(self, request_id: str) -> None:
        """Aborts a live request; its stream ends with a final output whose finish_reason is "abort"."""
        self._engine.abort(request_id)

    def shutdown(self) -> None:
        if self._loop is not None and not self._loop.is_closed():
            self._loop.remove_reader(self._engine.fileno())
        self._engine.shutdown()

    def _attach(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._loop is loop:
            return
        if self._loop is not None and not self._loop.is_closed() and self._streams:
            raise RuntimeError("AsyncLLM: already streaming on another event loop")
        if self._loop is not None and not self._loop.is_closed():
            self._loop.remove_reader(self._engine.fileno())
        self._loop = loop
        loop.add_reader(self._engine.fileno(), self._dispatch)

    def _dispatch(self) -> None:
        """On the loop: hands every queued output to its stream (outputs of closed streams are dropped)."""
        for c_out in self._engine.drain():
            stream = self._streams.get(c_out.request_id)
            if stream is not None:
                stream.queue.put_nowait(c_out)

    def _decode(self, token_id: int) -> Optional[str]:
        if self._tokenizer is None:
            return None
        text = self._decode_cache.get(token_id)
        if text is None:
            text = self._decode_cache[token_id] = self._tokenizer._c.decode([token_id], False)
        return text

    def __del__(self) -> None:
        try:
            self.shutdown()
        except Exception:
            pass
