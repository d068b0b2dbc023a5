// GatedMLP: gate_up GEMM -> ops::silu_and_mul -> down GEMM.
#include "model/layers/gated_mlp.h"

#include "kernels/ops.h"

namespace llmserve {

GatedMLP::GatedMLP(const LinearContext& ctx, int64_t hidden_size, int64_t intermediate_size, bool bias)
    : gate_up_proj_(ctx, hidden_size, {intermediate_size, intermediate_size}, bias),
      down_proj_(ctx, intermediate_size, hidden_size, bias) {}

GatedMLP::Activations GatedMLP::plan_activations(int64_t max_num_tokens, DType dtype, ArenaPlanner& planner) const {
  const char* limit = "max_num_batched_tokens";
  Activations a;
  a.gate_up = planner.reserve("mlp.gate_up", {max_num_tokens, gate_up_proj_.output_size_per_partition()}, dtype, limit);
  a.act = planner.reserve("mlp.act", {max_num_tokens, down_proj_.input_size_per_partition()}, dtype, limit);
  return a;
}

void GatedMLP::forward(const Arena& arena, const Activations& act, Tensor& x) const {
  const int64_t T = x.size(0);
  Tensor gate_up = arena.view(act.gate_up, T);
  Tensor activated = arena.view(act.act, T);
  gate_up_proj_.forward(gate_up, x);
  ops::silu_and_mul(activated, gate_up);
  down_proj_.forward(x, activated);
}

void GatedMLP::named_parameters(const std::string& prefix, NamedParameters& out) {
  gate_up_proj_.named_parameters(prefix + ".gate_up_proj", out);
  down_proj_.named_parameters(prefix + ".down_proj", out);
}

Status GatedMLP::process_weights_after_loading() {
  RETURN_IF_ERROR(gate_up_proj_.process_weights_after_loading());
  return down_proj_.process_weights_after_loading();
}

}  // namespace llmserve
