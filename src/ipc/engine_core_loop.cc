// apply_engine_core_input / step_engine_core: the engine loop's body.
#include "ipc/engine_core_loop.h"

#include "core/logging.h"

namespace llmserve {

void apply_engine_core_input(EngineCore &core, EngineCoreInput &input, std::vector<EngineCoreOutput> *rejected) {
  if (auto *req = std::get_if<EngineCoreRequest>(&input)) {
    std::string id = req->request_id;
    Status s = core.add_request(std::move(*req));
    if (!s.ok()) {
      LOG(WARNING) << "engine core rejected request " << id << ": " << s.to_string();
      EngineCoreOutput &o = rejected->emplace_back();
      o.request_id = std::move(id);
      o.finish_reason = FinishReason::kAbort;
    }
  } else if (auto *abort = std::get_if<AbortRequests>(&input)) {
    for (const std::string &id : abort->request_ids) core.abort_request(id);
  } else {
    for (const auto &[id, stop] : std::get<FinishRequestsStopped>(input).stops) core.finish_request_stopped(id, stop);
  }
}

StatusOr<std::optional<EngineCoreOutputs>> step_engine_core(EngineCore &core, std::vector<EngineCoreOutput> *rejected) {
  if (!core.has_work() && rejected->empty()) return std::optional<EngineCoreOutputs>();
  ASSIGN_OR_RETURN(EngineCoreOutputs outs, core.step());
  for (EngineCoreOutput &o : *rejected) outs.outputs.push_back(std::move(o));
  rejected->clear();
  if (outs.outputs.empty()) return std::optional<EngineCoreOutputs>();
  return std::optional<EngineCoreOutputs>(std::move(outs));
}

}  // namespace llmserve
