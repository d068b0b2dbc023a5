// gemm_bench: GFLOP/s of the CPU GEMM candidates for `ops::linear` (OpenBLAS sgemm/sbgemm, oneDNN matmul f32/bf16
// on OpenMP threads, and ops::linear itself with oneDNN on the llmserve pool or on OpenMP) on the projection shapes of
// a 110M Llama-2-shaped model, m = 1, 16, 128 tokens. For m <= 16 a buffer of twice the last-level cache is read
// (untimed) before every timed call, so the weights come from memory as in decode (a repeated call would read them
// from cache); m = 128 is timed warm (compute-bound). A program that prints a table (never a test); see
// bench/RESULTS.md for recorded runs and the decision taken.
#include <cblas.h>
#include <dlfcn.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <oneapi/dnnl/dnnl.hpp>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/ops.h"

namespace llmserve {
namespace {

struct Shape2 {
  const char* name;
  int n, k;
};

// The larger of the last-level cache one core sees (sysfs, e.g. "32768K") and sysconf's figure (which can be the
// whole host's): a flush must exceed whichever the weights could stay in.
size_t llc_bytes() {
  std::ifstream in("/sys/devices/system/cpu/cpu0/cache/index3/size");
  size_t kib = 0;
  in >> kib;
  const long conf = sysconf(_SC_LEVEL3_CACHE_SIZE);
  return std::max({kib * 1024, conf > 0 ? static_cast<size_t>(conf) : size_t{0}, size_t{32} << 20});
}

// Evicts the weights from every cache level by reading 2x the last-level cache (untimed).
class CacheFlusher {
 public:
  CacheFlusher() : buf_(2 * llc_bytes() / sizeof(float), 1.0f) {}
  void flush() {
    float acc = 0;
    for (size_t i = 0; i < buf_.size(); i += 16) acc += buf_[i];  // one read per 64-byte line
    sink_ = sink_ + acc;
  }
  size_t bytes() const { return buf_.size() * sizeof(float); }

 private:
  std::vector<float> buf_;
  volatile float sink_ = 0;
};

// Fastest seconds per call of fn over repeated calls (~0.25 s of calls, at most 2000; with a flusher, which costs
// far more than a call, at most 40), after a warm-up call. The minimum, not the median: the machine is shared, and
// other processes only ever make a call slower.
double time_call(const std::function<void()>& fn, CacheFlusher* flusher = nullptr) {
  fn();
  const size_t max_samples = flusher ? 40 : 2000;
  std::vector<double> samples;
  double timed = 0;
  while (samples.size() < 5 || (timed < 0.25 && samples.size() < max_samples)) {
    if (flusher) flusher->flush();
    auto t0 = std::chrono::steady_clock::now();
    fn();
    samples.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    timed += samples.back();
  }
  std::sort(samples.begin(), samples.end());
  return samples.front();
}

// cblas_sbgemm is declared by OpenBLAS 0.3.21 but exported only when it was built with BUILD_BFLOAT16 (Debian's
// is not): look it up at run time and print n/a when absent.
using SbgemmFn = void (*)(CBLAS_ORDER, CBLAS_TRANSPOSE, CBLAS_TRANSPOSE, blasint, blasint, blasint, float,
                          const uint16_t*, blasint, const uint16_t*, blasint, float, float*, blasint);

SbgemmFn find_sbgemm() { return reinterpret_cast<SbgemmFn>(dlsym(RTLD_DEFAULT, "cblas_sbgemm")); }

std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = f32_to_bf16(v[i]).bits;
  return out;
}

// A oneDNN matmul dst[m, n] = src[m, k] @ W^T with W [n, k] row-major. prepack: weights reordered once into the
// layout oneDNN prefers (format_tag::any), as a loader would do at start-up; else used as stored (format "ba").
class DnnlLinear {
 public:
  DnnlLinear(dnnl::engine& eng, int m, int n, int k, const std::vector<float>& w, bool bf16, bool prepack)
      : eng_(eng), stream_(eng), bf16_(bf16) {
    using dt = dnnl::memory::data_type;
    using tag = dnnl::memory::format_tag;
    const dt wt = bf16 ? dt::bf16 : dt::f32;
    dnnl::memory::desc src_md({m, k}, wt, tag::ab);
    // W [n, k] row-major is the [k, n] matrix B in format "ba".
    dnnl::memory::desc w_plain({k, n}, wt, tag::ba);
    dnnl::memory::desc w_any({k, n}, wt, tag::any);
    dnnl::memory::desc dst_md({m, n}, dt::f32, tag::ab);
    pd_ = dnnl::matmul::primitive_desc(dnnl::matmul::desc(src_md, prepack ? w_any : w_plain, dst_md), eng_);
    prim_ = dnnl::matmul(pd_);
    if (bf16) w_bf16_ = to_bf16(w);
    dnnl::memory plain(w_plain, eng_, bf16 ? static_cast<void*>(w_bf16_.data()) : const_cast<float*>(w.data()));
    weights_ = dnnl::memory(pd_.weights_desc(), eng_);
    dnnl::reorder(plain, weights_).execute(stream_, plain, weights_);
    stream_.wait();
    src_ = dnnl::memory(src_md, eng_);
    dst_ = dnnl::memory(dst_md, eng_);
    impl_ = pd_.impl_info_str();
  }

