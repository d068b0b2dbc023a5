// Parameter: one named weight of a layer (its tensor, declared shape and dtype, and the loader that places a
// checkpoint tensor — or one shard of a stacked parameter — into it), and loading a model's parameters by name.
// Invariant: after load_parameters every parameter's data is defined and has its declared shape.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "model/weight_source.h"

namespace llmserve {

struct Parameter {
  Shape shape;  // this rank's shape
  DType dtype = DType::kF32;
  int output_dim = -1;  // the dim split by output shards / column parallelism (-1: none)
  int input_dim = -1;   // the dim split by row parallelism (-1: none)
  // Shard ids a checkpoint fills this parameter from: {""} for a plain one, {"q", "k", "v"} for a stacked one.
  std::vector<std::string> shard_ids = {""};
  // Reads `checkpoint_name` from `weights` and places it as shard `shard_id`. Set by the owning layer.
  std::function<Status(Parameter& self, WeightSource& weights, const std::string& checkpoint_name,
                       const std::string& shard_id)>
      weight_loader;
  Tensor data;  // defined once loaded
};

using NamedParameters = std::vector<std::pair<std::string, Parameter*>>;

// vLLM's stacked_params_mapping entry: the shard `shard_id` of a parameter whose name contains `param_part`
// is the checkpoint tensor named with `checkpoint_part` in its place (".qkv_proj" <- ".q_proj" as "q").
struct StackedParamMapping {
  std::string param_part;
  std::string checkpoint_part;
  std::string shard_id;
};

// Loads every parameter: each of its shards from the checkpoint name the mapping gives (the parameter's own name
// for an unmapped shard ""). The first error (a missing tensor, a wrong shape) is returned, naming the tensor.
Status load_parameters(const NamedParameters& params, WeightSource& weights,
                       const std::vector<StackedParamMapping>& mapping);

// The loader of an unsplit parameter: the checkpoint tensor as is (zero-copy when its dtype matches).
Status load_whole_parameter(Parameter& p, WeightSource& weights, const std::string& checkpoint_name,
                            const std::string& shard_id);

}  // namespace llmserve
