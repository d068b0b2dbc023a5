// OpenAI protocol, response side: the JSON pieces of completion and chat responses and stream chunks (choices,
// logprobs in the legacy completions and the chat format, usage, finish/stop reasons). Pure functions of their
// inputs, so they are unit-tested without an engine. Invariant: every number is finite (logprobs are clamped
// to -9999 as vLLM does) so the output is always valid JSON.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "engine/scheduler_output.h"
#include "server/protocol.h"

namespace llmserve::server {

// The text a logprob entry shows for a token id ("token_id:N" with return_tokens_as_token_ids).
using TokenNamer = std::function<std::string(int32_t)>;

const char *finish_reason_json(FinishReason reason);  // "stop" | "length" | "abort"
OJson stop_reason_json(const StopReason &reason);     // null (EOS), the id or the string

// Legacy completions logprobs {text_offset, token_logprobs, tokens, top_logprobs} for `ids` (one entry in
// `logprobs` per id: the sampled token first, then the top-k). `offset` is the text offset of the first token;
// it is advanced past the tokens.
OJson completion_logprobs(const std::vector<int32_t> &ids, const std::vector<TokenLogprobs> &logprobs,
                          const TokenNamer &namer, size_t *offset);
// Chat logprobs {content: [{token, logprob, bytes, top_logprobs: [...]}]} with `top_k` alternatives each.
OJson chat_logprobs(const std::vector<int32_t> &ids, const std::vector<TokenLogprobs> &logprobs,
                    const TokenNamer &namer, int32_t top_k);

// vLLM's prompt_logprobs: per prompt position null (position 0) or {"<id>": {logprob, rank, decoded_token}} with
// the prompt token first, then the top-k (ranks 1..k).
OJson prompt_logprobs_json(const std::vector<std::optional<TokenLogprobs>> &positions, const TokenNamer &namer);

OJson usage_json(int64_t prompt_tokens, int64_t completion_tokens);

// Response envelopes: {"id", "object", "created", "model", "choices": choices} (+ usage when given).
OJson completion_envelope(const std::string &id, const char *object, int64_t created, const std::string &model,
                          OJson choices);

// A random id "<prefix>-<32 hex digits>".
std::string random_id(const std::string &prefix);

}  // namespace llmserve::server
