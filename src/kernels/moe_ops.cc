// ops.h mixture-of-experts ops: each one's schema and check (shapes, dtypes, devices; CHECK naming the op, writing
// nothing) and the Op objects dispatching to kernels/cpu/moe.cc and kernels/cuda/moe.cu + moe_gemm.cu; plus the
// alignment sizes the FusedMoE layer plans its buffers with. Kept apart from ops.cc so the MoE ops have one home.
#include <algorithm>
#include <cmath>
#include <initializer_list>

#include "kernels/ops.h"

namespace llmserve::ops {
namespace {

void check_2d_rows(const Tensor& t, const char* op, const char* name) {
  CHECK(t.defined()) << op << ": " << name << " is undefined";
  CHECK(t.dim() == 2 && (t.size(1) <= 1 || t.stride(1) == 1))
      << op << ": " << name << " " << t.to_string() << " must be 2-D with contiguous rows";
}

void check_vector(const Tensor& t, DType dtype, const char* op, const char* name) {
  CHECK(t.defined()) << op << ": " << name << " is undefined";
  CHECK(t.dim() == 1 && t.is_contiguous() && t.dtype() == dtype)
      << op << ": " << name << " " << t.to_string() << " must be a contiguous 1-D " << dtype_name(dtype) << " tensor";
}

void check_same_device(const Tensor& a, const Tensor& b, const char* op) {
  CHECK(a.device() == b.device()) << op << ": tensors on different devices: " << a.to_string() << " and "
                                  << b.to_string();
}

// Activations: f32 on CPU; f32, f16 or bf16 on CUDA.
void check_activation(const Tensor& t, const char* op, const char* name) {
  if (t.device().is_cpu()) {
    CHECK(t.dtype() == DType::kF32) << op << ": " << name << " " << t.to_string() << " must be f32 on cpu";
  } else {
    CHECK(t.dtype() == DType::kF32 || t.dtype() == DType::kF16 || t.dtype() == DType::kBF16)
        << op << ": " << name << " " << t.to_string() << " must be f32, f16 or bf16";
  }
}

void check_moe_route(Tensor& topk_weights, Tensor& topk_ids, const Tensor& router_logits, int64_t scoring,
                     int64_t renormalize) {
  constexpr const char* op = "moe_route";
  check_2d_rows(router_logits, op, "router_logits");
  check_2d_rows(topk_weights, op, "topk_weights");
  check_2d_rows(topk_ids, op, "topk_ids");
  check_activation(router_logits, op, "router_logits");
  CHECK(topk_weights.dtype() == DType::kF32) << op << ": topk_weights " << topk_weights.to_string() << " must be f32";
  CHECK(topk_ids.dtype() == DType::kI32) << op << ": topk_ids " << topk_ids.to_string() << " must be i32";
  const int64_t num_tokens = router_logits.size(0), num_experts = router_logits.size(1), k = topk_ids.size(1);
  CHECK(num_experts >= 1 && num_experts <= kMaxMoeExperts)
      << op << ": " << num_experts << " experts (1.." << kMaxMoeExperts << ")";
  CHECK(k >= 1 && k <= std::min(num_experts, kMaxMoeTopK))
      << op << ": top_k " << k << " for " << num_experts << " experts (at most " << kMaxMoeTopK << ")";
  CHECK(topk_ids.size(0) == num_tokens && topk_weights.shape() == topk_ids.shape())
      << op << ": topk_weights " << topk_weights.to_string() << ", topk_ids " << topk_ids.to_string()
      << " for router_logits " << router_logits.to_string();
  CHECK(scoring == kMoeScoringSoftmax || scoring == kMoeScoringSigmoid) << op << ": scoring " << scoring;
  CHECK(renormalize == 0 || renormalize == 1) << op << ": renormalize " << renormalize;
  check_same_device(router_logits, topk_weights, op);
  check_same_device(router_logits, topk_ids, op);
}

void check_moe_route_grouped(Tensor& topk_weights, Tensor& topk_ids, const Tensor& router_logits,
                             const Tensor& correction_bias, int64_t num_groups, int64_t topk_groups,
                             int64_t renormalize, float routed_scaling_factor) {
  constexpr const char* op = "moe_route_grouped";
  check_moe_route(topk_weights, topk_ids, router_logits, kMoeScoringSigmoid, renormalize);
  const int64_t num_experts = router_logits.size(1), k = topk_ids.size(1);
  check_vector(correction_bias, DType::kF32, op, "correction_bias");
  CHECK_EQ(correction_bias.size(0), num_experts)
      << op << ": correction_bias " << correction_bias.to_string() << " for " << num_experts << " experts";
  check_same_device(router_logits, correction_bias, op);
  CHECK(num_groups >= 1 && num_groups <= 32 && num_experts % num_groups == 0 && num_experts / num_groups >= 2)
      << op << ": " << num_groups << " groups of " << num_experts << " experts (at most 32 groups of >= 2)";
  CHECK(topk_groups >= 1 && topk_groups <= num_groups) << op << ": topk_groups " << topk_groups;
  CHECK_LE(k, topk_groups * (num_experts / num_groups))
      << op << ": top_k " << k << " past the experts of " << topk_groups << " groups";
  CHECK(std::isfinite(routed_scaling_factor)) << op << ": routed_scaling_factor " << routed_scaling_factor;
}

void check_moe_align(Tensor& sorted_pairs, Tensor& pair_rows, Tensor& expert_offsets, Tensor& experts_touched,
                     const Tensor& topk_ids, int64_t block) {
  constexpr const char* op = "moe_align";
  check_2d_rows(topk_ids, op, "topk_ids");
  CHECK(topk_ids.is_contiguous() && topk_ids.dtype() == DType::kI32)
      << op << ": topk_ids " << topk_ids.to_string() << " must be contiguous i32";
  check_vector(sorted_pairs, DType::kI32, op, "sorted_pairs");
  check_vector(pair_rows, DType::kI32, op, "pair_rows");
  check_vector(expert_offsets, DType::kI32, op, "expert_offsets");
  check_vector(experts_touched, DType::kI64, op, "experts_touched");
  CHECK_EQ(experts_touched.numel(), 1) << op << ": experts_touched " << experts_touched.to_string() << " (want [1])";
  const int64_t num_pairs = topk_ids.numel(), num_experts = expert_offsets.size(0) - 1;
  CHECK(num_experts >= 1 && num_experts <= kMaxMoeExperts)
      << op << ": expert_offsets " << expert_offsets.to_string() << " (want [num_experts + 1], at most "
      << kMaxMoeExperts << " experts)";
  CHECK(block >= 1 && block <= 1024) << op << ": block " << block;
  CHECK_EQ(pair_rows.size(0), num_pairs) << op << ": pair_rows " << pair_rows.to_string() << " for topk_ids "
                                         << topk_ids.to_string();
  CHECK_GE(sorted_pairs.size(0), moe_align_capacity(num_pairs, num_experts, block))
      << op << ": sorted_pairs " << sorted_pairs.to_string() << " too short for " << num_pairs << " pairs, "
      << num_experts << " experts, block " << block;
  CHECK_LT(sorted_pairs.size(0), int64_t{1} << 31) << op << ": sorted_pairs too long for i32 rows";
  for (const Tensor* t : {&sorted_pairs, &pair_rows, &expert_offsets, &experts_touched}) {
    check_same_device(topk_ids, *t, op);
  }
}

void check_moe_route_and_align(Tensor& topk_weights, Tensor& topk_ids, const Tensor& router_logits, int64_t scoring,
                               int64_t renormalize, Tensor& sorted_pairs, Tensor& pair_rows, Tensor& expert_offsets,
                               Tensor& experts_touched, int64_t block) {
  check_moe_route(topk_weights, topk_ids, router_logits, scoring, renormalize);
  check_moe_align(sorted_pairs, pair_rows, expert_offsets, experts_touched, topk_ids, block);
  CHECK_EQ(expert_offsets.size(0), router_logits.size(1) + 1)
      << "moe_route_and_align: expert_offsets " << expert_offsets.to_string() << " for router_logits "
      << router_logits.to_string();
}

void check_moe_gemm(Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& sorted_pairs,
                    const Tensor& expert_offsets, int64_t gather_top_k, int64_t block) {
  constexpr const char* op = "moe_gemm";
  check_2d_rows(out, op, "out");
  check_2d_rows(x, op, "x");
  CHECK(weight.defined() && weight.dim() == 3 && weight.is_contiguous())
      << op << ": weight " << (weight.defined() ? weight.to_string() : "undefined")
      << " must be contiguous [num_experts, n, k]";
  check_vector(sorted_pairs, DType::kI32, op, "sorted_pairs");
  check_vector(expert_offsets, DType::kI32, op, "expert_offsets");
  const int64_t num_experts = weight.size(0), n = weight.size(1), k = weight.size(2), capacity = out.size(0);
  CHECK_EQ(expert_offsets.size(0), num_experts + 1)
      << op << ": expert_offsets " << expert_offsets.to_string() << " for weight " << weight.to_string();
  CHECK(out.size(1) == n && x.size(1) == k && sorted_pairs.size(0) == capacity)
      << op << ": out " << out.to_string() << ", x " << x.to_string() << ", sorted_pairs " << sorted_pairs.to_string()
      << " for weight " << weight.to_string() << " (want out [capacity, n], x [*, k], sorted_pairs [capacity])";
  CHECK(gather_top_k >= 0 && gather_top_k <= kMaxMoeTopK) << op << ": gather_top_k " << gather_top_k;
  if (gather_top_k == 0) {
    CHECK_EQ(x.size(0), capacity) << op << ": x " << x.to_string() << " must have out's rows when not gathering";
  }
  CHECK(block >= 1) << op << ": block " << block;
  CHECK(out.raw_data() != x.raw_data() || out.numel() == 0) << op << ": out must not alias x";
  for (const Tensor* t : {&x, &weight, &sorted_pairs, &expert_offsets}) check_same_device(out, *t, op);
  check_activation(x, op, "x");
  CHECK(out.dtype() == x.dtype()) << op << ": out " << out.to_string() << " vs x " << x.to_string();
  if (x.device().is_cpu()) {
    CHECK(weight.dtype() == DType::kF32 || weight.dtype() == DType::kBF16)
        << op << ": weight " << weight.to_string() << " must be f32 or bf16 on cpu";
  } else {
    CHECK(weight.dtype() == x.dtype()) << op << ": weight " << weight.to_string() << " vs x " << x.to_string();
  }
}

void check_moe_gemm_silu(Tensor& out, Tensor& act, const Tensor& gate_up, const Tensor& weight,
                         const Tensor& sorted_pairs, const Tensor& expert_offsets, int64_t block) {
  constexpr const char* op = "moe_gemm_silu";
  check_2d_rows(gate_up, op, "gate_up");
  check_2d_rows(act, op, "act");
  CHECK(act.size(0) == gate_up.size(0) && gate_up.size(1) == 2 * act.size(1) && act.dtype() == gate_up.dtype())
      << op << ": act " << act.to_string() << " for gate_up " << gate_up.to_string()
      << " (want act [rows, K], gate_up [rows, 2K], one dtype)";
  check_same_device(act, gate_up, op);
  CHECK(out.raw_data() != gate_up.raw_data() || out.numel() == 0) << op << ": out must not alias gate_up";
  CHECK(act.raw_data() != gate_up.raw_data() || act.numel() == 0) << op << ": act must not alias gate_up";
  check_moe_gemm(out, act, weight, sorted_pairs, expert_offsets, /*gather_top_k=*/0, block);
}

void check_combine_operands(const char* op, const Tensor& out, const Tensor& expert_out, const Tensor& topk_weights,
                            const Tensor& pair_rows, const Tensor* shared_out, const Tensor* shared_gate) {
  check_2d_rows(out, op, "out");
  check_2d_rows(expert_out, op, "expert_out");
  check_2d_rows(topk_weights, op, "topk_weights");
  check_vector(pair_rows, DType::kI32, op, "pair_rows");
  check_activation(out, op, "out");
  CHECK(expert_out.dtype() == out.dtype())
      << op << ": expert_out " << expert_out.to_string() << " vs out " << out.to_string();
  CHECK(topk_weights.dtype() == DType::kF32) << op << ": topk_weights " << topk_weights.to_string() << " must be f32";
  CHECK(topk_weights.size(1) <= kMaxMoeTopK)  // the CUDA kernels stage a token's choices in kMaxMoeTopK slots
      << op << ": topk_weights " << topk_weights.to_string() << ": top_k past " << kMaxMoeTopK;
  const int64_t num_tokens = out.size(0);
  CHECK(expert_out.size(1) == out.size(1) && topk_weights.size(0) == num_tokens &&
        pair_rows.size(0) == topk_weights.numel())
      << op << ": out " << out.to_string() << ", expert_out " << expert_out.to_string() << ", topk_weights "
      << topk_weights.to_string() << ", pair_rows " << pair_rows.to_string();
  CHECK(out.raw_data() != expert_out.raw_data() || out.numel() == 0) << op << ": out must not alias expert_out";
  for (const Tensor* t : {&expert_out, &topk_weights, &pair_rows}) check_same_device(out, *t, op);
  if (shared_out != nullptr) {
    check_2d_rows(*shared_out, op, "shared_out");
    CHECK(shared_out->shape() == out.shape() && shared_out->dtype() == out.dtype())
        << op << ": shared_out " << shared_out->to_string() << " vs out " << out.to_string();
    check_same_device(out, *shared_out, op);
  }
  if (shared_gate != nullptr) {
    CHECK(shared_out != nullptr) << op << ": shared_gate without shared_out";
    check_2d_rows(*shared_gate, op, "shared_gate");
    CHECK(shared_gate->size(0) == num_tokens && shared_gate->size(1) == 1 && shared_gate->dtype() == out.dtype())
        << op << ": shared_gate " << shared_gate->to_string() << " (want [" << num_tokens << ", 1] in out's dtype)";
    check_same_device(out, *shared_gate, op);
  }
}

void check_moe_combine(Tensor& out, const Tensor& expert_out, const Tensor& topk_weights, const Tensor& pair_rows,
                       const Tensor* shared_out, const Tensor* shared_gate) {
  check_combine_operands("moe_combine", out, expert_out, topk_weights, pair_rows, shared_out, shared_gate);
}

// moe_combine's operands with x as out, then fused_add_rms_norm's (residual like x; weight [H], f32 or bf16 on CPU,
// f32, f16 or bf16 on CUDA): everything either op would refuse, before anything is written.
void check_moe_combine_add_rms_norm(Tensor& x, Tensor& residual, const Tensor& expert_out, const Tensor& topk_weights,
                                    const Tensor& pair_rows, const Tensor* shared_out, const Tensor* shared_gate,
                                    const Tensor& weight, float /*eps*/) {
  constexpr const char* op = "moe_combine_add_rms_norm";
  check_combine_operands(op, x, expert_out, topk_weights, pair_rows, shared_out, shared_gate);
  check_2d_rows(residual, op, "residual");
  CHECK(residual.shape() == x.shape() && residual.dtype() == x.dtype())
      << op << ": residual " << residual.to_string() << " vs x " << x.to_string();
  CHECK(residual.raw_data() != x.raw_data() || x.numel() == 0) << op << ": residual must not alias x";
  check_same_device(x, residual, op);
  CHECK(weight.defined() && weight.dim() == 1 && weight.is_contiguous() && weight.size(0) == x.size(1))
      << op << ": weight " << (weight.defined() ? weight.to_string() : "undefined") << " for x " << x.to_string();
  check_same_device(x, weight, op);
  const bool weight_dtype = weight.dtype() == DType::kF32 || weight.dtype() == DType::kBF16 ||
                            (!weight.device().is_cpu() && weight.dtype() == DType::kF16);
  CHECK(weight_dtype) << op << ": weight " << weight.to_string() << " must be f32 or bf16 (f16 too on cuda)";
}

}  // namespace

decltype(moe_route) moe_route(
    "moe_route",
    "moe_route(Tensor! topk_weights, Tensor! topk_ids, Tensor router_logits, int scoring, int renormalize) -> ()",
    check_moe_route);
decltype(moe_route_grouped) moe_route_grouped(
    "moe_route_grouped",
    "moe_route_grouped(Tensor! topk_weights, Tensor! topk_ids, Tensor router_logits, Tensor correction_bias, "
    "int num_groups, int topk_groups, int renormalize, float routed_scaling_factor) -> ()",
    check_moe_route_grouped);
decltype(moe_align) moe_align(
    "moe_align",
    "moe_align(Tensor! sorted_pairs, Tensor! pair_rows, Tensor! expert_offsets, Tensor! experts_touched, "
    "Tensor topk_ids, int block) -> ()",
    check_moe_align);
decltype(moe_route_and_align) moe_route_and_align(
    "moe_route_and_align",
    "moe_route_and_align(Tensor! topk_weights, Tensor! topk_ids, Tensor router_logits, int scoring, int renormalize, "
    "Tensor! sorted_pairs, Tensor! pair_rows, Tensor! expert_offsets, Tensor! experts_touched, int block) -> ()",
    check_moe_route_and_align);
decltype(moe_gemm) moe_gemm(
    "moe_gemm",
    "moe_gemm(Tensor! out, Tensor x, Tensor weight, Tensor sorted_pairs, Tensor expert_offsets, "
    "int gather_top_k, int block) -> ()",
    check_moe_gemm);
decltype(moe_gemm_silu) moe_gemm_silu(
    "moe_gemm_silu",
    "moe_gemm_silu(Tensor! out, Tensor! act, Tensor gate_up, Tensor weight, Tensor sorted_pairs, "
    "Tensor expert_offsets, int block) -> ()",
    check_moe_gemm_silu);
decltype(moe_combine) moe_combine("moe_combine",
                                  "moe_combine(Tensor! out, Tensor expert_out, Tensor topk_weights, Tensor pair_rows, "
                                  "Tensor? shared_out, Tensor? shared_gate) -> ()",
                                  check_moe_combine);
decltype(moe_combine_add_rms_norm) moe_combine_add_rms_norm(
    "moe_combine_add_rms_norm",
    "moe_combine_add_rms_norm(Tensor! x, Tensor! residual, Tensor expert_out, Tensor topk_weights, Tensor pair_rows, "
    "Tensor? shared_out, Tensor? shared_gate, Tensor weight, float eps) -> ()",
    check_moe_combine_add_rms_norm);

int64_t moe_align_block(Device device, int64_t num_pairs, int64_t num_experts) {
  if (device.is_cpu() || num_pairs <= kMoeStreamMaxRowsPerExpert * std::min(num_pairs, num_experts)) return 1;
  return num_pairs < 16 * num_experts ? kMoeGemmSmallTileRows : kMoeGemmTileRows;
}

int64_t moe_align_capacity(int64_t num_pairs, int64_t num_experts, int64_t block) {
  // Only experts with a pair are padded, each by at most block - 1 rows.
  return num_pairs + std::min(num_pairs, num_experts) * (block - 1);
}

}  // namespace llmserve::ops
