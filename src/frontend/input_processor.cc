// InputProcessor: validation, tokenization and n fan-out (the checks LLMEngine::add_request used to hold).
#include "frontend/input_processor.h"

#include <algorithm>
#include <utility>

#include "core/logging.h"
#include "engine/structured_output.h"
#include "runtime/model_runner.h"
#include "runtime/sampler.h"

namespace llmserve {

EosTokenIds resolve_eos_token_ids(const Tokenizer *tokenizer, const std::vector<int32_t> &model_eos_token_ids,
                                  int64_t vocab_size) {
  EosTokenIds e;
  if (tokenizer != nullptr && tokenizer->eos_token_id()) e.eos_token_id = tokenizer->eos_token_id();
  std::vector<int32_t> all_eos = model_eos_token_ids;
  if (tokenizer != nullptr) {
    for (int32_t id : tokenizer->eos_token_ids()) all_eos.push_back(id);
  }
  if (!e.eos_token_id && !all_eos.empty()) e.eos_token_id = all_eos.front();
  for (int32_t id : all_eos) {
    if (id >= 0 && id < vocab_size && id != e.eos_token_id &&
        std::find(e.extra_eos_ids.begin(), e.extra_eos_ids.end(), id) == e.extra_eos_ids.end()) {
      e.extra_eos_ids.push_back(id);
    }
  }
  return e;
}

std::shared_ptr<structured::GrammarCompiler> make_grammar_compiler(const Tokenizer *tokenizer, int64_t vocab_size,
                                                                   const std::vector<int32_t> &model_eos_token_ids) {
  if (tokenizer == nullptr) return nullptr;
  const EosTokenIds eos = resolve_eos_token_ids(tokenizer, model_eos_token_ids, vocab_size);
  std::vector<int32_t> eos_ids = eos.extra_eos_ids;
  if (eos.eos_token_id) eos_ids.insert(eos_ids.begin(), *eos.eos_token_id);
  StatusOr<std::unique_ptr<structured::GrammarCompiler>> compiler =
      structured::GrammarCompiler::create(*tokenizer, static_cast<int32_t>(vocab_size), eos_ids);
  if (!compiler.ok()) {
    LOG(WARNING) << "structured output is not available for this model: " << compiler.status().message();
    return nullptr;
  }
  return std::move(*compiler);
}

void attach_grammar_compiler(const Tokenizer *tokenizer, EngineCoreConfig *config) {
  config->scheduler.grammar_compiler =
      make_grammar_compiler(tokenizer, config->vocab_size, config->model_eos_token_ids);
}

InputProcessor::InputProcessor(const Tokenizer *tokenizer, const EngineCoreInfo &core)
    : tokenizer_(tokenizer),
      vocab_size_(core.vocab_size),
      max_model_len_(core.max_model_len),
      policy_(core.scheduling_policy),
      eos_(resolve_eos_token_ids(tokenizer, core.model_eos_token_ids, core.vocab_size)),
      grammar_compiler_(core.grammar_compiler) {}

StatusOr<ProcessedRequest> InputProcessor::process(const std::string &request_id, const PromptInput &prompt,
                                                   const SamplingParams &params, int32_t priority,
                                                   double arrival_time) const {
  const int64_t vocab = vocab_size_;
  RETURN_IF_ERROR(params.validate(vocab));
  if (priority != 0 && policy_ != SchedulingPolicy::kPriority) {
    return invalid_argument("priority: got priority " + std::to_string(priority) +
                            " but priority scheduling is not enabled (scheduling_policy is fcfs)");
  }
  if (!params.stop.empty() && tokenizer_ == nullptr) {
    return invalid_argument("stop: stop strings need a tokenizer");
  }
  ProcessedRequest out;
  std::vector<int32_t> ids = prompt.token_ids;
  if (ids.empty()) {
    if (tokenizer_ == nullptr) return invalid_argument("prompt: text prompts need a tokenizer");
    ids = tokenizer_->encode(prompt.text, true);
    out.prompt_text = prompt.text;
  }
  if (ids.empty()) return invalid_argument("prompt: the prompt cannot be empty");
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab) {
      return invalid_argument("prompt: token id " + std::to_string(id) + " is outside the vocabulary (" +
                              std::to_string(vocab) + ")");
    }
  }
  const int64_t len = static_cast<int64_t>(ids.size());
  if (len >= max_model_len_) {
    return invalid_argument("prompt: the prompt (length " + std::to_string(len) +
                            ") is longer than the maximum model length of " + std::to_string(max_model_len_));
  }
  if (params.max_tokens && len + *params.max_tokens > max_model_len_) {
    return invalid_argument("max_tokens: the prompt (" + std::to_string(len) + " tokens) + max_tokens (" +
                            std::to_string(*params.max_tokens) + ") exceeds max_model_len (" +
                            std::to_string(max_model_len_) + ")");
  }
  SamplingParams child = params;
  child.n = 1;
  if (!params.ignore_eos) {
    child.stop_token_ids.insert(child.stop_token_ids.end(), eos_.extra_eos_ids.begin(), eos_.extra_eos_ids.end());
  }
  // Structured output: the grammar compiles here (cached for the core's add_request), so a bad schema / regex /
  // grammar is an error of this request before anything is scheduled.
  if (params.structured_outputs) {
    if (grammar_compiler_ == nullptr) {
      return invalid_argument(
          "structured_outputs: constrained decoding is not available for this model (it needs a tokenizer whose "
          "vocabulary the grammar engine can read)");
    }
    RETURN_IF_ERROR(make_grammar_matcher(grammar_compiler_.get(), *params.structured_outputs).status());
  }
  // The sampler's own range checks, so a bad value fails here and not inside a batch with other requests.
  RETURN_IF_ERROR(Sampler::validate(to_sampling_settings(child, all_stop_token_ids(child, eos_.eos_token_id)), vocab));

  EngineCoreRequest parent;
  parent.request_id = request_id;
  parent.prompt_token_ids = ids;
  parent.sampling_params = std::move(child);
  parent.sampling_params.n = params.n;
  parent.eos_token_id = eos_.eos_token_id;
  parent.arrival_time = arrival_time;
  parent.priority = priority;
  // n > 1: the engine's fan-out (children "<i>_<id>", seeds seed + i, as vLLM); n = 1 keeps the id.
  if (params.n == 1) {
    out.children.push_back(std::move(parent));
    out.children.back().sampling_params.n = 1;
  } else {
    out.children = fan_out_parallel_sampling(parent);
  }
  for (const EngineCoreRequest &c : out.children) out.child_ids.push_back(c.request_id);
  out.prompt_token_ids = std::move(ids);
  return out;
}

}  // namespace llmserve
