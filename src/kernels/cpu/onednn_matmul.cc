// oneDNN matmul wrapper: primitives cached per thread by (k, dtype), so each is created and executed by one thread:
// oneDNN does not support executing one primitive from several threads at once (its library-managed scratchpad is
// per creating thread; concurrent executions of one primitive corrupted the heap, ~1 run in 100 of the real-Ctrl-C
// test); a thread running its kernels holds Ctrl-C and other async signals pending (HoldAsyncSignals). oneDNN errors
// (C++ exceptions) never leave this file.
#include "kernels/cpu/onednn_matmul.h"

#include <omp.h>
#include <pthread.h>

#include <algorithm>
#include <csignal>
#include <map>
#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <utility>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/vec.h"

namespace llmserve::cpu {
namespace {

using dt = dnnl::memory::data_type;

// Columns of W per task in kPool mode: a multiple of 64, about 4 tasks per thread so uneven tasks balance.
int64_t pool_slice_width(int64_t n, int threads) {
  const int64_t want = (n + 4 * threads - 1) / (4 * threads);
  return std::max<int64_t>(64, (want + 63) / 64 * 64);
}

class MatmulCache {
 public:
  static MatmulCache& get() {
    static MatmulCache cache;
    return cache;
  }

  bool has_engine() const { return engine_ != nullptr; }
  dnnl::engine& engine() { return *engine_; }

  // The calling thread's primitive for x [*, k] @ W^T with W [*, k] of dtype `wt`, or nullptr when oneDNN has none.
  const dnnl::matmul* find(int64_t k, dt wt) {
    thread_local std::map<std::pair<int64_t, int>, std::unique_ptr<dnnl::matmul>> mine;
    auto key = std::make_pair(k, static_cast<int>(wt));
    auto it = mine.find(key);
    if (it == mine.end()) it = mine.emplace(key, create(k, wt)).first;
    return it->second.get();
  }

 private:
  MatmulCache() {
    try {
      // Never freed: pool workers' thread_local primitives may outlive this static at exit.
      engine_ = new dnnl::engine(dnnl::engine::kind::cpu, 0);
    } catch (const dnnl::error& e) {
      LOG(WARNING) << "oneDNN engine unavailable (" << e.what() << "); linear falls back to OpenBLAS";
    }
  }

  std::unique_ptr<dnnl::matmul> create(int64_t k, dt wt) {
    constexpr auto kRt = DNNL_RUNTIME_DIM_VAL;
    try {
      dnnl::memory::desc src({kRt, k}, wt, {kRt, 1});
      dnnl::memory::desc weights({k, kRt}, wt, {1, k});  // W [n, k] row-major read as B [k, n]
      dnnl::memory::desc dst({kRt, kRt}, dt::f32, {kRt, 1});
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src, weights, dst), *engine_);
      return std::make_unique<dnnl::matmul>(pd);
    } catch (const dnnl::error& e) {
      LOG(WARNING) << "oneDNN has no matmul for k = " << k << ", " << (wt == dt::bf16 ? "bf16" : "f32") << " ("
                   << e.what() << "); using the fallback";
      return nullptr;
    }
  }

  dnnl::engine* engine_ = nullptr;  // shared: an engine may be used from any thread
};

// Holds the process-directed signals (Ctrl-C's SIGINT, SIGTERM, ...) pending on this thread while it lives; they are
// delivered when it ends. oneDNN's JIT matmul kernels must not take a signal: a handler run on the interrupted
// thread's stack (no sigaltstack) corrupted the heap ~1 run in 25-40 of the real-Ctrl-C test (LLMSERVE_GEMM=openblas
// and a sigaltstack on the main thread: 0 in 200 each; blocking only in the pool workers: 8 in 200). Threads that
// libgomp creates inside the region inherit the mask, so oneDNN's OpenMP team never takes them either.
class HoldAsyncSignals {
 public:
  HoldAsyncSignals() {
    sigset_t held;
    sigemptyset(&held);
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGALRM, SIGCHLD, SIGPIPE, SIGWINCH}) {
      sigaddset(&held, sig);
    }
    pthread_sigmask(SIG_BLOCK, &held, &previous_);
  }
  ~HoldAsyncSignals() { pthread_sigmask(SIG_SETMASK, &previous_, nullptr); }
  HoldAsyncSignals(const HoldAsyncSignals&) = delete;
  HoldAsyncSignals& operator=(const HoldAsyncSignals&) = delete;

 private:
  sigset_t previous_;
};

