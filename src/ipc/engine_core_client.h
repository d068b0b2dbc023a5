// EngineCoreClient: how the frontend talks to an EngineCore that runs elsewhere — on its own thread
// (InprocClient, the default) or in its own process over ZMQ + msgpack (ZmqClient, `--engine-process`), the
// vLLM V1 split (DESIGN §1, §3). Invariant: every request added is answered by exactly one final
// EngineCoreOutput (finished, abort if the core rejected it), and calls from any thread never wait on a step.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "engine/request.h"
#include "engine/scheduler_output.h"

namespace llmserve {

class EngineCoreClient {
 public:
  virtual ~EngineCoreClient() = default;

  // Thread-safe; return at once (the core applies them before its next step). The frontend has validated the
  // request; should the core still reject it, its final output comes back with finish reason abort.
  virtual void add_request(EngineCoreRequest request) = 0;
  virtual void abort_requests(const std::vector<std::string> &request_ids) = 0;
  // (request id, stop string): sequences the frontend found a stop string in; the core finishes them with
  // reason stop.
  virtual void finish_requests_stopped(const std::vector<std::pair<std::string, std::string>> &stops) = 0;

  // The core's next outputs (one step's; empty steps are not sent), waiting up to `timeout_s`; nullopt on
  // timeout. An error once the core has died (the status says why); every later call fails the same way.
  // One consumer thread (the frontend's output thread) calls it.
  virtual StatusOr<std::optional<EngineCoreOutputs>> get_output(double timeout_s) = 0;

  // Stops the core (joins its thread / ends its process); live requests are dropped. Idempotent; the
  // destructor calls it.
  virtual void shutdown() = 0;
};

}  // namespace llmserve
