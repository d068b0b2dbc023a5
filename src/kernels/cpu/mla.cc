// Multi-head latent attention's ops on CPU (ops.h: batched_linear, mla_rotary_and_cache, mla_attention), the
// reference for the CUDA kernels: f32 throughout, one latent row [kv_c (L), k_pe (R)] per cached token.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/vec.h"

namespace llmserve::cpu {
namespace {

// Rotates one vector of `rope` values by the angles of one position (cos, sin: rope / 2 each), from `in` into
// `out` (may be the same memory). interleaved: pairs (x[2i], x[2i+1]); else pairs (x[i], x[i + rope / 2]).
void rotate(const float* in, float* out, int64_t rope, const float* cos, const float* sin, bool interleaved) {
  const int64_t half = rope / 2;
  for (int64_t i = 0; i < half; ++i) {
    const int64_t i0 = interleaved ? 2 * i : i, i1 = interleaved ? 2 * i + 1 : i + half;
    const float a = in[i0], b = in[i1];
    out[i0] = a * cos[i] - b * sin[i];
    out[i1] = b * cos[i] + a * sin[i];
  }
}

}  // namespace

// One ops::linear per batch entry: x[b] and out[b] are row-strided [m, k] / [m, n] views.
void batched_linear(Tensor& out, const Tensor& x, const Tensor& weight) {
  for (int64_t b = 0; b < x.size(0); ++b) {
    Tensor out_b = out.select(0, b);
    ops::linear(out_b, x.select(0, b), weight.select(0, b), nullptr);
  }
}

void mla_rotary_and_cache(const Tensor& positions, const Tensor& q_pe, Tensor& q_out, Tensor& k_pe, const Tensor& kv_c,
                          const Tensor& cos_sin_cache, int64_t interleaved, Tensor& latent_cache,
                          const Tensor& slot_mapping) {
  const int64_t n = positions.size(0), heads = q_pe.size(1), rope = q_pe.size(2), latent = kv_c.size(1);
  const int64_t max_position = cos_sin_cache.size(0);
  const int64_t num_slots = latent_cache.size(0) * latent_cache.size(1), row = latent + rope;
  const int64_t* pos = positions.data<int64_t>();
  const int64_t* slots = slot_mapping.data<int64_t>();
  for (int64_t t = 0; t < n; ++t) {
    CHECK(pos[t] >= 0 && pos[t] < max_position) << "mla_rotary_and_cache: position " << pos[t] << " of token " << t
                                                << " outside the cos/sin cache [0, " << max_position << ")";
    CHECK_LT(slots[t], num_slots) << "mla_rotary_and_cache: slot " << slots[t] << " of token " << t
                                  << " past the cache (" << num_slots << " slots)";
  }
  parallel_for(
      n, std::max<int64_t>(1, 8192 / std::max<int64_t>(1, (heads + 1) * rope)), [&](int64_t begin, int64_t end) {
        for (int64_t t = begin; t < end; ++t) {
          const float* cos = cos_sin_cache.data<float>() + pos[t] * rope;
          const float* sin = cos + rope / 2;
          for (int64_t h = 0; h < heads; ++h) {
            rotate(q_pe.data<float>() + t * q_pe.stride(0) + h * q_pe.stride(1),
                   q_out.data<float>() + t * q_out.stride(0) + h * q_out.stride(1), rope, cos, sin, interleaved != 0);
          }
          float* k = row_ptr<float>(k_pe, t);
          rotate(k, k, rope, cos, sin, interleaved != 0);
          if (slots[t] < 0) continue;
          float* dst = latent_cache.data<float>() + slots[t] * row;
          std::memcpy(dst, row_ptr<float>(kv_c, t), static_cast<size_t>(latent) * sizeof(float));
          std::memcpy(dst + latent, k, static_cast<size_t>(rope) * sizeof(float));
        }
      });
}

// Each (query token, head) pair is independent: scores over the request's rows [0, pos], then the softmax-weighted
// sum of the rows' first L values, in f32.
void mla_attention(Tensor& out, const Tensor& query, const Tensor& latent_cache, const ops::AttentionMetadata& md,
                   float scale) {
  const int64_t num_tokens = query.size(0), heads = query.size(1), row = query.size(2), latent = out.size(2);
  const int64_t block_size = latent_cache.size(1);
  int64_t max_seq_len = 0;
  const std::vector<int32_t> req_of =
      token_to_request(md, num_tokens, latent_cache.size(0), block_size, &max_seq_len, "mla_attention");
  const int32_t* qsl = md.query_start_loc.data<int32_t>();
  const int32_t* seq_lens = md.seq_lens.data<int32_t>();
  const float* cache = latent_cache.data<float>();
  const int64_t work_per_item = std::max<int64_t>(1, max_seq_len * (row + latent));
  parallel_for(num_tokens * heads, std::max<int64_t>(1, 65536 / work_per_item), [&](int64_t begin, int64_t end) {
    std::vector<float> scores;
    for (int64_t item = begin; item < end; ++item) {
      const int64_t t = item / heads, h = item % heads;
      float* o = row_ptr<float>(out, t) + h * latent;
      std::memset(o, 0, static_cast<size_t>(latent) * sizeof(float));
      const int32_t r = req_of[t];
      if (r < 0) continue;
      const int64_t pos = seq_lens[r] - (qsl[r + 1] - qsl[r]) + (t - qsl[r]);
      const int32_t* block_row = md.block_table.data<int32_t>() + r * md.block_table.stride(0);
      const auto row_at = [&](int64_t p) {
        return cache + (block_row[p / block_size] * block_size + p % block_size) * row;
      };
      const float* q = row_ptr<float>(query, t) + h * row;
      scores.resize(static_cast<size_t>(pos + 1));
      float mx = -INFINITY;
      for (int64_t p = 0; p <= pos; ++p) {
        scores[p] = dot_f32(q, row_at(p), row) * scale;
        mx = std::max(mx, scores[p]);
      }
      float sum = 0.f;
      for (int64_t p = 0; p <= pos; ++p) sum += (scores[p] = std::exp(scores[p] - mx));
      const float inv = 1.0f / sum;
      for (int64_t p = 0; p <= pos; ++p) axpy_f32(scores[p] * inv, row_at(p), o, latent);
    }
  });
}

void register_mla_kernels() {
  ops::batched_linear.register_kernel(DeviceType::kCPU, batched_linear);
  ops::mla_rotary_and_cache.register_kernel(DeviceType::kCPU, mla_rotary_and_cache);
  ops::mla_attention.register_kernel(DeviceType::kCPU, mla_attention);
}

}  // namespace llmserve::cpu
