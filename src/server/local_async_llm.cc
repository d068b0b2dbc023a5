// LocalAsyncLLM: the engine thread loop.
#include "server/local_async_llm.h"

#include "core/logging.h"

namespace llmserve::server {

LocalAsyncLLM::LocalAsyncLLM(std::unique_ptr<LLMEngine> engine, const Tokenizer *tokenizer, int64_t vocab_size)
    : engine_(std::move(engine)), tokenizer_(tokenizer), vocab_size_(vocab_size) {
  thread_ = std::thread([this] { loop(); });
}

LocalAsyncLLM::~LocalAsyncLLM() { shutdown(); }

Status LocalAsyncLLM::add_request(const std::string &request_id, const PromptInput &prompt,
                                  const SamplingParams &params, int32_t priority, RequestOutputCallback on_output) {
  (void)priority;
  std::lock_guard<std::mutex> lock(mu_);
  if (!healthy_.load() || stop_) return {StatusCode::kUnavailable, "the engine is not running"};
  RETURN_IF_ERROR(engine_->add_request(request_id, prompt, params));
  callbacks_[request_id] = std::move(on_output);
  cv_.notify_one();
  return ok_status();
}

void LocalAsyncLLM::abort_request(const std::string &request_id) {
  std::lock_guard<std::mutex> lock(mu_);
  engine_->abort_request(request_id);
  cv_.notify_one();
}

void LocalAsyncLLM::set_stats_callback(StatsCallback callback) {
  std::lock_guard<std::mutex> lock(mu_);
  stats_ = std::move(callback);
}

void LocalAsyncLLM::shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    cv_.notify_one();
  }
  if (thread_.joinable()) thread_.join();
}

void LocalAsyncLLM::loop() {
  for (;;) {
    std::vector<std::pair<RequestOutputCallback, RequestOutput>> ready;
    IterationStats stats;
    StatsCallback stats_cb;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stop_ || engine_->has_unfinished(); });
      if (stop_) return;
      StatusOr<std::vector<RequestOutput>> outs = engine_->step();
      if (!outs.ok()) {
        LOG(ERROR) << "engine step failed: " << outs.status().message();
        healthy_ = false;
        return;
      }
      for (RequestOutput &o : *outs) {
        for (const CompletionOutput &c : o.outputs) stats.num_generation_tokens += c.delta_token_ids.size();
        auto it = callbacks_.find(o.request_id);
        if (it == callbacks_.end()) continue;
        RequestOutputCallback cb = it->second;
        if (o.finished) {
          callbacks_.erase(it);
          FinishedRequestStats f;
          f.finish_reason =
              o.outputs.empty() || !o.outputs[0].finish_reason ? FinishReason::kStop : *o.outputs[0].finish_reason;
          f.num_prompt_tokens = static_cast<int64_t>(o.prompt_token_ids.size());
          stats.finished_requests.push_back(f);
        }
        ready.emplace_back(std::move(cb), std::move(o));
      }
      stats.scheduler_stats = engine_->last_stats();
      stats_cb = stats_;
    }
    for (auto &[cb, out] : ready) cb(std::move(out));
    if (stats_cb) stats_cb(stats);
  }
}

}  // namespace llmserve::server
