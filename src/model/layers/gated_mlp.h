// GatedMLP (SwiGLU): down(silu(gate(x)) * up(x)), gate and up stacked in one GEMM (shards "0" and "1").
// x [T, hidden] in, the MLP output [T, hidden] out, in place.
#pragma once

#include "core/arena.h"
#include "model/layers/linear.h"

namespace llmserve {

class GatedMLP {
 public:
  GatedMLP(const LinearContext& ctx, int64_t hidden_size, int64_t intermediate_size, bool bias);

  struct Activations {
    ArenaRegion gate_up;  // [T, 2 * intermediate / world]
    ArenaRegion act;      // [T, intermediate / world]
  };
  Activations plan_activations(int64_t max_num_tokens, DType dtype, ArenaPlanner& planner) const;
  void forward(const Arena& arena, const Activations& act, Tensor& x) const;
  void named_parameters(const std::string& prefix, NamedParameters& out);
  Status process_weights_after_loading();

 private:
  MergedColumnParallelLinear gate_up_proj_;
  RowParallelLinear down_proj_;
};

}  // namespace llmserve
