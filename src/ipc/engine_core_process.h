// The engine-core process's side of ZmqClient: connect to the parent's sockets, build the core (reporting a
// build error instead of Ready), then the busy loop — drain inputs, step while there is work, publish
// outputs, sleep in zmq_poll when idle. Invariant: the process never outlives its parent and always tells the
// parent why it stops (Failure) unless the parent asked it to (ShutdownCore) or is gone.
#pragma once

#include <functional>
#include <string>

#include "core/status.h"
#include "executor/engine_core_builder.h"

namespace llmserve {

// A built core and the config it was built from (its Ready message is config.info()).
struct EngineCoreProcessCore {
  EngineCoreConfig config;
  EngineCoreInstance instance;
};

// Runs the engine-core process until shutdown; returns the process exit code (0 after a requested shutdown
// or the parent's death, 1 after a build or step failure, 2 when the sockets cannot be reached).
// `make_core` runs after the sockets are connected, so its error reaches the parent.
int run_engine_core_process(const std::string &input_address, const std::string &output_address,
                            const std::function<StatusOr<EngineCoreProcessCore>()> &make_core);

}  // namespace llmserve
