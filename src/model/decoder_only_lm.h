// DecoderOnlyLM: what every decoder-only architecture here shares around its layers — the linear method, the token
// embedding (written into the residual sum), the final norm, the LM head over the sampled rows, the rotary cos/sin
// table and the step buffers around the layers. An architecture adds its layers (llama.cc, deepseek_v3.cc).
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "model/causal_lm.h"
#include "model/layers/fused_moe.h"
#include "model/layers/linear.h"
#include "model/layers/rms_norm.h"
#include "model/layers/vocab_parallel_embedding.h"
#include "model/model_registry.h"

namespace llmserve {

class DecoderOnlyLM : public CausalLM {
 public:
  const ModelConfig& config() const override { return config_; }
  Device device() const override { return device_; }
  DType activation_dtype() const override { return act_; }
  void bind_activations(const Arena* arena) override { arena_ = arena; }
  const Arena* bound_activations() const override { return arena_; }

 protected:
  DecoderOnlyLM(const ModelConfig& config, const ModelLoadOptions& options);

  // Loads the layers' parameters (`layer_params`) with the embedding, final norm and LM head in one pass.
  Status load_parameters_with(NamedParameters layer_params, WeightSource& weights,
                              const std::vector<StackedParamMapping>& stacked);
  // After the layers processed their weights: ties the LM head when the config says so, builds the rotary table.
  Status finish_loading();
  // Reserves the buffers around the layers (running output, residual sum, LM-head rows and its own).
  void plan_outer_activations(const ActivationLimits& limits, ArenaPlanner& planner);
  // The start of a forward: the step's running output x and residual sum, the embeddings written into the residual
  // (each architecture's first layer normalises them from there into x).
  std::pair<Tensor, Tensor> embed(const ForwardBatch& batch) const;
  // The end: the final norm (adding the last block's output; `normed`: the last layer folded it into its MoE
  // combine, x holds its result), then the LM head on the requested rows only.
  void compute_logits(const ForwardBatch& batch, Tensor& x, Tensor& residual, Tensor& logits,
                      bool normed = false) const;
  // The norm MoE layer i folds into its combine (FusedMoE::forward's next_norm): the next layer's
  // fusable_input_norm(), the final norm after the last layer; nullptr where this model does not fold
  // (fold_norm_into_moe_combine).
  template <typename Layer>
  const RMSNorm* norm_to_fold_after(const std::vector<std::unique_ptr<Layer>>& layers, size_t i) const {
    if (!fold_moe_norms_) return nullptr;
    return i + 1 < layers.size() ? layers[i + 1]->fusable_input_norm() : &norm_;
  }
  const Arena& arena() const { return *arena_; }
  // moe_experts_touched() for the layers' shared MoE buffers (undefined when none were planned or no arena is bound).
  Tensor experts_touched_of(const FusedMoE::Activations& moe) const {
    return moe.experts_touched.valid() && arena_ != nullptr ? arena_->view(moe.experts_touched, 1) : Tensor();
  }

  ModelConfig config_;
  Device device_;
  DType act_ = DType::kF32;                            // activations: f32 on CPU, the weight dtype on CUDA
  std::shared_ptr<const LinearMethod> linear_method_;  // config.quantization's (the dense one when unset)
  LinearContext linear_;
  Tensor cos_sin_cache_;  // [max_position, rotary dim]

 private:
  VocabParallelEmbedding embed_tokens_;
  RMSNorm norm_;
  bool fold_moe_norms_;  // config_.moe && fold_norm_into_moe_combine(device_)
  ParallelLMHead lm_head_;
  ArenaRegion hidden_, residual_, selected_;
  ParallelLMHead::Activations lm_head_act_;
  const Arena* arena_ = nullptr;
};

}  // namespace llmserve
