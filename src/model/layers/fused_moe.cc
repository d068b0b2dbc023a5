// FusedMoE: expert stacking at load and the routed forward (see fused_moe.h).
#include "model/layers/fused_moe.h"

#include "core/env.h"
#include "core/logging.h"

namespace llmserve {
namespace {

constexpr const char* kGateUpSuffix = "gate_up_proj";
constexpr const char* kDownSuffix = "down_proj";

}  // namespace

FusedMoE::FusedMoE(const LinearContext& ctx, const FusedMoEOptions& o) : options_(o), comm_(ctx.comm) {
  CHECK(comm_ != nullptr && comm_->world_size() == 1) << "FusedMoE: expert / tensor parallelism is not implemented";
  CHECK(o.hidden_size > 0 && o.num_experts > 0 && o.top_k > 0 && o.top_k <= o.num_experts && o.intermediate_size > 0)
      << "FusedMoE: bad sizes";
  const DType dtype = ctx.params_dtype;
  router_.shape = {o.num_experts, o.hidden_size};
  router_.dtype = o.router_dtype;
  router_.weight_loader = load_whole_parameter;
  if (o.grouped_routing) {
    CHECK(o.num_groups >= 1 && o.topk_groups >= 1 && o.topk_groups <= o.num_groups && o.num_experts % o.num_groups == 0)
        << "FusedMoE: bad expert groups";
    correction_bias_.shape = {o.num_experts};
    correction_bias_.dtype = DType::kF32;
    correction_bias_.weight_loader = load_whole_parameter;
  }
  w13_.shape = {o.num_experts, 2 * o.intermediate_size, o.hidden_size};
  w13_.dtype = dtype;
  w13_.weight_loader = [this](Parameter& p, WeightSource& w, const std::string& name, const std::string&) {
    return load_experts(p, w, name, /*gate_up=*/true);
  };
  w2_.shape = {o.num_experts, o.hidden_size, o.intermediate_size};
  w2_.dtype = dtype;
  w2_.weight_loader = [this](Parameter& p, WeightSource& w, const std::string& name, const std::string&) {
    return load_experts(p, w, name, /*gate_up=*/false);
  };
  if (o.shared_expert_intermediate_size > 0) {
    shared_expert_ = std::make_unique<GatedMLP>(ctx, o.hidden_size, o.shared_expert_intermediate_size, false);
    if (o.shared_expert_gate) {
      shared_gate_.shape = {1, o.hidden_size};
      shared_gate_.dtype = o.router_dtype;
      shared_gate_.weight_loader = load_whole_parameter;
    }
  }
}

// `name` is the stacked parameter's own name, "<prefix>.experts.gate_up_proj" or "<prefix>.experts.down_proj": a
// checkpoint holding that tensor loads it whole; otherwise each expert's HF tensors are copied into their rows.
Status FusedMoE::load_experts(Parameter& p, WeightSource& weights, const std::string& name, bool gate_up) const {
  if (weights.contains(name)) {
    ASSIGN_OR_RETURN(p.data, weights.get(name, p.shape, p.dtype));
    if (!p.data.is_contiguous()) p.data = p.data.contiguous();
    return ok_status();
  }
  const std::string base = name.substr(0, name.size() - std::string(gate_up ? kGateUpSuffix : kDownSuffix).size());
  const int64_t rows = gate_up ? options_.intermediate_size : options_.hidden_size;
  const int64_t cols = gate_up ? options_.hidden_size : options_.intermediate_size;
  for (int64_t e = 0; e < options_.num_experts; ++e) {
    const std::string expert = base + std::to_string(e) + ".";
    std::vector<std::string> parts;
    if (gate_up) {
      parts = {expert + options_.gate_proj_name + ".weight", expert + options_.up_proj_name + ".weight"};
    } else {
      parts = {expert + options_.down_proj_name + ".weight"};
    }
    for (size_t i = 0; i < parts.size(); ++i) {
      ASSIGN_OR_RETURN(Tensor t, weights.get(parts[i], {rows, cols}, p.dtype));
      if (!p.data.defined()) p.data = Tensor::empty(p.shape, p.dtype, t.device());
      Tensor dst = p.data.select(0, e).slice(0, static_cast<int64_t>(i) * rows, static_cast<int64_t>(i + 1) * rows);
      dst.copy_from(t);
    }
  }
  return ok_status();
}

bool fold_norm_into_moe_combine(Device device) {
  static const bool on_cuda = switch_from_env_or_die("LLMSERVE_FUSED_MOE_COMBINE_NORM", true);
  return device.is_cpu() || on_cuda;
}

FusedMoE::Activations FusedMoE::plan_activations(int64_t max_num_tokens, DType dtype, ArenaPlanner& planner) const {
  const char* limit = "max_num_batched_tokens";
  const int64_t T = max_num_tokens, k = options_.top_k, E = options_.num_experts, I = options_.intermediate_size;
  const int64_t H = options_.hidden_size;
  // Planned for the largest padding any backend uses, so one plan fits every device.
  const int64_t capacity = ops::moe_align_capacity(T * k, E, ops::kMoeGemmTileRows);
  Activations a;
  // f32 logits on every device (cuBLASLt writes f32 from 16-bit inputs): no rounding before the softmax.
  a.router_logits = planner.reserve("moe.router_logits", {T, E}, DType::kF32, limit);
  a.topk_weights = planner.reserve("moe.topk_weights", {T, k}, DType::kF32, limit);
  a.topk_ids = planner.reserve("moe.topk_ids", {T, k}, DType::kI32, limit);
  a.sorted_pairs = planner.reserve("moe.sorted_pairs", {capacity}, DType::kI32, limit);
  a.pair_rows = planner.reserve("moe.pair_rows", {T * k}, DType::kI32, limit);
  a.expert_offsets = planner.reserve("moe.expert_offsets", {E + 1}, DType::kI32, "num_experts");
  a.experts_touched = planner.reserve("moe.experts_touched", {1}, DType::kI64, "one counter");
  a.gate_up = planner.reserve("moe.gate_up", {capacity, 2 * I}, dtype, limit);
  a.act = planner.reserve("moe.act", {capacity, I}, dtype, limit);
  a.down = planner.reserve("moe.down", {capacity, H}, dtype, limit);
  if (shared_expert_) {
    a.shared_out = planner.reserve("moe.shared_out", {T, H}, dtype, limit);
    if (options_.shared_expert_gate) a.shared_gate = planner.reserve("moe.shared_gate", {T, 1}, dtype, limit);
    a.shared = shared_expert_->plan_activations(T, dtype, planner);
  }
  return a;
}

void FusedMoE::forward(const Arena& arena, const Activations& act, Tensor& x, const RMSNorm* next_norm,
                       Tensor* residual) const {
  CHECK((next_norm == nullptr) == (residual == nullptr)) << "FusedMoE::forward: next_norm and residual go together";
  const int64_t T = x.size(0), k = options_.top_k, E = options_.num_experts;
  if (T == 0) return;
  Tensor logits = arena.view(act.router_logits, T);
  ops::linear(logits, x, router_.data, nullptr);
  Tensor topk_weights = arena.view(act.topk_weights, T), topk_ids = arena.view(act.topk_ids, T);
  const int64_t num_pairs = T * k, block = ops::moe_align_block(x.device(), num_pairs, E);
  const int64_t capacity = ops::moe_align_capacity(num_pairs, E, block);
  Tensor sorted_pairs = arena.view(act.sorted_pairs, capacity), pair_rows = arena.view(act.pair_rows, num_pairs);
  Tensor expert_offsets = arena.view(act.expert_offsets, E + 1), experts_touched = arena.view(act.experts_touched, 1);
  if (options_.grouped_routing) {
    ops::moe_route_grouped(topk_weights, topk_ids, logits, correction_bias_.data, options_.num_groups,
                           options_.topk_groups, options_.renormalize ? 1 : 0, options_.routed_scaling_factor);
    ops::moe_align(sorted_pairs, pair_rows, expert_offsets, experts_touched, topk_ids, block);
  } else if (options_.fuse_route_align) {
    ops::moe_route_and_align(topk_weights, topk_ids, logits, options_.scoring, options_.renormalize ? 1 : 0,
                             sorted_pairs, pair_rows, expert_offsets, experts_touched, block);
  } else {
    ops::moe_route(topk_weights, topk_ids, logits, options_.scoring, options_.renormalize ? 1 : 0);
    ops::moe_align(sorted_pairs, pair_rows, expert_offsets, experts_touched, topk_ids, block);
  }

  Tensor gate_up = arena.view(act.gate_up, capacity), activated = arena.view(act.act, capacity);
  Tensor down = arena.view(act.down, capacity);
  ops::moe_gemm(gate_up, x, w13_.data, sorted_pairs, expert_offsets, k, block);
  ops::moe_gemm_silu(down, activated, gate_up, w2_.data, sorted_pairs, expert_offsets, block);

  Tensor shared_out, shared_gate;
  if (shared_expert_) {
    shared_out = arena.view(act.shared_out, T);
    shared_out.copy_from(x);
    shared_expert_->forward(arena, act.shared, shared_out);
    if (options_.shared_expert_gate) {
      shared_gate = arena.view(act.shared_gate, T);
      ops::linear(shared_gate, x, shared_gate_.data, nullptr);
    }
  }
  const Tensor* shared = shared_out.defined() ? &shared_out : nullptr;
  const Tensor* gate = shared_gate.defined() ? &shared_gate : nullptr;
  if (next_norm != nullptr) {
    ops::moe_combine_add_rms_norm(x, *residual, down, topk_weights, pair_rows, shared, gate, next_norm->weight(),
                                  next_norm->eps());
  } else {
    ops::moe_combine(x, down, topk_weights, pair_rows, shared, gate);
  }
}

void FusedMoE::named_parameters(const std::string& prefix, NamedParameters& out) {
  out.emplace_back(prefix + "." + options_.router_name + ".weight", &router_);
  if (options_.grouped_routing) {
    out.emplace_back(prefix + "." + options_.router_name + ".e_score_correction_bias", &correction_bias_);
  }
  out.emplace_back(prefix + ".experts." + kGateUpSuffix, &w13_);
  out.emplace_back(prefix + ".experts." + kDownSuffix, &w2_);
  if (shared_expert_) {
    shared_expert_->named_parameters(prefix + "." + options_.shared_expert_name, out);
    if (options_.shared_expert_gate) out.emplace_back(prefix + ".shared_expert_gate.weight", &shared_gate_);
  }
}

Status FusedMoE::process_weights_after_loading() {
  return shared_expert_ ? shared_expert_->process_weights_after_loading() : ok_status();
}

}  // namespace llmserve
