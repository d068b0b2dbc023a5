// quant_divide (kernels/cuda/quant_traits.cuh), the quantization kernels' division by a row's scale through its
// reciprocal, against __fdiv_rn bit for bit over random and boundary quotients at scales across the exponent range.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>

#include "kernels/cuda/quant_traits.cuh"

namespace llmserve::cuda {
namespace {

__device__ uint32_t mix(uint64_t x) {  // splitmix64's finaliser: a counter-based random stream
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return static_cast<uint32_t>((x ^ (x >> 31)) >> 16);
}

// Thread t, sample i: a scale of 2^[-24, 24) x [1, 2) and, as the kernels see them, a value with |v| <= 448 x scale:
// uniform in that range, or a multiple of scale / 16 nudged by a few ulps (quotients on and beside the fp8 / int8
// rounding boundaries), or a signed zero. Counts the quotients whose bits differ from __fdiv_rn's (a zero's sign
// included).
__global__ void compare_kernel(uint64_t seed, int per_thread, unsigned long long* mismatches, float* example) {
  const uint64_t t = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x;
  unsigned long long bad = 0;
  for (int i = 0; i < per_thread; ++i) {
    const uint64_t id = (seed + t) * 1000003ull + i;
    const uint32_t a = mix(id), b = mix(id ^ 0xabcdefull), c = mix(id ^ 0x123457ull);
    const float scale = ldexpf(1.0f + (a & 0xffffff) / 16777216.0f, static_cast<int>(b % 48) - 24);
    float v;
    switch (c % 4) {
      case 0:
      case 1:
        v = scale * 448.0f * ((b >> 8) / 8388608.0f - 1.0f);
        break;
      case 2: {
        const float k = static_cast<float>(static_cast<int>(a >> 20) - 2048) / 16.0f;
        v = __uint_as_float(__float_as_uint(__fmul_rn(k, scale)) + static_cast<int>(c >> 28) - 8);
        break;
      }
      default:
        v = (c & 16) ? -0.0f : 0.0f;
    }
    const float want = __fdiv_rn(v, scale), got = quant_divide(v, scale, __frcp_rn(scale));
    // Values below 2^-100 are exempt (quant_traits.cuh): their remainders fall in the subnormal range.
    if (__float_as_uint(want) != __float_as_uint(got) && fabsf(v) >= 0x1p-100f) {
      ++bad;
      example[0] = v;
      example[1] = scale;
    }
  }
  atomicAdd(mismatches, bad);
}

TEST(QuantDivideGpuTest, EqualsTheIeeeDivisionBitForBit) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) GTEST_SKIP() << "no CUDA device";
  unsigned long long* mismatches = nullptr;
  float* example = nullptr;
  ASSERT_EQ(cudaMalloc(&mismatches, sizeof(*mismatches)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&example, 2 * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMemset(mismatches, 0, sizeof(*mismatches)), cudaSuccess);
  constexpr int kBlocks = 4096, kThreads = 256, kPerThread = 512;  // 2^29 quotients
  compare_kernel<<<kBlocks, kThreads>>>(7, kPerThread, mismatches, example);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  unsigned long long bad = 0;
  float ex[2] = {0, 0};
  ASSERT_EQ(cudaMemcpy(&bad, mismatches, sizeof(bad), cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(ex, example, sizeof(ex), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(bad, 0u) << "of " << static_cast<uint64_t>(kBlocks) * kThreads * kPerThread << " quotients, e.g. " << ex[0]
                     << " / " << ex[1];
  cudaFree(mismatches);
  cudaFree(example);
}

}  // namespace
}  // namespace llmserve::cuda
