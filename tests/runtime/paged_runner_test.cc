// PagedRunner: batching, block placement and chunking never change results; running out of blocks is a
// value, not a crash, and leaves no block behind.
#include "runtime/paged_runner.h"

#include <gtest/gtest.h>

#include "test_models.h"

namespace llmserve {
namespace {

const char* kModel = "llama_gqa_f32";

std::vector<std::vector<int32_t>> test_prompts() {
  return {{5, 17, 99, 3}, {42}, {7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25}};
}

TEST(PagedRunner, BatchedEqualsOneByOne) {
  auto model = testing::load_model_or_die(testing::fixtures_dir() + "/" + kModel);
  PagedRunner runner(*model, PagedRunnerOptions{});
  auto batched = greedy_generate(runner, test_prompts(), 12, {});
  ASSERT_TRUE(batched.ok());
  for (size_t i = 0; i < test_prompts().size(); ++i) {
    auto single = greedy_generate(runner, {test_prompts()[i]}, 12, {});
    ASSERT_TRUE(single.ok());
    EXPECT_EQ((*single)[0], (*batched)[i]) << "prompt " << i;
  }
  EXPECT_EQ(runner.num_free_blocks(), runner.num_blocks());
}

TEST(PagedRunner, ScatteredBlocksAndSmallBlocksGiveSameTokens) {
  auto model = testing::load_model_or_die(testing::fixtures_dir() + "/" + kModel);
  PagedRunner plain(*model, PagedRunnerOptions{});
  auto want = greedy_generate(plain, test_prompts(), 10, {});
  ASSERT_TRUE(want.ok());

  PagedRunnerOptions small;
  small.block_size = 4;
  small.num_blocks = 64;
  PagedRunner runner(*model, small);
  // Occupy and free blocks in an interleaved pattern so the next sequences get non-contiguous blocks.
  std::vector<RunnerSequence> fillers(6);
  for (auto& f : fillers) {
    f.token_ids = {1, 2, 3, 4, 5};
    ASSERT_TRUE(runner.step({&f}).ok());
  }
  for (size_t i = 0; i < fillers.size(); i += 2) runner.release(fillers[i]);
  auto got = greedy_generate(runner, test_prompts(), 10, {});
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, *want);
  for (size_t i = 1; i < fillers.size(); i += 2) runner.release(fillers[i]);
  EXPECT_EQ(runner.num_free_blocks(), runner.num_blocks());
}

TEST(PagedRunner, OutOfBlocksIsResourceExhaustedAndLeaksNothing) {
  auto model = testing::load_model_or_die(testing::fixtures_dir() + "/" + kModel);
  PagedRunnerOptions tiny;
  tiny.block_size = 4;
  tiny.num_blocks = 5;  // 20 tokens
  PagedRunner runner(*model, tiny);
  RunnerSequence a, b;
  a.token_ids = std::vector<int32_t>(12, 7);  // 3 blocks
  b.token_ids = std::vector<int32_t>(12, 9);  // 3 more: does not fit
  StatusOr<Tensor> r = runner.step({&a, &b});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(runner.num_free_blocks(), 5);
  EXPECT_EQ(a.num_computed_tokens, 0);
  ASSERT_TRUE(runner.step({&a}).ok());
  EXPECT_EQ(runner.num_free_blocks(), 2);
  auto out = greedy_generate(runner, {std::vector<int32_t>(30, 1)}, 4, {});
  EXPECT_EQ(out.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(runner.num_free_blocks(), 2);
  runner.release(a);
  EXPECT_EQ(runner.num_free_blocks(), 5);
}

TEST(PagedRunner, StopIdsEndGenerationEarly) {
  auto model = testing::load_model_or_die(testing::fixtures_dir() + "/" + kModel);
  PagedRunner runner(*model, PagedRunnerOptions{});
  auto full = greedy_generate(runner, {test_prompts()[0]}, 8, {});
  ASSERT_TRUE(full.ok());
  const int32_t stop = (*full)[0][3];
  auto stopped = greedy_generate(runner, {test_prompts()[0]}, 8, {stop});
  ASSERT_TRUE(stopped.ok());
  auto first = std::find((*full)[0].begin(), (*full)[0].end(), stop);
  EXPECT_EQ((*stopped)[0], std::vector<int32_t>((*full)[0].begin(), first + 1));
}

}  // namespace
}  // namespace llmserve
