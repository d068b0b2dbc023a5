# SamplingParams with vLLM's names and defaults, checked by the engine's own C++ validation (SamplingParams::validate)
# so Python and the server accept exactly the same values. Invariant: an instance always holds valid values.
from __future__ import annotations

import enum
import json as _json
from typing import Any, Optional, Union

from . import _C

# Stands in for the vocabulary at construction; the engine checks token ids against the model's at add time.
_ANY_VOCAB = 1 << 62


class RequestOutputKind(enum.IntEnum):
    """What AsyncLLM streams per update (vLLM's RequestOutputKind); LLM.generate returns final outputs only."""
    CUMULATIVE = 0
    DELTA = 1
    FINAL_ONLY = 2


class StructuredOutputsParams:
    """vLLM's StructuredOutputsParams: exactly one of json (a JSON Schema: dict or JSON text), regex, choice (list of
    strings), grammar (EBNF / GBNF, root rule `root`), json_object=True. The engine masks every sampled token so the
    finished output matches it; a schema / regex / grammar it cannot compile is a ValueError at add time."""

    def __init__(self, json: Union[None, str, dict, bool] = None, regex: Optional[str] = None,
                 choice: Optional[list[str]] = None, grammar: Optional[str] = None,
                 json_object: Optional[bool] = None) -> None:
        self.json = json
        self.regex = regex
        self.choice = None if choice is None else list(choice)
        self.grammar = grammar
        self.json_object = bool(json_object)
        given = [n for n in ("json", "regex", "choice", "grammar") if getattr(self, n) is not None]
        given += ["json_object"] if self.json_object else []
        if len(given) != 1:
            raise ValueError("structured_outputs: exactly one of json, regex, choice, grammar, json_object must be "
                             f"set, got {given or 'none'}")

    def _to_c(self) -> Any:
        c = _C.StructuredOutputsParams()
        if self.json is not None:
            c.json = self.json if isinstance(self.json, str) else _json.dumps(self.json)
        c.regex = self.regex
        c.choice = self.choice
        c.grammar = self.grammar
        c.json_object = self.json_object
        return c

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StructuredOutputsParams) and all(
            getattr(self, f) == getattr(other, f) for f in ("json", "regex", "choice", "grammar", "json_object"))

    def __repr__(self) -> str:
        fields = ", ".join(f"{n}={getattr(self, n)!r}" for n in ("json", "regex", "choice", "grammar", "json_object")
                           if getattr(self, n) not in (None, False))
        return f"StructuredOutputsParams({fields})"


class SamplingParams:
    """vLLM's SamplingParams: every field llmserve acts on. Bad values raise ValueError naming the field."""

    _FIELDS = ("n", "presence_penalty", "frequency_penalty", "repetition_penalty", "temperature", "top_p", "top_k",
               "min_p", "seed", "stop", "stop_token_ids", "ignore_eos", "max_tokens", "min_tokens", "logprobs",
               "prompt_logprobs", "skip_special_tokens", "spaces_between_special_tokens",
               "include_stop_str_in_output", "logit_bias", "structured_outputs", "output_kind")

    def __init__(self, n: int = 1, presence_penalty: float = 0.0, frequency_penalty: float = 0.0,
                 repetition_penalty: float = 1.0, temperature: float = 1.0, top_p: float = 1.0, top_k: int = 0,
                 min_p: float = 0.0, seed: Optional[int] = None, stop: Union[None, str, list[str]] = None,
                 stop_token_ids: Optional[list[int]] = None, ignore_eos: bool = False,
                 max_tokens: Optional[int] = 16, min_tokens: int = 0, logprobs: Optional[int] = None,
                 prompt_logprobs: Optional[int] = None, skip_special_tokens: bool = True,
                 spaces_between_special_tokens: bool = True, include_stop_str_in_output: bool = False,
                 logit_bias: Optional[dict[int, float]] = None,
                 structured_outputs: Optional[StructuredOutputsParams] = None,
                 output_kind: RequestOutputKind = RequestOutputKind.CUMULATIVE) -> None:
        self.n = n
        self.presence_penalty = presence_penalty
        self.frequency_penalty = frequency_penalty
        self.repetition_penalty = repetition_penalty
        self.temperature = temperature
        self.top_p = top_p
        self.top_k = top_k
        self.min_p = min_p
        self.seed = seed
        self.stop = [stop] if isinstance(stop, str) else list(stop or [])
        self.stop_token_ids = list(stop_token_ids or [])
        self.ignore_eos = ignore_eos
        self.max_tokens = max_tokens
        self.min_tokens = min_tokens
        self.logprobs = logprobs
        self.prompt_logprobs = prompt_logprobs
        self.skip_special_tokens = skip_special_tokens
        self.spaces_between_special_tokens = spaces_between_special_tokens
        self.include_stop_str_in_output = include_stop_str_in_output
        self.logit_bias = logit_bias
        if structured_outputs is not None and not isinstance(structured_outputs, StructuredOutputsParams):
            raise TypeError(f"structured_outputs must be a StructuredOutputsParams, got {structured_outputs!r}")
        self.structured_outputs = structured_outputs
        try:
            self.output_kind = RequestOutputKind(output_kind)
        except ValueError:
            raise ValueError(f"output_kind must be one of {[k.name for k in RequestOutputKind]}, got {output_kind!r}")
        self._c = self._to_c()
        self._c.validate(_ANY_VOCAB)

    def _to_c(self) -> Any:
        c = _C.SamplingParams()
        for name in self._FIELDS:
            if name == "output_kind":
                continue
            value = getattr(self, name)
            if name == "logit_bias":
                value = [] if value is None else list(dict(value).items())
            if name == "structured_outputs":
                value = None if value is None else value._to_c()
            if isinstance(value, bool) and name not in ("ignore_eos", "skip_special_tokens",
                                                        "spaces_between_special_tokens", "include_stop_str_in_output"):
                raise TypeError(f"{name} must be a number, got {value!r}")
            try:
                setattr(c, name, value)
            except TypeError:
                raise TypeError(f"{name} has the wrong type: {value!r}") from None
        return c

    def clone(self) -> "SamplingParams":
        return SamplingParams(**{name: getattr(self, name) for name in self._FIELDS})

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SamplingParams) and all(
            getattr(self, f) == getattr(other, f) for f in self._FIELDS)

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._FIELDS if name != "output_kind")
        return f"SamplingParams({fields})"
