// LLMEngine: the core built by executor/engine_core_builder, requests through the InputProcessor, outputs through the
// OutputProcessor, all on the caller's thread.
#include "frontend/llm_engine.h"

#include <utility>

namespace llmserve {

StatusOr<std::unique_ptr<LLMEngine>> LLMEngine::create(CausalLM &model, const Tokenizer *tokenizer,
                                                       const EngineArgs &args) {
  ASSIGN_OR_RETURN(EngineCoreConfig config, make_engine_core_config(model, args));
  attach_grammar_compiler(tokenizer, &config);
  EngineCoreInstance instance = build_engine_core(model, config);
  return std::unique_ptr<LLMEngine>(new LLMEngine(tokenizer, std::move(config), std::move(instance)));
}

Status LLMEngine::add_request(const std::string &request_id, const PromptInput &prompt, const SamplingParams &params,
                              int32_t priority) {
  if (!processor_.child_ids(request_id).empty()) {
    return {StatusCode::kAlreadyExists, "request id '" + request_id + "' is already in use"};
  }
  // Arrival = the step count: FCFS by submission step, deterministic for tests.
  ASSIGN_OR_RETURN(ProcessedRequest req, input_processor_.process(request_id, prompt, params, priority,
                                                                  static_cast<double>(totals_.num_steps)));
  EngineCore &core = *instance_.core;
  for (size_t i = 0; i < req.children.size(); ++i) {
    Status s = core.add_request(std::move(req.children[i]));
    if (!s.ok()) {
      for (size_t j = 0; j < i; ++j) core.abort_request(req.child_ids[j]);
      return s;
    }
  }
  processor_.add_request(request_id, std::move(req.prompt_text), std::move(req.prompt_token_ids), params,
                         req.child_ids);
  return ok_status();
}

StatusOr<std::vector<RequestOutput>> LLMEngine::step() {
  ASSIGN_OR_RETURN(EngineCoreOutputs outs, instance_.core->step());
  ++totals_.num_steps;
  last_stats_ = outs.scheduler_stats;
  totals_.prefix_cache_queries += outs.scheduler_stats.prefix_cache_queries;
  totals_.prefix_cache_hits += outs.scheduler_stats.prefix_cache_hits;
  totals_.num_preemptions += outs.scheduler_stats.num_preemptions;
  OutputProcessor::Result r = processor_.process(outs);
  for (const auto &[child_id, stop] : r.stop_string_finished) instance_.core->finish_request_stopped(child_id, stop);
  return std::move(r.request_outputs);
}

bool LLMEngine::abort_request(const std::string &request_id) {
  bool any = false;
  for (const std::string &child : processor_.child_ids(request_id)) any |= instance_.core->abort_request(child);
  return any;
}

}  // namespace llmserve
