// CUDA kernels vs the CPU ops (the reference), llama.cpp test-backend-ops style: random inputs of several shapes,
// every CUDA output poisoned with NaN before the run, tolerances per dtype. Skips when no CUDA device is present.
// f32: |gpu - cpu| <= 1e-5 + 1e-5 |cpu|. f16 / bf16: inputs are rounded to the dtype first and the CPU runs on
// those values in f32; the GPU rounds its output (and, in fused_add_rms_norm, the residual) to the dtype, so allow
// a few ulps: |gpu - cpu| <= 1e-3 + rtol |cpu|, rtol 2e-3 (f16) or 1.6e-2 (bf16). This file: normalisation,
// activation, add, embedding, rotary (alone, with the KV-cache write, and after Qwen3's q/k norms: bit-identical to
// the unfused CUDA ops); gemm_gpu_test.cc, logits_gpu_test.cc and sampling_gpu_test.cc the rest.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <tuple>

#include "gpu_test_util.h"
#include "kernels/ops.h"

namespace llmserve {
namespace {

using testing::expect_close;
using testing::random_tensor;
using testing::to_doubles;

using gpu_testing::have_cuda_device;
using gpu_testing::poisoned_device;
using gpu_testing::same_bytes;
using gpu_testing::to_device;
using gpu_testing::to_host;

void expect_matches(const Tensor& gpu_host, const Tensor& cpu_ref, DType dtype, const std::string& what) {
  expect_close(gpu_host, to_doubles(cpu_ref), gpu_testing::rounding_atol(dtype), gpu_testing::rounding_rtol(dtype),
               what);
}

class CudaKernelsTest : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    if (!have_cuda_device()) GTEST_SKIP() << "no CUDA device";
  }
};

// Rows of 8-element multiples up to 8192 take the vectorised norm / activation kernels (1, 2 or 4 chunks per thread,
// partial blocks; the norms' rows of up to 256 several per block: groups of 2..32 lanes, some partly idle (24, 200),
// a partial last block (1000 rows of 128)); 100 and 12288 the scalar ones.
const std::pair<int64_t, int64_t> kShapes[] = {{1, 16},   {7, 768},   {33, 100}, {4, 5000}, {300, 64},   {3, 2048},
                                               {2, 8192}, {1, 12288}, {5, 24},   {9, 200},  {1000, 128}, {70, 256}};

std::string label(const char* op, int64_t n, int64_t d, DType x, DType w) {
  return std::string(op) + " [" + std::to_string(n) + ", " + std::to_string(d) + "] x " + std::string(dtype_name(x)) +
         " weight " + std::string(dtype_name(w));
}

TEST_P(CudaKernelsTest, RmsNormMatchesCpu) {
  const DType dtype = GetParam();
  uint32_t seed = 1;
  for (auto [n, d] : kShapes) {
    for (DType wd : {DType::kF32, DType::kF16, DType::kBF16}) {
      Tensor x = random_tensor({n, d}, seed++, dtype, -3.f, 3.f);  // rounded to dtype: both sides see the same values
      Tensor w = random_tensor({d}, seed++, wd, 0.5f, 1.5f);
      Tensor ref = Tensor::empty({n, d}, DType::kF32);
      ops::rms_norm(ref, x.to(DType::kF32), w.to(DType::kF32), 1e-5f);  // the CPU takes no f16 weight
      Tensor x_dev = to_device(x), w_dev = to_device(w), out_dev = poisoned_device({n, d}, dtype);
      ops::rms_norm(out_dev, x_dev, w_dev, 1e-5f);
      expect_matches(to_host(out_dev), ref, dtype, label("rms_norm", n, d, dtype, wd));
      ops::rms_norm(x_dev, x_dev, w_dev, 1e-5f);  // in place
      expect_matches(to_host(x_dev), ref, dtype, label("rms_norm in place", n, d, dtype, wd));
    }
  }
}

