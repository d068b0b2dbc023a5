// Programming errors abort with a message naming the op and the offending tensor: shape and dtype mismatches,
// out-of-range ids / positions / slots / block ids.
#include <gtest/gtest.h>

#include "kernels/ops.h"
#include "test_util.h"

namespace llmserve {
namespace {

using testing::random_tensor;

TEST(KernelsDeathTest, LinearShapeMismatch) {
  Tensor x = random_tensor({2, 8}, 1), w = random_tensor({4, 9}, 2);
  Tensor out = Tensor::empty({2, 4}, DType::kF32);
  EXPECT_DEATH(ops::linear(out, x, w, nullptr), "linear: x .* vs weight");
  Tensor w_ok = random_tensor({4, 8}, 3), bad_bias = random_tensor({5}, 4);
  EXPECT_DEATH(ops::linear(out, x, w_ok, &bad_bias), "linear: bias");
}

TEST(KernelsDeathTest, RmsNormWeightMismatchAndWrongDtype) {
  Tensor x = random_tensor({3, 16}, 1), w = random_tensor({15}, 2);
  Tensor out = Tensor::empty({3, 16}, DType::kF32);
  EXPECT_DEATH(ops::rms_norm(out, x, w, 1e-5f), "rms_norm: weight");
  Tensor x_bf16 = random_tensor({3, 16}, 3, DType::kBF16), w_ok = random_tensor({16}, 4);
  Tensor out_bf16 = Tensor::empty({3, 16}, DType::kBF16);
  EXPECT_DEATH(ops::rms_norm(out_bf16, x_bf16, w_ok, 1e-5f), "rms_norm: x .* must be f32");
  // Per-head rows [n, h, d]: the weight is [d]; a 4-D x and a fused-add form of 3-D are refused.
  Tensor x3 = random_tensor({2, 3, 16}, 5), out3 = Tensor::empty({2, 3, 16}, DType::kF32);
  EXPECT_DEATH(ops::rms_norm(out3, x3, w, 1e-5f), "rms_norm: weight");
  Tensor x4 = random_tensor({2, 3, 1, 16}, 6), out4 = Tensor::empty({2, 3, 1, 16}, DType::kF32);
  EXPECT_DEATH(ops::rms_norm(out4, x4, w_ok, 1e-5f), "rms_norm: x");
  Tensor res3 = random_tensor({2, 3, 16}, 7);
  EXPECT_DEATH(ops::fused_add_rms_norm(x3, res3, w_ok, 1e-5f), "fused_add_rms_norm: x");
}

TEST(KernelsDeathTest, SiluAndMulWidthMismatch) {
  Tensor x = random_tensor({2, 10}, 1);
  Tensor out = Tensor::empty({2, 4}, DType::kF32);
  EXPECT_DEATH(ops::silu_and_mul(out, x), "silu_and_mul: out");
}

TEST(KernelsDeathTest, OutOfRangeIndices) {
  Tensor table = random_tensor({10, 4}, 1);
  Tensor out = Tensor::empty({2, 4}, DType::kF32);
  EXPECT_DEATH(ops::embedding(out, Tensor::from_i32({3, 10}, {2}), table), "token id 10");
  Tensor q = random_tensor({1, 8}, 2), k = random_tensor({1, 8}, 3), cache = random_tensor({4, 8}, 4);
  EXPECT_DEATH(ops::rotary_embedding(Tensor::from_i64({4}, {1}), q, k, 8, cache), "position 4");
  Tensor kc = Tensor::zeros({2, 2, 1, 8}, DType::kF32), vc = Tensor::zeros({2, 2, 1, 8}, DType::kF32);
  Tensor key = random_tensor({1, 1, 8}, 5);
  EXPECT_DEATH(ops::reshape_and_cache(key, key, kc, vc, Tensor::from_i64({4}, {1})), "slot");
}

TEST(KernelsDeathTest, QkNormRotaryWeightOfTheWrongLength) {
  Tensor q = random_tensor({1, 2, 8}, 1), k = random_tensor({1, 1, 8}, 2), v = random_tensor({1, 1, 8}, 3);
  Tensor kc = Tensor::zeros({2, 2, 1, 8}, DType::kF32), vc = Tensor::zeros({2, 2, 1, 8}, DType::kF32);
  Tensor cache = random_tensor({4, 8}, 4), w8 = random_tensor({8}, 5), w6 = random_tensor({6}, 6);
  Tensor pos = Tensor::from_i64({1}, {1}), slots = Tensor::from_i64({0}, {1});
  EXPECT_DEATH(ops::qk_norm_rotary_embedding_and_cache(pos, q, k, v, 8, cache, w8, w6, 1e-6f, kc, vc, slots),
               "qk_norm_rotary_embedding_and_cache: weight");
  EXPECT_DEATH(ops::qk_norm_rotary_embedding_and_cache(pos, q, k, v, 8, cache, w8, w8, -1.f, kc, vc, slots),
               "qk_norm_rotary_embedding_and_cache: eps");
}

TEST(KernelsDeathTest, AttentionBadMetadata) {
  Tensor kc = Tensor::zeros({2, 4, 1, 8}, DType::kF32), vc = Tensor::zeros({2, 4, 1, 8}, DType::kF32);
  Tensor q = random_tensor({2, 2, 8}, 1);
  Tensor out = Tensor::empty({2, 2, 8}, DType::kF32);
  ops::AttentionMetadata md;
  md.query_start_loc = Tensor::from_i32({0, 2}, {2});
  md.seq_lens = Tensor::from_i32({6}, {1});
  md.block_table = Tensor::from_i32({0, 2}, {1, 2});  // block 2 does not exist
  md.num_reqs = 1;
  EXPECT_DEATH(ops::paged_attention(out, q, kc, vc, md, 1.f, 0), "block 1 = 2 outside");
  Tensor q_bad_heads = random_tensor({2, 3, 8}, 2);
  Tensor out3 = Tensor::empty({2, 3, 8}, DType::kF32);
  md.block_table = Tensor::from_i32({0, 1}, {1, 2});
  ops::AttentionMetadata md_ok = md;
  ops::paged_attention(out, q, kc, vc, md_ok, 1.f, 0);  // the fixed table works
  Tensor kc2 = Tensor::zeros({2, 4, 2, 8}, DType::kF32), vc2 = Tensor::zeros({2, 4, 2, 8}, DType::kF32);
  EXPECT_DEATH(ops::paged_attention(out3, q_bad_heads, kc2, vc2, md, 1.f, 0), "not a multiple of num_kv_heads");
}

TEST(KernelsDeathTest, TopKTooLarge) {
  Tensor x = random_tensor({1, 4}, 1);
  Tensor values = Tensor::empty({1, 5}, DType::kF32), ids = Tensor::empty({1, 5}, DType::kI32);
  EXPECT_DEATH(ops::top_k(values, ids, x, 5), "top_k: k 5");
}

}  // namespace
}  // namespace llmserve
