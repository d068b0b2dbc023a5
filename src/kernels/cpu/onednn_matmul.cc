// oneDNN matmul wrapper: primitives cached by (n, k, dtype) behind a mutex; execution is lock-free (primitives
// are immutable and may run from several threads at once). oneDNN errors (C++ exceptions) never leave this file.
#include "kernels/cpu/onednn_matmul.h"

#include <omp.h>

#include <map>
#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/vec.h"

namespace llmserve::cpu {
namespace {

using dt = dnnl::memory::data_type;

class MatmulCache {
 public:
  static MatmulCache& get() {
    static MatmulCache cache;
    return cache;
  }

  bool has_engine() const { return engine_ != nullptr; }
  dnnl::engine& engine() { return *engine_; }

  // The primitive for weight [n, k] of dtype `wt`, or nullptr when oneDNN has none.
  const dnnl::matmul* find(int64_t n, int64_t k, dt wt) {
    std::lock_guard<std::mutex> lock(mu_);
    auto key = std::make_tuple(n, k, static_cast<int>(wt));
    auto it = map_.find(key);
    if (it == map_.end()) it = map_.emplace(key, create(n, k, wt)).first;
    return it->second.get();
  }

 private:
  MatmulCache() {
    try {
      engine_ = std::make_unique<dnnl::engine>(dnnl::engine::kind::cpu, 0);
    } catch (const dnnl::error& e) {
      LOG(WARNING) << "oneDNN engine unavailable (" << e.what() << "); linear falls back to OpenBLAS";
    }
  }

  std::unique_ptr<dnnl::matmul> create(int64_t n, int64_t k, dt wt) {
    constexpr auto kRt = DNNL_RUNTIME_DIM_VAL;
    try {
      dnnl::memory::desc src({kRt, k}, wt, {kRt, 1});
      dnnl::memory::desc weights({k, n}, wt, {1, k});  // W [n, k] row-major read as B [k, n]
      dnnl::memory::desc dst({kRt, n}, dt::f32, {kRt, 1});
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src, weights, dst), *engine_);
      return std::make_unique<dnnl::matmul>(pd);
    } catch (const dnnl::error& e) {
      LOG(WARNING) << "oneDNN has no matmul for weight [" << n << ", " << k << "] " << (wt == dt::bf16 ? "bf16" : "f32")
                   << " (" << e.what() << "); using the fallback";
      return nullptr;
    }
  }

  std::unique_ptr<dnnl::engine> engine_;
  std::mutex mu_;
  std::map<std::tuple<int64_t, int64_t, int>, std::unique_ptr<dnnl::matmul>> map_;
};

}  // namespace

bool onednn_linear(Tensor& out, const Tensor& x, const Tensor& weight) {
  MatmulCache& cache = MatmulCache::get();
  if (!cache.has_engine()) return false;
  const int64_t m = x.size(0), k = x.size(1), n = weight.size(0);
  const bool bf16 = weight.dtype() == DType::kBF16;
  const dt wt = bf16 ? dt::bf16 : dt::f32;
  const dnnl::matmul* prim = cache.find(n, k, wt);
  if (prim == nullptr) return false;
  // oneDNN runs on OpenMP threads; size them like the global pool ($LLMSERVE_NUM_THREADS). Per calling thread.
  const int threads = ThreadPool::global().num_threads();
  if (omp_get_max_threads() != threads) omp_set_num_threads(threads);

  void* src_ptr = x.raw_data();
  int64_t lda = x.stride(0);
  thread_local std::vector<bf16_t> x_bf16;
  if (bf16) {
    x_bf16.resize(static_cast<size_t>(m * k));
    bf16_t* staged = x_bf16.data();  // the caller's thread_local: pool workers must not name it themselves
    parallel_for(m, std::max<int64_t>(1, 65536 / std::max<int64_t>(1, k)), [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) f32_to_bf16_n(row_ptr<float>(x, i), staged + i * k, k);
    });
    src_ptr = x_bf16.data();
    lda = k;
  }
  try {
    dnnl::engine& eng = cache.engine();
    dnnl::memory src(dnnl::memory::desc({m, k}, wt, {lda, 1}), eng, src_ptr);
    dnnl::memory w(dnnl::memory::desc({k, n}, wt, {1, k}), eng, weight.raw_data());
    dnnl::memory dst(dnnl::memory::desc({m, n}, dt::f32, {out.stride(0), 1}), eng, out.raw_data());
    dnnl::stream stream(eng);
    prim->execute(stream, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_DST, dst}});
    stream.wait();
  } catch (const dnnl::error& e) {
    LOG(FATAL) << "oneDNN matmul failed for x [" << m << ", " << k << "], weight [" << n << ", " << k
               << "]: " << e.what();
  }
  return true;
}

}  // namespace llmserve::cpu
