// InputProcessor: the frontend's request gate, shared by LLMEngine and AsyncLLM — validates sampling params
// and the prompt (tokenizing text), adds the model's extra EOS ids as stop ids, and fans n > 1 out into the
// core's child requests. Invariant: what it returns passes every check the core and the sampler make, so a
// request it accepts is never rejected inside a batch with others. Stateless and thread-safe (const).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/request.h"
#include "engine/sampling_params.h"
#include "frontend/engine_core_builder.h"
#include "tokenizer/tokenizer.h"

namespace llmserve {

// A prompt as text (needs a tokenizer) or as token ids (used when non-empty).
struct PromptInput {
  std::string text;
  std::vector<int32_t> token_ids;
};

// One validated request, ready for the core and the OutputProcessor.
struct ProcessedRequest {
  std::string prompt_text;  // the text prompt; empty when given as ids
  std::vector<int32_t> prompt_token_ids;
  std::vector<EngineCoreRequest> children;  // n of them, in index order ("<i>_<id>" when n > 1, else the id)
  std::vector<std::string> child_ids;       // children's request ids, same order
};

class InputProcessor {
 public:
  // `tokenizer` may be null (ids-only prompts, no stop strings) and must outlive this object.
  InputProcessor(const Tokenizer *tokenizer, const EngineCoreConfig &config);

  // InvalidArgument naming the field (sampling params, an empty / too long prompt, ids outside the vocabulary,
  // text or stop strings without a tokenizer), Unimplemented for prompt_logprobs. `arrival_time` orders FCFS.
  StatusOr<ProcessedRequest> process(const std::string &request_id, const PromptInput &prompt,
                                     const SamplingParams &params, int32_t priority, double arrival_time) const;

  int64_t max_model_len() const { return max_model_len_; }
  int64_t vocab_size() const { return vocab_size_; }

 private:
  const Tokenizer *tokenizer_;
  int64_t vocab_size_;
  int64_t max_model_len_;
  std::optional<int32_t> eos_token_id_;
  std::vector<int32_t> extra_eos_ids_;
};

}  // namespace llmserve
