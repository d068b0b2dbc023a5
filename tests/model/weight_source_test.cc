// WeightSource: single-file, sharded (index.json) and multi-file checkpoints, zero-copy vs converted reads checked
// against scalar conversions, error messages, and the dummy source's determinism and value ranges.
#include "model/weight_source.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "model/safetensors.h"
#include "model_test_util.h"

namespace llmserve {
namespace {

using testing::TempDir;
using testing::write_bytes;

Tensor random_f32(Shape shape, uint32_t seed, DType dtype = DType::kF32) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 2.0f);
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return Tensor::from_f32(v, std::move(shape), dtype);
}

bool contains(const Status& s, const std::string& frag) { return s.message().find(frag) != std::string::npos; }

TEST(WeightSource, SingleFileZeroCopyAndConversions) {
  TempDir dir;
  Tensor bf = random_f32({64, 33}, 1, DType::kBF16);
  Tensor f32 = random_f32({5, 7}, 2);
  Tensor f16 = random_f32({9}, 3, DType::kF16);
  Tensor fp8 = random_f32({11}, 4, DType::kFP8E4M3);
  Tensor ids = Tensor::from_i64({1, -2, 3}, {3});
  ASSERT_TRUE(write_safetensors(dir.file("model.safetensors"),
                                {{"bf", bf}, {"f32", f32}, {"f16", f16}, {"fp8", fp8}, {"ids", ids}})
                  .ok());
  auto src_or = open_safetensors_checkpoint(dir.path());
  ASSERT_TRUE(src_or.ok()) << src_or.status().to_string();
  WeightSource& src = **src_or;
  EXPECT_EQ(src.names(), (std::vector<std::string>{"bf", "f16", "f32", "fp8", "ids"}));
  EXPECT_TRUE(src.contains("bf"));
  EXPECT_FALSE(src.contains("nope"));

  // Same dtype: two reads alias the same mapped bytes (a copy would allocate anew each time).
  StatusOr<Tensor> a = src.get("bf", {64, 33}, DType::kBF16);
  StatusOr<Tensor> b = src.get("bf", {64, 33}, DType::kBF16);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->raw_data(), b->raw_data());
  EXPECT_EQ(0, std::memcmp(a->raw_data(), bf.raw_data(), bf.nbytes()));

  // Conversions match the scalar conversions element by element.
  StatusOr<Tensor> bf_as_f32 = src.get("bf", {64, 33}, DType::kF32);
  ASSERT_TRUE(bf_as_f32.ok());
  for (int64_t i = 0; i < bf.numel(); ++i) {
    ASSERT_EQ(bf_as_f32->data<float>()[i], bf16_to_f32(bf.data<bf16_t>()[i])) << i;
  }
  StatusOr<Tensor> f32_as_bf = src.get("f32", {5, 7}, DType::kBF16);
  ASSERT_TRUE(f32_as_bf.ok());
  for (int64_t i = 0; i < f32.numel(); ++i) {
    ASSERT_EQ(f32_as_bf->data<bf16_t>()[i].bits, f32_to_bf16(f32.data<float>()[i]).bits) << i;
  }
  StatusOr<Tensor> f16_as_bf = src.get("f16", {9}, DType::kBF16);
  ASSERT_TRUE(f16_as_bf.ok());
  for (int64_t i = 0; i < f16.numel(); ++i) {
    ASSERT_EQ(f16_as_bf->data<bf16_t>()[i].bits, f32_to_bf16(f16_to_f32(f16.data<f16_t>()[i])).bits) << i;
  }
  StatusOr<Tensor> fp8_as_f32 = src.get("fp8", {11}, DType::kF32);
  ASSERT_TRUE(fp8_as_f32.ok());
  for (int64_t i = 0; i < fp8.numel(); ++i) {
    ASSERT_EQ(fp8_as_f32->data<float>()[i], fp8_e4m3_to_f32(fp8.data<fp8_e4m3_t>()[i])) << i;
  }
  StatusOr<Tensor> ids32 = src.get("ids", {3}, DType::kI32);
  ASSERT_TRUE(ids32.ok());
  EXPECT_EQ(ids32->data<int32_t>()[1], -2);

  // Errors name the file and tensor.
  StatusOr<Tensor> wrong_shape = src.get("bf", {33, 64}, DType::kBF16);
  ASSERT_FALSE(wrong_shape.ok());
  EXPECT_EQ(wrong_shape.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(wrong_shape.status(), "model.safetensors"));
  EXPECT_TRUE(contains(wrong_shape.status(), "'bf'"));
  EXPECT_TRUE(contains(wrong_shape.status(), "[64, 33]"));
  EXPECT_TRUE(contains(wrong_shape.status(), "[33, 64]"));
  StatusOr<Tensor> missing = src.get("model.norm.weight", {4}, DType::kF32);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(contains(missing.status(), dir.path()));
  EXPECT_TRUE(contains(missing.status(), "'model.norm.weight'"));
  StatusOr<Tensor> int_to_float = src.get("ids", {3}, DType::kF32);
  ASSERT_FALSE(int_to_float.ok());
  EXPECT_TRUE(contains(int_to_float.status(), "'ids'"));
}

