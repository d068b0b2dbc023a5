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

}  // namespace
}  // namespace llmserve
