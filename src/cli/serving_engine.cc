// start_serving_engine: in-thread (model loaded here) or engine-process (tokenizer here, model in the child).
#include "cli/serving_engine.h"

#include "frontend/async_llm_factory.h"

namespace llmserve::cli {

StatusOr<std::unique_ptr<ServingEngine>> start_serving_engine(const ModelFlags &model_flags,
                                                              const EngineFlags &engine_flags, bool engine_process,
                                                              bool need_tokenizer) {
  auto engine = std::make_unique<ServingEngine>();
  if (!engine_process) {
    ASSIGN_OR_RETURN(engine->loaded, load_model_from_flags(model_flags, need_tokenizer));
    ASSIGN_OR_RETURN(engine->llm, create_inproc_async_llm(*engine->loaded.model, engine->loaded.tokenizer.get(),
                                                          to_engine_args(engine_flags, model_flags)));
    return engine;
  }
  if (!engine_process_supported()) {
    return unimplemented(
        "--engine-process: this build has no ZMQ / msgpack (install cppzmq-dev and "
        "libmsgpack-cxx-dev, then rebuild)");
  }
  ASSIGN_OR_RETURN(engine->loaded.tokenizer, load_tokenizer_from_flags(model_flags, need_tokenizer));
  engine->loaded.builtin_default = model_flags.model.empty() && model_flags.config_file.empty();
  EngineProcessOptions options;
  options.args = {"engine-core"};
  for (std::string &a : to_args(model_flags)) options.args.push_back(std::move(a));
  for (std::string &a : to_args(engine_flags)) options.args.push_back(std::move(a));
  ASSIGN_OR_RETURN(engine->llm, create_process_async_llm(engine->loaded.tokenizer.get(), options));
  return engine;
}

}  // namespace llmserve::cli
