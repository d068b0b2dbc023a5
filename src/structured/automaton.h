// The recognizer: a pushdown automaton over bytes whose configurations (sets of parse stacks) are interned as
// numbered states with memoized byte transitions, so a state met once is a table lookup ever after. Each state's
// token mask is computed once by walking the byte-sorted vocabulary and then served from a cache: the per-state
// form of xgrammar's adaptive token mask cache, keyed by the whole stack set so no token is ever left uncertain.
// Not thread-safe: CompiledGrammar serializes access.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "structured/program.h"
#include "structured/token_index.h"

namespace llmserve::structured {

class Automaton {
 public:
  static constexpr int32_t kDead = 0;  // the state with no stacks that cannot end: every byte is refused

  // mask_budget: bytes of cached masks left for all grammars of a compiler; a mask that does not fit is computed
  // each time instead of cached.
  Automaton(const Program& program, const TokenIndex& tokens, std::shared_ptr<std::atomic<int64_t>> mask_budget);
  ~Automaton();
  Automaton(const Automaton&) = delete;
  Automaton& operator=(const Automaton&) = delete;

  int32_t start() const { return start_; }
  // The state after `byte`, or kDead.
  int32_t step(int32_t state, uint8_t byte);
  // The state after all of `bytes`, or kDead.
  int32_t walk(int32_t state, std::string_view bytes);
  // The grammar may end here (EOS allowed).
  bool can_end(int32_t state) const { return states_[state].can_end; }
  // The grammar can only end here (no stack left).
  bool only_end(int32_t state) const { return states_[state].nodes.empty(); }
  // [tokens.num_words] bits of the tokens allowed after `state` (EOS bits never set). Cached per state while the
  // budget lasts; the pointer stays valid after the lock is released.
  std::shared_ptr<const std::vector<uint32_t>> mask(int32_t state);

  int32_t num_states() const { return static_cast<int32_t>(states_.size()); }

 private:
  struct Node {
    int32_t pos;     // a kByteSet element (top of stack) or a return position (below the top)
    int32_t parent;  // the node below, or -1 at the bottom
  };
  struct State {
    std::vector<int32_t> nodes;  // sorted node ids, each the top of one stack
    bool can_end = false;
    std::unique_ptr<std::array<int32_t, 256>> next;  // memoized transitions; -1 = not computed yet
    std::shared_ptr<const std::vector<uint32_t>> mask;
  };
  struct VectorHash {
    size_t operator()(const std::vector<int32_t>& v) const;
  };

  int32_t node(int32_t pos, int32_t parent);
  // Adds the stacks reachable from (pos, parent) without consuming a byte: tops are byte sets.
  void close(int32_t pos, int32_t parent, std::vector<int32_t>& tops, bool& can_end);
  int32_t intern(std::vector<int32_t> tops, bool can_end);
  std::shared_ptr<const std::vector<uint32_t>> compute_mask(int32_t state);

  const Program& program_;
  const TokenIndex& tokens_;
  std::shared_ptr<std::atomic<int64_t>> mask_budget_;
  int64_t cached_mask_bytes_ = 0;
  std::vector<Node> nodes_;
  std::unordered_map<uint64_t, int32_t> node_ids_;
  std::vector<State> states_;
  std::unordered_map<std::vector<int32_t>, int32_t, VectorHash> state_ids_;  // key: nodes + {can_end}
  std::unordered_set<uint64_t> visited_;  // scratch for close()
  int32_t start_ = kDead;
};

}  // namespace llmserve::structured
