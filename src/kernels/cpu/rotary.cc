// Rotary position embedding on CPU, rotate-half layout: for each head, pair element i with i + head_dim/2.
// In place on query and key; positions past the cos/sin cache abort.
#include "core/thread_pool.h"
#include "kernels/cpu/cpu_ops.h"

namespace llmserve::cpu {
namespace {

// Rotates `num_heads` consecutive heads of one token: x1' = x1 cos - x2 sin, x2' = x2 cos + x1 sin.
void rotate_heads(float* x, int64_t num_heads, int64_t head_dim, const float* cos, const float* sin) {
  const int64_t half = head_dim / 2;
  for (int64_t h = 0; h < num_heads; ++h) {
    float* x1 = x + h * head_dim;
    float* x2 = x1 + half;
#pragma omp simd
    for (int64_t i = 0; i < half; ++i) {
      const float a = x1[i], b = x2[i];
      x1[i] = a * cos[i] - b * sin[i];
      x2[i] = b * cos[i] + a * sin[i];
    }
  }
}

}  // namespace

void rotary_embedding(const Tensor& positions, Tensor& query, Tensor& key, int64_t head_dim,
                      const Tensor& cos_sin_cache) {
  const int64_t n = positions.size(0), max_position = cos_sin_cache.size(0);
  const int64_t* pos = positions.data<int64_t>();
  for (int64_t t = 0; t < n; ++t) {
    CHECK(pos[t] >= 0 && pos[t] < max_position) << "rotary_embedding: position " << pos[t] << " of token " << t
                                                << " outside the cache [0, " << max_position << ")";
  }
  const int64_t num_heads = row_numel(query) / head_dim, num_kv_heads = row_numel(key) / head_dim;
  const int64_t per_token = (num_heads + num_kv_heads) * head_dim;
  parallel_for(n, std::max<int64_t>(1, 8192 / std::max<int64_t>(1, per_token)), [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const float* cos = cos_sin_cache.data<float>() + pos[t] * head_dim;
      const float* sin = cos + head_dim / 2;
      rotate_heads(row_ptr<float>(query, t), num_heads, head_dim, cos, sin);
      rotate_heads(row_ptr<float>(key, t), num_kv_heads, head_dim, cos, sin);
    }
  });
}

void register_rotary_kernels() { ops::rotary_embedding.register_kernel(DeviceType::kCPU, rotary_embedding); }

}  // namespace llmserve::cpu
