// AsyncLLM over an EngineCoreClient: requests validated on the caller's thread, one output thread running the
// OutputProcessor and the stats. Core ids are "<id>-<counter>" (vLLM gives internal ids a unique suffix too),
// so a late output of a finished request can never be taken for a new request that reuses its id.
#include "frontend/async_llm.h"

#include <atomic>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "core/logging.h"
#include "frontend/iteration_stats.h"

namespace llmserve {
namespace {

class AsyncLLMImpl final : public AsyncLLM {
 public:
  AsyncLLMImpl(std::unique_ptr<EngineCoreClient> client, const Tokenizer *tokenizer, const EngineCoreInfo &core)
      : client_(std::move(client)), tokenizer_(tokenizer), input_processor_(tokenizer, core), processor_(tokenizer) {
    output_thread_ = std::thread([this] { output_loop(); });
  }
  ~AsyncLLMImpl() override { shutdown(); }

  Status add_request(const std::string &request_id, const PromptInput &prompt, const SamplingParams &params,
                     int32_t priority, RequestOutputCallback on_output) override;
  void abort_request(const std::string &request_id) override;
  void set_stats_callback(StatsCallback callback) override {
    std::lock_guard<std::mutex> lock(stats_mu_);
    stats_callback_ = std::make_shared<StatsCallback>(std::move(callback));
  }
  const Tokenizer *tokenizer() const override { return tokenizer_; }
  int64_t max_model_len() const override { return input_processor_.max_model_len(); }
  int64_t vocab_size() const override { return input_processor_.vocab_size(); }
  bool healthy() const override { return healthy_.load(); }
  void shutdown() override;

 private:
  struct RequestState {
    std::string external_id;
    std::shared_ptr<RequestOutputCallback> callback;
  };
  // One step's work for after the lock: callbacks to run, stop strings to send, stats to publish.
  struct Dispatch {
    std::vector<std::pair<std::shared_ptr<RequestOutputCallback>, RequestOutput>> outputs;
    std::vector<std::pair<std::string, std::string>> stops;
    IterationStats stats;
  };

  void output_loop();
  // Runs `outputs` through the OutputProcessor and the stats tracker. Needs mu_.
  void process_locked(const EngineCoreOutputs &outputs, Dispatch *d);
  // The core died: every live request gets a final abort output. Needs mu_.
  void fail_all_locked(const Status &status, Dispatch *d);
  void deliver(Dispatch &d, bool send_stops);

  std::unique_ptr<EngineCoreClient> client_;
  const Tokenizer *tokenizer_;
  const InputProcessor input_processor_;
  std::atomic<uint64_t> next_core_id_{0};

  std::mutex mu_;
  OutputProcessor processor_;                                          // guarded by mu_
  IterationStatsTracker tracker_;                                      // guarded by mu_
  std::unordered_map<std::string, std::string> external_to_internal_;  // guarded by mu_
  std::unordered_map<std::string, RequestState> requests_;             // by internal id; guarded by mu_
  bool dead_ = false;                                                  // guarded by mu_

  std::mutex stats_mu_;
  std::shared_ptr<StatsCallback> stats_callback_;  // guarded by stats_mu_

