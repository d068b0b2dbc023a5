// CausalLM: the interface every architecture implements — one forward pass over a flattened mixed
// prefill + decode batch that writes K/V into the paged cache and returns logits for selected token rows.
#pragma once

#include <cstdint>
#include <vector>

#include "core/arena.h"
#include "core/tensor.h"
#include "kernels/ops.h"
#include "model/model_config.h"

namespace llmserve {

// What one token takes in one layer's paged KV cache (vLLM's KVCacheSpec): each layer's key tensor is
// [num_blocks, block_size] + token_shape, and so is its value tensor when has_value. Llama family: key and value
// [num_kv_heads, head_dim] (ops::reshape_and_cache's layout); multi-head latent attention: one latent row
// [kv_lora_rank + qk_rope_head_dim] (ops::mla_rotary_and_cache's) and no value tensor.
struct KVCacheSpec {
  Shape token_shape;
  bool has_value = true;
  // One token's bytes over all of one layer's cache tensors, in `dtype`.
  size_t bytes_per_token(DType dtype) const;
  // The key (and value) tensor shape of one layer.
  Shape layer_shape(int64_t num_blocks, int64_t block_size) const;
};

// The paged KV cache of one model: per layer a key tensor and, when the model's KVCacheSpec has values, a value
// tensor (value stays empty otherwise), shaped KVCacheSpec::layer_shape.
struct KVCacheTensors {
  std::vector<Tensor> key;    // [num_layers]
  std::vector<Tensor> value;  // [num_layers], or empty (no value cache)
  int64_t num_blocks = 0;
  int64_t block_size = 0;
};

// One step's inputs, built by the runner, on the model's device. Tokens of each request are contiguous, requests
// in batch order.
struct ForwardBatch {
  Tensor input_ids;       // [num_tokens] i32
  Tensor positions;       // [num_tokens] i64
  Tensor logits_indices;  // [num_logits] i32: token rows whose logits are wanted (e.g. each request's last)
  ops::AttentionMetadata attention;
};

// The largest step activations are planned for (the runner's max_num_batched_tokens and logits rows).
struct ActivationLimits {
  int64_t max_num_tokens = 0;  // tokens in one forward
  int64_t max_num_logits = 0;  // rows of logits_indices in one forward
};

class CausalLM {
 public:
  virtual ~CausalLM() = default;
  virtual const ModelConfig& config() const = 0;
  // Where weights and activations live; the KV cache must be there too.
  virtual Device device() const { return Device::cpu(); }
  // Activations and the KV cache: f32 on CPU; the weight dtype on CUDA.
  virtual DType activation_dtype() const { return DType::kF32; }
  // KV heads the cache passed to forward() holds per layer: the config's, or one rank's share under tensor
  // parallelism (num_key_value_heads / tp, or 1 when replicated).
  virtual int64_t num_kv_heads_per_rank() const { return config().num_key_value_heads; }
  // The per-token layout of each layer's KV cache (the runner allocates it, the KV-cache manager sizes blocks by
  // it). Default: key and value [num_kv_heads_per_rank(), head_dim].
  virtual KVCacheSpec kv_cache_spec() const;
  // Elements of the CUDA attention kernels' split-K workspace (AttentionMetadata::workspace) for steps of up to
  // max_num_tokens tokens and contexts up to max_model_len. Default: ops::paged_attention_workspace_elems with the
  // config's heads and head_dim.
  virtual int64_t attention_workspace_elems(int64_t max_num_tokens, int64_t max_model_len) const;
  // Whether a CUDA graph captured on the caller's stream records the whole forward (false for a model whose ranks
  // run on other threads' streams: the runner then runs eagerly).
  virtual bool cuda_graph_capturable() const { return true; }
  // Every device holding a part of the model, device() first (tensor parallelism: one per rank of this process).
  virtual std::vector<Device> devices() const { return {device()}; }
  // Runs the model; writes logits [num_logits, vocab_size] (f32, on device()). Aborts (CHECK) on inconsistent shapes:
  // the runner is trusted, user input was validated before it. A tensor-parallel rank that does not sample passes an
  // undefined `logits`: it still takes part in every collective.
  // forward never allocates: its per-step buffers are views of an arena bound before (ActivationMemory); a step
  // larger than the planned limits CHECK-fails naming the limit.
  virtual void forward(const ForwardBatch& batch, KVCacheTensors& kv_cache, Tensor& logits) = 0;
  // Reserves the per-step buffers for `limits` on `planner` and remembers the regions. Every call reserves the
  // same regions in the same order (only their row counts follow the limits), so any arena planned for this model
  // can be bound.
  virtual void plan_activations(const ActivationLimits& limits, ArenaPlanner& planner) = 0;
  // Binds an arena allocated from this model's plan (nullptr: none). It must outlive its use in forward.
  virtual void bind_activations(const Arena* arena) = 0;
  virtual const Arena* bound_activations() const = 0;
  // A mixture-of-experts model's running count of the experts its MoE layers' steps read (the sum over steps and
  // layers of ops::moe_align's experts_touched: [1] i64 on device(), in the bound arena; zero it before a phase to
  // count that phase). Undefined for dense models and when no arena is bound.
  virtual Tensor moe_experts_touched() const { return {}; }
};

// The activation memory of one model: plans, allocates once on model.device() and binds it; when destroyed it binds
// back the arena bound before (so a short-lived one, e.g. a reference forward in a test, nests inside a runner's).
// Several of one model must be destroyed in reverse order of creation (CHECKed).
// The ModelRunner owns one; tests calling forward directly make one too.
class ActivationMemory {
 public:
  ActivationMemory(CausalLM& model, const ActivationLimits& limits);
  ~ActivationMemory();
  ActivationMemory(const ActivationMemory&) = delete;
  ActivationMemory& operator=(const ActivationMemory&) = delete;
  size_t bytes() const { return arena_.total_bytes(); }
  const ActivationLimits& limits() const { return limits_; }

 private:
  CausalLM& model_;
  ActivationLimits limits_;
  const Arena* previous_;
  Arena arena_;
};

}  // namespace llmserve
