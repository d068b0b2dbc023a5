// ops::linear on CUDA (cuBLASLt) at the Mistral-7B shapes (hidden 4096, 32 / 8 heads of 128, ffn 14336, vocab
// 32768) for m = 1, 4, 128 and 2048 tokens, bf16 operands (f32 logits out of the lm_head), beside two measured
// ceilings: a large square bf16 product (the matmul rate) and a device-to-device copy (the bandwidth); for m <= 4
// also cuBLASLt and the GEMV separately (ops::linear picks the GEMV there). Each figure
// is the median of many event-timed calls, rotating among enough weight copies that L2 (50 MB) never holds them.
// Prints a markdown table; the "layer" rows are the four projections of one decoder layer together -- the rate
// the prefill floor (2 x params x tokens / rate) should use.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "core/cuda_stream.h"
#include "core/logging.h"
#include "core/tensor.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/ops.h"

namespace llmserve {
namespace {

#define CUDA_OK(expr) CHECK((expr) == cudaSuccess) << #expr

// Random-ish bf16 contents without a host round trip: a fixed bit pattern is enough for timing (never zeros).
void fill_device(Tensor& t) {
  std::vector<uint16_t> host(static_cast<size_t>(t.numel()));
  uint32_t s = 12345;
  for (auto& h : host) {
    s = s * 1664525u + 1013904223u;
    h = static_cast<uint16_t>(0x3c00 | (s >> 22));  // bf16 in [0.0078, 0.0156): finite, non-zero
  }
  CUDA_OK(cudaMemcpy(t.raw_data(), host.data(), t.nbytes(), cudaMemcpyHostToDevice));
}

// Median milliseconds of `reps` event-timed calls of fn(i).
template <typename F>
double median_ms(int reps, F&& fn) {
  cudaStream_t stream = cuda::current_stream();
  for (int i = 0; i < 3; ++i) fn(i);  // warm-up: plan creation, module load
  std::vector<cudaEvent_t> events(2 * reps);
  for (auto& e : events) CUDA_OK(cudaEventCreate(&e));
  for (int i = 0; i < reps; ++i) {
    CUDA_OK(cudaEventRecord(events[2 * i], stream));
    fn(i);
    CUDA_OK(cudaEventRecord(events[2 * i + 1], stream));
  }
  CUDA_OK(cudaStreamSynchronize(stream));
  std::vector<double> ms(reps);
  for (int i = 0; i < reps; ++i) {
    float t = 0;
    CUDA_OK(cudaEventElapsedTime(&t, events[2 * i], events[2 * i + 1]));
    ms[i] = t;
  }
  for (auto& e : events) cudaEventDestroy(e);
  std::sort(ms.begin(), ms.end());
  return ms[reps / 2];
}

struct Shape2 {
  const char* name;
  int64_t n, k;
  bool logits;  // f32 out
};

}  // namespace

int bench_main() {
  cudaDeviceProp prop{};
  CUDA_OK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs, L2 %d MB\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20);

  // Ceiling 1: bandwidth from a 2 GiB device-to-device copy (bytes read + written).
  const size_t copy_bytes = size_t{2} << 30;
  Tensor a = Tensor::empty({static_cast<int64_t>(copy_bytes)}, DType::kU8, Device::cuda());
  Tensor b = Tensor::empty({static_cast<int64_t>(copy_bytes)}, DType::kU8, Device::cuda());
  CUDA_OK(cudaMemset(a.raw_data(), 1, copy_bytes));
  const double copy_ms = median_ms(20, [&](int) {
    CUDA_OK(cudaMemcpyAsync(b.raw_data(), a.raw_data(), copy_bytes, cudaMemcpyDeviceToDevice, cuda::current_stream()));
  });
  const double bandwidth = 2.0 * copy_bytes / (copy_ms * 1e-3) / 1e12;  // TB/s
  a = Tensor();
  b = Tensor();

