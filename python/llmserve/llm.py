# LLM: vLLM's offline API (`LLM(model).generate(prompts, SamplingParams(...))`) over the C++ LLMEngine. Engine steps
# run with the GIL released; between steps Python handles signals, so Ctrl-C aborts the batch. Invariant: after
# generate / chat returns or raises, the engine holds no request of that call (the LLM stays usable).
from __future__ import annotations

import itertools
import threading
from typing import Any, Optional, Sequence, Union

from . import _C
from ._progress import progress_bar
from .engine_args import EngineArgs
from .outputs import RequestOutput, convert_request_output
from .sampling_params import SamplingParams
from .tokenizer import Tokenizer

PromptType = Union[str, dict[str, Any]]


class LLM:
    """An engine for offline generation. `model`: a Hugging Face model directory; None runs the built-in default
    (a tiny Llama with random weights and a byte-level tokenizer). Keywords: EngineArgs' fields."""

    def __init__(self, model: Optional[str] = None, **kwargs: Any) -> None:
        # EngineArgs' fields are vLLM's; any other keyword raises TypeError naming it (never ignored).
        self._engine = _C.Engine.create(**EngineArgs(model=model, **kwargs)._c_kwargs())
        c_tok = self._engine.tokenizer
        self._tokenizer = Tokenizer(c_tok, owner=self._engine) if c_tok is not None else None
        self._counter = itertools.count()
        # Steps run without the GIL, so a second Python thread could enter the (single-threaded) engine: calls
        # take turns instead.
        self._lock = threading.Lock()

    def get_tokenizer(self) -> Optional[Tokenizer]:
        return self._tokenizer

    def get_default_sampling_params(self) -> SamplingParams:
        return SamplingParams()

    def generate(self, prompts: Union[PromptType, Sequence[PromptType]],
                 sampling_params: Union[None, SamplingParams, Sequence[SamplingParams]] = None, use_tqdm: bool = True,
                 lora_request: None = None, priority: Optional[list[int]] = None) -> list[RequestOutput]:
        if lora_request is not None:
            raise ValueError("lora_request: LoRA is not supported by llmserve")
        if priority is not None:
            raise ValueError("priority: not supported by LLM.generate (use the server's priority scheduling)")
        items = [_parse_prompt(p) for p in _as_list(prompts)]
        return self._run(items, sampling_params, use_tqdm)

    def chat(self, messages: Union[list[dict[str, Any]], list[list[dict[str, Any]]]],
             sampling_params: Union[None, SamplingParams, Sequence[SamplingParams]] = None, use_tqdm: bool = True,
             chat_template: Optional[str] = None, add_generation_prompt: bool = True,
             continue_final_message: bool = False, chat_template_kwargs: Optional[dict[str, Any]] = None,
             tools: Optional[list[dict[str, Any]]] = None) -> list[RequestOutput]:
        """Renders each conversation with the chat template (the tokenizer's unless given) and generates; the
        template writes the special tokens itself, so the text is encoded without adding any (as vLLM)."""
        tok = self._require_tokenizer("chat")
        conversations = messages if messages and isinstance(messages[0], list) else [messages]
        items = []
        for conv in conversations:
            text = tok.apply_chat_template(conv, chat_template=chat_template, tokenize=False,
                                           add_generation_prompt=add_generation_prompt,
                                           continue_final_message=continue_final_message, tools=tools,
                                           **(chat_template_kwargs or {}))
            items.append((text, tok.encode(text, add_special_tokens=False)))
        return self._run(items, sampling_params, use_tqdm)

    def _require_tokenizer(self, what: str) -> Tokenizer:
        if self._tokenizer is None:
            raise ValueError(f"{what}: the model has no tokenizer (pass tokenizer=)")
        return self._tokenizer

    def _run(self, items: list[tuple[Optional[str], list[int]]], sampling_params: Any,
             use_tqdm: bool) -> list[RequestOutput]:
        params = _params_per_prompt(sampling_params, len(items))
        with self._lock:
            return self._run_locked(items, params, use_tqdm)

    def _run_locked(self, items: list[tuple[Optional[str], list[int]]], params: list[SamplingParams],
                    use_tqdm: bool) -> list[RequestOutput]:
        ids: list[str] = []
        results: dict[str, RequestOutput] = {}
        bar = None
        # One guarded region from the first add to the last output: a Ctrl-C raised anywhere in it (Python raises it
        # at the first bytecode after the C++ call it arrived in) aborts what is left and keeps the engine usable.
        try:
            for (text, token_ids), p in zip(items, params):
                rid = str(next(self._counter))
                # Listed before it is added: a Ctrl-C raised as add_request returns must still abort it (aborting an
                # id the engine never got is a no-op), or the drain below would run it to completion.
                ids.append(rid)
                self._engine.add_request(rid, text if not token_ids else "", token_ids, p._c)
            index = {rid: i for i, rid in enumerate(ids)}
            bar = progress_bar(len(ids), use_tqdm and len(ids) > 0)
            decode = self._token_decoder()
            while len(results) < len(ids):
                for out in self._engine.step_finished():
                    i = index[out.request_id]
                    p = params[i]
                    results[out.request_id] = convert_request_output(
                        out, items[i][0], p.logprobs is not None, p.prompt_logprobs is not None, decode)
                    bar.update(1)
        except BaseException:  # KeyboardInterrupt included
            self._abort_and_drain(ids, results)
            raise
        finally:
            if bar is not None:
                bar.close()
        return [results[rid] for rid in ids]

    def _abort_and_drain(self, ids: list[str], done: Any) -> None:
        for rid in ids:
            if rid not in done:
                self._engine.abort(rid)
        while self._engine.has_unfinished():
            self._engine.step_finished()

    def _token_decoder(self):
        if self._tokenizer is None:
            return lambda token_id: None
        cache: dict[int, str] = {}
        c_tok = self._tokenizer._c

        def decode(token_id: int) -> str:
            text = cache.get(token_id)
            if text is None:
                text = cache[token_id] = c_tok.decode([token_id], False)
            return text

        return decode

    def __repr__(self) -> str:
        return f"llmserve.LLM(max_model_len={self._engine.max_model_len}, vocab_size={self._engine.vocab_size})"


