// safetensors reader and writer: round trips of every dtype, zero-copy views, a hand-built file as an independent
// oracle of the format, and every malformed-header case giving a Status that names the file and the tensor.
#include "model/safetensors.h"

#include <gtest/gtest.h>

#include <random>

#include "model/weight_source.h"
#include "model_test_util.h"

namespace llmserve {
namespace {

using testing::raw_safetensors;
using testing::TempDir;
using testing::write_bytes;

Tensor random_tensor(Shape shape, DType dtype, std::mt19937* rng) {
  Tensor t = Tensor::empty(std::move(shape), dtype);
  auto* p = static_cast<uint8_t*>(t.raw_data());
  for (size_t i = 0; i < t.nbytes(); ++i) p[i] = static_cast<uint8_t>((*rng)() & 0xff);
  return t;
}

TEST(Safetensors, RoundTripsEveryDTypeZeroCopy) {
  TempDir dir;
  std::mt19937 rng(7);
  // Deliberately mixed sizes in an order that would misalign a naive layout.
  std::vector<std::pair<std::string, Tensor>> tensors = {
      {"u8", random_tensor({3}, DType::kU8, &rng)},       {"f32", random_tensor({2, 3}, DType::kF32, &rng)},
      {"fp8", random_tensor({5}, DType::kFP8E4M3, &rng)}, {"bf16", random_tensor({3, 1, 2}, DType::kBF16, &rng)},
      {"f16", random_tensor({7}, DType::kF16, &rng)},     {"i64", random_tensor({3}, DType::kI64, &rng)},
      {"i32", random_tensor({1, 5}, DType::kI32, &rng)},  {"empty", Tensor::empty({0, 4}, DType::kF32)},
      {"scalar", random_tensor({}, DType::kF32, &rng)},
  };
  const std::string path = dir.file("t.safetensors");
  ASSERT_TRUE(write_safetensors(path, tensors, {{"format", "pt"}, {"note", "x"}}).ok());

  const std::string raw = testing::read_bytes(path);
  uint64_t header_len;
  std::memcpy(&header_len, raw.data(), 8);
  EXPECT_EQ((8 + header_len) % 8, 0u) << "header must be padded to 8 bytes";
  EXPECT_EQ(raw[8], '{');

  StatusOr<SafetensorsFile> file = SafetensorsFile::open(path);
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  EXPECT_EQ(file->metadata().at("format"), "pt");
  EXPECT_EQ(file->metadata().at("note"), "x");
  EXPECT_EQ(file->names().size(), tensors.size());
  Tensor keep;
  for (const auto& [name, t] : tensors) {
    const TensorInfo* info = file->info(name);
    ASSERT_NE(info, nullptr) << name;
    EXPECT_TRUE(info->supported);
    EXPECT_EQ(info->dtype, t.dtype()) << name;
    EXPECT_EQ(info->shape, t.shape()) << name;
    StatusOr<Tensor> v = file->view(name);
    ASSERT_TRUE(v.ok()) << v.status().to_string();
    EXPECT_EQ(v->shape(), t.shape());
    EXPECT_EQ(0, std::memcmp(v->raw_data(), t.raw_data(), t.nbytes())) << name;
    const auto* p = static_cast<const uint8_t*>(v->raw_data());
    EXPECT_TRUE(p >= file->data() && p + v->nbytes() <= file->data() + file->data_size()) << "not zero-copy: " << name;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % dtype_size(t.dtype()), 0u) << name;
    if (name == "f32") keep = *v;
  }
  // The view keeps the mapping alive after the file object is gone.
  file = invalid_argument("dropped");
  EXPECT_EQ(0, std::memcmp(keep.raw_data(), tensors[1].second.raw_data(), keep.nbytes()));
}

TEST(Safetensors, ReadsHandBuiltFile) {
  TempDir dir;
  float a[2] = {1.5f, -2.0f};
  uint16_t b[3] = {0x3f80, 0xc000, 0x4049};  // bf16 1, -2, 3.140625
  std::string data(reinterpret_cast<char*>(a), 8);
  data += std::string(reinterpret_cast<char*>(b), 6);
  // Header not padded and keys in arbitrary order: both are legal.
  const std::string header = R"({"b":{"shape":[3],"dtype":"BF16","data_offsets":[8,14]},"__metadata__":{"k":"v"},)"
                             R"("a":{"dtype":"F32","shape":[2,1],"data_offsets":[0,8]}})";
  const std::string path = dir.file("h.safetensors");
  write_bytes(path, raw_safetensors(header, data));
  StatusOr<SafetensorsFile> f = SafetensorsFile::open(path);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ(f->names(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(f->info("a")->shape, (Shape{2, 1}));
  // The header is not padded, so the data buffer may be misaligned; get() copies in that case.
  auto src = open_safetensors_checkpoint(path);
  ASSERT_TRUE(src.ok()) << src.status().to_string();
  StatusOr<Tensor> ta = (*src)->get("a", {2, 1}, DType::kF32);
  ASSERT_TRUE(ta.ok()) << ta.status().to_string();
  EXPECT_EQ(ta->data<float>()[0], 1.5f);
  EXPECT_EQ(ta->data<float>()[1], -2.0f);
  StatusOr<Tensor> tb = (*src)->get("b", {3}, DType::kF32);
  ASSERT_TRUE(tb.ok()) << tb.status().to_string();
  EXPECT_EQ(tb->data<float>()[0], 1.0f);
  EXPECT_EQ(tb->data<float>()[1], -2.0f);
  EXPECT_EQ(tb->data<float>()[2], 3.140625f);
}

TEST(Safetensors, MisalignedTensorIsCopiedNotViewed) {
  TempDir dir;
  float v = 2.5f;
  std::string data = std::string(1, '\x07') + std::string(reinterpret_cast<char*>(&v), 4);
  std::string header = R"({"b":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                       R"("w":{"dtype":"F32","shape":[1],"data_offsets":[1,5]}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  const std::string path = dir.file("m.safetensors");
  write_bytes(path, raw_safetensors(header, data));
  StatusOr<SafetensorsFile> f = SafetensorsFile::open(path);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  StatusOr<Tensor> view = f->view("w");
  EXPECT_FALSE(view.ok());
  EXPECT_NE(view.status().message().find("aligned"), std::string::npos);
  auto src = open_safetensors_checkpoint(path);
  ASSERT_TRUE(src.ok());
  for (DType d : {DType::kF32, DType::kBF16}) {
    StatusOr<Tensor> t = (*src)->get("w", {1}, d);
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    EXPECT_EQ(t->to(DType::kF32).data<float>()[0], 2.5f);
  }
}

TEST(Safetensors, RecognisedButUnsupportedDTypes) {
  TempDir dir;
  const std::string header =
      R"({"m":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]},"c":{"dtype":"F8_E5M2","shape":[2],"data_offsets":[2,4]},)"
      R"("s":{"dtype":"I16","shape":[2],"data_offsets":[8,12]},"d":{"dtype":"F64","shape":[1],"data_offsets":[16,24]},)"
      R"("p":{"dtype":"F4","shape":[4],"data_offsets":[24,26]}})";
  const std::string path = dir.file("u.safetensors");
  write_bytes(path, raw_safetensors(header, std::string(26, '\0')));
  StatusOr<SafetensorsFile> f = SafetensorsFile::open(path);
  ASSERT_TRUE(f.ok()) << f.status().to_string();  // recognised: structure checked, open succeeds
  for (const char* name : {"m", "c", "s", "d", "p"}) {
    StatusOr<Tensor> v = f->view(name);
    ASSERT_FALSE(v.ok()) << name;
    EXPECT_EQ(v.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(v.status().message().find(path), std::string::npos);
    EXPECT_NE(v.status().message().find(std::string("'") + name + "'"), std::string::npos) << v.status().message();
    EXPECT_NE(v.status().message().find("not supported"), std::string::npos);
  }
  auto src = open_safetensors_checkpoint(path);
  ASSERT_TRUE(src.ok());
  StatusOr<Tensor> t = (*src)->get("d", {1}, DType::kF32);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("F64"), std::string::npos) << t.status().message();
}

struct BadCase {
  const char* what;
  std::string bytes;     // whole file
  const char* tensor;    // name expected in the message, or nullptr
  const char* fragment;  // another expected fragment
};

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  std::memcpy(s.data(), &v, 8);
  return s;
}

std::vector<BadCase> bad_cases() {
  auto entry = [](const std::string& name, const std::string& body) { return "{\"" + name + "\":" + body + "}"; };
  auto file = [](const std::string& header, size_t data) { return raw_safetensors(header, std::string(data, 'x')); };
  return {
      {"short file", "abc", nullptr, "shorter than"},
      {"empty file", "", nullptr, "shorter than"},
      {"header past EOF", le64(100) + "{}", nullptr, "past the end"},
      {"absurd header length", le64(uint64_t{1} << 40) + "{}", nullptr, "exceeds the limit"},
      {"max header length", le64(~uint64_t{0}) + "{}", nullptr, "exceeds the limit"},
      {"invalid json", file("{\"a\": [1,", 0), nullptr, "not valid JSON"},
      {"trailing junk", file("{} x", 0), nullptr, "not valid JSON"},
      {"not an object", file("[1, 2]", 0), nullptr, "JSON object"},
      {"empty header", file("", 0), nullptr, "JSON object"},
      {"entry not object", file(entry("w", "3"), 0), "w", "not an object"},
      {"unknown dtype", file(entry("w", R"({"dtype":"F33","shape":[1],"data_offsets":[0,4]})"), 4), "w", "F33"},
      {"dtype not string", file(entry("w", R"({"dtype":4,"shape":[1],"data_offsets":[0,4]})"), 4), "w", "dtype"},
      {"missing key", file(entry("w", R"({"dtype":"F32","shape":[1]})"), 4), "w", "data_offsets"},
      {"shape not list", file(entry("w", R"({"dtype":"F32","shape":4,"data_offsets":[0,4]})"), 4), "w", "shape"},
      {"negative dim", file(entry("w", R"({"dtype":"F32","shape":[-1],"data_offsets":[0,4]})"), 4), "w",
       "non-negative"},
      {"float dim", file(entry("w", R"({"dtype":"F32","shape":[1.5],"data_offsets":[0,4]})"), 4), "w", "non-negative"},
      {"string dim", file(entry("w", R"({"dtype":"F32","shape":["1"],"data_offsets":[0,4]})"), 4), "w", "shape"},
      {"bool dim", file(entry("w", R"({"dtype":"F32","shape":[true],"data_offsets":[0,4]})"), 4), "w", "shape"},
      {"huge dims", file(entry("w", R"({"dtype":"F32","shape":[4611686018427387904,8],"data_offsets":[0,4]})"), 4), "w",
       "overflow"},
      {"offsets one elem", file(entry("w", R"({"dtype":"F32","shape":[1],"data_offsets":[0]})"), 4), "w",
       "data_offsets"},
      {"offsets negative", file(entry("w", R"({"dtype":"F32","shape":[1],"data_offsets":[-4,0]})"), 4), "w",
       "data_offsets"},
      {"begin > end", file(entry("w", R"({"dtype":"F32","shape":[1],"data_offsets":[8,4]})"), 8), "w", "begin > end"},
      {"past buffer", file(entry("w", R"({"dtype":"F32","shape":[4],"data_offsets":[0,16]})"), 12), "w", "run past"},
      {"size mismatch", file(entry("w", R"({"dtype":"F32","shape":[3],"data_offsets":[0,8]})"), 8), "w",
       "does not match"},
      {"sub-byte remainder", file(entry("w", R"({"dtype":"F4","shape":[3],"data_offsets":[0,2]})"), 2), "w",
       "whole number of bytes"},
      {"overlap",
       file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],)"
            R"("data_offsets":[4,12]}})",
            12),
       "b", "overlaps"},
      {"duplicate name",
       file(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"w":{"dtype":"U8","shape":[1],)"
            R"("data_offsets":[1,2]}})",
            2),
       "w", "twice"},
      {"metadata value", file(R"({"__metadata__":{"k":1}})", 0), nullptr, "__metadata__"},
      {"metadata not object", file(R"({"__metadata__":[1]})", 0), nullptr, "__metadata__"},
      {"deep nesting", file("{\"w\":" + std::string(40, '[') + std::string(40, ']') + "}", 0), nullptr, "nested"},
  };
}