TEST_P(CudaKernelsTest, RmsNormPerHeadRowsMatchCpu) {
  // [T, H, D] heads of a fused QKV output (row stride (H + 2 kv) * D), in place as the attention layer runs it:
  // the short-row kernel (D 64, 128, 256; one token and many) and the scalar one (D 512, and 100: unaligned rows);
  // the columns past the heads (k and v) keep their values.
  const DType dtype = GetParam();
  uint32_t seed = 500;
  for (auto [T, H, D] : {std::tuple<int64_t, int64_t, int64_t>{1, 32, 128}, {37, 4, 128}, {5, 16, 64},
                         {3, 2, 256}, {2, 3, 512}, {4, 3, 100}}) {
    const int64_t W = (H + 4) * D;
    Tensor qkv = random_tensor({T, W}, seed++, dtype, -3.f, 3.f);
    Tensor w = random_tensor({D}, seed++, DType::kF32, 0.5f, 1.5f);
    Tensor ref = Tensor::empty({T, H, D}, DType::kF32);
    Tensor qkv_f32 = qkv.to(DType::kF32);
    ops::rms_norm(ref, qkv_f32.as_strided({T, H, D}, {W, D, 1}), w, 1e-6f);
    Tensor dev = to_device(qkv), w_dev = to_device(w);
    Tensor heads = dev.as_strided({T, H, D}, {W, D, 1});
    ops::rms_norm(heads, heads, w_dev, 1e-6f);
    Tensor back = to_host(dev).to(DType::kF32);
    const std::string what = label("rms_norm per head", T * H, D, dtype, DType::kF32);
    Tensor got = Tensor::empty({T, H, D}, DType::kF32);
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t i = 0; i < H * D; ++i) got.data<float>()[t * H * D + i] = back.data<float>()[t * W + i];
      for (int64_t i = H * D; i < W; ++i) {
        ASSERT_EQ(back.data<float>()[t * W + i], qkv_f32.data<float>()[t * W + i]) << what << " column " << i;
      }
    }
    expect_matches(got, ref, dtype, what);
  }
}

TEST_P(CudaKernelsTest, FusedAddRmsNormMatchesCpu) {
  const DType dtype = GetParam();
  uint32_t seed = 100;
  for (auto [n, d] : kShapes) {
    for (DType wd : {DType::kF32, DType::kF16, DType::kBF16}) {
      Tensor x = random_tensor({n, d}, seed++, dtype, -2.f, 2.f);
      Tensor res = random_tensor({n, d}, seed++, dtype, -2.f, 2.f);
      Tensor w = random_tensor({d}, seed++, wd, 0.5f, 1.5f);
      Tensor x_ref = x.to(DType::kF32), res_ref = res.to(DType::kF32);
      ops::fused_add_rms_norm(x_ref, res_ref, w.to(DType::kF32), 1e-6f);
      // Poison first, then copy the inputs in: the op must overwrite both tensors in place.
      Tensor x_dev = poisoned_device({n, d}, dtype), res_dev = poisoned_device({n, d}, dtype);
      Tensor x_in = to_device(x), res_in = to_device(res);
      CHECK(cudaMemcpy(x_dev.raw_data(), x_in.raw_data(), x_in.nbytes(), cudaMemcpyDeviceToDevice) == cudaSuccess);
      CHECK(cudaMemcpy(res_dev.raw_data(), res_in.raw_data(), res_in.nbytes(), cudaMemcpyDeviceToDevice) ==
            cudaSuccess);
      Tensor w_dev = to_device(w);
      ops::fused_add_rms_norm(x_dev, res_dev, w_dev, 1e-6f);
      expect_matches(to_host(res_dev), res_ref, dtype, label("fused_add_rms_norm residual", n, d, dtype, wd));
      expect_matches(to_host(x_dev), x_ref, dtype, label("fused_add_rms_norm x", n, d, dtype, wd));
    }
  }
}

TEST_P(CudaKernelsTest, SiluAndMulMatchesCpu) {
  const DType dtype = GetParam();
  uint32_t seed = 200;
  for (auto [n, d] : kShapes) {
    Tensor x = random_tensor({n, 2 * d}, seed++, dtype, -8.f, 8.f);
    Tensor ref = Tensor::empty({n, d}, DType::kF32);
    ops::silu_and_mul(ref, x.to(DType::kF32));
    Tensor x_dev = to_device(x), out_dev = poisoned_device({n, d}, dtype);
    ops::silu_and_mul(out_dev, x_dev);
    expect_matches(to_host(out_dev), ref, dtype, label("silu_and_mul", n, d, dtype, dtype));
  }
}

