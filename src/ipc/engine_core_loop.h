// What the engine-core loop does with the frontend's inputs and when it steps — shared by the core thread
// (InprocClient) and the engine-core process, so both behave identically. Invariant: every request handed to
// apply_engine_core_input gets exactly one final output (the core's, or an abort if the core rejected it).
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "core/status.h"
#include "engine/engine_core.h"

namespace llmserve {

struct AbortRequests {
  std::vector<std::string> request_ids;
};
struct FinishRequestsStopped {
  std::vector<std::pair<std::string, std::string>> stops;  // (request id, stop string)
};
using EngineCoreInput = std::variant<EngineCoreRequest, AbortRequests, FinishRequestsStopped>;

// Applies one input (consumes a request). A request the core rejects (a race the frontend could not see, e.g.
// its id still live) gets a final abort output appended to `rejected`.
void apply_engine_core_input(EngineCore &core, EngineCoreInput &input, std::vector<EngineCoreOutput> *rejected);

// One core step when there is work or a rejected request to answer: the outputs to publish (nullopt when
// there is nothing to send: empty steps are not sent), or the core's error (the core must then be dropped).
// Clears `rejected` into the outputs.
StatusOr<std::optional<EngineCoreOutputs>> step_engine_core(EngineCore &core, std::vector<EngineCoreOutput> *rejected);

}  // namespace llmserve
