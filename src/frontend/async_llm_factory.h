// Building the whole serving engine for the server: an AsyncLLM over the right EngineCoreClient (ipc/, the layer
// below). Invariant: the frontend validates against what the core itself reports (EngineCoreInfo: its config in
// process, its Ready handshake from a process), so its checks (max_model_len, vocabulary) are the core's.
#pragma once

#include <memory>

#include "core/status.h"
#include "executor/engine_core_builder.h"
#include "frontend/async_llm.h"
#include "ipc/zmq_client.h"
#include "model/causal_lm.h"
#include "tokenizer/tokenizer.h"

namespace llmserve {

// The default process model: the core on its own thread in this process (InprocClient), built over `model`.
// args.log_stats is forced on (the IterationStats need the core's timestamps). `model` and `tokenizer` (may
// be null: ids-only prompts) must outlive the result. InvalidArgument naming the field for bad args.
StatusOr<std::unique_ptr<AsyncLLM>> create_inproc_async_llm(CausalLM &model, const Tokenizer *tokenizer,
                                                            EngineArgs args);

// `--engine-process`: the core in a child process (`options.args` = {"engine-core", model / engine flags...},
// see cli/serving_engine.h), reached over ZmqClient. The frontend validates against the limits the child
// reports in its handshake and resolves the EOS ids with its own tokenizer. The child's load error comes back
// as it reported it. `tokenizer` may be null and must outlive the result. Unimplemented when built without
// ZMQ / msgpack.
StatusOr<std::unique_ptr<AsyncLLM>> create_process_async_llm(const Tokenizer *tokenizer,
                                                             const EngineProcessOptions &options);

// True when this build has the engine-process transport (cppzmq and msgpack-cxx were found).
bool engine_process_supported();

}  // namespace llmserve