TEST_P(CudaKernelsTest, ReadsRowStridedRows) {
  // x as a column slice of a wider device buffer: rows are stride 2d apart.
  const DType dtype = GetParam();
  const int64_t n = 9, d = 96;
  Tensor wide = random_tensor({n, 2 * d}, 300, dtype);
  Tensor w = random_tensor({d}, 301, DType::kF32, 0.5f, 1.5f);
  Tensor ref = Tensor::empty({n, d}, DType::kF32);
  ops::rms_norm(ref, wide.slice(1, d, 2 * d).to(DType::kF32), w, 1e-5f);
  Tensor wide_dev = to_device(wide), w_dev = to_device(w), out_dev = poisoned_device({n, d}, dtype);
  ops::rms_norm(out_dev, wide_dev.slice(1, d, 2 * d), w_dev, 1e-5f);
  expect_matches(to_host(out_dev), ref, dtype, "rms_norm strided");
  // A row start that is not 16-byte aligned (column offset 1) takes the scalar kernels.
  Tensor ref1 = Tensor::empty({n, d}, DType::kF32);
  ops::rms_norm(ref1, wide.slice(1, 1, d + 1).to(DType::kF32), w, 1e-5f);
  Tensor out1_dev = poisoned_device({n, d}, dtype);
  ops::rms_norm(out1_dev, wide_dev.slice(1, 1, d + 1), w_dev, 1e-5f);
  expect_matches(to_host(out1_dev), ref1, dtype, "rms_norm unaligned rows");
}

TEST_P(CudaKernelsTest, AddMatchesCpu) {
  const DType dtype = GetParam();
  uint32_t seed = 400;
  for (auto [n, d] : kShapes) {
    Tensor a = random_tensor({n, d}, seed++, dtype, -4.f, 4.f);
    Tensor b = random_tensor({n, d}, seed++, dtype, -4.f, 4.f);
    Tensor ref = a.to(DType::kF32);
    ops::add(ref, b.to(DType::kF32));
    // a row-strided in place, b row-strided too.
    Tensor a_dev = gpu_testing::to_device_strided(a, 3), b_dev = gpu_testing::to_device_strided(b, 5);
    ops::add(a_dev, b_dev);
    expect_matches(to_host(a_dev), ref, dtype, label("add", n, d, dtype, dtype));
  }
}

TEST_P(CudaKernelsTest, EmbeddingMatchesCpu) {
  const DType out_dtype = GetParam();
  uint32_t seed = 500;
  for (auto [vocab, hidden] : {std::pair<int64_t, int64_t>{17, 8}, {1000, 77}, {32768, 512}}) {
    for (DType table_dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
      Tensor table = random_tensor({vocab, hidden}, seed++, table_dtype, -2.f, 2.f);
      std::vector<int32_t> ids = {0, static_cast<int32_t>(vocab - 1)};
      std::mt19937 rng(seed++);
      for (int i = 0; i < 61; ++i) ids.push_back(static_cast<int32_t>(rng() % vocab));
      const int64_t n = static_cast<int64_t>(ids.size());
      Tensor ids_t = Tensor::from_i32(ids, {n});
      Tensor ref = Tensor::empty({n, hidden}, out_dtype);
      ops::embedding(ref, ids_t, table);  // the CPU converts with the same round-to-nearest-even: exact equality
      Tensor out_dev = gpu_testing::poisoned_strided(n, hidden, 4, out_dtype);
      ops::embedding(out_dev, to_device(ids_t), to_device(table));
      expect_close(to_host(out_dev), to_doubles(ref), 0, 0, label("embedding", vocab, hidden, out_dtype, table_dtype));
    }
  }
}

// A vocabulary-parallel rank's lookup: its rows for its ids, zeros for the rest (exact, as embedding).
TEST_P(CudaKernelsTest, MaskedEmbeddingMatchesCpu) {
  const DType out_dtype = GetParam();
  uint32_t seed = 900;
  for (auto [vocab, hidden] : {std::pair<int64_t, int64_t>{17, 8}, {1000, 77}, {32768, 512}}) {
    for (DType table_dtype : {DType::kF32, DType::kBF16}) {
      Tensor table = random_tensor({vocab, hidden}, seed++, table_dtype, -2.f, 2.f);
      std::vector<int32_t> ids = {0, static_cast<int32_t>(vocab - 1)};
      std::mt19937 rng(seed++);
      for (int i = 0; i < 61; ++i) ids.push_back(static_cast<int32_t>(rng() % vocab));
      const int64_t n = static_cast<int64_t>(ids.size());
      Tensor ids_t = Tensor::from_i32(ids, {n});
      const int64_t per = (vocab + 3) / 4;
      for (int64_t start = 0; start < vocab; start += per) {
        const Tensor part = table.slice(0, start, std::min(vocab, start + per)).contiguous();
        Tensor ref = Tensor::empty({n, hidden}, out_dtype);
        ops::masked_embedding(ref, ids_t, part, start);
        Tensor out_dev = gpu_testing::poisoned_strided(n, hidden, 4, out_dtype);
        ops::masked_embedding(out_dev, to_device(ids_t), to_device(part), start);
        expect_close(
            to_host(out_dev), to_doubles(ref), 0, 0,
            label("masked_embedding", vocab, hidden, out_dtype, table_dtype) + " start " + std::to_string(start));
      }
    }
  }
}

