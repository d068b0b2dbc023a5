// LocalAsyncLLM: a stand-in AsyncLLM over LLMEngine on one thread (one mutex around the engine), used by
// `llmserve serve` until the ipc layer's factory lands. Invariant: every accepted request gets exactly one final
// output through its callback; callbacks run on the engine thread, outside the engine lock.
#pragma once

#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "frontend/async_llm.h"
#include "frontend/llm_engine.h"

namespace llmserve::server {

class LocalAsyncLLM : public AsyncLLM {
 public:
  LocalAsyncLLM(std::unique_ptr<LLMEngine> engine, const Tokenizer *tokenizer, int64_t vocab_size);
  ~LocalAsyncLLM() override;

  Status add_request(const std::string &request_id, const PromptInput &prompt, const SamplingParams &params,
                     int32_t priority, RequestOutputCallback on_output) override;
  void abort_request(const std::string &request_id) override;
  void set_stats_callback(StatsCallback callback) override;
  const Tokenizer *tokenizer() const override { return tokenizer_; }
  int64_t max_model_len() const override { return engine_->max_model_len(); }
  int64_t vocab_size() const override { return vocab_size_; }
  bool healthy() const override { return healthy_.load(); }
  void shutdown() override;

 private:
  void loop();

  std::unique_ptr<LLMEngine> engine_;
  const Tokenizer *tokenizer_;
  int64_t vocab_size_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, RequestOutputCallback> callbacks_;
  StatsCallback stats_;
  bool stop_ = false;
  std::atomic<bool> healthy_{true};
  std::thread thread_;
};

}  // namespace llmserve::server
