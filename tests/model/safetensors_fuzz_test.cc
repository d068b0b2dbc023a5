// Fuzz: thousands of random corruptions of a valid safetensors file (bit flips, header byte overwrites, digit
// edits, truncations, header-length edits, appended junk). Opening and reading every tensor must never crash;
// likewise corrupted config.json texts through parse_model_config and the RoPE tables
// (this binary runs under ASan/UBSan in CI); LLMSERVE_FUZZ_ITERATIONS / LLMSERVE_FUZZ_SEED widen local runs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <random>

#include "model/model_config.h"
#include "model/rope.h"
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

// Mutated config.json texts: parsing, validation and the RoPE tables must fail cleanly or succeed, never crash.
TEST(ConfigFuzz, RandomCorruptionsNeverCrash) {
  const std::string tinyllama =
      testing::read_bytes(testing::testdata_dir() + "/tokenizers/tinyllama-1.1b-chat-v1.0/config.json");
  ASSERT_FALSE(tinyllama.empty());
  const std::vector<std::string> bases = {
      tinyllama,
      R"({"architectures": ["Qwen2ForCausalLM"], "hidden_size": 64, "intermediate_size": 128, "vocab_size": 300,
          "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 4096,
          "use_sliding_window": true, "sliding_window": 512, "max_window_layers": 1, "eos_token_id": [1, 2],
          "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 1024,
                           "beta_fast": 32, "beta_slow": 1, "mscale": 0.707, "mscale_all_dim": 0.707,
                           "truncate": false}})",
      R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 128, "vocab_size": 300,
          "num_hidden_layers": 2, "num_attention_heads": 4, "head_dim": 32, "max_position_embeddings": 2048,
          "rope_parameters": {"rope_theta": 500000.0, "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                              "high_freq_factor": 4.0, "original_max_position_embeddings": 256},
          "temperature": 0.7, "top_p": 0.9, "top_k": 40, "do_sample": true})",
  };
  uint64_t seed = 777;
  if (const char* env = std::getenv("LLMSERVE_FUZZ_SEED")) seed = std::strtoull(env, nullptr, 10);
  std::mt19937_64 rng(seed);
  auto pick = [&](uint64_t n) { return n == 0 ? 0 : rng() % n; };
  static const char* kTokens[] = {"0",
                                  "-1",
                                  "1e308",
                                  "null",
                                  "true",
                                  "\"x\"",
                                  "[]",
                                  "{}",
                                  "4096",
                                  "0.5",
                                  "-0.0",
                                  "18446744073709551615",
                                  "9223372036854775807",
                                  "1e-320",
                                  ",",
                                  ":",
                                  "\"yarn\""};
  int parsed = 0, accepted = 0;
  int iterations = 3000;
  if (const char* env = std::getenv("LLMSERVE_FUZZ_ITERATIONS")) iterations = std::atoi(env);
  for (int it = 0; it < iterations; ++it) {
    std::string text = bases[pick(bases.size())];
    for (int m = 1 + static_cast<int>(pick(3)); m > 0; --m) {
      size_t at = pick(text.size());
      switch (pick(4)) {
        case 0:
          text[at] = static_cast<char>('0' + pick(10));
          break;
        case 1:
          text.erase(at, 1 + pick(8));
          break;
        case 2:
          text.insert(at, kTokens[pick(std::size(kTokens))]);
          break;
        case 3: {  // replace a number with a token
          size_t b = text.find_first_of("0123456789", at);
          if (b == std::string::npos) break;
          size_t e = text.find_first_not_of("0123456789.e-", b);
          text.replace(b, (e == std::string::npos ? text.size() : e) - b, kTokens[pick(std::size(kTokens))]);
          break;
        }
      }
    }
    nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) continue;
    ++parsed;
    (void)parse_generation_config(j);
    StatusOr<ModelConfig> cfg = parse_model_config(j);
    if (!cfg.ok()) continue;
    ++accepted;
    StatusOr<Tensor> cache = build_rope_cos_sin_cache(*cfg, std::min<int64_t>(cfg->max_position_embeddings, 64));
    if (cache.ok()) {
      for (int64_t i = 0; i < cache->numel(); ++i) ASSERT_FALSE(std::isnan(cache->data<float>()[i])) << text;
    }
    for (int64_t layer = -1; layer <= cfg->num_hidden_layers && layer < 100; ++layer) {
      (void)cfg->sliding_window_for_layer(layer);
    }
  }
  EXPECT_GT(parsed, iterations / 4);
  EXPECT_GT(accepted, iterations / 20);
  EXPECT_LT(accepted, parsed);
  std::printf("config fuzz: %d iterations, %d valid JSON, %d accepted configs\n", iterations, parsed, accepted);
}

}  // namespace
}  // namespace llmserve
