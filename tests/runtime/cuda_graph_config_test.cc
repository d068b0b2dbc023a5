// CUDA-graph settings without a GPU: vLLM's capture-size list, the padding table, mode and JSON parsing.
// Invariant: these run in CI (no CUDA needed).
#include "runtime/cuda_graph_config.h"

#include <gtest/gtest.h>

namespace llmserve {
namespace {

TEST(CudaGraphConfig, DefaultSizesFollowVllm) {
  const std::vector<int64_t> s = default_capture_sizes(256, 8192);
  ASSERT_GE(s.size(), 5u);
  EXPECT_EQ((std::vector<int64_t>{s[0], s[1], s[2], s[3], s[4]}), (std::vector<int64_t>{1, 2, 4, 8, 16}));
  EXPECT_EQ(s.back(), 256);  // min(2 x 256, 512) = 512, capped by max_num_seqs
  EXPECT_EQ(s[s.size() - 2], 248);
  const std::vector<int64_t> big = default_capture_sizes(1024, 8192);
  EXPECT_EQ(big.back(), 512);
  EXPECT_EQ(big[big.size() - 2], 496);                   // multiples of 16 above 256
  EXPECT_EQ(default_capture_sizes(256, 20).back(), 16);  // capped by max_num_batched_tokens
  EXPECT_EQ(default_capture_sizes(3, 8192), (std::vector<int64_t>{1, 2}));
}

TEST(CudaGraphConfig, ExplicitSizesAreSortedDedupedAndCapped) {
  EXPECT_EQ(resolve_capture_sizes({8, 1, 8, 300, 4}, 256, 8192), (std::vector<int64_t>{1, 4, 8}));
}

TEST(CudaGraphConfig, PaddingTableRoundsUpToTheNextSize) {
  CudaGraphPadding p({1, 2, 4, 8, 16});
  EXPECT_EQ(p.padded_size(1), 1);
  EXPECT_EQ(p.padded_size(3), 4);
  EXPECT_EQ(p.padded_size(8), 8);
  EXPECT_EQ(p.padded_size(9), 16);
  EXPECT_EQ(p.padded_size(17), 0);  // eager
  EXPECT_EQ(p.padded_size(0), 0);
}

TEST(CudaGraphConfig, ModesParseAndBadValuesNameTheFlag) {
  EXPECT_EQ(*parse_cuda_graph_mode("FULL_DECODE_ONLY", "--x"), CudaGraphMode::kFullDecodeOnly);
  EXPECT_EQ(*parse_cuda_graph_mode("none", "--x"), CudaGraphMode::kNone);
  StatusOr<CudaGraphMode> bad = parse_cuda_graph_mode("fast", "--cuda-graph-mode");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--cuda-graph-mode"), std::string::npos);
  EXPECT_TRUE(captures_full_decode(CudaGraphMode::kFullAndPiecewise));
  EXPECT_FALSE(captures_full_decode(CudaGraphMode::kPiecewise));
  EXPECT_FALSE(parse_capture_sizes("1,x", "--cuda-graph-capture-sizes").ok());
  EXPECT_FALSE(parse_capture_sizes("1,0", "--cuda-graph-capture-sizes").ok());
  EXPECT_EQ(*parse_capture_sizes("1,2,4", "--f"), (std::vector<int64_t>{1, 2, 4}));
}

TEST(CudaGraphConfig, CompilationConfigRefusesUnknownKeys) {
  StatusOr<CompilationConfig> c =
      parse_compilation_config(R"({"cudagraph_mode": "full", "cudagraph_capture_sizes": [1, 2]})");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_TRUE(c->has_mode);
  EXPECT_EQ(c->mode, CudaGraphMode::kFull);
  EXPECT_EQ(c->capture_sizes, (std::vector<int64_t>{1, 2}));
  StatusOr<CompilationConfig> unknown = parse_compilation_config(R"({"level": 3})");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("'level'"), std::string::npos);
  EXPECT_FALSE(parse_compilation_config(R"({"cudagraph_mode": "bogus"})").ok());
  EXPECT_FALSE(parse_compilation_config("not json").ok());
}

}  // namespace
}  // namespace llmserve
