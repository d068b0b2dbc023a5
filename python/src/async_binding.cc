// PyAsyncEngine: the AsyncLLM hand-off to an asyncio loop (async_binding.h).
// Invariant: one pipe byte stands for "the queue is non-empty", so the loop wakes once per batch of outputs.
#include "async_binding.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "core/logging.h"
#include "engine_binding.h"
#include "frontend/async_llm_factory.h"

namespace llmserve::python {

PyAsyncEngine::PyAsyncEngine(cli::LoadedModel loaded) : loaded_(std::move(loaded)) {
  CHECK(::pipe2(pipe_, O_NONBLOCK | O_CLOEXEC) == 0);
}

PyAsyncEngine::~PyAsyncEngine() {
  if (llm_) llm_->shutdown();
  llm_.reset();
  ::close(pipe_[0]);
  ::close(pipe_[1]);
}

StatusOr<std::unique_ptr<PyAsyncEngine>> PyAsyncEngine::create(const cli::ModelFlags &model,
                                                               const cli::EngineFlags &engine) {
  RETURN_IF_ERROR(cli::check_engine_flags(engine));
  cli::ModelFlags flags = model;
  flags.device = resolve_device(model.device);
  ASSIGN_OR_RETURN(cli::LoadedModel loaded, cli::load_model_from_flags(flags, /*need_tokenizer=*/false));
  if (loaded.builtin_default && !model.tokenizer.empty()) {
    ASSIGN_OR_RETURN(loaded.tokenizer, Tokenizer::from_dir(model.tokenizer));
  }
  std::unique_ptr<PyAsyncEngine> out(new PyAsyncEngine(std::move(loaded)));
  ASSIGN_OR_RETURN(out->llm_, create_inproc_async_llm(*out->loaded_.model, out->loaded_.tokenizer.get(),
                                                      cli::to_engine_args(engine, flags)));
  return out;
}

Status PyAsyncEngine::add_request(const std::string &request_id, const PromptInput &prompt,
                                  const SamplingParams &params) {
  return llm_->add_request(request_id, prompt, params, /*priority=*/0,
                           [this](RequestOutput out) { push(std::move(out)); });
}

void PyAsyncEngine::push(RequestOutput out) {
  std::lock_guard<std::mutex> lock(mu_);
  pending_.push_back(std::move(out));
  if (!signaled_) {
    const char byte = 1;
    // The pipe holds at most this one byte, so the write cannot block or fill it.
    CHECK(::write(pipe_[1], &byte, 1) == 1);
    signaled_ = true;
  }
}

std::vector<RequestOutput> PyAsyncEngine::drain() {
  std::vector<RequestOutput> out;
  std::lock_guard<std::mutex> lock(mu_);
  out.swap(pending_);
  if (signaled_) {
    char byte;
    while (::read(pipe_[0], &byte, 1) == 1) {
    }
    signaled_ = false;
  }
  return out;
}

}  // namespace llmserve::python
