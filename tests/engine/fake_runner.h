// FakeRunner: a model runner for scheduler tests that keeps per-request state from SchedulerOutput deltas
// (as a real runner must), writes each computed token into a simulated paged KV cache and "attends" by reading
// the whole sequence back through its block table. The next token is a hash of what it read, so a wrong block
// table, a bad prefix hit or a lost token changes every later token. execute_async / wait follow ModelExecutor's
// contract for async scheduling (a token sampled by a step not yet waited for is dropped on preemption).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <deque>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "engine/scheduler_output.h"

namespace llmserve::testing {

// The fake model: a deterministic function of the whole sequence so far, in [0, vocab).
inline int32_t fake_next_token(std::span<const int32_t> seq, int32_t vocab) {
  uint64_t h = 1469598103934665603ULL;
  for (int32_t t : seq) h = (h ^ static_cast<uint32_t>(t)) * 1099511628211ULL;
  h ^= h >> 29;
  return static_cast<int32_t>(h % static_cast<uint64_t>(vocab));
}

class FakeRunner {
 public:
  FakeRunner(int32_t num_blocks, int32_t block_size, int32_t vocab)
      : block_size_(block_size), vocab_(vocab), slots_(static_cast<size_t>(num_blocks) * block_size) {}

  // The split form: the step runs now; its sampled tokens stay outstanding until wait(handle).
  int64_t execute_async(const SchedulerOutput& so) {
    outstanding_.push_back(execute(so));
    for (const auto& id : outstanding_.back().req_ids) {
      auto it = reqs_.find(id);
      if (it != reqs_.end() && sampled_now_.count(id.str())) it->second.outstanding_step = next_handle_;
    }
    return next_handle_++;
  }
  ModelRunnerOutput wait(int64_t handle) {
    EXPECT_EQ(handle, next_handle_ - static_cast<int64_t>(outstanding_.size())) << "steps waited for out of order";
    ModelRunnerOutput out = std::move(outstanding_.front());
    outstanding_.pop_front();
    for (const auto& id : out.req_ids) {
      auto it = reqs_.find(id);
      if (it != reqs_.end() && it->second.outstanding_step == handle) it->second.outstanding_step = -1;
    }
    return out;
  }

  ModelRunnerOutput execute(const SchedulerOutput& so) {
    sampled_now_.clear();
    for (const auto& id : so.finished_req_ids) reqs_.erase(id);
    for (const auto& id : so.preempted_req_ids) {
      auto it = reqs_.find(id);
      if (it == reqs_.end() || it->second.outstanding_step < 0) continue;
      it->second.tokens.pop_back();  // the scheduler discards a token sampled by a step still outstanding
      it->second.outstanding_step = -1;
    }
    for (const auto& n : so.scheduled_new_reqs) {
      EXPECT_EQ(reqs_.count(n.req_id), 0u) << "new request " << n.req_id << " already known to the runner";
      reqs_[n.req_id] = {n.prompt_token_ids, n.block_ids, n.num_computed_tokens};
    }
    for (const auto& c : so.scheduled_cached_reqs) {
      auto it = reqs_.find(c.req_id);
      if (it == reqs_.end()) {
        ADD_FAILURE() << "cached request " << c.req_id << " unknown to the runner";
        continue;
      }
      State& st = it->second;
      if (c.resumed_from_preemption) {
        st.block_ids = c.new_block_ids;
      } else {
        EXPECT_EQ(c.num_computed_tokens, st.num_computed) << c.req_id;
        st.block_ids.insert(st.block_ids.end(), c.new_block_ids.begin(), c.new_block_ids.end());
      }
      st.num_computed = c.num_computed_tokens;
    }
    // Like a forward pass: every layer writes the K/V of all scheduled tokens before any attention reads.
    for (const auto& s : so.num_scheduled_tokens) {
      State& st = reqs_.at(s.req_id);
      for (int64_t pos = st.num_computed; pos < st.num_computed + s.num_tokens; ++pos) {
        if (pos >= static_cast<int64_t>(st.tokens.size())) {
          ADD_FAILURE() << s.req_id << " scheduled position " << pos << " beyond its " << st.tokens.size() << " tokens";
          break;
        }
        slots_[slot_of(st, pos)] = {st.tokens[pos], pos};
      }
    }
    ModelRunnerOutput out;
    for (const auto& s : so.num_scheduled_tokens) {
      State& st = reqs_.at(s.req_id);
      st.num_computed += s.num_tokens;
      out.req_ids.push_back(s.req_id);
      auto& sampled = out.sampled_token_ids.emplace_back();
      if (st.num_computed < static_cast<int64_t>(st.tokens.size())) continue;  // partial prefill
      std::vector<int32_t> seen(st.num_computed);
      for (int64_t pos = 0; pos < st.num_computed; ++pos) {
        const Slot& slot = slots_[slot_of(st, pos)];
        if (slot.pos != pos) ++num_corrupt_reads;
        seen[pos] = slot.token;
      }
      const int32_t next = fake_next_token(seen, vocab_);
      sampled.push_back(next);
      st.tokens.push_back(next);
      sampled_now_.insert(s.req_id.str());
    }
    return out;
  }

  size_t num_states() const { return reqs_.size(); }
  int64_t num_corrupt_reads = 0;  // reads of a slot last written for another position

 private:
  struct State {
    std::vector<int32_t> tokens;
    std::vector<int32_t> block_ids;
    int64_t num_computed = 0;
    int64_t outstanding_step = -1;  // the step that sampled tokens.back(), until waited for
  };
  struct Slot {
    int32_t token = -1;
    int64_t pos = -1;
  };
  size_t slot_of(const State& st, int64_t pos) const {
    const size_t b = static_cast<size_t>(pos / block_size_);
    EXPECT_LT(b, st.block_ids.size()) << "position " << pos << " has no block";
    if (b >= st.block_ids.size()) return 0;
    return static_cast<size_t>(st.block_ids[b]) * block_size_ + static_cast<size_t>(pos % block_size_);
  }

  int32_t block_size_;
  int32_t vocab_;
  std::vector<Slot> slots_;
  std::unordered_map<std::string, State> reqs_;
  std::deque<ModelRunnerOutput> outstanding_;
  std::unordered_set<std::string> sampled_now_;  // requests the last execute() sampled for
  int64_t next_handle_ = 0;
};

}  // namespace llmserve::testing