  // Ceiling 2: the bf16 matmul rate of a large square product through the same op.
  double peak = 0;
  for (int64_t s : {8192, 16384}) {
    Tensor x = Tensor::empty({s, s}, DType::kBF16, Device::cuda()),
           w = Tensor::empty({s, s}, DType::kBF16, Device::cuda());
    Tensor o = Tensor::empty({s, s}, DType::kBF16, Device::cuda());
    fill_device(x);
    fill_device(w);
    const double ms = median_ms(10, [&](int) { ops::linear(o, x, w, nullptr); });
    const double tflops = 2.0 * s * s * s / (ms * 1e-3) / 1e12;
    std::printf("square bf16 %lldx%lldx%lld: %.3f ms, %.1f TFLOP/s\n", static_cast<long long>(s),
                static_cast<long long>(s), static_cast<long long>(s), ms, tflops);
    peak = std::max(peak, tflops);
  }
  std::printf("copy bandwidth: %.2f TB/s (2 GiB device-to-device, read + write)\n", bandwidth);
  std::printf("bf16 matmul rate: %.1f TFLOP/s (best square product above)\n\n", peak);

  const Shape2 shapes[] = {{"qkv_proj", 6144, 4096, false},
                           {"o_proj", 4096, 4096, false},
                           {"gate_up_proj", 28672, 4096, false},
                           {"down_proj", 4096, 14336, false},
                           {"lm_head", 32768, 4096, true}};
  std::printf(
      "| shape (n x k) | m | path | median us | TFLOP/s | %% of matmul rate | weight GB/s | %% of copy bandwidth |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  auto row = [&](const char* name, int64_t n, int64_t k, int64_t m, const char* path, double ms, double flop,
                 double bytes) {
    const double tflops = flop / (ms * 1e-3) / 1e12, gbs = bytes / (ms * 1e-3) / 1e9;
    const std::string dims = n > 0 ? " " + std::to_string(n) + "x" + std::to_string(k) : "";
    std::printf("| %s%s | %lld | %s | %.1f | %.1f | %.0f%% | %.0f | %.0f%% |\n", name, dims.c_str(),
                static_cast<long long>(m), path, ms * 1e3, tflops, 100 * tflops / peak, gbs,
                100 * gbs / (bandwidth * 1e3));
  };
  for (int64_t m : {1, 4, 128, 2048}) {
    double layer_flop = 0, layer_ms = 0, layer_bytes = 0;
    for (const Shape2& sh : shapes) {
      // Enough weight copies to exceed L2 twice over.
      const size_t w_bytes = static_cast<size_t>(sh.n * sh.k) * 2;
      const int copies = static_cast<int>(std::min<size_t>(8, std::max<size_t>(1, (size_t{100} << 20) / w_bytes + 1)));
      std::vector<Tensor> ws, xs, outs;
      for (int c = 0; c < copies; ++c) {
        ws.push_back(Tensor::empty({sh.n, sh.k}, DType::kBF16, Device::cuda()));
        fill_device(ws.back());
        xs.push_back(Tensor::empty({m, sh.k}, DType::kBF16, Device::cuda()));
        fill_device(xs.back());
        outs.push_back(Tensor::empty({m, sh.n}, sh.logits ? DType::kF32 : DType::kBF16, Device::cuda()));
      }
      const double flop = 2.0 * m * sh.n * sh.k;
      const double ms =
          median_ms(50, [&](int i) { ops::linear(outs[i % copies], xs[i % copies], ws[i % copies], nullptr); });
      row(sh.name, sh.n, sh.k, m, "ops::linear", ms, flop, static_cast<double>(w_bytes));
      if (cuda::gemv_applies(outs[0], xs[0], ws[0])) {  // both paths, to justify the dispatch rule
        const double lt = median_ms(
            50, [&](int i) { cuda::cublaslt_linear(outs[i % copies], xs[i % copies], ws[i % copies], nullptr); });
        const double gv =
            median_ms(50, [&](int i) { cuda::gemv(outs[i % copies], xs[i % copies], ws[i % copies], nullptr); });
        row(sh.name, sh.n, sh.k, m, "cublaslt", lt, flop, static_cast<double>(w_bytes));
        row(sh.name, sh.n, sh.k, m, "gemv", gv, flop, static_cast<double>(w_bytes));
      }
      if (!sh.logits) {
        layer_flop += flop;
        layer_ms += ms;
        layer_bytes += static_cast<double>(w_bytes);
      }
    }
    row("layer (4 projections)", 0, 0, m, "ops::linear", layer_ms, layer_flop, layer_bytes);
  }
  return 0;
}

}  // namespace llmserve

int main() { return llmserve::bench_main(); }
