// The logit and sampler ops on CUDA at serving sizes (rows 1, 32 and 256; vocab 32768 and 151936), each beside its
// floor: the bytes it must read and write / the measured copy bandwidth (copy bytes counted read + write). Median
// of event-timed calls on fresh logits (a copy restores them before each timed call; the copy is not timed).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <vector>

#include "core/cuda_stream.h"
#include "core/logging.h"
#include "core/tensor.h"
#include "kernels/ops.h"

namespace llmserve {
namespace {

#define CUDA_OK(expr) CHECK((expr) == cudaSuccess) << #expr

Tensor device_copy(const Tensor& host) {
  Tensor d = Tensor::empty(host.shape(), host.dtype(), Device::cuda());
  CUDA_OK(cudaMemcpy(d.raw_data(), host.raw_data(), host.nbytes(), cudaMemcpyHostToDevice));
  return d;
}

// Median microseconds of fn() over `reps` calls; before each, `restore` (untimed) runs.
template <typename R, typename F>
double median_us(int reps, R&& restore, F&& fn) {
  cudaStream_t s = cuda::current_stream();
  cudaEvent_t a, b;
  CUDA_OK(cudaEventCreate(&a));
  CUDA_OK(cudaEventCreate(&b));
  std::vector<double> us;
  for (int i = 0; i < reps + 3; ++i) {
    restore();
    CUDA_OK(cudaEventRecord(a, s));
    fn();
    CUDA_OK(cudaEventRecord(b, s));
    CUDA_OK(cudaEventSynchronize(b));
    float ms = 0;
    CUDA_OK(cudaEventElapsedTime(&ms, a, b));
    if (i >= 3) us.push_back(ms * 1e3);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

}  // namespace

int bench_main() {
  cudaDeviceProp prop{};
  CUDA_OK(cudaGetDeviceProperties(&prop, 0));
  const size_t copy_bytes = size_t{1} << 30;
  Tensor ca = Tensor::empty({static_cast<int64_t>(copy_bytes)}, DType::kU8, Device::cuda());
  Tensor cb = Tensor::empty({static_cast<int64_t>(copy_bytes)}, DType::kU8, Device::cuda());
  CUDA_OK(cudaMemset(ca.raw_data(), 1, copy_bytes));
  const double copy_us = median_us(
      10, [] {},
      [&] {
        CUDA_OK(cudaMemcpyAsync(cb.raw_data(), ca.raw_data(), copy_bytes, cudaMemcpyDeviceToDevice,
                                cuda::current_stream()));
      });
  const double bw = 2.0 * copy_bytes / (copy_us * 1e-6);  // bytes/s
  std::printf("device: %s; copy bandwidth %.2f TB/s\n\n", prop.name, bw / 1e12);
  std::printf("| op | rows | vocab | median us | floor us | floor / time |\n|---|---|---|---|---|---|\n");
  for (int64_t vocab : {32768, 151936}) {
    for (int64_t n : {1, 32, 256}) {
      std::mt19937 rng(static_cast<uint32_t>(n * vocab));
      std::normal_distribution<float> dist(0.f, 3.f);
      std::vector<float> v(static_cast<size_t>(n * vocab));
      for (float& x : v) x = dist(rng);
      Tensor host = Tensor::from_f32(v, {n, vocab});
      Tensor pristine = device_copy(host), logits = device_copy(host), out = device_copy(host);
      auto restore = [&] {
        CUDA_OK(cudaMemcpyAsync(logits.raw_data(), pristine.raw_data(), pristine.nbytes(), cudaMemcpyDeviceToDevice,
                                cuda::current_stream()));
      };
      auto vec_f = [&](float value) { return device_copy(Tensor::from_f32(std::vector<float>(n, value), {n})); };
      Tensor ids = Tensor::empty({n}, DType::kI32, Device::cuda());
      Tensor topv = Tensor::empty({n, 20}, DType::kF32, Device::cuda()),
             topi = Tensor::empty({n, 20}, DType::kI32, Device::cuda());
      Tensor temps = vec_f(0.8f), top_p = vec_f(0.9f), min_p = vec_f(0.f), no_p = vec_f(1.f);
      Tensor top_k = device_copy(Tensor::from_i32(std::vector<int32_t>(n, 50), {n}));
      Tensor no_k = device_copy(Tensor::from_i32(std::vector<int32_t>(n, 0), {n}));
      std::vector<int64_t> seq(n);
      for (int64_t i = 0; i < n; ++i) seq[i] = i;
      Tensor seeds = device_copy(Tensor::from_i64(seq, {n})), offsets = device_copy(Tensor::from_i64(seq, {n}));
      const double row_bytes = 4.0 * n * vocab;
      auto print = [&](const char* op, double us, double bytes) {
        const double floor_us = bytes / bw * 1e6;
        std::printf("| %s | %lld | %lld | %.1f | %.1f | %.0f%% |\n", op, static_cast<long long>(n),
                    static_cast<long long>(vocab), us, floor_us, 100 * floor_us / us);
      };
      print("argmax", median_us(20, restore, [&] { ops::argmax(ids, logits); }), row_bytes);
      print("log_softmax", median_us(20, restore, [&] { ops::log_softmax(out, logits); }), 2 * row_bytes);
      print("top_k 20", median_us(20, restore, [&] { ops::top_k(topv, topi, logits, 20); }), row_bytes);
      print("temperature", median_us(20, restore, [&] { ops::apply_temperature(logits, temps); }), 2 * row_bytes);
      print("top_k 50 mask",
            median_us(20, restore,
                      [&] {
                        ops::apply_top_k_top_p_min_p(logits, {top_k, no_p, min_p});
                      }),
            2 * row_bytes);
      print("top_p 0.9 mask",
            median_us(20, restore,
                      [&] {
                        ops::apply_top_k_top_p_min_p(logits, {no_k, top_p, min_p});
                      }),
            2 * row_bytes);
      print("sample", median_us(20, restore, [&] { ops::sample(ids, logits, {temps, seeds, offsets}); }), row_bytes);
    }
  }
  return 0;
}

}  // namespace llmserve

int main() { return llmserve::bench_main(); }
