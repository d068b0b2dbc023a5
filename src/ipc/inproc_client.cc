// InprocClient: the core thread's loop — wait for inputs or work, apply inputs, step, publish outputs.
#include "ipc/inproc_client.h"

#include <chrono>

#include "core/logging.h"

namespace llmserve {

StatusOr<std::unique_ptr<InprocClient>> InprocClient::create(CoreFactory make_core) {
  std::unique_ptr<InprocClient> client(new InprocClient());
  std::promise<Status> built;
  std::future<Status> ready = built.get_future();
  // The promise lives in the thread's closure: set_value() may still touch it after get() returned here.
  client->thread_ = std::thread(
      [c = client.get(), f = std::move(make_core), p = std::move(built)]() mutable { c->run(std::move(f), &p); });
  Status s = ready.get();
  if (!s.ok()) {
    client->thread_.join();  // run() returns right after reporting a failed build
    return s;
  }
  return client;
}

InprocClient::~InprocClient() { shutdown(); }

void InprocClient::push_input(EngineCoreInput input) {
  {
    std::lock_guard<std::mutex> lock(input_mu_);
    if (stop_) return;
    inputs_.push_back(std::move(input));
  }
  input_cv_.notify_one();
}

void InprocClient::add_request(EngineCoreRequest request) { push_input(std::move(request)); }

void InprocClient::abort_requests(const std::vector<std::string> &request_ids) {
  if (!request_ids.empty()) push_input(AbortRequests{request_ids});
}

void InprocClient::finish_requests_stopped(const std::vector<std::pair<std::string, std::string>> &stops) {
  if (!stops.empty()) push_input(FinishRequestsStopped{stops});
}

void InprocClient::push_output(EngineCoreOutputs outputs) {
  {
    std::lock_guard<std::mutex> lock(output_mu_);
    outputs_.push_back(std::move(outputs));
  }
  output_cv_.notify_one();
}

StatusOr<std::optional<EngineCoreOutputs>> InprocClient::get_output(double timeout_s) {
  std::unique_lock<std::mutex> lock(output_mu_);
  const auto timeout = std::chrono::duration<double>(std::max(0.0, timeout_s));
  output_cv_.wait_for(lock, timeout, [this] { return !outputs_.empty() || !error_.ok(); });
  if (!outputs_.empty()) {
    EngineCoreOutputs out = std::move(outputs_.front());
    outputs_.pop_front();
    return std::optional<EngineCoreOutputs>(std::move(out));
  }
  if (!error_.ok()) return error_;
  return std::optional<EngineCoreOutputs>();
}

void InprocClient::run(CoreFactory make_core, std::promise<Status> *built) {
  StatusOr<EngineCoreInstance> made = make_core();
  if (!made.ok()) {
    built->set_value(made.status());
    return;
  }
  EngineCoreInstance instance = std::move(made).value();
  EngineCore &core = *instance.core;
  built->set_value(ok_status());

  std::deque<EngineCoreInput> batch;
  std::vector<EngineCoreOutput> rejected;
  while (true) {
    {
      std::unique_lock<std::mutex> lock(input_mu_);
      input_cv_.wait(lock, [&] { return stop_ || !inputs_.empty() || core.has_work(); });
      if (stop_) break;
      batch.swap(inputs_);
    }
    for (EngineCoreInput &input : batch) apply_engine_core_input(core, input, &rejected);
    batch.clear();
    StatusOr<std::optional<EngineCoreOutputs>> outs = step_engine_core(core, &rejected);
    if (!outs.ok()) {
      LOG(ERROR) << "engine core died: " << outs.status().to_string();
      {
        std::lock_guard<std::mutex> lock(input_mu_);
        stop_ = true;  // nobody will drain the inputs any more
        inputs_.clear();
      }
      {
        std::lock_guard<std::mutex> lock(output_mu_);
        error_ = outs.status().with_context("engine core step failed");
      }
      output_cv_.notify_all();
      break;
    }
    if (outs->has_value()) push_output(std::move(**outs));
  }
  // The core (and the device state it holds) is destroyed here, on its own thread.
}

void InprocClient::shutdown() {
  std::call_once(shutdown_once_, [this] {
    {
      std::lock_guard<std::mutex> lock(input_mu_);
      stop_ = true;
      inputs_.clear();
    }
    input_cv_.notify_all();
    if (thread_.joinable()) thread_.join();
    {
      std::lock_guard<std::mutex> lock(output_mu_);
      if (error_.ok()) error_ = Status(StatusCode::kUnavailable, "the engine core client was shut down");
      outputs_.clear();
    }
    output_cv_.notify_all();
  });
}

}  // namespace llmserve
