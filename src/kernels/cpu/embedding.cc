// Embedding lookup on CPU: copies (and converts) one table row per token; ids out of range abort.
#include <cstring>

#include "core/thread_pool.h"
#include "kernels/cpu/cpu_ops.h"

namespace llmserve::cpu {

void embedding(Tensor& out, const Tensor& ids, const Tensor& table) {
  const int64_t num_tokens = ids.size(0), vocab = table.size(0), hidden = table.size(1);
  const int32_t* id = ids.data<int32_t>();
  for (int64_t t = 0; t < num_tokens; ++t) {
    CHECK(id[t] >= 0 && id[t] < vocab) << "embedding: token id " << id[t] << " at " << t << " outside [0, " << vocab
                                       << ")";
  }
  const size_t table_row_bytes = static_cast<size_t>(hidden) * dtype_size(table.dtype());
  const size_t out_elem = dtype_size(out.dtype());
  parallel_for(num_tokens, 64, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const char* src = static_cast<const char*>(table.raw_data()) + id[t] * table_row_bytes;
      char* dst = static_cast<char*>(out.raw_data()) + t * out.stride(0) * out_elem;
      convert_elements(src, table.dtype(), dst, out.dtype(), static_cast<size_t>(hidden));
    }
  });
}

void masked_embedding(Tensor& out, const Tensor& ids, const Tensor& table, int64_t vocab_start) {
  const int64_t num_tokens = ids.size(0), rows = table.size(0), hidden = table.size(1);
  const int32_t* id = ids.data<int32_t>();
  for (int64_t t = 0; t < num_tokens; ++t) {
    CHECK(id[t] >= 0) << "masked_embedding: token id " << id[t] << " at " << t << " is negative";
  }
  const size_t table_row_bytes = static_cast<size_t>(hidden) * dtype_size(table.dtype());
  const size_t out_elem = dtype_size(out.dtype());
  parallel_for(num_tokens, 64, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      char* dst = static_cast<char*>(out.raw_data()) + t * out.stride(0) * out_elem;
      const int64_t local = id[t] - vocab_start;
      if (local < 0 || local >= rows) {
        std::memset(dst, 0, static_cast<size_t>(hidden) * out_elem);  // +0.0 in every float dtype
        continue;
      }
      const char* src = static_cast<const char*>(table.raw_data()) + local * table_row_bytes;
      convert_elements(src, table.dtype(), dst, out.dtype(), static_cast<size_t>(hidden));
    }
  });
}

void register_embedding_kernels() {
  ops::embedding.register_kernel(DeviceType::kCPU, embedding);
  ops::masked_embedding.register_kernel(DeviceType::kCPU, masked_embedding);
}

}  // namespace llmserve::cpu