TEST(WeightSource, ParallelConversionMatchesSerial) {
  // Big enough for several parallel_for chunks, with an odd length so the last chunk is ragged.
  const size_t n = (1u << 20) + 12345;
  std::vector<uint16_t> src(n);
  std::mt19937 rng(5);
  for (auto& v : src) v = static_cast<uint16_t>(rng());
  std::vector<float> out(n);
  convert_elements_parallel(src.data(), DType::kBF16, out.data(), DType::kF32, n);
  for (size_t i = 0; i < n; ++i) {
    float ref = bf16_to_f32(bf16_t{src[i]});
    ASSERT_TRUE(std::memcmp(&ref, &out[i], 4) == 0) << i;  // bitwise, NaNs included
  }
  // f32 -> f16 (an inlined fast path in the loader) is bit-identical to the core conversion on any bit pattern.
  std::vector<uint32_t> bits(n);
  for (auto& v : bits) v = static_cast<uint32_t>(rng());
  for (size_t i = 0; i < 64; ++i) bits[i] = 0x38800000u + static_cast<uint32_t>(i) - 32;  // the range edges
  for (size_t i = 64; i < 128; ++i) bits[i] = 0x477ff000u + static_cast<uint32_t>(i) - 96;
  std::vector<uint16_t> halves(n);
  convert_elements_parallel(bits.data(), DType::kF32, halves.data(), DType::kF16, n);
  for (size_t i = 0; i < n; ++i) {
    float f;
    std::memcpy(&f, &bits[i], 4);
    ASSERT_EQ(halves[i], f32_to_f16(f).bits) << std::hex << bits[i];
  }
  std::vector<uint16_t> back(n);
  convert_elements_parallel(src.data(), DType::kF16, back.data(), DType::kBF16, n);
  for (size_t i = 0; i < n; i += 97) {
    ASSERT_EQ(back[i], f32_to_bf16(f16_to_f32(f16_t{src[i]})).bits) << i;
  }
}

void write_index(const std::string& path, const std::string& weight_map_json) {
  write_bytes(path, R"({"metadata": {"total_size": 1}, "weight_map": )" + weight_map_json + "}");
}

