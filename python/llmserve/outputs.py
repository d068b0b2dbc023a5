# RequestOutput / CompletionOutput / Logprob: vLLM's output shapes as plain Python objects, built from the C++
# frontend's structs (frontend/output_processor.h). Invariant: field names and meanings are vLLM's.
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional, Union


@dataclass
class Logprob:
    """One token's log probability, its rank in the vocabulary (1 = most likely) and its text."""
    logprob: float
    rank: Optional[int] = None
    decoded_token: Optional[str] = None


# Per position: token id -> Logprob (the scored token first, then the top-k), as in vLLM.
SampleLogprobs = list[dict[int, Logprob]]
PromptLogprobs = list[Optional[dict[int, Logprob]]]


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: list[int]
    cumulative_logprob: Optional[float]
    logprobs: Optional[SampleLogprobs]
    finish_reason: Optional[str] = None
    stop_reason: Union[int, str, None] = None

    def finished(self) -> bool:
        return self.finish_reason is not None

    def __repr__(self) -> str:
        return (f"CompletionOutput(index={self.index}, text={self.text!r}, token_ids={self.token_ids}, "
                f"cumulative_logprob={self.cumulative_logprob}, logprobs={self.logprobs}, "
                f"finish_reason={self.finish_reason}, stop_reason={self.stop_reason})")


@dataclass
class RequestOutput:
    request_id: str
    prompt: Optional[str]
    prompt_token_ids: list[int]
    prompt_logprobs: Optional[PromptLogprobs]
    outputs: list[CompletionOutput]
    finished: bool
    num_cached_tokens: int = 0
    metrics: None = field(default=None, repr=False)

    def __repr__(self) -> str:
        return (f"RequestOutput(request_id={self.request_id}, prompt={self.prompt!r}, "
                f"prompt_token_ids={self.prompt_token_ids}, prompt_logprobs={self.prompt_logprobs}, "
                f"outputs={self.outputs}, finished={self.finished}, num_cached_tokens={self.num_cached_tokens})")


def _logprob_dict(entry, decode: Callable[[int], str]) -> dict[int, Logprob]:
    ids, values = entry.token_ids, entry.logprobs
    out = {ids[0]: Logprob(values[0], entry.sampled_token_rank, decode(ids[0]))}
    for k in range(1, len(ids)):  # the top-k, ranked 1..k; the scored token may be among them
        if ids[k] not in out:
            out[ids[k]] = Logprob(values[k], k, decode(ids[k]))
    return out


def convert_request_output(c, prompt: Optional[str], want_logprobs: bool, want_prompt_logprobs: bool,
                           decode: Callable[[int], str], delta: bool = False) -> RequestOutput:
    """The Python RequestOutput of a C++ one; `prompt` replaces the C++ prompt text (which is empty for ids).
    With `delta`, each completion holds only what this output added (vLLM's RequestOutputKind.DELTA)."""
    outputs = []
    for co in c.outputs:
        token_ids = list(co.delta_token_ids if delta else co.token_ids)
        logprobs = cumulative = None
        if want_logprobs:
            entries = co.logprobs[len(co.logprobs) - len(token_ids):] if delta else co.logprobs
            logprobs = [_logprob_dict(e, decode) for e in entries]
            cumulative = float(sum(e.logprobs[0] for e in co.logprobs))
        outputs.append(CompletionOutput(co.index, co.delta_text if delta else co.text, token_ids, cumulative,
                                        logprobs, co.finish_reason, co.stop_reason))
    prompt_logprobs = None
    if want_prompt_logprobs:
        prompt_logprobs = [None if e is None else _logprob_dict(e, decode) for e in c.prompt_logprobs]
    return RequestOutput(c.request_id, prompt if prompt is not None else (c.prompt or None),
                         list(c.prompt_token_ids), prompt_logprobs, outputs, c.finished, c.num_cached_tokens)
