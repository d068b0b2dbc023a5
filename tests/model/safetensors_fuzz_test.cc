// Fuzz: thousands of random corruptions of a valid safetensors file (bit flips, header byte overwrites, digit
// edits, truncations, header-length edits, appended junk). Opening and reading every tensor must never crash
// (this binary runs under ASan/UBSan in CI); LLMSERVE_FUZZ_ITERATIONS / LLMSERVE_FUZZ_SEED widen local runs.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <random>

#include "model/safetensors.h"
#include "model/weight_source.h"
#include "model_test_util.h"

namespace llmserve {
namespace {

std::string make_valid_file(const std::string& path) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-3, 3);
  auto rnd = [&](Shape shape, DType dtype) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = dist(rng);
    return Tensor::from_f32(v, std::move(shape), dtype);
  };
  std::vector<std::pair<std::string, Tensor>> tensors = {
      {"model.embed_tokens.weight", rnd({6, 4}, DType::kBF16)},
      {"model.layers.0.self_attn.q_proj.weight", rnd({4, 4}, DType::kF32)},
      {"model.layers.0.input_layernorm.weight", rnd({4}, DType::kF16)},
      {"model.layers.0.mlp.scale", rnd({3}, DType::kFP8E4M3)},
      {"ids", Tensor::from_i64({1, 2, 3}, {3})},
      {"ids32", Tensor::from_i32({4, 5}, {2})},
      {"bytes", Tensor::from_f32({1, 2, 3, 4, 5}, {5}, DType::kU8)},
      {"empty", Tensor::empty({0}, DType::kF32)},
  };
  CHECK_OK(write_safetensors(path, tensors, {{"format", "pt"}}));
  return testing::read_bytes(path);
}

// Reads every byte of every tensor the file admits to, through both the raw view and the weight source.
uint64_t touch_everything(const std::string& path, int* num_tensors_read) {
  uint64_t checksum = 0;
  StatusOr<SafetensorsFile> file = SafetensorsFile::open(path);
  if (!file.ok()) return 0;
  for (const auto& [name, info] : file->infos()) {
    const uint8_t* p = file->bytes(info);
    for (uint64_t i = 0; i < info.end - info.begin; ++i) checksum += p[i];
    StatusOr<Tensor> v = file->view(name);
    if (v.ok()) {
      ++*num_tensors_read;
      const auto* q = static_cast<const uint8_t*>(v->raw_data());
      for (size_t i = 0; i < v->nbytes(); ++i) checksum += q[i];
    }
  }
  auto src = open_safetensors_checkpoint(path);
  if (!src.ok()) return checksum;
  for (const std::string& name : (*src)->names()) {
    const TensorInfo* info = file->info(name);
    if (info == nullptr) continue;
    DType want = info->supported && dtype_is_float(info->dtype) ? DType::kF32 : DType::kI64;
    StatusOr<Tensor> t = (*src)->get(name, info->shape, want);
    if (t.ok()) {
      const auto* q = static_cast<const uint8_t*>(t->raw_data());
      for (size_t i = 0; i < t->nbytes(); ++i) checksum += q[i];
    }
  }
  return checksum;
}