TEST(WeightSource, ShardedCheckpointViaIndex) {
  TempDir dir;
  Tensor a = random_f32({4, 4}, 10), b = random_f32({8}, 11), c = random_f32({2, 3}, 12, DType::kBF16);
  ASSERT_TRUE(write_safetensors(dir.file("model-00001-of-00002.safetensors"), {{"a", a}, {"b", b}}).ok());
  ASSERT_TRUE(write_safetensors(dir.file("model-00002-of-00002.safetensors"), {{"c", c}}).ok());
  write_index(dir.file("model.safetensors.index.json"),
              R"({"a": "model-00001-of-00002.safetensors", "b": "model-00001-of-00002.safetensors",
                  "c": "model-00002-of-00002.safetensors"})");
  auto src = open_safetensors_checkpoint(dir.path());
  ASSERT_TRUE(src.ok()) << src.status().to_string();
  EXPECT_EQ((*src)->names(), (std::vector<std::string>{"a", "b", "c"}));
  StatusOr<Tensor> tc = (*src)->get("c", {2, 3}, DType::kBF16);
  ASSERT_TRUE(tc.ok());
  EXPECT_EQ(0, std::memcmp(tc->raw_data(), c.raw_data(), c.nbytes()));
  StatusOr<Tensor> ta = (*src)->get("a", {4, 4}, DType::kF32);
  ASSERT_TRUE(ta.ok());
  EXPECT_EQ(0, std::memcmp(ta->raw_data(), a.raw_data(), a.nbytes()));
  StatusOr<Tensor> bad = (*src)->get("c", {6}, DType::kBF16);
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(contains(bad.status(), "model-00002-of-00002.safetensors")) << bad.status().message();
  EXPECT_TRUE(contains(bad.status(), "'c'"));
}

TEST(WeightSource, ShardedCheckpointErrors) {
  Tensor a = random_f32({4}, 20);
  struct Case {
    const char* what;
    std::string weight_map;
    std::vector<const char*> fragments;
  };
  std::vector<Case> cases = {
      {"missing shard", R"({"a": "s1.safetensors", "z": "s9.safetensors"})", {"s9.safetensors", "'z'", "index.json"}},
      {"tensor not in shard", R"({"a": "s1.safetensors", "q": "s1.safetensors"})", {"'q'", "s1.safetensors"}},
      {"path traversal", R"({"a": "../s1.safetensors"})", {"'a'", "inside the model directory"}},
      {"absolute path", R"({"a": "/etc/passwd"})", {"'a'"}},
      {"non-string shard", R"({"a": 3})", {"'a'"}},
      {"weight_map not object", R"([1])", {"weight_map"}},
  };
  for (const Case& c : cases) {
    TempDir dir;
    ASSERT_TRUE(write_safetensors(dir.file("s1.safetensors"), {{"a", a}}).ok());
    write_index(dir.file("model.safetensors.index.json"), c.weight_map);
    auto src = open_safetensors_checkpoint(dir.path());
    ASSERT_FALSE(src.ok()) << c.what;
    for (const char* frag : c.fragments) {
      EXPECT_TRUE(contains(src.status(), frag)) << c.what << ": " << src.status().message();
    }
  }
  TempDir dir;
  write_bytes(dir.file("model.safetensors.index.json"), "{not json");
  auto src = open_safetensors_checkpoint(dir.path());
  ASSERT_FALSE(src.ok());
  EXPECT_TRUE(contains(src.status(), "model.safetensors.index.json"));
}

TEST(WeightSource, RealIndexWithoutShardsNamesTheMissingShard) {
  // The real Mistral-7B-Instruct-v0.3 index; its shards are not in the test data, so opening must fail cleanly.
  const std::string dir = testing::testdata_dir() + "/tokenizers/mistral-7b-instruct-v0.3";
  auto src = open_safetensors_checkpoint(dir);
  ASSERT_FALSE(src.ok());
  EXPECT_EQ(src.status().code(), StatusCode::kNotFound) << src.status().to_string();
  EXPECT_TRUE(contains(src.status(), "model-0000")) << src.status().message();
  EXPECT_TRUE(contains(src.status(), "model.safetensors.index.json"));
}

TEST(WeightSource, FileAndDirectoryForms) {
  TempDir dir;
  Tensor a = random_f32({3}, 30), b = random_f32({2}, 31);
  ASSERT_TRUE(write_safetensors(dir.file("consolidated.safetensors"), {{"a", a}}).ok());
  auto one = open_safetensors_checkpoint(dir.path());  // the sole *.safetensors file
  ASSERT_TRUE(one.ok()) << one.status().to_string();
  EXPECT_TRUE((*one)->contains("a"));
  auto by_path = open_safetensors_checkpoint(dir.file("consolidated.safetensors"));
  ASSERT_TRUE(by_path.ok());
  EXPECT_TRUE((*by_path)->get("a", {3}, DType::kF32).ok());

  ASSERT_TRUE(write_safetensors(dir.file("extra.safetensors"), {{"b", b}}).ok());
  auto two = open_safetensors_checkpoint(dir.path());
  ASSERT_TRUE(two.ok());
  EXPECT_EQ((*two)->names(), (std::vector<std::string>{"a", "b"}));

  ASSERT_TRUE(write_safetensors(dir.file("dup.safetensors"), {{"b", b}}).ok());
  auto dup = open_safetensors_checkpoint(dir.path());
  ASSERT_FALSE(dup.ok());
  EXPECT_TRUE(contains(dup.status(), "'b'"));

  TempDir empty;
  auto none = open_safetensors_checkpoint(empty.path());
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
  EXPECT_FALSE(open_safetensors_checkpoint(empty.path() + "/missing").ok());
}