  // x [m, k] f32 -> dst; for bf16 the activation conversion is part of the timed work.
  void run(const float* x, size_t numel) {
    if (bf16_) {
      auto* p = static_cast<uint16_t*>(src_.get_data_handle());
      for (size_t i = 0; i < numel; ++i) p[i] = f32_to_bf16(x[i]).bits;
    } else {
      std::copy(x, x + numel, static_cast<float*>(src_.get_data_handle()));
    }
    prim_.execute(stream_, {{DNNL_ARG_SRC, src_}, {DNNL_ARG_WEIGHTS, weights_}, {DNNL_ARG_DST, dst_}});
    stream_.wait();
  }
  const std::string& impl() const { return impl_; }

 private:
  dnnl::engine& eng_;
  dnnl::stream stream_;
  bool bf16_;
  std::vector<uint16_t> w_bf16_;
  dnnl::matmul::primitive_desc pd_;
  dnnl::matmul prim_;
  dnnl::memory weights_, src_, dst_;
  std::string impl_;
};

// Times every candidate on x [m, s.k] @ W^T and prints one table row.
void bench_row(dnnl::engine& eng, const Shape2& s, int m, std::vector<float>& w, std::vector<uint16_t>& w_bf16,
               std::mt19937& rng, CacheFlusher& flusher) {
  CacheFlusher* cold = m <= 16 ? &flusher : nullptr;  // small m: weights from memory, as decode reads them
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  Tensor w_t = Tensor::from_blob(w.data(), {s.n, s.k}, DType::kF32);
  Tensor w_bf16_t = Tensor::from_blob(w_bf16.data(), {s.n, s.k}, DType::kBF16);
  std::vector<float> x(static_cast<size_t>(m) * s.k), y(static_cast<size_t>(m) * s.n);
  for (float& v : x) v = dist(rng);
  std::vector<uint16_t> x_bf16(x.size());
  const double flop = 2.0 * m * s.n * s.k;
  auto cell = [&](double sec, size_t weight_bytes) {
    char buf[64];
    if (m == 1) {
      std::snprintf(buf, sizeof buf, "%.1f [%.0f GB/s]", flop / sec * 1e-9, weight_bytes / sec * 1e-9);
    } else {
      std::snprintf(buf, sizeof buf, "%.1f", flop / sec * 1e-9);
    }
    return std::string(buf);
  };
  const size_t wf32 = w.size() * 4, wbf16 = w.size() * 2;
  double t_sgemm = time_call(
      [&] {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, s.n, s.k, 1.f, x.data(), s.k, w.data(), s.k, 0.f,
                    y.data(), s.n);
      },
      cold);
  std::string sbgemm_cell = "n/a (not exported)";
  if (SbgemmFn sbgemm = find_sbgemm()) {
    double t_sbgemm = time_call(
        [&] {
          for (size_t i = 0; i < x.size(); ++i) x_bf16[i] = f32_to_bf16(x[i]).bits;
          sbgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, s.n, s.k, 1.f, x_bf16.data(), s.k, w_bf16.data(), s.k, 0.f,
                 y.data(), s.n);
        },
        cold);
    sbgemm_cell = cell(t_sbgemm, wbf16);
  }
  DnnlLinear dnnl_f32(eng, m, s.n, s.k, w, false, true), dnnl_f32_plain(eng, m, s.n, s.k, w, false, false);
  DnnlLinear dnnl_bf16(eng, m, s.n, s.k, w, true, true), dnnl_bf16_plain(eng, m, s.n, s.k, w, true, false);
  double t_dnnl_f32 = time_call([&] { dnnl_f32.run(x.data(), x.size()); }, cold);
  double t_dnnl_f32_plain = time_call([&] { dnnl_f32_plain.run(x.data(), x.size()); }, cold);
  double t_dnnl_bf16 = time_call([&] { dnnl_bf16.run(x.data(), x.size()); }, cold);
  double t_dnnl_bf16_plain = time_call([&] { dnnl_bf16_plain.run(x.data(), x.size()); }, cold);
  Tensor x_t = Tensor::from_blob(x.data(), {m, s.k}, DType::kF32);
  Tensor y_t = Tensor::from_blob(y.data(), {m, s.n}, DType::kF32);
  auto time_linear = [&](cpu::GemmBackend backend, const Tensor& weight) {
    cpu::set_gemm_backend(backend);
    return time_call([&] { ops::linear(y_t, x_t, weight, nullptr); }, cold);
  };
  double t_pool_f32 = time_linear(cpu::GemmBackend::kOnednn, w_t);
  double t_pool_bf16 = time_linear(cpu::GemmBackend::kOnednn, w_bf16_t);
  double t_omp_f32 = time_linear(cpu::GemmBackend::kOnednnOmp, w_t);
  double t_omp_bf16 = time_linear(cpu::GemmBackend::kOnednnOmp, w_bf16_t);
  std::printf("| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", s.name, m, cell(t_sgemm, wf32).c_str(),
              sbgemm_cell.c_str(), cell(t_dnnl_f32, wf32).c_str(), cell(t_dnnl_f32_plain, wf32).c_str(),
              cell(t_dnnl_bf16, wbf16).c_str(), cell(t_dnnl_bf16_plain, wbf16).c_str(), cell(t_pool_f32, wf32).c_str(),
              cell(t_pool_bf16, wbf16).c_str(), cell(t_omp_f32, wf32).c_str(), cell(t_omp_bf16, wbf16).c_str());
  if (m == 128 && s.n == 32000) {
    std::printf("\n(onednn kernels at m=128, lm_head: f32 packed %s, plain %s; bf16 packed %s, plain %s)\n\n",
                dnnl_f32.impl().c_str(), dnnl_f32_plain.impl().c_str(), dnnl_bf16.impl().c_str(),
                dnnl_bf16_plain.impl().c_str());
  }
}

