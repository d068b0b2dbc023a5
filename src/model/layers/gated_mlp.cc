// GatedMLP: gate_up GEMM -> ops::silu_and_mul (or silu_and_mul_quant) -> down GEMM.
#include "model/layers/gated_mlp.h"

#include "kernels/ops.h"

namespace llmserve {

GatedMLP::GatedMLP(const LinearContext& ctx, int64_t hidden_size, int64_t intermediate_size, bool bias)
    : gate_up_proj_(ctx, hidden_size, {intermediate_size, intermediate_size}, bias),
      down_proj_(ctx, intermediate_size, hidden_size, bias) {}

GatedMLP::Activations GatedMLP::plan_activations(int64_t max_num_tokens, DType dtype, ArenaPlanner& planner) const {
  const char* limit = "max_num_batched_tokens";
  const int64_t intermediate = down_proj_.input_size_per_partition();
  Activations a;
  a.gate_up = planner.reserve("mlp.gate_up", {max_num_tokens, gate_up_proj_.output_size_per_partition()}, dtype, limit);
  if (const std::optional<QuantizedInputSpec> q = down_proj_.quantized_input()) {
    a.act_q = planner.reserve("mlp.act_q", {max_num_tokens, intermediate}, q->dtype, limit);
    a.act_scales = planner.reserve("mlp.act_scales", {max_num_tokens, q->num_groups(intermediate)}, DType::kF32, limit);
  } else {
    a.act = planner.reserve("mlp.act", {max_num_tokens, intermediate}, dtype, limit);
  }
  return a;
}

void GatedMLP::forward(const Arena& arena, const Activations& act, Tensor& x, const QuantizedActivation* xq) const {
  const int64_t T = x.size(0);
  Tensor gate_up = arena.view(act.gate_up, T);
  if (xq != nullptr) {
    gate_up_proj_.forward_quantized(gate_up, *xq);
  } else {
    gate_up_proj_.forward(gate_up, x);
  }
  if (act.act_q.valid()) {  // planned for a down_proj that takes per-token quantized input
    QuantizedActivation activated{arena.view(act.act_q, T), arena.view(act.act_scales, T)};
    ops::silu_and_mul_quant(activated.q, activated.scales, gate_up);
    down_proj_.forward_quantized(x, activated);
    return;
  }
  Tensor activated = arena.view(act.act, T);
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
