// SamplingParams::validate: vLLM's ranges and wording, one check per field, first failure wins.
// Messages name the field first so the server can report it as the OpenAI error's `param`.
#include "engine/sampling_params.h"

#include <cmath>
#include <sstream>

namespace llmserve {
namespace {

template <typename T>
std::string str(T v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

Status check_finite(const char* field, double v) {
  if (!std::isfinite(v)) return invalid_argument(std::string(field) + " must be a finite number, got " + str(v) + ".");
  return ok_status();
}

Status check_logprobs(const char* field, const std::optional<int32_t>& v) {
  if (!v) return ok_status();
  if (*v < 0) return invalid_argument(std::string(field) + " must be non-negative, got " + str(*v) + ".");
  if (*v > SamplingParams::kMaxLogprobs) {
    return invalid_argument(std::string(field) + ": requested " + str(*v) +
                            " logprobs, which is greater than the max allowed: " + str(SamplingParams::kMaxLogprobs) +
                            ".");
  }
  return ok_status();
}

}  // namespace

Status SamplingParams::validate(int64_t vocab_size) const {
  if (n < 1) return invalid_argument("n must be at least 1, got " + str(n) + ".");
  RETURN_IF_ERROR(check_finite("temperature", temperature));
  if (temperature < 0) return invalid_argument("temperature must be non-negative, got " + str(temperature) + ".");
  RETURN_IF_ERROR(check_finite("top_p", top_p));
  if (!(top_p > 0 && top_p <= 1)) return invalid_argument("top_p must be in (0, 1], got " + str(top_p) + ".");
  if (top_k < -1) {
    return invalid_argument("top_k must be 0 or -1 (disable), or at least 1, got " + str(top_k) + ".");
  }
  RETURN_IF_ERROR(check_finite("min_p", min_p));
  if (min_p < 0 || min_p > 1) return invalid_argument("min_p must be in [0, 1], got " + str(min_p) + ".");
  if (max_tokens && *max_tokens < 1) {
    return invalid_argument("max_tokens must be at least 1, got " + str(*max_tokens) + ".");
  }
  if (min_tokens < 0) {
    return invalid_argument("min_tokens must be greater than or equal to 0, got " + str(min_tokens) + ".");
  }
  if (max_tokens && min_tokens > *max_tokens) {
    return invalid_argument("min_tokens must be less than or equal to max_tokens=" + str(*max_tokens) + ", got " +
                            str(min_tokens) + ".");
  }
  for (const std::string& s : stop) {
    if (s.empty()) return invalid_argument("stop cannot contain an empty string.");
  }
  for (int32_t id : stop_token_ids) {
    if (id < 0 || id >= vocab_size) {
      return invalid_argument("stop_token_ids contains token id " + str(id) + " outside the vocabulary (size " +
                              str(vocab_size) + ").");
    }
  }
  RETURN_IF_ERROR(check_finite("presence_penalty", presence_penalty));
  if (presence_penalty < -2 || presence_penalty > 2) {
    return invalid_argument("presence_penalty must be in [-2, 2], got " + str(presence_penalty) + ".");
  }
  RETURN_IF_ERROR(check_finite("frequency_penalty", frequency_penalty));
  if (frequency_penalty < -2 || frequency_penalty > 2) {
    return invalid_argument("frequency_penalty must be in [-2, 2], got " + str(frequency_penalty) + ".");
  }
  RETURN_IF_ERROR(check_finite("repetition_penalty", repetition_penalty));
  if (repetition_penalty <= 0) {
    return invalid_argument("repetition_penalty must be greater than zero, got " + str(repetition_penalty) + ".");
  }
  for (const auto& [id, bias] : logit_bias) {
    if (id < 0 || id >= vocab_size) {
      return invalid_argument("logit_bias contains out-of-vocab token id " + str(id) +
                              ". Vocabulary size: " + str(vocab_size) + ".");
    }
    if (!std::isfinite(bias) || bias < -kMaxLogitBias || bias > kMaxLogitBias) {
      return invalid_argument("logit_bias value for token id " + str(id) + " must be in [-100, 100], got " + str(bias) +
                              ".");
    }
  }
  RETURN_IF_ERROR(check_logprobs("logprobs", logprobs));
  RETURN_IF_ERROR(check_logprobs("prompt_logprobs", prompt_logprobs));
  if (structured_outputs) {
    const StructuredOutputsParams& so = *structured_outputs;
    if (so.num_constraints() != 1) {
      return invalid_argument(
          "structured_outputs: exactly one of json, regex, choice, grammar, json_object must be "
          "set, got " +
          str(so.num_constraints()) + ".");
    }
    if (so.choice && so.choice->empty()) return invalid_argument("structured_outputs: choice cannot be empty.");
    // The grammar ends on EOS, which min_tokens would forbid: a shorter complete output could not end.
    if (min_tokens > 0) return invalid_argument("min_tokens cannot be combined with structured output.");
  }
  return ok_status();
}

std::vector<int32_t> all_stop_token_ids(const SamplingParams& params, std::optional<int32_t> eos_token_id) {
  std::vector<int32_t> ids = params.stop_token_ids;
  if (!params.ignore_eos && eos_token_id) ids.push_back(*eos_token_id);
  return ids;
}

}  // namespace llmserve
