// The recognizer: a pushdown automaton over bytes whose configurations (sets of parse stacks) are interned as
// numbered states with memoized byte transitions, so a state met once is a table lookup ever after.
// Token masks use two caches, in the manner of xgrammar's adaptive token mask cache: per stack top (the top
// kContextDepth frames), the tokens accepted or rejected whatever the stack below (computed once by walking the
// byte-sorted vocabulary with the frames below unknown) and the "uncertain" rest, which return below those frames;
// per state, the exact mask (that part plus the uncertain tokens walked with the real stacks), served from then
// on by one copy.
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
  static constexpr int32_t kUnknownCaller = -2;  // parent of a context-free probe: the rule's caller is unknown
  // Frames of a stack top a context-free entry covers. One frame leaves every token that finishes the innermost
  // rule uncertain (inside a JSON string: every token longer than one character); three cover a string inside an
  // object member, so only tokens that also close the enclosing object stay uncertain. A fourth frame would tell
  // apart the copies of an item rule that minItems / maxItems expand into (records.json's 40 records: 2.6x the
  // cold mask time, same masks, measured with the Mistral vocabulary; bench/RESULTS.md, issue 17).
  static constexpr int kContextDepth = 3;

  struct Node {
    int32_t pos;     // a kByteSet element (top of stack) or a return position (below the top)
    int32_t parent;  // the node below, -1 at the bottom, kUnknownCaller in context-free probes
  };
  struct State {
    std::vector<int32_t> nodes;                      // sorted node ids, each the top of one stack
    bool can_end = false;                            // a stack emptied: the grammar may end
    bool escaped = false;                            // a stack returned into kUnknownCaller (context-free probes only)
    std::unique_ptr<std::array<int32_t, 256>> next;  // memoized transitions; -1 = not computed yet
    std::shared_ptr<const std::vector<uint32_t>> mask;
  };
  // Tokens from one grammar position whatever the stack below it.
  struct ContextFree {
    std::vector<uint32_t> accepted;  // bitmask [num_words]
    std::vector<int32_t> uncertain;  // token ids, byte-sorted: they finish the position's rule, so the caller decides
  };
  struct VectorHash {
    size_t operator()(const std::vector<int32_t>& v) const;
  };

  int32_t node(int32_t pos, int32_t parent);
  // Adds the stacks reachable from (pos, parent) without consuming a byte: tops are byte sets.
  void close(int32_t pos, int32_t parent, std::vector<int32_t>& tops, bool& can_end, bool& escaped);
  int32_t intern(std::vector<int32_t> tops, bool can_end, bool escaped);
  bool dead(int32_t state) const { return state == kDead; }
  int32_t next_state(int32_t state, uint8_t byte) {
    const State& s = states_[state];
    int32_t n = s.next != nullptr ? (*s.next)[byte] : -1;
    return n >= 0 ? n : step(state, byte);
  }
  // The entry of a stack top node (its top kContextDepth frames).
  std::shared_ptr<const ContextFree> context_free(int32_t top_node);
  std::shared_ptr<const std::vector<uint32_t>> compute_mask(int32_t state);

  const Program& program_;
  const TokenIndex& tokens_;
  std::shared_ptr<std::atomic<int64_t>> mask_budget_;
  int64_t cached_mask_bytes_ = 0;
  std::vector<Node> nodes_;
  std::unordered_map<uint64_t, int32_t> node_ids_;
  std::vector<State> states_;
  std::unordered_map<std::vector<int32_t>, int32_t, VectorHash> state_ids_;       // key: nodes + {flags}
  std::unordered_map<int32_t, std::shared_ptr<const ContextFree>> context_free_;  // by truncated top node
  std::unordered_set<uint64_t> visited_;                                          // scratch for close()
  int32_t start_ = kDead;
};

}  // namespace llmserve::structured
