// SamplingParams: how one request samples and when it stops, with vLLM's defaults and validation ranges.
// validate() is the only gate for user-supplied values: every invalid field yields InvalidArgument naming it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/sampling_eps.h"
#include "core/status.h"

namespace llmserve {

// vLLM's StructuredOutputsParams: the one constraint on a request's output (exactly one field set). The engine turns
// it into a grammar (structured/) and masks every sampled token to it; a finished output then matches it.
struct StructuredOutputsParams {
  std::optional<std::string> json;                 // a JSON Schema, as JSON text
  std::optional<std::string> regex;                // the whole output fullmatches it
  std::optional<std::vector<std::string>> choice;  // the output is one of these strings
  std::optional<std::string> grammar;              // an EBNF / GBNF grammar (root rule `root`)
  bool json_object = false;                        // any JSON object

  int num_constraints() const {
    return (json ? 1 : 0) + (regex ? 1 : 0) + (choice ? 1 : 0) + (grammar ? 1 : 0) + (json_object ? 1 : 0);
  }
  bool operator==(const StructuredOutputsParams&) const = default;
};

struct SamplingParams {
  // Largest `logprobs` / `prompt_logprobs` accepted (vLLM's default max_logprobs).
  static constexpr int32_t kMaxLogprobs = 20;
  // logit_bias values are clamped by OpenAI to this magnitude; we reject beyond it.
  static constexpr double kMaxLogitBias = 100.0;

  int32_t n = 1;                           // completions per prompt; the frontend fans out n child requests
  double temperature = 1.0;                // >= 0; 0 means greedy
  double top_p = 1.0;                      // (0, 1]
  int32_t top_k = 0;                       // 0 or -1: disabled; else >= 1
  double min_p = 0.0;                      // [0, 1]
  std::optional<int64_t> seed;             // per-request generator seed; nullopt: engine-wide randomness
  std::optional<int64_t> max_tokens = 16;  // >= 1; nullopt: until max_model_len
  int64_t min_tokens = 0;                  // EOS / stop ids are ignored until this many outputs exist
  std::vector<std::string> stop;           // stop strings, checked by the frontend's detokenizer
  std::vector<int32_t> stop_token_ids;     // finish with reason "stop" and stop_reason = the id
  bool ignore_eos = false;                 // keep generating past EOS
  bool include_stop_str_in_output = false;
  double presence_penalty = 0.0;                       // [-2, 2]
  double frequency_penalty = 0.0;                      // [-2, 2]
  double repetition_penalty = 1.0;                     // > 0; 1 disables
  std::vector<std::pair<int32_t, double>> logit_bias;  // (token id in [0, vocab), bias in [-100, 100])
  std::optional<int32_t> logprobs;                     // top-k logprobs per sampled token, [0, kMaxLogprobs]
  std::optional<int32_t> prompt_logprobs;              // top-k logprobs per prompt token, [0, kMaxLogprobs]
  bool skip_special_tokens = true;
  bool spaces_between_special_tokens = true;
  // Constrained decoding (response_format, structured_outputs, guided_*, tool_choice required / named); nullopt: free.
  std::optional<StructuredOutputsParams> structured_outputs;

  bool greedy() const { return temperature < kSamplingEps; }  // core/sampling_eps.h

  // OK, or InvalidArgument whose message starts with the offending field's name. `vocab_size` bounds
  // token ids in logit_bias and stop_token_ids.
  Status validate(int64_t vocab_size) const;
};

// vLLM's all_stop_token_ids, the one definition of a request's stop-id set: stop_token_ids, plus `eos_token_id`
// unless ignore_eos (then EOS is an ordinary token). Once min_tokens outputs exist, sampling one of them finishes
// the request (Scheduler's stop check); before that the Sampler masks them all (min_tokens).
std::vector<int32_t> all_stop_token_ids(const SamplingParams &params, std::optional<int32_t> eos_token_id);

}  // namespace llmserve
