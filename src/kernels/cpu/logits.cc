// Logit post-processing on CPU: row-wise log_softmax, top-k (descending, ties -> lower id) and argmax
// (ties -> lowest id). NaN logits rank below every number, so they are never chosen while a number exists.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/cpu_ops.h"

namespace llmserve::cpu {

void log_softmax(Tensor& out, const Tensor& logits) {
  const int64_t n = logits.size(0), vocab = logits.size(1);
  parallel_for(n, std::max<int64_t>(1, 65536 / std::max<int64_t>(1, vocab)), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const float* x = row_ptr<float>(logits, i);
      float* o = row_ptr<float>(out, i);
      float mx = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < vocab; ++j) mx = std::max(mx, x[j]);
      double sum = 0.0;
      for (int64_t j = 0; j < vocab; ++j) sum += std::exp(x[j] - mx);
      const float lse = mx + static_cast<float>(std::log(sum));
      for (int64_t j = 0; j < vocab; ++j) o[j] = x[j] - lse;
    }
  });
}

void top_k(Tensor& values, Tensor& ids, const Tensor& x, int64_t k) {
  const int64_t n = x.size(0), vocab = x.size(1);
  parallel_for(n, 1, [&](int64_t begin, int64_t end) {
    std::vector<int32_t> order(static_cast<size_t>(vocab));
    for (int64_t i = begin; i < end; ++i) {
      const float* row = row_ptr<float>(x, i);
      // Strict weak order: larger value first, NaN after every number, equal values by id.
      auto before = [row](int32_t a, int32_t b) {
        const float va = row[a], vb = row[b];
        const bool na = std::isnan(va), nb = std::isnan(vb);
        if (na != nb) return nb;
        if (!na && va != vb) return va > vb;
        return a < b;
      };
      for (int64_t j = 0; j < vocab; ++j) order[j] = static_cast<int32_t>(j);
      std::partial_sort(order.begin(), order.begin() + k, order.end(), before);
      float* v = row_ptr<float>(values, i);
      int32_t* id = row_ptr<int32_t>(ids, i);
      for (int64_t j = 0; j < k; ++j) {
        id[j] = order[j];
        v[j] = row[order[j]];
      }
    }
  });
}

void argmax(Tensor& out_ids, const Tensor& logits) {
  const int64_t n = logits.size(0), vocab = logits.size(1);
  int32_t* out = out_ids.data<int32_t>();
  parallel_for(n, std::max<int64_t>(1, 65536 / std::max<int64_t>(1, vocab)), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const float* x = row_ptr<float>(logits, i);
      int64_t best = 0;
      while (best < vocab - 1 && std::isnan(x[best])) ++best;
      for (int64_t j = best + 1; j < vocab; ++j) {
        if (x[j] > x[best]) best = j;  // strict: ties keep the lower id; NaN compares false
      }
      out[i] = static_cast<int32_t>(best);
    }
  });
}

void register_logits_kernels() {
  ops::log_softmax.register_kernel(DeviceType::kCPU, log_softmax);
  ops::top_k.register_kernel(DeviceType::kCPU, top_k);
  ops::argmax.register_kernel(DeviceType::kCPU, argmax);
}

}  // namespace llmserve::cpu