TEST(WeightSource, DummyIsDeterministicAndShaped) {
  auto s1 = make_dummy_weight_source(42);
  auto s2 = make_dummy_weight_source(42);
  auto s3 = make_dummy_weight_source(43);
  EXPECT_TRUE(s1->contains("anything"));
  const Shape shape{300, 70};
  Tensor a = s1->get("model.layers.0.mlp.up_proj.weight", shape, DType::kF32).value();
  Tensor b = s2->get("model.layers.0.mlp.up_proj.weight", shape, DType::kF32).value();
  Tensor c = s3->get("model.layers.0.mlp.up_proj.weight", shape, DType::kF32).value();
  Tensor d = s1->get("model.layers.1.mlp.up_proj.weight", shape, DType::kF32).value();
  EXPECT_EQ(a.shape(), shape);
  EXPECT_EQ(0, std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()));
  EXPECT_NE(0, std::memcmp(a.raw_data(), c.raw_data(), a.nbytes()));
  EXPECT_NE(0, std::memcmp(a.raw_data(), d.raw_data(), a.nbytes()));
  double sum = 0, sum_sq = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    float v = a.data<float>()[i];
    ASSERT_TRUE(v >= -0.05f && v < 0.05f) << v;
    sum += v;
    sum_sq += static_cast<double>(v) * v;
  }
  const double mean = sum / a.numel(), var = sum_sq / a.numel() - mean * mean;
  EXPECT_NEAR(mean, 0.0, 0.002);
  EXPECT_NEAR(std::sqrt(var), 0.1 / std::sqrt(12.0), 0.002);  // uniform over a width of 0.1

  // Values depend only on (seed, name, element index): a larger request (several parallel chunks) starts with the
  // same values, and bf16 is the f32 values rounded.
  Tensor big = s1->get("model.layers.0.mlp.up_proj.weight", {1 << 20}, DType::kF32).value();
  EXPECT_EQ(0, std::memcmp(a.raw_data(), big.raw_data(), a.nbytes()));
  Tensor a16 = s1->get("model.layers.0.mlp.up_proj.weight", shape, DType::kBF16).value();
  for (int64_t i = 0; i < a.numel(); i += 13) {
    ASSERT_EQ(a16.data<bf16_t>()[i].bits, f32_to_bf16(a.data<float>()[i]).bits);
  }

  Tensor norm = s1->get("model.layers.0.input_layernorm.weight", {4096}, DType::kF32).value();
  double norm_mean = 0;
  for (int64_t i = 0; i < norm.numel(); ++i) {
    float v = norm.data<float>()[i];
    ASSERT_TRUE(v >= 0.95f && v <= 1.05f) << v;
    norm_mean += v / norm.numel();
  }
  EXPECT_NEAR(norm_mean, 1.0, 0.005);
  EXPECT_NE(norm.data<float>()[0], norm.data<float>()[1]);  // noisy, not constant
  // Only 1-D norm weights are special.
  Tensor norm2d = s1->get("x.norm.weight", {4, 4}, DType::kF32).value();
  EXPECT_LT(std::fabs(norm2d.data<float>()[0]), 0.05f);

  Tensor ints = s1->get("ids", {100}, DType::kI64).value();
  for (int64_t i = 0; i < 100; ++i) ASSERT_TRUE(ints.data<int64_t>()[i] >= 0 && ints.data<int64_t>()[i] < 16);
  EXPECT_FALSE(s1->get("bad", {-1, 3}, DType::kF32).ok());
}

}  // namespace
}  // namespace llmserve

