// The CUDA runtime pieces that need no model kernels: the caching allocator (reuse without cudaMalloc, stream
// separation, accounting), Tensor host<->device copies (contiguous, row-strided, pinned), the pinned-staging
// weight upload (sizes across several staging buffers), the device weight source over a real checkpoint, Event,
// and the Sampler's persistent device parameter arrays. Oracle: the host bytes we started from (copies are exact);
// for the Sampler, the CPU Sampler's ids. Skips when no CUDA device is present.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "../runtime/test_models.h"
#include "core/cuda_allocator.h"
#include "core/cuda_event.h"
#include "core/cuda_stream.h"
#include "model/device_weights.h"
#include "model/safetensors.h"
#include "model/weight_source.h"
#include "runtime/sampler.h"

namespace llmserve {
namespace {

bool have_cuda_device() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

class CudaRuntimeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_cuda_device()) GTEST_SKIP() << "no CUDA device";
  }
};

Tensor random_bytes(int64_t n, uint32_t seed) {
  Tensor t = Tensor::empty({n}, DType::kU8);
  std::mt19937 rng(seed);
  for (int64_t i = 0; i < n; ++i) t.data<uint8_t>()[i] = static_cast<uint8_t>(rng());
  return t;
}

Tensor testing_random_f32(Shape shape, uint32_t seed) {
  Tensor t = Tensor::empty(std::move(shape), DType::kF32);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = u(rng);
  return t;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

TEST_F(CudaRuntimeTest, AllocatorReusesFreedBlocksWithoutCudaMalloc) {
  const Device dev = Device::cuda();
  { Tensor warm = Tensor::empty({1000, 1000}, DType::kF32, dev); }  // one block of this size in the cache
  const cuda::AllocatorStats before = cuda::allocator_stats();
  for (int i = 0; i < 50; ++i) {
    Tensor a = Tensor::empty({1000, 1000}, DType::kF32, dev);
    EXPECT_NE(a.raw_data(), nullptr);
  }
  const cuda::AllocatorStats after = cuda::allocator_stats();
  EXPECT_EQ(after.num_mallocs, before.num_mallocs) << "a cached block of the same size must be reused";
  EXPECT_GE(after.num_cache_hits, before.num_cache_hits + 50);
  EXPECT_EQ(after.in_use, before.in_use);
}

TEST_F(CudaRuntimeTest, AllocatorCountsInUseAndPeak) {
  const Device dev = Device::cuda();
  cuda::reset_peak();
  const size_t base = cuda::allocator_stats().in_use;
  {
    Tensor a = Tensor::empty({3 << 20}, DType::kU8, dev);  // 3 MiB: a large block, rounded to 4 MiB
    Tensor b = Tensor::empty({100}, DType::kU8, dev);      // small: rounded to 512 B
    EXPECT_EQ(cuda::allocator_stats().in_use, base + (4u << 20) + 512);
  }
  EXPECT_EQ(cuda::allocator_stats().in_use, base);
  EXPECT_GE(cuda::allocator_stats().peak_in_use, base + (4u << 20) + 512);
  cuda::reset_peak();
  EXPECT_EQ(cuda::allocator_stats().peak_in_use, base);
}

TEST_F(CudaRuntimeTest, BlocksAreNotSharedAcrossStreams) {
  const Device dev = Device::cuda();
  void* first = nullptr;
  {
    Tensor a = Tensor::empty({777 * 1024}, DType::kU8, dev);
    first = a.raw_data();
  }
  cudaStream_t other;
  ASSERT_EQ(cudaStreamCreate(&other), cudaSuccess);
  {
    cuda::StreamGuard guard(other);
    Tensor b = Tensor::empty({777 * 1024}, DType::kU8, dev);
    EXPECT_NE(b.raw_data(), first) << "a block freed on one stream was handed to another without a sync";
  }
  Tensor c = Tensor::empty({777 * 1024}, DType::kU8, dev);
  EXPECT_EQ(c.raw_data(), first) << "the same stream gets its cached block back";
  cudaStreamSynchronize(other);
  cudaStreamDestroy(other);
}

TEST_F(CudaRuntimeTest, EmptyCacheReturnsFreeBlocks) {
  { Tensor a = Tensor::empty({5 << 20}, DType::kU8, Device::cuda()); }
  const size_t reserved = cuda::allocator_stats().reserved;
  cuda::empty_cache();
  EXPECT_LT(cuda::allocator_stats().reserved, reserved);
  EXPECT_EQ(cuda::allocator_stats().reserved, cuda::allocator_stats().in_use);
}

TEST_F(CudaRuntimeTest, HostDeviceRoundTripIsExact) {
  for (int64_t n : {1, 1000, 1 << 20, (1 << 22) + 3}) {
    const Tensor host = random_bytes(n, static_cast<uint32_t>(n));
    const Tensor dev = host.to(Device::cuda());
    EXPECT_EQ(dev.device(), Device::cuda());
    const Tensor copy = dev.clone();  // device -> device
    EXPECT_TRUE(same_bytes(copy.to(Device::cpu()), host)) << n;
  }
}

TEST_F(CudaRuntimeTest, RowStridedCopiesMoveOnlyTheirColumns) {
  Tensor host = testing_random_f32({37, 100}, 5);
  const Tensor dev = host.to(Device::cuda());
  // Columns [10, 60) of each row, device -> host (strided source) and host -> device (strided destination).
  Tensor cols = Tensor::empty({37, 50}, DType::kF32);
  cols.copy_from(dev.slice(1, 10, 60));
  Tensor target = Tensor::zeros({37, 100}, DType::kF32, Device::cuda());
  Tensor window = target.slice(1, 20, 70);
  window.copy_from(cols);
  const Tensor back = target.to(Device::cpu());
  for (int64_t r = 0; r < 37; ++r) {
    for (int64_t c = 0; c < 100; ++c) {
      const float want = (c >= 20 && c < 70) ? host.data<float>()[r * 100 + c - 10] : 0.f;
      ASSERT_EQ(back.data<float>()[r * 100 + c], want) << r << ", " << c;
    }
  }
}

TEST_F(CudaRuntimeTest, PinnedTensorsCopyAsynchronously) {
  Tensor pinned = Tensor::empty_pinned({1 << 16}, DType::kI32);
  for (int i = 0; i < (1 << 16); ++i) pinned.data<int32_t>()[i] = i * 3;
  cudaPointerAttributes attr{};
  ASSERT_EQ(cudaPointerGetAttributes(&attr, pinned.raw_data()), cudaSuccess);
  EXPECT_EQ(attr.type, cudaMemoryTypeHost) << "empty_pinned must give page-locked memory";
  const Tensor dev = pinned.to(Device::cuda());
  Tensor out = Tensor::empty_pinned({1 << 16}, DType::kI32);
  out.copy_from(dev);  // to the host: waits
  EXPECT_TRUE(same_bytes(out, pinned));
}

TEST_F(CudaRuntimeTest, EventWaitsForTheWorkRecordedBeforeIt) {
  const Tensor host = random_bytes(1 << 22, 5);
  Tensor pinned = Tensor::empty_pinned({1 << 22}, DType::kU8);
  std::memcpy(pinned.raw_data(), host.raw_data(), host.nbytes());
  Tensor dev = Tensor::empty({1 << 22}, DType::kU8, Device::cuda());
  Event event(Device::cuda());
  EXPECT_TRUE(event.is_device());
  EXPECT_TRUE(event.query()) << "nothing recorded yet";
  dev.copy_from(pinned);
  event.record();
  event.synchronize();
  EXPECT_TRUE(event.query());
  Event moved = std::move(event);
  EXPECT_FALSE(event.is_device());  // NOLINT(bugprone-use-after-move)
  moved.record(cuda::current_stream());
  synchronize_current_stream(Device::cuda());
  EXPECT_TRUE(moved.query());
  Tensor back = Tensor::empty({1 << 22}, DType::kU8);
  back.copy_from(dev);
  EXPECT_TRUE(same_bytes(back, host));
}

// The Sampler on the device (parameters in its persistent arrays, kept per row across batches) gives the CPU
// Sampler's ids for greedy and seeded rows with penalties, bias, min_tokens and filters.
TEST_F(CudaRuntimeTest, SamplerOnTheDeviceMatchesTheCpuSampler) {
  const int64_t v = 257;
  std::vector<SamplingSettings> settings(4);
  settings[0].temperature = 0.f;
  settings[0].logit_bias = {{3, 5.f}};
  settings[0].frequency_penalty = 0.5f;
  settings[1].temperature = 0.7f;
  settings[1].top_k = 5;
  settings[1].seed = 1;
  settings[2].temperature = 1.2f;
  settings[2].top_p = 0.8f;
  settings[2].seed = 2;
  settings[2].repetition_penalty = 1.3f;
  settings[2].min_tokens = 2;
  settings[2].all_stop_token_ids = {0, 1};
  settings[3].temperature = 0.f;
  std::vector<std::vector<int32_t>> prompts(4, std::vector<int32_t>{4, 9, 16}), outputs(4);
  const std::vector<std::vector<size_t>> batches = {{0, 1, 2}, {2, 0, 1}, {3}, {1, 3, 2, 0}, {3, 1}};
  Sampler gpu(3, 4, Device::cuda());
  for (size_t b = 0; b < batches.size(); ++b) {
    const int64_t n = static_cast<int64_t>(batches[b].size());
    Tensor logits = testing_random_f32({n, v}, static_cast<uint32_t>(b));
    std::vector<SamplerRequest> requests;
    for (size_t i : batches[b]) {
      requests.push_back({&settings[i], prompts[i], outputs[i], static_cast<int64_t>(outputs[i].size()), i + 1});
    }
    Tensor on_device = logits.to(Device::cuda());
    StatusOr<SamplerOutput> got = gpu.sample(on_device, requests);
    Sampler cpu(3);
    StatusOr<SamplerOutput> want = cpu.sample(logits, requests);
    ASSERT_TRUE(got.ok() && want.ok());
    for (int64_t r = 0; r < n; ++r) {
      EXPECT_EQ(got->sampled_token_ids.data<int32_t>()[r], want->sampled_token_ids.data<int32_t>()[r])
          << "batch " << b << " row " << r;
      outputs[batches[b][r]].push_back(want->sampled_token_ids.data<int32_t>()[r]);
    }
  }
}

// Structured output on the device: with grammar bitmasks on some rows (one narrower than the vocabulary), the device
// Sampler gives the CPU Sampler's ids batch after batch (the mask buffer is reused and grows), and every constrained
// id is allowed by its mask.
TEST_F(CudaRuntimeTest, SamplerBitmaskOnTheDeviceMatchesTheCpuSampler) {
  const int64_t v = 1000, words = (v + 31) / 32;
  std::vector<SamplingSettings> settings(3);
  settings[0].temperature = 0.f;
  settings[1].temperature = 1.f;
  settings[1].seed = 5;
  settings[2].temperature = 0.8f;
  settings[2].top_k = 20;
  settings[2].seed = 6;
  std::vector<std::vector<uint32_t>> masks(3, std::vector<uint32_t>(words));
  uint32_t x = 12345;
  for (auto& m : masks) {
    for (uint32_t& w : m) {
      x = x * 1664525u + 1013904223u;
      w = x & (x >> 7);
    }
  }
  Sampler gpu(3, 2, Device::cuda());  // capacity 2: the third row grows the buffers
  for (int b = 0; b < 6; ++b) {
    Tensor logits = testing_random_f32({3, v}, static_cast<uint32_t>(100 + b));
    std::vector<SamplerRequest> requests;
    for (size_t i = 0; i < 3; ++i) {
      SamplerRequest r{&settings[i], {}, {}, b, i + 1};
      if (i != 1 || b % 2 == 0) {  // row 1 alternates between constrained and free
        r.allowed_token_bitmask = masks[i].data();
        r.bitmask_words = i == 2 ? 20 : static_cast<int32_t>(words);  // row 2: ids >= 640 disallowed
      }
      requests.push_back(r);
    }
    Tensor on_device = logits.to(Device::cuda());
    StatusOr<SamplerOutput> got = gpu.sample(on_device, requests);
    Sampler cpu(3);
    StatusOr<SamplerOutput> want = cpu.sample(logits, requests);
    ASSERT_TRUE(got.ok() && want.ok());
    for (int64_t r = 0; r < 3; ++r) {
      const int32_t id = got->sampled_token_ids.data<int32_t>()[r];
      EXPECT_EQ(id, want->sampled_token_ids.data<int32_t>()[r]) << "batch " << b << " row " << r;
      if (requests[r].allowed_token_bitmask != nullptr) {
        EXPECT_TRUE(id < 32 * requests[r].bitmask_words && ((masks[r][id / 32] >> (id % 32)) & 1u)) << id;
      }
    }
  }
}

TEST_F(CudaRuntimeTest, DeviceCopyRejectsDtypeChange) {
  const Tensor dev = Tensor::zeros({4}, DType::kF32, Device::cuda());
  Tensor host = Tensor::empty({4}, DType::kBF16);
  EXPECT_DEATH(host.copy_from(dev), "dtypes differ");
}

TEST_F(CudaRuntimeTest, UploadThroughStagingSpansSeveralBuffers) {
  // 150 MB: three 64 MiB staging rounds, the last one partial.
  const Tensor host = random_bytes(150'000'003, 11);
  const Tensor dev = upload_to_device(host, Device::cuda());
  EXPECT_TRUE(same_bytes(dev.to(Device::cpu()), host));
}

TEST_F(CudaRuntimeTest, DeviceWeightSourceMatchesTheCheckpoint) {
  const std::string dir = testing::fixtures_dir() + "/llama_gqa_f32";
  StatusOr<SafetensorsFile> file = SafetensorsFile::open(dir + "/model.safetensors");
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  StatusOr<std::unique_ptr<WeightSource>> cpu = open_safetensors_checkpoint(dir);
  ASSERT_TRUE(cpu.ok()) << cpu.status().to_string();
  std::unique_ptr<WeightSource> gpu = make_device_weight_source(**cpu, Device::cuda());
  int checked = 0;
  for (const auto& [name, info] : file->infos()) {
    for (DType dtype : {info.dtype, DType::kBF16}) {  // as stored, and converted on the fly
      StatusOr<Tensor> want = (*cpu)->get(name, info.shape, dtype);
      StatusOr<Tensor> got = gpu->get(name, info.shape, dtype);
      ASSERT_TRUE(want.ok() && got.ok()) << name;
      EXPECT_EQ(got->device(), Device::cuda());
      EXPECT_EQ(got->shape(), info.shape);
      EXPECT_TRUE(same_bytes(got->to(Device::cpu()), want->contiguous())) << name << " as " << dtype_name(dtype);
      ++checked;
    }
  }
  EXPECT_GT(checked, 10);
  // Errors of the inner source pass through unchanged (they name the tensor).
  StatusOr<Tensor> missing = gpu->get("no.such.weight", {1}, DType::kF32);
  EXPECT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("no.such.weight"), std::string::npos);
}

}  // namespace
}  // namespace llmserve
