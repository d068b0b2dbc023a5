// Tensor views, copies and conversions on CPU.
#include "core/tensor.h"

#include <gtest/gtest.h>

namespace llmserve {
namespace {

TEST(Tensor, ViewsShareStorage) {
  Tensor t = Tensor::from_f32({0, 1, 2, 3, 4, 5}, {2, 3});
  EXPECT_TRUE(t.is_contiguous());
  Tensor row = t.select(0, 1);
  EXPECT_EQ(row.shape(), (Shape{3}));
  EXPECT_EQ(row.data<float>()[0], 3.0f);
  Tensor col = t.slice(1, 1, 3);
  EXPECT_FALSE(col.is_contiguous());
  Tensor c = col.contiguous();
  EXPECT_EQ(c.data<float>()[2], 4.0f);  // [[1,2],[4,5]]
  Tensor tr = t.transpose(0, 1).contiguous();
  EXPECT_EQ(tr.shape(), (Shape{3, 2}));
  EXPECT_EQ(tr.data<float>()[1], 3.0f);
  Tensor v = t.view({3, -1});
  EXPECT_EQ(v.size(1), 2);
  v.data<float>()[0] = 42;
  EXPECT_EQ(t.data<float>()[0], 42.0f);
}

TEST(Tensor, ConvertsDtypes) {
  Tensor t = Tensor::from_f32({1.5f, -0.25f, 8.0f}, {3});
  Tensor b = t.to(DType::kBF16);
  EXPECT_EQ(b.nbytes(), 6u);
  Tensor back = b.to(DType::kF32);
  EXPECT_EQ(back.data<float>()[1], -0.25f);
  Tensor h = t.to(DType::kF16).to(DType::kF32);
  EXPECT_EQ(h.data<float>()[2], 8.0f);
}

TEST(Tensor, FromBlobBorrowsAndKeepsAlive) {
  auto owner = std::make_shared<std::vector<int32_t>>(std::vector<int32_t>{7, 8, 9, 10});
  Tensor t = Tensor::from_blob(owner->data(), {2, 2}, DType::kI32, owner);
  std::weak_ptr<std::vector<int32_t>> weak = owner;
  owner.reset();
  EXPECT_FALSE(weak.expired());
  EXPECT_EQ(t.data<int32_t>()[3], 10);
  t = Tensor();
  EXPECT_TRUE(weak.expired());
}

TEST(TensorDeathTest, BadSliceAborts) {
  Tensor t = Tensor::zeros({4}, DType::kF32);
  EXPECT_DEATH((void)t.slice(0, 2, 5), "slice");
}

// [T, heads, head_dim] over a column slice of a fused [T, width] projection: element (t, h, d) is column
// start + h * head_dim + d of row t (the oracle is plain index arithmetic on the parent).
TEST(Tensor, AsStridedViewsAColumnSliceAsHeads) {
  const int64_t T = 3, width = 20, start = 8, heads = 2, dim = 4;
  Tensor parent = Tensor::empty({T, width}, DType::kF32);
  for (int64_t i = 0; i < T * width; ++i) parent.data<float>()[i] = static_cast<float>(i);
  const Tensor slice = parent.slice(1, start, start + heads * dim);
  const Tensor v = slice.as_strided({T, heads, dim}, {slice.stride(0), dim, 1});
  EXPECT_EQ(v.shape(), (Shape{T, heads, dim}));
  EXPECT_FALSE(v.is_contiguous());
  const Tensor c = v.contiguous();  // the strided walk of copy_from reads through the view's strides
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t d = 0; d < dim; ++d) {
        EXPECT_EQ(c.data<float>()[(t * heads + h) * dim + d], static_cast<float>(t * width + start + h * dim + d));
      }
    }
  }
}

TEST(TensorDeathTest, AsStridedPastTheTensorAborts) {
  Tensor t = Tensor::empty({4, 4}, DType::kF32);
  EXPECT_DEATH((void)t.as_strided({4, 5}, {4, 1}), "as_strided");
  EXPECT_DEATH((void)t.as_strided({2}, {1, 1}), "as_strided");
}

TEST(Tensor, ZerosOnCpuAndPinnedBuffersAreUsable) {
  Tensor z = Tensor::zeros({5, 3}, DType::kBF16, Device::cpu());
  for (int64_t i = 0; i < z.numel(); ++i) EXPECT_EQ(z.data<uint16_t>()[i], 0);
  Tensor p = Tensor::empty_pinned({7}, DType::kI32);  // page-locked in CUDA builds, plain memory otherwise
  for (int i = 0; i < 7; ++i) p.data<int32_t>()[i] = i;
  EXPECT_EQ(p.data<int32_t>()[6], 6);
  EXPECT_TRUE(p.device().is_cpu());
}

}  // namespace
}  // namespace llmserve
