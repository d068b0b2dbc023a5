// GatedMLP (SwiGLU): down(silu(gate(x)) * up(x)), gate and up stacked in one GEMM (shards "0" and "1").
// x [T, hidden] in, the MLP output [T, hidden] out, in place. When down_proj's method takes per-token quantized input
// the SiLU-and-mul quantizes its output in the same kernel (ops::silu_and_mul_quant).
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
    // When down_proj takes quantized input: silu_and_mul_quant's [T, intermediate / world] fp8 / i8 and
    // [T, groups] f32 scales (act is then not planned).
    ArenaRegion act_q, act_scales;
  };
  Activations plan_activations(int64_t max_num_tokens, DType dtype, ArenaPlanner& planner) const;
  // xq: x already normed and quantized (as quantized_input() says) for gate_up; x's contents are then
  // not read, only its shape and the output written.
  void forward(const Arena& arena, const Activations& act, Tensor& x, const QuantizedActivation* xq = nullptr) const;
  // The quantized input gate_up_proj takes (LinearMethod::quantized_input()), if any.
  std::optional<QuantizedInputSpec> quantized_input() const { return gate_up_proj_.quantized_input(); }
  void named_parameters(const std::string& prefix, NamedParameters& out);
  Status process_weights_after_loading();

 private:
  MergedColumnParallelLinear gate_up_proj_;
  RowParallelLinear down_proj_;
};

}  // namespace llmserve
