// The AsyncLLM factories: the shared builder on the core thread (in-process), or a spawned engine-core process.
#include "frontend/async_llm_factory.h"

#include "ipc/inproc_client.h"

namespace llmserve {

StatusOr<std::unique_ptr<AsyncLLM>> create_inproc_async_llm(CausalLM &model, const Tokenizer *tokenizer,
                                                            EngineArgs args) {
  args.log_stats = true;
  ASSIGN_OR_RETURN(EngineCoreConfig config, make_engine_core_config(model, args));
  attach_grammar_compiler(tokenizer, &config);
  ASSIGN_OR_RETURN(std::unique_ptr<InprocClient> client,
                   InprocClient::create([&model, config]() -> StatusOr<EngineCoreInstance> {
                     return build_engine_core(model, config);
                   }));
  return make_async_llm(std::move(client), tokenizer, config.info());
}

#if LLMSERVE_WITH_ZMQ
bool engine_process_supported() { return true; }

StatusOr<std::unique_ptr<AsyncLLM>> create_process_async_llm(const Tokenizer *tokenizer,
                                                             const EngineProcessOptions &options) {
  EngineCoreInfo ready;
  ASSIGN_OR_RETURN(std::unique_ptr<ZmqClient> client, ZmqClient::spawn(options, &ready));
  // The child compiles with its own compiler (engine-core loads the tokenizer); this one validates requests here.
  ready.grammar_compiler = make_grammar_compiler(tokenizer, ready.vocab_size, ready.model_eos_token_ids);
  return make_async_llm(std::move(client), tokenizer, ready);
}
#else
bool engine_process_supported() { return false; }

StatusOr<std::unique_ptr<AsyncLLM>> create_process_async_llm(const Tokenizer *, const EngineProcessOptions &) {
  return unimplemented("--engine-process: this build has no ZMQ / msgpack (install cppzmq-dev and libmsgpack-cxx-dev)");
}
#endif

}  // namespace llmserve
