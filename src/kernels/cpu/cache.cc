// Paged KV-cache writes on CPU (token t to slot slot_mapping[t] of the [num_blocks, block_size, num_kv_heads,
// head_dim] caches; negative slots skipped), alone or after rotary and Qwen3's q/k norms, as the fused CUDA ops.
#include <cstring>

#include "kernels/cpu/cpu_ops.h"

namespace llmserve::cpu {

void reshape_and_cache(const Tensor& key, const Tensor& value, Tensor& key_cache, Tensor& value_cache,
                       const Tensor& slot_mapping) {
  const int64_t n = key.size(0);
  const int64_t num_slots = key_cache.size(0) * key_cache.size(1);
  const int64_t slot_elems = key_cache.size(2) * key_cache.size(3);
  const size_t bytes = static_cast<size_t>(slot_elems) * sizeof(float);
  const int64_t* slots = slot_mapping.data<int64_t>();
  // Small copies (one token's heads each): a serial loop is faster than waking the pool.
  for (int64_t t = 0; t < n; ++t) {
    const int64_t s = slots[t];
    if (s < 0) continue;
    CHECK_LT(s, num_slots) << "reshape_and_cache: slot of token " << t << " past the cache";
    std::memcpy(key_cache.data<float>() + s * slot_elems, row_ptr<float>(key, t), bytes);
    std::memcpy(value_cache.data<float>() + s * slot_elems, row_ptr<float>(value, t), bytes);
  }
}

// rotary_embedding then reshape_and_cache: on the CPU two passes cost nothing extra worth fusing.
void rotary_embedding_and_cache(const Tensor& positions, Tensor& query, Tensor& key, const Tensor& value,
                                int64_t head_dim, const Tensor& cos_sin_cache, Tensor& key_cache, Tensor& value_cache,
                                const Tensor& slot_mapping) {
  rotary_embedding(positions, query, key, head_dim, cos_sin_cache);
  reshape_and_cache(key, value, key_cache, value_cache, slot_mapping);
}

// The per-head norms then rotary_embedding_and_cache, through the ops: the reference the CUDA kernel matches.
void qk_norm_rotary_embedding_and_cache(const Tensor& positions, Tensor& query, Tensor& key, const Tensor& value,
                                        int64_t head_dim, const Tensor& cos_sin_cache, const Tensor& q_weight,
                                        const Tensor& k_weight, float eps, Tensor& key_cache, Tensor& value_cache,
                                        const Tensor& slot_mapping) {
  ops::rms_norm(query, query, q_weight, eps);
  ops::rms_norm(key, key, k_weight, eps);
  rotary_embedding_and_cache(positions, query, key, value, head_dim, cos_sin_cache, key_cache, value_cache,
                             slot_mapping);
}

void register_cache_kernels() {
  ops::reshape_and_cache.register_kernel(DeviceType::kCPU, reshape_and_cache);
  ops::rotary_embedding_and_cache.register_kernel(DeviceType::kCPU, rotary_embedding_and_cache);
  ops::qk_norm_rotary_embedding_and_cache.register_kernel(DeviceType::kCPU, qk_norm_rotary_embedding_and_cache);
}

}  // namespace llmserve::cpu
