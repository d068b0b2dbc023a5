// Attention: the paged self-attention block of a decoder layer — QKV projection (one fused GEMM, or three when
// fuse_qkv is off: the CPU), optional per-head q/k RMSNorm (on the heads' strided views; with the rotary when
// fuse_qk_norm_rope), rotary + K/V cache write in one op, paged attention (GQA, sliding window), output projection.
#pragma once

#include <memory>
#include <optional>

#include "core/arena.h"
#include "model/causal_lm.h"
#include "model/layers/linear.h"
#include "model/layers/rms_norm.h"

namespace llmserve {

struct AttentionOptions {
  int64_t hidden_size = 0, num_heads = 0, num_kv_heads = 0, head_dim = 0;
  bool qkv_bias = false, o_bias = false, qk_norm = false;
  float rms_norm_eps = 1e-6f;
  std::optional<int64_t> sliding_window;  // tokens; nullopt: full attention
  bool fuse_qkv = false;                  // one [T, (nh + 2 nkv) D] GEMM instead of three
  bool fuse_qk_norm_rope = false;         // q/k norms through ops::qk_norm_rotary_embedding_and_cache
};

class Attention {
 public:
  Attention(const LinearContext& ctx, const AttentionOptions& options);

  // The per-step buffers every Attention of a model shares (planned once, for max_num_tokens rows).
  struct Activations {
    ArenaRegion qkv;      // fused: [T, (nh + 2 nkv) D]
    ArenaRegion q, k, v;  // unfused: [T, nh D], [T, nkv D], [T, nkv D]
    ArenaRegion out;      // [T, nh, D]
  };
  Activations plan_activations(int64_t max_num_tokens, DType dtype, ArenaPlanner& planner) const;

  // h [T, hidden]: in the normed hidden states, out the projected attention output. Writes this layer's K/V.
  // hq: the normed hidden states already quantized (as quantized_input() says) for the QKV projection;
  // h's contents are then not read, only written.
  void forward(const ForwardBatch& batch, const Tensor& key_cache, const Tensor& value_cache,
               const Tensor& cos_sin_cache, const Arena& arena, const Activations& act, Tensor& h,
               const QuantizedActivation* hq = nullptr) const;
  // The quantized input the QKV projection takes (LinearMethod::quantized_input()), if any.
  std::optional<QuantizedInputSpec> quantized_input() const { return qkv_proj_.quantized_input(); }
  void named_parameters(const std::string& prefix, NamedParameters& out);
  Status process_weights_after_loading();

 private:
  AttentionOptions options_;
  int64_t num_heads_, num_kv_heads_;  // on this rank
  QKVParallelLinear qkv_proj_;
  RowParallelLinear o_proj_;
  std::unique_ptr<RMSNorm> q_norm_, k_norm_;  // qk_norm: over head_dim, per head, before rotary
};

}  // namespace llmserve
