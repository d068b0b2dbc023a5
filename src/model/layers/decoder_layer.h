// DecoderLayer: pre-norm attention + gated MLP (or a FusedMoE block) with the fused residual norm (the Llama family's
// block; Mixtral / Qwen-MoE put a FusedMoE where the MLP was).
// x [T, hidden] is the running block output, residual [T, hidden] the running sum; the first layer finds the
// embeddings in residual (the model embeds into it: no copy) and normalises them into x. A sparse layer may end with
// the next layer's input norm (or the final norm) folded into its combine: see LayerInput.
#pragma once

#include <memory>
#include <vector>

#include "model/layers/attention.h"
#include "model/layers/fused_moe.h"
#include "model/layers/gated_mlp.h"
#include "model/layers/rms_norm.h"

namespace llmserve {

// What x holds when a pre-norm layer starts (this one, DeepSeek-V3's): nothing yet (the first layer: the embeddings
// are in residual), the previous layer's block output (its residual add and this layer's input norm still to do), or
// this layer's normed input (the previous MoE layer folded both into its combine).
enum class LayerInput { kEmbeddings, kBlockOutput, kNormed };

class DecoderLayer {
 public:
  DecoderLayer(const LinearContext& ctx, const AttentionOptions& attention, int64_t intermediate_size, bool mlp_bias);
  // The sparse form: `moe` in place of the MLP, its parameters under `<prefix>.<moe_module>` ("mlp";
  // Mixtral: "block_sparse_moe").
  DecoderLayer(const LinearContext& ctx, const AttentionOptions& attention, const FusedMoEOptions& moe,
               std::string moe_module);

  struct Activations {
    Attention::Activations attention;
    GatedMLP::Activations mlp;  // planned when some layer is dense
    FusedMoE::Activations moe;  // planned when some layer is sparse
    // The normed hidden states quantized ([T, hidden] fp8 / i8, [T, groups] f32): planned when the QKV projection
    // or the dense MLP's gate_up takes them (LinearMethod::quantized_input()); the norm before such
    // a consumer then quantizes in the same kernel (the input norm for QKV, the post-attention norm for gate_up).
    ArenaRegion normed_q, normed_scales;
  };
  // Planned once per model on any one layer (every layer has the same shapes), plus the feed-forward kind it lacks
  // when the model mixes dense and sparse layers: see plan_decoder_activations.
  Activations plan_activations(int64_t max_num_tokens, DType dtype, ArenaPlanner& planner) const;
  // Plans only this layer's feed-forward part (the MLP or the MoE block) into `a`.
  void plan_feed_forward(int64_t max_num_tokens, DType dtype, ArenaPlanner& planner, Activations& a) const;
  // Returns what x holds for the next layer: kNormed where this layer is sparse and was given next_norm (the next
  // layer's fusable_input_norm(), or the final norm; nullptr: no folding), else kBlockOutput.
  LayerInput forward(const ForwardBatch& batch, const Tensor& key_cache, const Tensor& value_cache,
                     const Tensor& cos_sin_cache, const Arena& arena, const Activations& act, LayerInput input,
                     const RMSNorm* next_norm, Tensor& x, Tensor& residual) const;
  // This layer's input norm where the layer before may apply it (its output unquantized), else nullptr.
  const RMSNorm* fusable_input_norm() const { return self_attn_.quantized_input() ? nullptr : &input_layernorm_; }
  void named_parameters(const std::string& prefix, NamedParameters& out);
  Status process_weights_after_loading();
  bool is_sparse() const { return moe_ != nullptr; }

 private:
  int64_t hidden_size_;
  RMSNorm input_layernorm_;
  Attention self_attn_;
  RMSNorm post_attention_layernorm_;
  std::unique_ptr<GatedMLP> mlp_;  // dense layers
  std::unique_ptr<FusedMoE> moe_;  // sparse layers
  std::string moe_module_;

  // The quantized normed hidden states of act for T tokens when `consumer` (a projection's quantized_input()) takes
  // them as planned; else an undefined q (the unfused path).
  QuantizedActivation quantized_normed(const Arena& arena, const Activations& act, int64_t T,
                                       const std::optional<QuantizedInputSpec>& consumer) const;
};

// The activations of a model's layers (the attention once; the MLP and / or the MoE block from the first layer of
// each kind).
DecoderLayer::Activations plan_decoder_activations(const std::vector<std::unique_ptr<DecoderLayer>>& layers,
                                                   int64_t max_num_tokens, DType dtype, ArenaPlanner& planner);

}  // namespace llmserve