int run_bench(int num_threads) {
  openblas_set_num_threads(num_threads);
  omp_set_num_threads(num_threads);
  ThreadPool::set_global_num_threads(num_threads);
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);

  const Shape2 shapes[] = {{"qkvo 768x768", 768, 768},
                           {"gate/up 2048x768", 2048, 768},
                           {"down 768x2048", 768, 2048},
                           {"lm_head 32000x768", 32000, 768}};
  const int ms[] = {1, 16, 128};
  std::mt19937 rng(1234);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);

  std::printf("threads=%d; f32 peak ~%.0f GFLOP/s (2.0 GHz x 2 AVX-512 FMA x 16 lanes x 2 flop x %d cores)\n",
              num_threads, 2.0 * 2 * 16 * 2 * num_threads, num_threads);
  CacheFlusher flusher;
  std::printf("GFLOP/s (2*m*n*k / fastest call); [GB/s of weight bytes read] for m=1\n");
  std::printf(
      "m <= 16: cold weights (a %zu MiB buffer, 2x the last-level cache, read before every timed call, as decode "
      "reads weights from memory); m = 128: warm (repeated calls)\n\n",
      flusher.bytes() >> 20);
  std::printf(
      "| shape (n x k) | m | openblas sgemm f32 | openblas sbgemm bf16 | onednn f32 packed | onednn f32 plain "
      "| onednn bf16 packed | onednn bf16 plain | ops::linear f32 (pool) | ops::linear bf16 (pool) "
      "| ops::linear f32 (omp) | ops::linear bf16 (omp) |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const Shape2& s : shapes) {
    std::vector<float> w(static_cast<size_t>(s.n) * s.k);
    for (float& v : w) v = dist(rng) * 0.05f;
    std::vector<uint16_t> w_bf16 = to_bf16(w);
    for (int m : ms) {
      bench_row(eng, s, m, w, w_bf16, rng, flusher);
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace
}  // namespace llmserve

int main(int argc, char** argv) {
  int threads = 2;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--threads=", 0) == 0) {
      threads = std::atoi(a.c_str() + 10);
    } else {
      std::fprintf(stderr, "usage: gemm_bench [--threads=N]   (default 2)\n");
      return 2;
    }
  }
  return llmserve::run_bench(threads);
}
