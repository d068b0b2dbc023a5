// InputProcessor: the frontend's request gate, shared by LLMEngine and AsyncLLM — validates sampling params
// and the prompt (tokenizing text), stamps the model's EOS ids (resolved here with the tokenizer: the core has
// none) and fans n > 1 out into the core's child requests. Invariant: what it returns passes every check the core and
// the sampler make, so a request it accepts is never rejected inside a batch with others. Stateless and thread-safe
// (const).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/request.h"
#include "engine/sampling_params.h"
#include "executor/engine_core_builder.h"
#include "tokenizer/tokenizer.h"

namespace llmserve {

// The model's EOS ids as requests carry them (vLLM's generation-config handling): `eos_token_id` is each
// request's EOS; every further EOS id joins its stop_token_ids unless ignore_eos. Both reach the core's one
// stop-id set (engine's all_stop_token_ids).
struct EosTokenIds {
  std::optional<int32_t> eos_token_id;  // the tokenizer's EOS, else the model config's first
  std::vector<int32_t> extra_eos_ids;   // the config's and the tokenizer's other EOS ids, in the vocabulary, unique
};
// `tokenizer` may be null; `model_eos_token_ids` is the core's (EngineCoreInfo).
EosTokenIds resolve_eos_token_ids(const Tokenizer *tokenizer, const std::vector<int32_t> &model_eos_token_ids,
                                  int64_t vocab_size);

// Structured output: a grammar compiler over `tokenizer` for a model of `vocab_size` logits, whose grammars end on the
// model's EOS ids (resolved as for requests). Null (logged) without a tokenizer, or with one whose vocabulary the
// grammar engine cannot read: constrained requests are then refused with a message saying why.
std::shared_ptr<structured::GrammarCompiler> make_grammar_compiler(const Tokenizer *tokenizer, int64_t vocab_size,
                                                                   const std::vector<int32_t> &model_eos_token_ids);
// The compiler of a core built from `config`, stored in config->scheduler.grammar_compiler (so config->info() hands
// it to an in-process frontend: one cache for validation and the core).
void attach_grammar_compiler(const Tokenizer *tokenizer, EngineCoreConfig *config);

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
  // `core`: what the engine core reported (its config in process, its Ready handshake from a process).
  InputProcessor(const Tokenizer *tokenizer, const EngineCoreInfo &core);

  // InvalidArgument naming the field (sampling params, an empty / too long prompt, ids outside the vocabulary,
  // text or stop strings without a tokenizer, a non-zero priority without the priority policy). `arrival_time`
  // orders FCFS.
  StatusOr<ProcessedRequest> process(const std::string &request_id, const PromptInput &prompt,
                                     const SamplingParams &params, int32_t priority, double arrival_time) const;

  int64_t max_model_len() const { return max_model_len_; }
  int64_t vocab_size() const { return vocab_size_; }

 private:
  const Tokenizer *tokenizer_;
  int64_t vocab_size_;
  int64_t max_model_len_;
  SchedulingPolicy policy_;
  EosTokenIds eos_;
  std::shared_ptr<structured::GrammarCompiler> grammar_compiler_;  // null: constrained requests are refused
};

}  // namespace llmserve