struct RotaryCase {
  int64_t n, num_heads, num_kv_heads, head_dim;
};
// head_dim 6: half a head is not a multiple of 8 -- the scalar rotary path; the others take the vector path.
const RotaryCase kRotaryCases[] = {{1, 4, 2, 64}, {13, 8, 8, 16}, {37, 32, 8, 128}, {300, 6, 1, 32}, {5, 4, 2, 6}};
constexpr int64_t kMaxPosition = 4096;

Tensor rope_cache(int64_t head_dim) {
  std::vector<float> cache(static_cast<size_t>(kMaxPosition * head_dim));
  for (int64_t p = 0; p < kMaxPosition; ++p) {
    for (int64_t i = 0; i < head_dim / 2; ++i) {
      const double angle = p * std::pow(10000.0, -2.0 * i / head_dim);
      cache[p * head_dim + i] = static_cast<float>(std::cos(angle));
      cache[p * head_dim + head_dim / 2 + i] = static_cast<float>(std::sin(angle));
    }
  }
  return Tensor::from_f32(cache, {kMaxPosition, head_dim});
}

Tensor random_positions(int64_t n, uint32_t seed) {
  std::vector<int64_t> positions;
  std::mt19937 rng(seed);
  for (int64_t t = 0; t < n; ++t) positions.push_back(t == 0 ? kMaxPosition - 1 : rng() % kMaxPosition);
  return Tensor::from_i64(positions, {n});
}

// [n, n_heads, head_dim] view of columns [col, col + n_heads * head_dim) of a fused [n, q + k + v] buffer.
Tensor head_view(const Tensor& t, int64_t col, int64_t n_heads, int64_t head_dim) {
  Tensor cols = t.slice(1, col, col + n_heads * head_dim);
  return cols.as_strided({t.size(0), n_heads, head_dim}, {cols.stride(0), head_dim, 1});
}

// n distinct slots of [0, num_slots) in shuffled order, token n / 2 a padding token (-1).
Tensor cache_slots(int64_t n, int64_t num_slots, uint32_t seed) {
  std::vector<int64_t> slots(static_cast<size_t>(num_slots));
  for (size_t i = 0; i < slots.size(); ++i) slots[i] = static_cast<int64_t>(i);
  std::mt19937 rng(seed);
  std::shuffle(slots.begin(), slots.end(), rng);
  slots.resize(static_cast<size_t>(n));
  slots[n / 2] = -1;
  return Tensor::from_i64(slots, {n});
}

TEST_P(CudaKernelsTest, RotaryMatchesCpu) {
  const DType dtype = GetParam();
  uint32_t seed = 600;
  for (const RotaryCase& c : kRotaryCases) {
    const int64_t q_cols = c.num_heads * c.head_dim, k_cols = c.num_kv_heads * c.head_dim;
    // q and k as column slices of one fused [n, q + k + v] buffer, as the model's QKV projection leaves them.
    Tensor qkv = random_tensor({c.n, q_cols + 2 * k_cols}, seed++, dtype, -2.f, 2.f);
    Tensor cache_t = rope_cache(c.head_dim), pos = random_positions(c.n, seed++);
    Tensor ref = qkv.to(DType::kF32);
    Tensor q_ref = ref.slice(1, 0, q_cols), k_ref = ref.slice(1, q_cols, q_cols + k_cols);
    ops::rotary_embedding(pos, q_ref, k_ref, c.head_dim, cache_t);
    Tensor qkv_dev = to_device(qkv);
    Tensor q_dev = qkv_dev.slice(1, 0, q_cols), k_dev = qkv_dev.slice(1, q_cols, q_cols + k_cols);
    ops::rotary_embedding(to_device(pos), q_dev, k_dev, c.head_dim, to_device(cache_t));
    // v (the rest of the buffer) must be untouched: compare the whole fused row.
    expect_matches(to_host(qkv_dev), ref, dtype, label("rotary", c.n, c.head_dim, dtype, DType::kF32));
  }
}

