// The AsyncLLM factories: the shared builder on the core thread (in-process), or a spawned engine-core process.
#include "ipc/async_llm_factory.h"

#include "ipc/inproc_client.h"

namespace llmserve {

StatusOr<std::unique_ptr<AsyncLLM>> create_inproc_async_llm(CausalLM &model, const Tokenizer *tokenizer,
                                                            EngineArgs args) {
  args.log_stats = true;
  ASSIGN_OR_RETURN(EngineCoreConfig config, make_engine_core_config(model.config(), tokenizer, args));
  ASSIGN_OR_RETURN(std::unique_ptr<InprocClient> client,
                   InprocClient::create([&model, config]() -> StatusOr<EngineCoreInstance> {
                     return build_engine_core(model, config);
                   }));
  return make_async_llm(std::move(client), tokenizer, config);
}

EngineCoreConfig frontend_config_from(const EngineCoreReady &ready) {
  EngineCoreConfig c;
  c.vocab_size = ready.vocab_size;
  c.scheduler.max_model_len = ready.max_model_len;
  c.eos_token_id = ready.eos_token_id;
  c.extra_eos_ids = ready.extra_eos_ids;
  return c;
}

#if LLMSERVE_WITH_ZMQ
bool engine_process_supported() { return true; }

StatusOr<std::unique_ptr<AsyncLLM>> create_process_async_llm(const Tokenizer *tokenizer,
                                                             const EngineProcessOptions &options) {
  EngineCoreReady ready;
  ASSIGN_OR_RETURN(std::unique_ptr<ZmqClient> client, ZmqClient::spawn(options, &ready));
  return make_async_llm(std::move(client), tokenizer, frontend_config_from(ready));
}
#else
bool engine_process_supported() { return false; }

StatusOr<std::unique_ptr<AsyncLLM>> create_process_async_llm(const Tokenizer *, const EngineProcessOptions &) {
  return unimplemented("--engine-process: this build has no ZMQ / msgpack (install cppzmq-dev and libmsgpack-cxx-dev)");
}
#endif

}  // namespace llmserve
