# Every field of OpenAI's request schemas (read from the official client's own type definitions) and of vLLM's
# extensions is either honoured or refused with 400 naming it — never silently ignored. A field answered 200 must be
# one this file lists as acted on (with the value sent, where only some values are supported); anything else must
# be refused. A new field in the client's schema is tested the day the client pin moves.
import json
import typing

import pytest
from openai.types import completion_create_params as completion_params
from openai.types.chat import completion_create_params as chat_params

# vLLM's extra request fields (its protocol.py), beyond OpenAI's.
VLLM_FIELDS = ["top_k", "min_p", "repetition_penalty", "min_tokens", "stop_token_ids", "ignore_eos",
               "include_stop_str_in_output", "skip_special_tokens", "spaces_between_special_tokens",
               "prompt_logprobs", "priority", "return_tokens_as_token_ids", "add_special_tokens", "use_beam_search",
               "length_penalty", "truncate_prompt_tokens", "allowed_token_ids", "bad_words", "guided_json",
               "guided_regex", "guided_choice", "guided_grammar", "guided_decoding_backend", "structured_outputs",
               "logits_processors", "request_id", "cache_salt", "kv_transfer_params", "vllm_xargs", "return_token_ids",
               "prompt_embeds", "mm_processor_kwargs", "documents", "chat_template", "chat_template_kwargs",
               "add_generation_prompt", "continue_final_message", "echo"]

# Acted on, with a value this server supports. (Other values of some of them are refused: see
# test_openai_server.py::test_fields_needing_missing_features_are_refused.)
COMMON = {"model": "default", "n": 1, "temperature": 0.5, "top_p": 0.9, "seed": 3, "stop": ["zz"],
          "frequency_penalty": 0.1, "presence_penalty": 0.1, "logit_bias": {"5": -1}, "top_k": 4, "min_p": 0.05,
          "repetition_penalty": 1.1, "min_tokens": 1, "stop_token_ids": [7], "ignore_eos": True,
          "include_stop_str_in_output": True, "skip_special_tokens": False, "spaces_between_special_tokens": False,
          "prompt_logprobs": 1, "priority": 0, "return_tokens_as_token_ids": True, "add_special_tokens": True,
          "use_beam_search": False, "stream_options": None, "response_format": {"type": "text"}, "echo": False,
          "guided_json": {"type": "object"}, "guided_regex": "x", "guided_choice": ["a", "b"],
          "guided_grammar": 'root ::= "a"', "structured_outputs": {"regex": "x"}}
HONOURED = {
    "completions": {**COMMON, "prompt": "hi", "max_tokens": 2, "logprobs": 1, "best_of": 1},
    "chat": {**COMMON, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "max_completion_tokens": 2,
             "logprobs": True, "top_logprobs": 1, "tools": [], "tool_choice": "none", "modalities": ["text"],
             "documents": [], "chat_template": "{{ messages[0].content }}", "chat_template_kwargs": {"x": 1},
             "add_generation_prompt": True, "continue_final_message": False},
}
BASE = {"completions": {"prompt": "hi", "max_tokens": 2}, "chat": {"messages": [{"role": "user", "content": "hi"}],
                                                                  "max_tokens": 2}}
SCHEMAS = {"completions": completion_params.CompletionCreateParamsBase, "chat": chat_params.CompletionCreateParamsBase}
PATHS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}
# Fields valid only together with another.
NEEDS = {"stream_options": {"stream": True, "stream_options": {"include_usage": True}},
         "top_logprobs": {"logprobs": True}}


def fields(endpoint):
    return sorted(set(typing.get_type_hints(SCHEMAS[endpoint])) | set(VLLM_FIELDS))


@pytest.mark.parametrize("endpoint", ["completions", "chat"])
def test_every_schema_field_is_honoured_or_refused(default_server, endpoint):
    names = fields(endpoint)
    assert {"model", "temperature", "stop", "n"} <= set(names)  # the client's schema was read
    outcome = {}
    for name in names:
        body = dict(BASE[endpoint])
        body[name] = HONOURED[endpoint].get(name, "x")
        body.update(NEEDS.get(name, {}))
        status, data = default_server.request("POST", PATHS[endpoint], json.dumps(body))
        if name in HONOURED[endpoint]:
            assert status == 200, (name, data)
        else:
            assert status == 400, (name, status, data)
            assert json.loads(data)["error"]["param"] == name, (name, data)
        outcome[name] = status
    refused = sorted(n for n, s in outcome.items() if s == 400)
    print(f"{endpoint}: {len(outcome) - len(refused)} honoured, {len(refused)} refused: {', '.join(refused)}")
