// `llmserve engine-core` (hidden, internal): the engine-core child process of `serve --engine-process`. It
// takes the same model / engine flags as the parent (engine_flags), loads the model, builds the core with the
// shared builder and runs the ZMQ busy loop until the parent shuts it down or dies.
#include <cstdio>

#include "cli/command.h"
#include "cli/engine_flags.h"
#include "frontend/input_processor.h"

#if LLMSERVE_WITH_ZMQ
#include "ipc/engine_core_process.h"

namespace llmserve::cli {
namespace {

int run_engine_core(const std::vector<std::string> &args) {
  ModelFlags model_flags;
  EngineFlags engine_flags;
  std::string input_address, output_address;
  ArgParser parser("engine-core", "internal: the engine-core process of `llmserve serve --engine-process`");
  add_model_flags(parser, &model_flags);
  add_engine_flags(parser, &engine_flags);
  parser.add_string("input-address", &input_address, "ZMQ address the frontend pushes requests to");
  parser.add_string("output-address", &output_address, "ZMQ address the core pushes outputs to");
  const Status parsed = parser.parse(args);
  if (parser.help_requested()) return 0;
  if (input_address.empty() || output_address.empty()) {
    std::fprintf(stderr, "llmserve engine-core: --input-address and --output-address are required (%s)\n",
                 parsed.ok() ? "internal command" : parsed.message().c_str());
    return 2;
  }
  LoadedModel loaded;  // outlives the core built over it inside run_engine_core_process
  return run_engine_core_process(input_address, output_address, [&]() -> StatusOr<EngineCoreProcessCore> {
    RETURN_IF_ERROR(parsed);
    RETURN_IF_ERROR(check_engine_flags(engine_flags));
    ASSIGN_OR_RETURN(loaded, load_model_from_flags(model_flags, /*need_tokenizer=*/false));
    EngineArgs engine_args = to_engine_args(engine_flags, model_flags);
    engine_args.log_stats = true;  // the frontend's metrics need the core's timestamps
    EngineCoreProcessCore core;
    ASSIGN_OR_RETURN(core.config, make_engine_core_config(*loaded.model, engine_args));
    attach_grammar_compiler(loaded.tokenizer.get(), &core.config);  // structured output: grammars compile here too
    core.instance = build_engine_core(*loaded.model, core.config);
    return core;
  });
}

// No summary: `llmserve --help` does not list it.
LLMSERVE_REGISTER_COMMAND("engine-core", "", run_engine_core);

}  // namespace
}  // namespace llmserve::cli
#endif  // LLMSERVE_WITH_ZMQ
