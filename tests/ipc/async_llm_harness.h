// Test harness for AsyncLLM: collects every request's outputs from the callbacks (any thread), waits for
// final ones, and checks the stream invariants (exactly one final output, deltas that add up to the final).
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "frontend/async_llm.h"

namespace llmserve::testing {

class OutputCollector {
 public:
  struct Stream {
    std::vector<RequestOutput> outputs;
    int num_finals = 0;
  };

  RequestOutputCallback callback(const std::string &id) {
    return [this, id](RequestOutput out) {
      std::lock_guard<std::mutex> lock(mu_);
      Stream &s = streams_[id];
      if (out.finished) {
        ++s.num_finals;
        ++num_finished_;
      }
      s.outputs.push_back(std::move(out));
      cv_.notify_all();
    };
  }
  StatsCallback stats_callback() {
    return [this](const IterationStats &stats) {
      std::lock_guard<std::mutex> lock(mu_);
      stats_.push_back(stats);
    };
  }
  // Waits until `count` requests have their final output (false on timeout).
  bool wait_finished(int count, double timeout_s = 60.0) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::duration<double>(timeout_s), [&] { return num_finished_ >= count; });
  }
  bool wait_any_output(const std::string &id, double timeout_s = 60.0) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::duration<double>(timeout_s), [&] {
      auto it = streams_.find(id);
      return it != streams_.end() && !it->second.outputs.empty();
    });
  }
  std::map<std::string, Stream> streams() {
    std::lock_guard<std::mutex> lock(mu_);
    return streams_;
  }
  std::vector<IterationStats> stats() {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }
  int num_finished() {
    std::lock_guard<std::mutex> lock(mu_);
    return num_finished_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, Stream> streams_;
  std::vector<IterationStats> stats_;
  int num_finished_ = 0;
};

// The final output of a stream after checking: exactly one final, it is the last, every output names the
// request (`request_id`, default `id`), and per sequence the deltas concatenate to the final ids and text.
inline RequestOutput check_stream(const std::string &id, const OutputCollector::Stream &s,
                                  const std::string &request_id = "") {
  EXPECT_EQ(s.num_finals, 1) << id;
  EXPECT_FALSE(s.outputs.empty()) << id;
  if (s.outputs.empty()) return {};
  const RequestOutput &last = s.outputs.back();
  EXPECT_TRUE(last.finished) << id;
  for (size_t k = 0; k < last.outputs.size(); ++k) {
    std::vector<int32_t> ids;
    std::string text;
    for (const RequestOutput &o : s.outputs) {
      EXPECT_EQ(o.request_id, request_id.empty() ? id : request_id);
      if (k >= o.outputs.size()) continue;
      ids.insert(ids.end(), o.outputs[k].delta_token_ids.begin(), o.outputs[k].delta_token_ids.end());
      text += o.outputs[k].delta_text;
    }
    EXPECT_EQ(ids, last.outputs[k].token_ids) << id << " seq " << k;
    EXPECT_EQ(text, last.outputs[k].text) << id << " seq " << k;
  }
  return last;
}

}  // namespace llmserve::testing
