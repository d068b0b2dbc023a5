// The engine behind `llmserve serve`, started from the shared model / engine flags: the AsyncLLM over the
// engine core on its own thread (default), or with --engine-process over a child `llmserve engine-core`
// process given the same flags. Invariant: the AsyncLLM is destroyed before the model and tokenizer it uses.
#pragma once

#include <memory>

#include "cli/engine_flags.h"
#include "core/status.h"
#include "frontend/async_llm.h"

namespace llmserve::cli {

struct ServingEngine {
  LoadedModel loaded;             // in-thread: model + tokenizer; --engine-process: the tokenizer only
  std::unique_ptr<AsyncLLM> llm;  // declared last: destroyed first
};

// Loads what this process needs and starts the core. need_tokenizer: fail without one (text prompts).
// Errors name the flag or file; with engine_process the child's load error comes back as it reported it, and
// Unimplemented when this build has no ZMQ / msgpack.
StatusOr<std::unique_ptr<ServingEngine>> start_serving_engine(const ModelFlags &model_flags,
                                                              const EngineFlags &engine_flags, bool engine_process,
                                                              bool need_tokenizer);

}  // namespace llmserve::cli