namespace llmserve {
namespace {

// Tensor parallelism's sliced reads equal slices of the whole tensor: stored dtype (a dim-0 slice stays a view of the
// mapping), converted dtypes, dim 1 (the row-parallel split), an unaligned tensor, and the dummy source.
TEST(WeightSource, GetSliceEqualsSliceOfGet) {
  TempDir dir;
  Tensor bf = random_f32({12, 10}, 5, DType::kBF16);
  Tensor f32 = random_f32({6, 4, 3}, 6);
  Tensor odd = random_f32({3}, 7, DType::kBF16);  // shifts the next tensor off 4-byte alignment
  Tensor after = random_f32({8, 6}, 8);
  ASSERT_TRUE(
      write_safetensors(dir.file("model.safetensors"), {{"bf", bf}, {"f32", f32}, {"odd", odd}, {"z", after}}).ok());
  auto src_or = open_safetensors_checkpoint(dir.path());
  ASSERT_TRUE(src_or.ok());
  std::unique_ptr<WeightSource> dummy = make_dummy_weight_source(3);
  struct Case {
    WeightSource* src;
    std::string name;
    Shape shape;
    DType dtype;
  };
  for (const Case& c :
       {Case{src_or->get(), "bf", {12, 10}, DType::kBF16}, Case{src_or->get(), "bf", {12, 10}, DType::kF32},
        Case{src_or->get(), "f32", {6, 4, 3}, DType::kF32}, Case{src_or->get(), "f32", {6, 4, 3}, DType::kBF16},
        Case{src_or->get(), "z", {8, 6}, DType::kF32}, Case{src_or->get(), "z", {8, 6}, DType::kBF16},
        Case{dummy.get(), "w", {12, 10}, DType::kF32}, Case{dummy.get(), "w", {6, 4, 3}, DType::kBF16}}) {
    const Tensor whole = c.src->get(c.name, c.shape, c.dtype).value().to(DType::kF32);
    for (int dim = 0; dim < static_cast<int>(c.shape.size()); ++dim) {
      const int64_t n = c.shape[dim];
      for (auto [begin, end] : {std::pair<int64_t, int64_t>{0, n / 2}, {n / 2, n}, {1, n - 1}}) {
        StatusOr<Tensor> part = c.src->get_slice(c.name, c.shape, c.dtype, dim, begin, end);
        ASSERT_TRUE(part.ok()) << part.status().to_string();
        ASSERT_TRUE(part->is_contiguous());
        const Tensor want = whole.slice(dim, begin, end).contiguous();
        const Tensor got = part->to(DType::kF32);
        ASSERT_EQ(got.shape(), want.shape());
        EXPECT_EQ(0, std::memcmp(got.raw_data(), want.raw_data(), want.nbytes()))
            << c.name << " " << dtype_name(c.dtype) << " dim " << dim << " [" << begin << ", " << end << ")";
      }
    }
  }
  // A dim-0 slice in the stored dtype is a view of the mapped rows (no copy).
  const Tensor rows = src_or->get()->get_slice("bf", {12, 10}, DType::kBF16, 0, 6, 12).value();
  const Tensor all = src_or->get()->get("bf", {12, 10}, DType::kBF16).value();
  EXPECT_EQ(rows.raw_data(), static_cast<const char*>(all.raw_data()) + 6 * 10 * 2);
  // Bad slices and shapes are errors naming the tensor.
  EXPECT_TRUE(contains(src_or->get()->get_slice("bf", {12, 10}, DType::kF32, 0, 6, 13).status(), "'bf'"));
  EXPECT_TRUE(contains(src_or->get()->get_slice("bf", {12, 10}, DType::kF32, 2, 0, 1).status(), "outside its shape"));
  EXPECT_TRUE(contains(src_or->get()->get_slice("bf", {24, 5}, DType::kF32, 0, 0, 1).status(), "has shape"));
}

}  // namespace
}  // namespace llmserve