def _as_list(prompts: Any) -> list:
    if isinstance(prompts, (str, dict)):
        return [prompts]
    if isinstance(prompts, Sequence):
        return list(prompts)
    raise TypeError(f"prompts must be a string, a dict or a list of them, got {type(prompts).__name__}")


def _parse_prompt(prompt: PromptType) -> tuple[Optional[str], list[int]]:
    """(text, token ids) of one prompt: a string, {"prompt": text} or {"prompt_token_ids": [ids]}."""
    if isinstance(prompt, str):
        return prompt, []
    if isinstance(prompt, dict):
        unknown = set(prompt) - {"prompt", "prompt_token_ids"}
        if unknown:
            raise ValueError(f"prompt: unsupported key(s) {sorted(unknown)}")
        if "prompt_token_ids" in prompt:
            ids = prompt["prompt_token_ids"]
            if not isinstance(ids, (list, tuple)) or not all(isinstance(i, int) and i >= 0 for i in ids):
                raise ValueError("prompt_token_ids must be a list of non-negative token ids")
            return prompt.get("prompt"), list(ids)
        if isinstance(prompt.get("prompt"), str):
            return prompt["prompt"], []
    raise ValueError(f"prompt must be a string, {{'prompt': str}} or {{'prompt_token_ids': [int]}}, got {prompt!r}")


def _params_per_prompt(sampling_params: Any, count: int) -> list[SamplingParams]:
    if sampling_params is None:
        return [SamplingParams()] * count
    if isinstance(sampling_params, SamplingParams):
        return [sampling_params] * count
    params = list(sampling_params)
    if len(params) != count:
        raise ValueError(f"sampling_params: {len(params)} given for {count} prompts (give one or one per prompt)")
    for p in params:
        if not isinstance(p, SamplingParams):
            raise TypeError(f"sampling_params must hold SamplingParams, got {type(p).__name__}")
    return params