// out[:, j0:j0+nb] = src @ W[j0:j0+nb, :]^T on the calling thread's OpenMP team. Runs on pool workers too, so
// oneDNN's exceptions are caught here (one escaping a worker would terminate the process without a message).
void run_slice(const dnnl::matmul& prim, dnnl::engine& eng, dt wt, const void* src, int64_t lda, int64_t m, int64_t k,
               const char* weight, int64_t j0, int64_t nb, float* out, int64_t ldc) {
  const size_t esize = wt == dt::bf16 ? 2 : 4;
  HoldAsyncSignals hold;
  try {
    dnnl::memory s(dnnl::memory::desc({m, k}, wt, {lda, 1}), eng, const_cast<void*>(src));
    dnnl::memory w(dnnl::memory::desc({k, nb}, wt, {1, k}), eng, const_cast<char*>(weight) + j0 * k * esize);
    dnnl::memory d(dnnl::memory::desc({m, nb}, dt::f32, {ldc, 1}), eng, out + j0);
    dnnl::stream stream(eng);
    prim.execute(stream, {{DNNL_ARG_SRC, s}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_DST, d}});
    stream.wait();
  } catch (const dnnl::error& e) {
    LOG(FATAL) << "oneDNN matmul failed for x [" << m << ", " << k << "], weight columns [" << j0 << ", " << j0 + nb
               << "): " << e.what();
  }
}

}  // namespace

bool onednn_linear(Tensor& out, const Tensor& x, const Tensor& weight, OnednnThreading threading) {
  MatmulCache& cache = MatmulCache::get();
  if (!cache.has_engine()) return false;
  const int64_t m = x.size(0), k = x.size(1), n = weight.size(0);
  const bool bf16 = weight.dtype() == DType::kBF16;
  const dt wt = bf16 ? dt::bf16 : dt::f32;
  if (cache.find(k, wt) == nullptr) return false;  // none for this (k, dtype) on any thread

  const void* src = x.raw_data();
  int64_t lda = x.stride(0);
  thread_local std::vector<bf16_t> x_bf16;
  if (bf16) {
    x_bf16.resize(static_cast<size_t>(m * k));
    bf16_t* staged = x_bf16.data();  // the caller's thread_local: pool workers must not name it themselves
    parallel_for(m, std::max<int64_t>(1, 65536 / std::max<int64_t>(1, k)), [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) f32_to_bf16_n(row_ptr<float>(x, i), staged + i * k, k);
    });
    src = staged;
    lda = k;
  }
  const int threads = ThreadPool::global().num_threads();
  dnnl::engine& eng = cache.engine();
  const char* w = static_cast<const char*>(weight.raw_data());
  float* o = out.data<float>();
  const int64_t ldc = out.stride(0);
  if (threading == OnednnThreading::kOpenmp) {
    // OpenMP's thread count is per calling thread: size it like the global pool ($LLMSERVE_NUM_THREADS).
    if (omp_get_max_threads() != threads) omp_set_num_threads(threads);
    run_slice(*cache.find(k, wt), eng, wt, src, lda, m, k, w, 0, n, o, ldc);
  } else {
    const int64_t width = pool_slice_width(n, threads);
    parallel_for((n + width - 1) / width, 1, [&](int64_t begin, int64_t end) {
      if (omp_get_max_threads() != 1) omp_set_num_threads(1);  // this thread's oneDNN calls stay serial
      const dnnl::matmul* prim = cache.find(k, wt);            // this thread's own primitive
      CHECK(prim != nullptr) << "oneDNN matmul for k = " << k << " exists on the caller's thread only";
      for (int64_t s = begin; s < end; ++s) {
        const int64_t j0 = s * width;
        run_slice(*prim, eng, wt, src, lda, m, k, w, j0, std::min(width, n - j0), o, ldc);
      }
    });
  }
  return true;
}

}  // namespace llmserve::cpu