TEST(Safetensors, MalformedFilesGiveStatusNamingFileAndTensor) {
  TempDir dir;
  int i = 0;
  for (const BadCase& c : bad_cases()) {
    const std::string path = dir.file("bad" + std::to_string(i++) + ".safetensors");
    write_bytes(path, c.bytes);
    StatusOr<SafetensorsFile> f = SafetensorsFile::open(path);
    ASSERT_FALSE(f.ok()) << c.what;
    const std::string& msg = f.status().message();
    EXPECT_EQ(f.status().code(), StatusCode::kInvalidArgument) << c.what;
    EXPECT_NE(msg.find(path), std::string::npos) << c.what << ": " << msg;
    if (c.tensor != nullptr) {
      EXPECT_NE(msg.find(std::string("'") + c.tensor + "'"), std::string::npos) << c.what << ": " << msg;
    }
    EXPECT_NE(msg.find(c.fragment), std::string::npos) << c.what << ": " << msg;
    // The checkpoint opener reports the same error.
    auto src = open_safetensors_checkpoint(path);
    EXPECT_FALSE(src.ok()) << c.what;
  }
}

TEST(Safetensors, MissingFileIsNotFound) {
  StatusOr<SafetensorsFile> f = SafetensorsFile::open("/nonexistent/x.safetensors");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), StatusCode::kNotFound);
  EXPECT_NE(f.status().message().find("/nonexistent/x.safetensors"), std::string::npos);
  TempDir dir;
  StatusOr<SafetensorsFile> d = SafetensorsFile::open(dir.path());
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("not a regular file"), std::string::npos);
}

TEST(Safetensors, WriterRejectsBadInput) {
  TempDir dir;
  Tensor t = Tensor::zeros({2}, DType::kF32);
  EXPECT_FALSE(write_safetensors(dir.file("a.safetensors"), {{"x", t}, {"x", t}}).ok());
  EXPECT_FALSE(write_safetensors(dir.file("b.safetensors"), {{"__metadata__", t}}).ok());
  EXPECT_FALSE(write_safetensors(dir.path() + "/no/such/dir/c.safetensors", {{"x", t}}).ok());
  // Non-contiguous input is written in logical order.
  Tensor m = Tensor::from_f32({0, 1, 2, 3, 4, 5}, {2, 3});
  ASSERT_TRUE(write_safetensors(dir.file("d.safetensors"), {{"mt", m.transpose(0, 1)}}).ok());
  StatusOr<SafetensorsFile> f = SafetensorsFile::open(dir.file("d.safetensors"));
  ASSERT_TRUE(f.ok());
  StatusOr<Tensor> v = f->view("mt");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->shape(), (Shape{3, 2}));
  const float expect[6] = {0, 3, 1, 4, 2, 5};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(v->data<float>()[i], expect[i]);
}

}  // namespace
}  // namespace llmserve
