// load_parameters: the pull-style name walk over a model's parameters (see parameter.h).
#include "model/layers/parameter.h"

#include "core/logging.h"

namespace llmserve {

Status load_whole_parameter(Parameter& p, WeightSource& weights, const std::string& checkpoint_name,
                            const std::string& shard_id) {
  CHECK(shard_id.empty()) << checkpoint_name << ": an unsplit parameter has no shard '" << shard_id << "'";
  ASSIGN_OR_RETURN(p.data, weights.get(checkpoint_name, p.shape, p.dtype));
  return ok_status();
}

Status load_parameters(const NamedParameters& params, WeightSource& weights,
                       const std::vector<StackedParamMapping>& mapping) {
  for (const auto& [name, param] : params) {
    CHECK(param->weight_loader) << name << " has no weight loader";
    for (const std::string& shard_id : param->shard_ids) {
      std::string checkpoint_name = name;
      if (!shard_id.empty()) {
        bool found = false;
        for (const StackedParamMapping& m : mapping) {
          const size_t at = name.find(m.param_part);
          if (m.shard_id != shard_id || at == std::string::npos) continue;
          checkpoint_name = name.substr(0, at) + m.checkpoint_part + name.substr(at + m.param_part.size());
          found = true;
          break;
        }
        CHECK(found) << "no stacked-parameter mapping for shard '" << shard_id << "' of " << name;
      }
      RETURN_IF_ERROR(param->weight_loader(*param, weights, checkpoint_name, shard_id));
    }
    CHECK(param->data.defined() && param->data.shape() == param->shape) << name << " not fully loaded";
  }
  return ok_status();
}

}  // namespace llmserve
