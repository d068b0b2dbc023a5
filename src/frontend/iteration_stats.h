// IterationStatsTracker: per-sequence timestamps (vLLM's RequestStateStats) turned into one IterationStats
// per engine step — TTFT and e2e from the frontend's arrival time, ITL / queue / prefill / decode times from
// the core's timestamped events and step times. Invariant: every tracked sequence is finished (and counted in
// finished_requests) at most once. All clocks are steady_clock seconds, which the core (in this process or
// a child one: CLOCK_MONOTONIC is system-wide) shares. Not thread-safe: the AsyncLLM's lock guards it.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/scheduler_output.h"
#include "frontend/async_llm.h"

namespace llmserve {

// steady_clock now, in seconds (the clock of arrival times and of the core's events).
double monotonic_seconds();

class IterationStatsTracker {
 public:
  void add_sequence(const std::string &core_id, double arrival_time, int64_t num_prompt_tokens);
  // Records one step's outputs (events, new tokens) of tracked sequences into `stats`; `now` = frontend time.
  void record_step(const EngineCoreOutputs &outputs, double now, IterationStats *stats);
  // Ends a tracked sequence (no-op if unknown) and adds its FinishedRequestStats.
  void finish_sequence(const std::string &core_id, FinishReason reason, double now, IterationStats *stats);
  bool tracks(const std::string &core_id) const { return sequences_.count(core_id) != 0; }
  std::vector<std::string> tracked_ids() const;
  size_t size() const { return sequences_.size(); }

 private:
  struct Sequence {
    double arrival_time = 0.0;
    int64_t num_prompt_tokens = 0;
    int64_t num_generation_tokens = 0;
    double queued_ts = 0.0, scheduled_ts = 0.0, first_token_ts = 0.0, last_token_ts = 0.0;
  };
  std::unordered_map<std::string, Sequence> sequences_;
};

}  // namespace llmserve
