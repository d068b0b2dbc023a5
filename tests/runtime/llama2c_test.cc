// A real trained model: llama2.c's stories260K, converted to a HF directory by import_llama2c, must generate
// llama2.c's own greedy ids from BOS. Also the converter's errors on bad input.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "model/llama2c_import.h"
#include "test_models.h"

namespace llmserve {
namespace {

namespace fs = std::filesystem;

class Llama2cTest : public ::testing::Test {
 protected:
  void SetUp() override {
    src_ = testing::testdata_dir() + "/models/stories260K";
    out_ = fs::temp_directory_path() / ("llmserve_llama2c_" + std::to_string(::getpid()));
    fs::create_directories(out_);
  }
  void TearDown() override { fs::remove_all(out_); }

  Llama2cImportOptions options(const std::string& checkpoint) {
    return {checkpoint, src_ + "/tok512.bin", (out_ / "model").string()};
  }

  std::string src_;
  fs::path out_;
};

TEST_F(Llama2cTest, Stories260KGreedyIdsMatchLlama2c) {
  ASSERT_TRUE(import_llama2c(options(src_ + "/stories260K.bin")).ok());
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"}) {
    EXPECT_TRUE(fs::exists(out_ / "model" / f)) << f;
  }
  std::ifstream in(src_ + "/expected_greedy_ids_first60.json");
  nlohmann::json expected = nlohmann::json::parse(in);
  auto want = expected["ids"].get<std::vector<int32_t>>();

  std::unique_ptr<CausalLM> model = testing::load_model_or_die((out_ / "model").string());
  // Through the engine loop (scheduler, ModelRunner, greedy sampler) and through the plain reference.
  const std::vector<int32_t> start = {expected["start_token"].get<int32_t>()};
  const int64_t num = static_cast<int64_t>(want.size());
  testing::CoreRun run = testing::run_engine_core(*model, {testing::greedy_request("s", start, num)});
  EXPECT_EQ(run.results.at("s").token_ids, want);
  EXPECT_EQ(testing::reference_greedy(*model, start, num), want);
}

TEST_F(Llama2cTest, TruncatedCheckpointIsAClearError) {
  std::ifstream in(src_ + "/stories260K.bin", std::ios::binary);
  std::string data(std::istreambuf_iterator<char>(in), {});
  const std::string truncated = (out_ / "truncated.bin").string();
  std::ofstream(truncated, std::ios::binary).write(data.data(), static_cast<std::streamsize>(data.size() / 2));
  Status s = import_llama2c(options(truncated));
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("truncated.bin"), std::string::npos) << s.message();

  const std::string junk = (out_ / "junk.bin").string();
  std::ofstream(junk, std::ios::binary) << "not a checkpoint at all, just text that is long enough";
  EXPECT_EQ(import_llama2c(options(junk)).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(import_llama2c(options((out_ / "missing.bin").string())).code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace llmserve
