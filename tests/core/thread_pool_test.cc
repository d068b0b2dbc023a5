// ThreadPool: every index visited exactly once, nested calls, many small calls in a row.
#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>

namespace llmserve {
namespace {

TEST(ThreadPool, CoversRangeExactlyOnce) {
  ThreadPool pool(4);
  std::vector<std::atomic<int>> hits(10007);
  pool.parallel_for(10007, 3, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) hits[i]++;
  });
  for (auto& h : hits) EXPECT_EQ(h.load(), 1);
}

TEST(ThreadPool, NestedAndRepeatedCalls) {
  ThreadPool pool(3);
  std::atomic<int64_t> sum{0};
  for (int rep = 0; rep < 200; ++rep) {
    pool.parallel_for(8, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        pool.parallel_for(4, 1, [&](int64_t b2, int64_t e2) { sum += (e2 - b2); });
      }
    });
  }
  EXPECT_EQ(sum.load(), 200 * 8 * 4);
}

}  // namespace
}  // namespace llmserve
