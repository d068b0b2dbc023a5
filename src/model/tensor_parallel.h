// Tensor-parallel shape rules of a model config: which sizes must divide by the number of ranks (vLLM's rules and
// error messages), and how many heads each rank holds. Checked before a sharded model is built, so a bad
// --tensor-parallel-size is an InvalidArgument naming the sizes, never a CHECK inside a layer.
#pragma once

#include <cstdint>

#include "core/status.h"
#include "model/model_config.h"

namespace llmserve {

// InvalidArgument unless: tp >= 1; num_attention_heads % tp == 0; num_key_value_heads % tp == 0 when there are at
// least tp of them, else tp % num_key_value_heads == 0 (each kv head replicated tp / kv times); intermediate_size
// % tp == 0; no mixture-of-experts layers when tp > 1 (their experts are not sharded). The vocabulary needs no rule:
// it is padded to a multiple of tp.
Status check_tensor_parallel_size(const ModelConfig& config, int64_t tensor_parallel_size);

// Heads of `total` held by each of `tp` ranks: total / tp, or 1 (replicated) when total < tp.
int64_t heads_per_rank(int64_t total, int64_t tensor_parallel_size);

}  // namespace llmserve
