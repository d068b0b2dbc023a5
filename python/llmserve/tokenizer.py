# The tokenizer LLM.get_tokenizer() returns: the engine's own C++ tokenizer (HF tokenizer.json compatible) with
# transformers' encode / decode / apply_chat_template names. Invariant: it is the very tokenizer the engine uses.
from __future__ import annotations

import json
from typing import Any, Optional, Union


class Tokenizer:
    def __init__(self, c_tokenizer: Any, owner: Any = None) -> None:
        self._c = c_tokenizer
        self._owner = owner  # keeps the engine that owns the C++ tokenizer alive

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return self._c.encode(text, add_special_tokens)

    def decode(self, token_ids: Union[int, list[int]], skip_special_tokens: bool = False) -> str:
        ids = [token_ids] if isinstance(token_ids, int) else list(token_ids)
        return self._c.decode(ids, skip_special_tokens)

    def convert_ids_to_tokens(self, ids: list[int]) -> list[Optional[str]]:
        return [self._c.id_to_token(i) for i in ids]

    @property
    def vocab_size(self) -> int:
        return self._c.vocab_size

    @property
    def eos_token_id(self) -> Optional[int]:
        return self._c.eos_token_id

    @property
    def bos_token_id(self) -> Optional[int]:
        return self._c.bos_token_id

    @property
    def chat_template(self) -> Optional[str]:
        return self._c.chat_template("default")

    def apply_chat_template(self, conversation: list[dict[str, Any]], chat_template: Optional[str] = None,
                            add_generation_prompt: bool = False, tokenize: bool = True,
                            continue_final_message: bool = False, tools: Optional[list[dict]] = None,
                            documents: Optional[list[dict]] = None, **kwargs: Any) -> Union[str, list[int]]:
        """transformers' apply_chat_template: renders with the engine's Jinja implementation (byte-identical to
        jinja2 as transformers configures it); extra keyword arguments reach the template."""
        if add_generation_prompt and continue_final_message:
            raise ValueError("continue_final_message and add_generation_prompt are not compatible")
        source = chat_template if chat_template is not None else self.chat_template
        if source is None:
            raise ValueError("chat_template: the tokenizer has none; pass chat_template=")
        context = {"messages": list(conversation), "add_generation_prompt": add_generation_prompt,
                   "bos_token": self._c.bos_token, "eos_token": self._c.eos_token}
        if tools is not None:
            context["tools"] = tools
        if documents is not None:
            context["documents"] = documents
        context.update(kwargs)
        try:
            text = _C_render(source, json.dumps(context))
        except TypeError as e:
            raise ValueError(f"conversation: {e}") from None
        if continue_final_message:  # cut after the final message's content, as transformers does
            final = conversation[-1]["content"]
            if isinstance(final, str) and final.strip() in text:
                end = text.rindex(final.strip()) + len(final.strip())
                text = text[:end]
            else:
                raise ValueError("continue_final_message: the final message's content is not in the rendered chat")
        return self.encode(text, add_special_tokens=False) if tokenize else text

    def __repr__(self) -> str:
        return f"llmserve.Tokenizer(vocab_size={self.vocab_size})"


def _C_render(source: str, context_json: str) -> str:
    from . import _C
    return _C.render_chat_template(source, context_json)
