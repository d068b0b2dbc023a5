// PyEngine: what `llmserve.LLM` drives — a model loaded the way the CLI loads it (cli/engine_flags.h) and an
// LLMEngine over it. Invariant: the model and tokenizer outlive the engine (members destroyed in reverse order),
// and a failed add_request leaves nothing queued (LLMEngine's contract).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cli/engine_flags.h"
#include "core/status.h"
#include "frontend/llm_engine.h"

namespace llmserve::python {

class PyEngine {
 public:
  // Loads the model (the built-in default when model flags name none) and builds the engine. InvalidArgument
  // naming the field for bad values.
  static StatusOr<std::unique_ptr<PyEngine>> create(const cli::ModelFlags &model, const cli::EngineFlags &engine);

  Status add_request(const std::string &request_id, const PromptInput &prompt, const SamplingParams &params) {
    return engine_->add_request(request_id, prompt, params);
  }
  // One engine step; only the outputs of requests that finished in it (the offline API returns nothing else).
  StatusOr<std::vector<RequestOutput>> step_finished();
  bool abort(const std::string &request_id) { return engine_->abort_request(request_id); }
  bool has_unfinished() const { return engine_->has_unfinished(); }
  int64_t num_unfinished() const { return engine_->num_unfinished(); }

  const Tokenizer *tokenizer() const { return loaded_.tokenizer.get(); }
  int64_t vocab_size() const;
  int64_t max_model_len() const { return engine_->max_model_len(); }
  bool builtin_default() const { return loaded_.builtin_default; }
  const std::string &device() const { return device_; }  // the resolved device ("auto" resolved)

 private:
  explicit PyEngine(cli::LoadedModel loaded) : loaded_(std::move(loaded)) {}

  cli::LoadedModel loaded_;
  std::string device_;
  std::unique_ptr<LLMEngine> engine_;  // declared last: destroyed before the model it runs
};

// "auto": cuda when this build has CUDA and a device is present, else cpu; any other name unchanged.
std::string resolve_device(const std::string &device);

}  // namespace llmserve::python
