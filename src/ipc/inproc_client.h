// InprocClient: the EngineCore on its own thread in this process (the default EngineCoreClient). Inputs go
// through a lock-protected queue that the core thread drains before each step; outputs come back through a
// second queue. Invariant: the core is built, stepped and destroyed only on its own thread, and the thread
// sleeps on a condition variable while it has neither inputs nor work (it never spins idle).
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "executor/engine_core_builder.h"
#include "ipc/engine_core_client.h"
#include "ipc/engine_core_loop.h"

namespace llmserve {

class InprocClient final : public EngineCoreClient {
 public:
  // Builds the core on the core thread (device state such as a CUDA context then belongs to that thread).
  using CoreFactory = std::function<StatusOr<EngineCoreInstance>()>;

  // Starts the core thread and waits until `make_core` has run; its error is returned (the thread is joined).
  static StatusOr<std::unique_ptr<InprocClient>> create(CoreFactory make_core);
  ~InprocClient() override;

  void add_request(EngineCoreRequest request) override;
  void abort_requests(const std::vector<std::string> &request_ids) override;
  void finish_requests_stopped(const std::vector<std::pair<std::string, std::string>> &stops) override;
  // Outputs made before the core died are still delivered, then its error; Unavailable after shutdown().
  StatusOr<std::optional<EngineCoreOutputs>> get_output(double timeout_s) override;
  void shutdown() override;

 private:
  InprocClient() = default;
  void push_input(EngineCoreInput input);
  void run(CoreFactory make_core, std::promise<Status> *built);
  void push_output(EngineCoreOutputs outputs);

  std::mutex input_mu_;
  std::condition_variable input_cv_;
  std::deque<EngineCoreInput> inputs_;  // guarded by input_mu_
  bool stop_ = false;                   // guarded by input_mu_

  std::mutex output_mu_;
  std::condition_variable output_cv_;
  std::deque<EngineCoreOutputs> outputs_;  // guarded by output_mu_
  Status error_;                           // guarded by output_mu_: why the core died (or shut down)

  std::once_flag shutdown_once_;
  std::thread thread_;
};

}  // namespace llmserve