// The fused rotary + cache write against the CPU's two ops: the whole q/k/v buffer and both whole caches (slots
// not written must keep their old contents; padding slots -1 write nothing).
TEST_P(CudaKernelsTest, RotaryAndCacheMatchesCpu) {
  const DType dtype = GetParam();
  uint32_t seed = 700;
  for (const RotaryCase& c : kRotaryCases) {
    const int64_t q_cols = c.num_heads * c.head_dim, k_cols = c.num_kv_heads * c.head_dim;
    const int64_t block_size = 16, num_blocks = (c.n + block_size - 1) / block_size * 2 + 1;
    Tensor qkv = random_tensor({c.n, q_cols + 2 * k_cols}, seed++, dtype, -2.f, 2.f);
    Tensor cache_t = rope_cache(c.head_dim), pos = random_positions(c.n, seed++);
    const Shape cache_shape = {num_blocks, block_size, c.num_kv_heads, c.head_dim};
    Tensor key_cache = random_tensor(cache_shape, seed++, dtype);
    Tensor value_cache = random_tensor(cache_shape, seed++, dtype);
    Tensor slot_t = cache_slots(c.n, num_blocks * block_size, seed++);
    auto heads = [&c](const Tensor& t, int64_t col, int64_t n_heads) { return head_view(t, col, n_heads, c.head_dim); };
    Tensor ref = qkv.to(DType::kF32), kc_ref = key_cache.to(DType::kF32), vc_ref = value_cache.to(DType::kF32);
    Tensor q_ref = heads(ref, 0, c.num_heads), k_ref = heads(ref, q_cols, c.num_kv_heads);
    ops::rotary_embedding(pos, q_ref, k_ref, c.head_dim, cache_t);
    ops::reshape_and_cache(k_ref, heads(ref, q_cols + k_cols, c.num_kv_heads), kc_ref, vc_ref, slot_t);
    Tensor qkv_dev = to_device(qkv), kc_dev = to_device(key_cache), vc_dev = to_device(value_cache);
    Tensor q_dev = heads(qkv_dev, 0, c.num_heads), k_dev = heads(qkv_dev, q_cols, c.num_kv_heads);
    ops::rotary_embedding_and_cache(to_device(pos), q_dev, k_dev, heads(qkv_dev, q_cols + k_cols, c.num_kv_heads),
                                    c.head_dim, to_device(cache_t), kc_dev, vc_dev, to_device(slot_t));
    const std::string what = label("rotary_and_cache", c.n, c.head_dim, dtype, DType::kF32);
    expect_matches(to_host(qkv_dev), ref, dtype, what + " q/k/v");
    expect_matches(to_host(kc_dev), kc_ref, dtype, what + " key cache");
    expect_matches(to_host(vc_dev), vc_ref, dtype, what + " value cache");
  }
}

