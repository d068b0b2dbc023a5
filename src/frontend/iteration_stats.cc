// IterationStatsTracker: vLLM's definitions (v1/metrics/stats.py) on the core's events.
#include "frontend/iteration_stats.h"

#include <chrono>

namespace llmserve {

double monotonic_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void IterationStatsTracker::add_sequence(const std::string &core_id, double arrival_time, int64_t num_prompt_tokens) {
  Sequence &s = sequences_[core_id];
  s.arrival_time = arrival_time;
  s.num_prompt_tokens = num_prompt_tokens;
}

void IterationStatsTracker::record_step(const EngineCoreOutputs &outputs, double now, IterationStats *stats) {
  for (const EngineCoreOutput &o : outputs.outputs) {
    auto it = sequences_.find(o.request_id);
    if (it == sequences_.end()) continue;
    Sequence &s = it->second;
    for (const EngineCoreEvent &e : o.events) {
      if (e.type == EngineCoreEventType::kQueued) s.queued_ts = e.timestamp;
      // A preempted request is scheduled again: its queue time ends at the first scheduling (vLLM).
      if (e.type == EngineCoreEventType::kScheduled && s.scheduled_ts == 0.0) s.scheduled_ts = e.timestamp;
    }
    const int64_t num_new = static_cast<int64_t>(o.new_token_ids.size());
    if (num_new == 0) continue;
    stats->num_generation_tokens += num_new;
    if (s.num_generation_tokens == 0) {
      stats->num_prompt_tokens += s.num_prompt_tokens;
      stats->time_to_first_tokens.push_back(now - s.arrival_time);
      s.first_token_ts = outputs.timestamp;
    } else {
      stats->inter_token_latencies.push_back(outputs.timestamp - s.last_token_ts);
    }
    s.last_token_ts = outputs.timestamp;
    s.num_generation_tokens += num_new;
  }
}

void IterationStatsTracker::finish_sequence(const std::string &core_id, FinishReason reason, double now,
                                            IterationStats *stats) {
  auto it = sequences_.find(core_id);
  if (it == sequences_.end()) return;
  const Sequence &s = it->second;
  FinishedRequestStats &f = stats->finished_requests.emplace_back();
  f.finish_reason = reason;
  f.e2e_latency = now - s.arrival_time;
  f.num_prompt_tokens = s.num_prompt_tokens;
  f.num_generation_tokens = s.num_generation_tokens;
  if (s.scheduled_ts > 0.0 && s.queued_ts > 0.0) f.queued_time = s.scheduled_ts - s.queued_ts;
  if (s.num_generation_tokens > 0) {
    if (s.scheduled_ts > 0.0) f.prefill_time = s.first_token_ts - s.scheduled_ts;
    f.decode_time = s.last_token_ts - s.first_token_ts;
  }
  sequences_.erase(it);
}

std::vector<std::string> IterationStatsTracker::tracked_ids() const {
  std::vector<std::string> ids;
  ids.reserve(sequences_.size());
  for (const auto &[id, s] : sequences_) ids.push_back(id);
  return ids;
}

}  // namespace llmserve
