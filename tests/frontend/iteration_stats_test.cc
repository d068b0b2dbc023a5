// IterationStatsTracker against hand-computed vLLM definitions on a scripted timeline: TTFT from the frontend
// arrival, ITL between step timestamps, queue / prefill / decode from the core's events (first scheduling
// only, preemption does not reset it), one finished entry per sequence, unknown ids ignored.
#include "frontend/iteration_stats.h"

#include <gtest/gtest.h>

namespace llmserve {
namespace {

EngineCoreOutput out(const std::string &id, std::vector<int32_t> ids, std::vector<EngineCoreEvent> events = {}) {
  EngineCoreOutput o;
  o.request_id = id;
  o.new_token_ids = std::move(ids);
  o.events = std::move(events);
  return o;
}

TEST(IterationStatsTest, ScriptedTimeline) {
  IterationStatsTracker t;
  t.add_sequence("a", 10.0, 7);
  t.add_sequence("b", 10.25, 3);

  EngineCoreOutputs s1;
  s1.timestamp = 12.0;
  s1.outputs.push_back(out("a", {5}, {{EngineCoreEventType::kQueued, 10.5}, {EngineCoreEventType::kScheduled, 11.0}}));
  s1.outputs.push_back(out("ghost", {1, 2}));  // not tracked: ignored
  IterationStats st1;
  t.record_step(s1, 12.25, &st1);
  EXPECT_EQ(st1.num_generation_tokens, 1);
  EXPECT_EQ(st1.num_prompt_tokens, 7);
  ASSERT_EQ(st1.time_to_first_tokens.size(), 1u);
  EXPECT_DOUBLE_EQ(st1.time_to_first_tokens[0], 2.25);
  EXPECT_TRUE(st1.inter_token_latencies.empty());

  EngineCoreOutputs s2;
  s2.timestamp = 13.0;
  s2.outputs.push_back(
      out("a", {6, 7}, {{EngineCoreEventType::kPreempted, 12.5}, {EngineCoreEventType::kScheduled, 12.75}}));
  s2.outputs.push_back(out("b", {9}, {{EngineCoreEventType::kQueued, 10.5}, {EngineCoreEventType::kScheduled, 12.5}}));
  IterationStats st2;
  t.record_step(s2, 13.5, &st2);
  EXPECT_EQ(st2.num_generation_tokens, 3);
  EXPECT_EQ(st2.num_prompt_tokens, 3);
  ASSERT_EQ(st2.inter_token_latencies.size(), 1u);
  EXPECT_DOUBLE_EQ(st2.inter_token_latencies[0], 1.0);
  ASSERT_EQ(st2.time_to_first_tokens.size(), 1u);
  EXPECT_DOUBLE_EQ(st2.time_to_first_tokens[0], 3.25);

  t.finish_sequence("a", FinishReason::kLength, 14.0, &st2);
  t.finish_sequence("a", FinishReason::kLength, 14.0, &st2);  // once only
  ASSERT_EQ(st2.finished_requests.size(), 1u);
  const FinishedRequestStats &f = st2.finished_requests[0];
  EXPECT_EQ(f.finish_reason, FinishReason::kLength);
  EXPECT_DOUBLE_EQ(f.e2e_latency, 4.0);
  EXPECT_DOUBLE_EQ(f.queued_time, 0.5);
  EXPECT_DOUBLE_EQ(f.prefill_time, 1.0);
  EXPECT_DOUBLE_EQ(f.decode_time, 1.0);
  EXPECT_EQ(f.num_prompt_tokens, 7);
  EXPECT_EQ(f.num_generation_tokens, 3);
  EXPECT_FALSE(t.tracks("a"));
  EXPECT_TRUE(t.tracks("b"));

  // Aborted before any token: only e2e (and queue time if it was scheduled).
  t.add_sequence("c", 20.0, 4);
  IterationStats st3;
  t.finish_sequence("c", FinishReason::kAbort, 21.0, &st3);
  ASSERT_EQ(st3.finished_requests.size(), 1u);
  EXPECT_DOUBLE_EQ(st3.finished_requests[0].e2e_latency, 1.0);
  EXPECT_EQ(st3.finished_requests[0].num_generation_tokens, 0);
  EXPECT_EQ(st3.finished_requests[0].prefill_time, 0.0);
  EXPECT_EQ(t.tracked_ids(), std::vector<std::string>{"b"});
}

}  // namespace
}  // namespace llmserve
