// PyAsyncEngine: what `llmserve.AsyncLLM` drives — the in-process AsyncLLM (core on its own thread, outputs on
// the frontend's output thread) plus a hand-off queue whose pipe an asyncio loop watches. Invariant: the output
// thread never waits on Python (no GIL, only a mutex and a one-byte pipe write), and every output it produces is
// in the queue until drain() takes it.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cli/engine_flags.h"
#include "core/status.h"
#include "frontend/async_llm.h"

namespace llmserve::python {

class PyAsyncEngine {
 public:
  static StatusOr<std::unique_ptr<PyAsyncEngine>> create(const cli::ModelFlags &model, const cli::EngineFlags &engine);
  ~PyAsyncEngine();

  // Validates and submits (InvalidArgument naming the field); its outputs go to the hand-off queue.
  Status add_request(const std::string &request_id, const PromptInput &prompt, const SamplingParams &params);
  void abort(const std::string &request_id) { llm_->abort_request(request_id); }
  // The read end of the pipe that becomes readable when outputs wait in the queue.
  int fileno() const { return pipe_[0]; }
  // Every output queued so far, in arrival order; clears the pipe.
  std::vector<RequestOutput> drain();
  void shutdown() { llm_->shutdown(); }
  const Tokenizer *tokenizer() const { return loaded_.tokenizer.get(); }

 private:
  explicit PyAsyncEngine(cli::LoadedModel loaded);
  void push(RequestOutput out);

  cli::LoadedModel loaded_;
  int pipe_[2] = {-1, -1};
  std::mutex mu_;
  std::vector<RequestOutput> pending_;  // guarded by mu_
  bool signaled_ = false;               // a byte is in the pipe; guarded by mu_
  std::unique_ptr<AsyncLLM> llm_;       // declared last: its threads stop before the queue and model go
};

}  // namespace llmserve::python