// The fused q/k norm + rotary + cache write: bit-identical to the unfused CUDA ops (rms_norm on the q and k head
// views, then rotary_embedding_and_cache) — the fused kernel for head_dim 16-256 in powers of two, the three ops it
// falls back to elsewhere (96: 12 chunks; 6: the scalar rotary) — and within the dtype's rounding of the CPU op.
// f32 and bf16 norm weights (the models keep them f32).
TEST_P(CudaKernelsTest, QkNormRotaryAndCacheMatchesTheUnfusedOps) {
  const DType dtype = GetParam();
  const RotaryCase cases[] = {{1, 4, 2, 64},   {37, 32, 4, 128}, {13, 8, 8, 16}, {300, 6, 1, 32},
                              {7, 16, 2, 256}, {9, 3, 1, 96},    {5, 4, 2, 6}};
  uint32_t seed = 800;
  for (const RotaryCase& c : cases) {
    for (DType weight_dtype : {DType::kF32, DType::kBF16}) {
      const int64_t q_cols = c.num_heads * c.head_dim, k_cols = c.num_kv_heads * c.head_dim;
      const int64_t block_size = 16, num_blocks = (c.n + block_size - 1) / block_size * 2 + 1;
      Tensor qkv = random_tensor({c.n, q_cols + 2 * k_cols}, seed++, dtype, -4.f, 4.f);
      Tensor q_weight = random_tensor({c.head_dim}, seed++, weight_dtype, 0.25f, 2.f);
      Tensor k_weight = random_tensor({c.head_dim}, seed++, weight_dtype, 0.25f, 2.f);
      Tensor cache_t = rope_cache(c.head_dim), pos = random_positions(c.n, seed++);
      const Shape cache_shape = {num_blocks, block_size, c.num_kv_heads, c.head_dim};
      Tensor key_cache = random_tensor(cache_shape, seed++, dtype);
      Tensor value_cache = random_tensor(cache_shape, seed++, dtype);
      Tensor slot_t = cache_slots(c.n, num_blocks * block_size, seed++);
      auto heads = [&c](const Tensor& t, int64_t col, int64_t n_heads) {
        return head_view(t, col, n_heads, c.head_dim);
      };
      const float eps = 1e-6f;
      // CPU reference in f32 on the dtype-rounded inputs.
      Tensor ref = qkv.to(DType::kF32), kc_ref = key_cache.to(DType::kF32), vc_ref = value_cache.to(DType::kF32);
      Tensor q_ref = heads(ref, 0, c.num_heads), k_ref = heads(ref, q_cols, c.num_kv_heads);
      ops::qk_norm_rotary_embedding_and_cache(pos, q_ref, k_ref, heads(ref, q_cols + k_cols, c.num_kv_heads),
                                              c.head_dim, cache_t, q_weight, k_weight, eps, kc_ref, vc_ref, slot_t);
      // CUDA: the unfused ops on one copy, the fused op on another.
      Tensor pos_d = to_device(pos), cache_d = to_device(cache_t), slot_d = to_device(slot_t);
      Tensor qw_d = to_device(q_weight), kw_d = to_device(k_weight);
      Tensor qkv_a = to_device(qkv), kc_a = to_device(key_cache), vc_a = to_device(value_cache);
      Tensor q_a = heads(qkv_a, 0, c.num_heads), k_a = heads(qkv_a, q_cols, c.num_kv_heads);
      ops::rms_norm(q_a, q_a, qw_d, eps);
      ops::rms_norm(k_a, k_a, kw_d, eps);
      ops::rotary_embedding_and_cache(pos_d, q_a, k_a, heads(qkv_a, q_cols + k_cols, c.num_kv_heads), c.head_dim,
                                      cache_d, kc_a, vc_a, slot_d);
      Tensor qkv_b = to_device(qkv), kc_b = to_device(key_cache), vc_b = to_device(value_cache);
      Tensor q_b = heads(qkv_b, 0, c.num_heads), k_b = heads(qkv_b, q_cols, c.num_kv_heads);
      ops::qk_norm_rotary_embedding_and_cache(pos_d, q_b, k_b, heads(qkv_b, q_cols + k_cols, c.num_kv_heads),
                                              c.head_dim, cache_d, qw_d, kw_d, eps, kc_b, vc_b, slot_d);
      const std::string what = label("qk_norm_rotary_and_cache", c.n, c.head_dim, dtype, weight_dtype);
      EXPECT_TRUE(same_bytes(qkv_b, qkv_a)) << what << ": q/k/v differ from the unfused ops";
      EXPECT_TRUE(same_bytes(kc_b, kc_a)) << what << ": key cache differs from the unfused ops";
      EXPECT_TRUE(same_bytes(vc_b, vc_a)) << what << ": value cache differs from the unfused ops";
      // Against the CPU, whose normed heads are not rounded to the dtype before the rotation: a 16-bit rounding of
      // values up to ~3.5 (|x| / rms <= sqrt(3) for uniform inputs, weights <= 2) on each of the two rotated terms.
      const double atol = dtype == DType::kF32 ? 1e-4 : dtype == DType::kF16 ? 1e-2 : 6e-2;
      const double rtol = gpu_testing::rounding_rtol(dtype);
      expect_close(to_host(qkv_b), to_doubles(ref), atol, rtol, what + " q/k/v");
      expect_close(to_host(kc_b), to_doubles(kc_ref), atol, rtol, what + " key cache");
      expect_matches(to_host(vc_b), vc_ref, dtype, what + " value cache");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaKernelsTest, ::testing::Values(DType::kF32, DType::kF16, DType::kBF16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace llmserve
