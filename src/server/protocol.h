// OpenAI protocol, request side: the JSON bodies of /v1/completions and /v1/chat/completions (OpenAI's field
// names plus vLLM's extensions) turned into typed requests with SamplingParams. Invariant: a request that
// parses OK holds only values SamplingParams::validate accepts; every error is InvalidArgument whose message
// starts with the offending field's name (param_of() recovers it for the error JSON). Nothing here throws.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/sampling_params.h"
#include "frontend/input_processor.h"
#include "server/structured_request.h"

namespace llmserve::server {

using OJson = nlohmann::ordered_json;

// Bounds that depend on the model or the deployment.
struct ProtocolLimits {
  int64_t vocab_size = 0;  // token ids in prompts, logit_bias, stop_token_ids must be below it
  int32_t max_n = 128;     // n (choices per prompt) at most
  size_t max_prompts = 1024;
};

// Fields common to both endpoints.
struct GenerationRequest {
  std::string model;  // empty: the served model
  SamplingParams params;
  int32_t priority = 0;
  bool stream = false;
  bool include_usage = false;           // stream_options.include_usage: a last chunk with usage
  bool continuous_usage_stats = false;  // stream_options.continuous_usage_stats: usage on every chunk
  bool echo = false;
  // The response carries vLLM's prompt_logprobs field: the request asked for it (echo with logprobs scores the
  // prompt too, but puts those logprobs at the head of the choice's logprobs instead).
  bool prompt_logprobs_field = false;
  bool return_tokens_as_token_ids = false;  // logprob tokens as "token_id:N"
  std::optional<bool> add_special_tokens;   // unset: the endpoint's default
  // The field params.structured_outputs came from (response_format, structured_outputs, guided_*, tools): a compile
  // error found later is reported under it. Empty: unconstrained.
  std::string constraint_field;
};

struct CompletionRequest : GenerationRequest {
  std::vector<PromptInput> prompts;  // each a text or token ids; choices are numbered prompt * n + i
};

struct ChatRequest : GenerationRequest {
  OJson messages;         // as given, with list-of-parts content flattened to a string
  bool logprobs = false;  // chat: logprobs is a bool, top_logprobs the count
  bool add_generation_prompt = true;
  bool continue_final_message = false;
  std::optional<std::string> chat_template;  // a per-request template source
  OJson chat_template_kwargs = OJson::object();
  OJson tools = nullptr;
  OJson documents = nullptr;
  ToolChoice tool_choice = ToolChoice::kNone;  // kRequired / kNamed set params.structured_outputs
  std::string named_tool;                      // kNamed: the function called
};

// Parses a request body; `defaults` are the server's sampling defaults (e.g. from generation_config.json).
StatusOr<CompletionRequest> parse_completion_request(const OJson &body, const SamplingParams &defaults,
                                                     const ProtocolLimits &limits);
StatusOr<ChatRequest> parse_chat_request(const OJson &body, const SamplingParams &defaults,
                                         const ProtocolLimits &limits);

// The field a message names: its leading identifier ("max_tokens must be ..." -> "max_tokens"); empty if none.
std::string param_of(const std::string &message);

// Parses a body as JSON without throwing: InvalidArgument for malformed JSON or a body that is not an object.
StatusOr<OJson> parse_json_object(const std::string &body);

}  // namespace llmserve::server