void mutate(std::string* bytes, uint64_t header_len, std::mt19937_64* rng) {
  auto pick = [&](uint64_t n) { return n == 0 ? 0 : (*rng)() % n; };
  const uint64_t header_end = std::min<uint64_t>(8 + header_len, bytes->size());
  static const char kInteresting[] = "{}[]\":,-0123456789e. ";
  switch (pick(8)) {
    case 0:  // bit flip in the header
      if (header_end > 8) (*bytes)[8 + pick(header_end - 8)] ^= static_cast<char>(1 << pick(8));
      break;
    case 1:  // overwrite a header byte with a JSON-significant or random byte
      if (header_end > 8) {
        (*bytes)[8 + pick(header_end - 8)] =
            pick(2) ? kInteresting[pick(sizeof(kInteresting) - 1)] : static_cast<char>(pick(256));
      }
      break;
    case 2: {  // change one digit: shapes and offsets stay syntactically valid but disagree
      std::vector<size_t> digits;
      for (size_t i = 8; i < header_end; ++i) {
        if ((*bytes)[i] >= '0' && (*bytes)[i] <= '9') digits.push_back(i);
      }
      if (!digits.empty()) (*bytes)[digits[pick(digits.size())]] = static_cast<char>('0' + pick(10));
      break;
    }
    case 3:  // truncate
      bytes->resize(pick(bytes->size() + 1));
      break;
    case 4: {  // header-length edit
      if (bytes->size() < 8) break;
      uint64_t n;
      std::memcpy(&n, bytes->data(), 8);
      const uint64_t choices[] = {
          n + 1, n - 1, n + 8, n - 8, 0, ~uint64_t{0}, (*rng)(), pick(bytes->size() + 16), uint64_t{1} << 63};
      n = choices[pick(std::size(choices))];
      std::memcpy(bytes->data(), &n, 8);
      break;
    }
    case 5: {  // append junk
      size_t n = 1 + pick(64);
      for (size_t i = 0; i < n; ++i) bytes->push_back(static_cast<char>(pick(256)));
      break;
    }
    case 6:  // bit flip anywhere
      if (!bytes->empty()) (*bytes)[pick(bytes->size())] ^= static_cast<char>(1 << pick(8));
      break;
    case 7: {  // splice: duplicate a header slice over another spot
      if (header_end <= 16) break;
      size_t from = 8 + pick(header_end - 8), to = 8 + pick(header_end - 8), len = 1 + pick(24);
      std::string piece = bytes->substr(from, len);
      for (size_t i = 0; i < piece.size() && to + i < header_end; ++i) (*bytes)[to + i] = piece[i];
      break;
    }
  }
}

TEST(SafetensorsFuzz, RandomCorruptionsNeverCrash) {
  testing::TempDir dir(testing::ram_temp_base());
  const std::string valid = make_valid_file(dir.file("valid.safetensors"));
  uint64_t header_len;
  std::memcpy(&header_len, valid.data(), 8);
  int iterations = 4000;
  if (const char* env = std::getenv("LLMSERVE_FUZZ_ITERATIONS")) iterations = std::atoi(env);
  uint64_t seed = 12345;
  if (const char* env = std::getenv("LLMSERVE_FUZZ_SEED")) seed = std::strtoull(env, nullptr, 10);
  std::mt19937_64 rng(seed);
  int opened = 0, rejected = 0, tensors_read = 0;
  uint64_t checksum = 0;
  for (int it = 0; it < iterations; ++it) {
    // A fresh name each time: truncating and rewriting one file makes ext4 flush it to disk on every close.
    const std::string path = dir.file("fuzz" + std::to_string(it) + ".safetensors");
    std::string bytes = valid;
    const int num_mutations = 1 + static_cast<int>(rng() % 3);
    for (int m = 0; m < num_mutations; ++m) mutate(&bytes, header_len, &rng);
    testing::write_bytes(path, bytes);
    StatusOr<SafetensorsFile> f = SafetensorsFile::open(path);
    if (f.ok()) {
      ++opened;
    } else {
      ++rejected;
      // Every rejection names the file.
      ASSERT_NE(f.status().message().find(path), std::string::npos) << f.status().message();
    }
    checksum += touch_everything(path, &tensors_read);
    std::remove(path.c_str());
  }
  // The corpus must exercise both outcomes, or the fuzzer is not testing anything.
  EXPECT_GT(opened, iterations / 20);
  EXPECT_GT(rejected, iterations / 4);
  EXPECT_GT(tensors_read, iterations / 10);
  std::printf("fuzz: %d iterations, %d opened, %d rejected, %d tensor views, checksum %llu\n", iterations, opened,
              rejected, tensors_read, static_cast<unsigned long long>(checksum));
}

}  // namespace
}  // namespace llmserve
