// Paged attention on CPU for a mixed prefill + decode batch (one code path for both): each (query token, head)
// pair is independent and split across the thread pool. Two passes over the keys per pair: scores into a
// per-thread buffer, then softmax-weighted sum of values, all in f32. Output rows of padding tokens (past
// query_start_loc[num_reqs]) are zeroed.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/vec.h"

namespace llmserve::cpu {
namespace {

struct CacheView {
  const float* key;
  const float* value;
  int64_t block_size, num_kv_heads, head_dim;
  // Offset of (slot offset `off` in physical block `block`, kv head) in elements.
  int64_t offset(int64_t block, int64_t off, int64_t kv_head) const {
    return ((block * block_size + off) * num_kv_heads + kv_head) * head_dim;
  }
};

// One query vector against key positions [lo, hi] of one request; writes head_dim outputs.
void attend_one(const float* q, float* out, const int32_t* block_row, const CacheView& cache, int64_t kv_head,
                int64_t lo, int64_t hi, float scale, std::vector<float>& scores) {
  const int64_t d = cache.head_dim, bs = cache.block_size, num = hi - lo + 1;
  scores.resize(static_cast<size_t>(num));
  float mx = -INFINITY;
  for (int64_t p = lo; p <= hi; ++p) {
    const float s = dot_f32(q, cache.key + cache.offset(block_row[p / bs], p % bs, kv_head), d) * scale;
    scores[p - lo] = s;
    mx = std::max(mx, s);
  }
  float sum = 0.f;
  for (int64_t i = 0; i < num; ++i) {
    scores[i] = std::exp(scores[i] - mx);
    sum += scores[i];
  }
  std::memset(out, 0, static_cast<size_t>(d) * sizeof(float));
  for (int64_t p = lo; p <= hi; ++p) {
    axpy_f32(scores[p - lo], cache.value + cache.offset(block_row[p / bs], p % bs, kv_head), out, d);
  }
  const float inv = 1.0f / sum;
  for (int64_t i = 0; i < d; ++i) out[i] *= inv;
}

}  // namespace

std::vector<int32_t> token_to_request(const ops::AttentionMetadata& md, int64_t num_tokens, int64_t num_blocks,
                                      int64_t block_size, int64_t* max_seq_len, const char* op) {
  const int32_t* qsl = md.query_start_loc.data<int32_t>();
  const int32_t* seq_lens = md.seq_lens.data<int32_t>();
  const int64_t max_blocks = md.block_table.size(1);
  std::vector<int32_t> req_of(static_cast<size_t>(num_tokens), -1);
  CHECK_EQ(qsl[0], 0) << op << ": query_start_loc[0]";
  CHECK_LE(qsl[md.num_reqs], num_tokens) << op << ": query_start_loc[num_reqs] past the query";
  *max_seq_len = 0;
  for (int64_t r = 0; r < md.num_reqs; ++r) {
    const int64_t qlen = qsl[r + 1] - qsl[r], seq = seq_lens[r];
    CHECK(qlen >= 0 && qlen <= seq) << op << ": request " << r << " has query_len " << qlen << " and seq_len " << seq;
    CHECK_LE((seq + block_size - 1) / block_size, max_blocks) << op << ": block table too narrow, request " << r;
    const int32_t* row = md.block_table.data<int32_t>() + r * md.block_table.stride(0);
    for (int64_t b = 0; b < (seq + block_size - 1) / block_size; ++b) {
      CHECK(row[b] >= 0 && row[b] < num_blocks)
          << op << ": request " << r << " block " << b << " = " << row[b] << " outside [0, " << num_blocks << ")";
    }
    for (int64_t t = qsl[r]; t < qsl[r + 1]; ++t) req_of[t] = static_cast<int32_t>(r);
    *max_seq_len = std::max(*max_seq_len, seq);
  }
  return req_of;
}

void paged_attention(Tensor& out, const Tensor& query, const Tensor& key_cache, const Tensor& value_cache,
                     const ops::AttentionMetadata& md, float scale, int64_t sliding_window) {
  const int64_t num_tokens = query.size(0), num_heads = query.size(1), head_dim = query.size(2);
  const CacheView cache{key_cache.data<float>(), value_cache.data<float>(), key_cache.size(1), key_cache.size(2),
                        head_dim};
  const int64_t group = num_heads / cache.num_kv_heads;
  int64_t max_seq_len = 0;
  const std::vector<int32_t> req_of =
      token_to_request(md, num_tokens, key_cache.size(0), cache.block_size, &max_seq_len, "paged_attention");
  const int32_t* qsl = md.query_start_loc.data<int32_t>();
  const int32_t* seq_lens = md.seq_lens.data<int32_t>();
  const int64_t work_per_item = std::max<int64_t>(1, max_seq_len * head_dim * 4);
  parallel_for(num_tokens * num_heads, std::max<int64_t>(1, 65536 / work_per_item), [&](int64_t begin, int64_t end) {
    std::vector<float> scores;
    for (int64_t item = begin; item < end; ++item) {
      const int64_t t = item / num_heads, h = item % num_heads;
      float* o = row_ptr<float>(out, t) + h * head_dim;
      const int32_t r = req_of[t];
      if (r < 0) {
        std::memset(o, 0, static_cast<size_t>(head_dim) * sizeof(float));
        continue;
      }
      const int64_t qlen = qsl[r + 1] - qsl[r];
      const int64_t pos = seq_lens[r] - qlen + (t - qsl[r]);
      const int64_t lo = sliding_window > 0 ? std::max<int64_t>(0, pos - sliding_window + 1) : 0;
      const int32_t* block_row = md.block_table.data<int32_t>() + r * md.block_table.stride(0);
      attend_one(row_ptr<float>(query, t) + h * head_dim, o, block_row, cache, h / group, lo, pos, scale, scores);
    }
  });
}

void register_attention_kernels() { ops::paged_attention.register_kernel(DeviceType::kCPU, paged_attention); }

}  // namespace llmserve::cpu