  std::atomic<bool> healthy_{true};
  std::atomic<bool> stopping_{false};
  std::once_flag shutdown_once_;
  std::thread output_thread_;
};

Status AsyncLLMImpl::add_request(const std::string &request_id, const PromptInput &prompt, const SamplingParams &params,
                                 int32_t priority, RequestOutputCallback on_output) {
  if (!healthy_.load()) return {StatusCode::kUnavailable, "the engine core is not running"};
  const double arrival = monotonic_seconds();
  std::string internal_id = request_id;
  internal_id += '-';
  internal_id += std::to_string(next_core_id_.fetch_add(1));
  // Tokenization and validation run here, on the caller's thread, outside the lock.
  ASSIGN_OR_RETURN(ProcessedRequest req, input_processor_.process(internal_id, prompt, params, priority, arrival));
  std::lock_guard<std::mutex> lock(mu_);
  if (dead_ || stopping_.load()) return {StatusCode::kUnavailable, "the engine core is not running"};
  if (external_to_internal_.count(request_id)) {
    return {StatusCode::kAlreadyExists, "request id '" + request_id + "' is already in use"};
  }
  external_to_internal_.emplace(request_id, internal_id);
  requests_.emplace(internal_id,
                    RequestState{request_id, std::make_shared<RequestOutputCallback>(std::move(on_output))});
  const int64_t num_prompt = static_cast<int64_t>(req.prompt_token_ids.size());
  for (const std::string &child : req.child_ids) tracker_.add_sequence(child, arrival, num_prompt);
  processor_.add_request(internal_id, std::move(req.prompt_text), std::move(req.prompt_token_ids), params,
                         req.child_ids);
  // Submitted under the lock, so an abort_request() that follows is queued after the request.
  for (EngineCoreRequest &child : req.children) client_->add_request(std::move(child));
  return ok_status();
}

void AsyncLLMImpl::abort_request(const std::string &request_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = external_to_internal_.find(request_id);
  if (it == external_to_internal_.end() || dead_) return;
  client_->abort_requests(processor_.child_ids(it->second));
}

void AsyncLLMImpl::process_locked(const EngineCoreOutputs &outputs, Dispatch *d) {
  const double now = monotonic_seconds();
  tracker_.record_step(outputs, now, &d->stats);
  OutputProcessor::Result r = processor_.process(outputs);
  for (const EngineCoreOutput &o : outputs.outputs) {
    if (o.finished()) tracker_.finish_sequence(o.request_id, *o.finish_reason, now, &d->stats);
  }
  for (const auto &[child, stop] : r.stop_string_finished) {
    tracker_.finish_sequence(child, FinishReason::kStop, now, &d->stats);
  }
  for (RequestOutput &out : r.request_outputs) {
    auto it = requests_.find(out.request_id);
    if (it == requests_.end()) continue;
    out.request_id = it->second.external_id;
    d->outputs.emplace_back(it->second.callback, std::move(out));
    if (d->outputs.back().second.finished) {
      external_to_internal_.erase(it->second.external_id);
      requests_.erase(it);
    }
  }
  d->stops = std::move(r.stop_string_finished);
  d->stats.scheduler_stats = outputs.scheduler_stats;
}

void AsyncLLMImpl::fail_all_locked(const Status &status, Dispatch *d) {
  dead_ = true;
  healthy_.store(false);
  LOG(ERROR) << "engine core failed; aborting " << requests_.size() << " live requests: " << status.to_string();
  EngineCoreOutputs finals;
  for (const std::string &id : tracker_.tracked_ids()) {
    EngineCoreOutput &o = finals.outputs.emplace_back();
    o.request_id = id;
    o.finish_reason = FinishReason::kAbort;
  }
  process_locked(finals, d);
}

void AsyncLLMImpl::deliver(Dispatch &d, bool send_stops) {
  if (send_stops && !d.stops.empty()) client_->finish_requests_stopped(d.stops);
  // Stats first: whoever sees a request's final output then also sees metrics that include it.
  std::shared_ptr<StatsCallback> stats_cb;
  {
    std::lock_guard<std::mutex> lock(stats_mu_);
    stats_cb = stats_callback_;
  }
  if (stats_cb && *stats_cb) (*stats_cb)(d.stats);
  for (auto &[callback, out] : d.outputs) (*callback)(std::move(out));
}

void AsyncLLMImpl::output_loop() {
  while (!stopping_.load()) {
    // The timeout only bounds how late a shutdown is noticed; shutdown() also wakes get_output.
    StatusOr<std::optional<EngineCoreOutputs>> got = client_->get_output(0.5);
    Dispatch d;
    if (!got.ok()) {
      if (stopping_.load()) return;
      {
        std::lock_guard<std::mutex> lock(mu_);
        fail_all_locked(got.status(), &d);
      }
      deliver(d, /*send_stops=*/false);
      return;
    }
    if (!got->has_value()) continue;
    {
      std::lock_guard<std::mutex> lock(mu_);
      process_locked(**got, &d);
    }
    deliver(d, /*send_stops=*/true);
  }
}

void AsyncLLMImpl::shutdown() {
  std::call_once(shutdown_once_, [this] {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_.store(true);
    }
    client_->shutdown();
    if (output_thread_.joinable()) output_thread_.join();
    healthy_.store(false);
  });
}

}  // namespace

std::unique_ptr<AsyncLLM> make_async_llm(std::unique_ptr<EngineCoreClient> client, const Tokenizer *tokenizer,
                                         const EngineCoreInfo &core) {
  CHECK(client != nullptr);
  return std::make_unique<AsyncLLMImpl>(std::move(client), tokenizer, core);
}

}  // namespace llmserve
