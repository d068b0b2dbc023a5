// FusedMoE: a mixture-of-experts feed-forward block (vLLM's FusedMoE) — router GEMM, top-k routing, tokens grouped by
// expert, grouped gate/up GEMM over experts stacked [E, 2 I, H] at load, SiLU-and-mul, grouped down GEMM [E, H, I],
// weighted combine back to token order, plus an optional shared expert (Qwen2-MoE: behind a sigmoid gate; DeepSeek-V3:
// ungated, beside a group-limited sigmoid router).
// x [T, hidden] in, the block's output [T, hidden] out, in place.
#pragma once

#include <memory>
#include <string>

#include "core/arena.h"
#include "kernels/ops.h"
#include "model/layers/gated_mlp.h"
#include "model/layers/linear.h"
#include "model/layers/rms_norm.h"

namespace llmserve {

struct FusedMoEOptions {
  int64_t hidden_size = 0;
  int64_t num_experts = 0;
  int64_t top_k = 0;
  int64_t intermediate_size = 0;                // each expert's
  int64_t scoring = ops::kMoeScoringSoftmax;    // ops::moe_route's
  bool renormalize = false;                     // top-k weights divided by their sum (Mixtral; norm_topk_prob)
  int64_t shared_expert_intermediate_size = 0;  // 0: none
  bool shared_expert_gate = false;              // the shared expert's output scaled by sigmoid(x . w_gate)
  // DeepSeek-V3's router (ops::moe_route_grouped) instead of ops::moe_route: sigmoid scores, num_groups groups of
  // experts of which the topk_groups best stay, the f32 `<router>.e_score_correction_bias` [E] added for choosing
  // only, the chosen weights (renormalised when `renormalize`) times routed_scaling_factor. `scoring` is unused.
  bool grouped_routing = false;
  int64_t num_groups = 1, topk_groups = 1;
  float routed_scaling_factor = 1.0f;
  // The router's (and the shared expert gate's) weight dtype: the activation dtype, so routing is computed in f32 on
  // CPU even over bf16 experts (a bf16-rounded router input flips near-tied choices: a discrete error the continuous
  // tolerance of the bf16 GEMM path cannot absorb); on CUDA the activation dtype too (ops::linear wants one dtype).
  DType router_dtype = DType::kF32;
  // Routing and grouping in one call (ops::moe_route_and_align: one kernel for decode batches on CUDA) where
  // grouped_routing is off; else ops::moe_route then ops::moe_align.
  bool fuse_route_align = false;
  // Checkpoint names under the block's prefix: `<router>.weight`, `experts.<e>.<gate|up|down>.weight`,
  // `shared_expert.*`, `shared_expert_gate.weight` (Qwen: gate / gate_proj, up_proj, down_proj; Mixtral: gate / w1,
  // w3, w2). A checkpoint holding the stacked tensors themselves (`experts.gate_up_proj` [E, 2 I, H],
  // `experts.down_proj` [E, H, I], transformers 5's in-memory layout) loads them as they are.
  std::string router_name = "gate";
  std::string gate_proj_name = "gate_proj", up_proj_name = "up_proj", down_proj_name = "down_proj";
  std::string shared_expert_name = "shared_expert";  // DeepSeek: "shared_experts" (n_shared_experts merged in one)
};

// Whether a model on `device` folds the pre-norm step after each MoE block into its combine (FusedMoE::forward's
// next_norm): on the CPU always (the op is the two ops there); on CUDA (one kernel) unless
// LLMSERVE_FUSED_MOE_COMBINE_NORM=0 (the A/B switch; bench/RESULTS.md, eighteenth session).
bool fold_norm_into_moe_combine(Device device);

class FusedMoE {
 public:
  // Expert parallelism plugs in through ctx.comm (each rank keeping a slice of the experts, the combine all-reduced);
  // world size 1 only today: a larger world is refused by the model factory before this is built.
  FusedMoE(const LinearContext& ctx, const FusedMoEOptions& options);
  FusedMoE(const FusedMoE&) = delete;
  FusedMoE& operator=(const FusedMoE&) = delete;

  // The per-step buffers every FusedMoE of a model shares (same options in every sparse layer).
  struct Activations {
    ArenaRegion router_logits;   // [T, E] f32
    ArenaRegion topk_weights;    // [T, k] f32
    ArenaRegion topk_ids;        // [T, k] i32
    ArenaRegion sorted_pairs;    // [capacity] i32
    ArenaRegion pair_rows;       // [T k] i32
    ArenaRegion expert_offsets;  // [E + 1] i32
    // [1] i64: ops::moe_align's running count of the experts each MoE layer's step reads, shared by the layers; the
    // arena is never cleared, so it counts from whatever it held until a reader zeroes it (CausalLM).
    ArenaRegion experts_touched;
    ArenaRegion gate_up;         // [capacity, 2 I]
    ArenaRegion act;             // [capacity, I]
    ArenaRegion down;            // [capacity, hidden]
    ArenaRegion shared_out;      // [T, hidden] (shared expert only)
    ArenaRegion shared_gate;     // [T, 1] (gated shared expert only)
    GatedMLP::Activations shared;
  };
  Activations plan_activations(int64_t max_num_tokens, DType dtype, ArenaPlanner& planner) const;
  // x: the block's input in, its output out; or, with next_norm, the next pre-norm step folded into the combine
  // (ops::moe_combine_add_rms_norm): residual += the block's output, x = next_norm(residual).
  void forward(const Arena& arena, const Activations& act, Tensor& x, const RMSNorm* next_norm = nullptr,
               Tensor* residual = nullptr) const;
  void named_parameters(const std::string& prefix, NamedParameters& out);
  Status process_weights_after_loading();

  const FusedMoEOptions& options() const { return options_; }

 private:
  Status load_experts(Parameter& p, WeightSource& weights, const std::string& name, bool gate_up) const;

  FusedMoEOptions options_;
  Communicator* comm_;
  Parameter router_;           // [E, hidden] in router_dtype
  Parameter correction_bias_;  // [E] f32 (grouped routing only)
  Parameter w13_;              // [E, 2 I, hidden]: gate rows then up rows of each expert
  Parameter w2_;               // [E, hidden, I]
  std::unique_ptr<GatedMLP> shared_expert_;
  Parameter shared_gate_;  // [1, hidden]
};

}  // namespace llmserve
