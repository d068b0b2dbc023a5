// Pushdown recognizer with interned stack sets. Rule references in tail position push no frame, so `x*` loops keep
// one stack and their states repeat (and hit the mask cache) instead of growing with the output.
#include "structured/automaton.h"

#include <algorithm>
#include <climits>

namespace llmserve::structured {

size_t Automaton::VectorHash::operator()(const std::vector<int32_t>& v) const {
  uint64_t h = 1469598103934665603ull;
  for (int32_t x : v) h = (h ^ static_cast<uint32_t>(x)) * 1099511628211ull;
  return static_cast<size_t>(h);
}

Automaton::Automaton(const Program& program, const TokenIndex& tokens,
                     std::shared_ptr<std::atomic<int64_t>> mask_budget)
    : program_(program), tokens_(tokens), mask_budget_(std::move(mask_budget)) {
  intern({}, false, false);  // kDead
  std::vector<int32_t> tops;
  bool can_end = false, escaped = false;
  visited_.clear();
  for (int32_t alt : program_.rule_alternatives[program_.root]) close(alt, -1, tops, can_end, escaped);
  start_ = tops.empty() && !can_end ? kDead : intern(std::move(tops), can_end, escaped);
}

Automaton::~Automaton() { *mask_budget_ += cached_mask_bytes_; }

int32_t Automaton::node(int32_t pos, int32_t parent) {
  uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(pos)) << 32) | static_cast<uint32_t>(parent);
  auto [it, inserted] = node_ids_.emplace(key, static_cast<int32_t>(nodes_.size()));
  if (inserted) nodes_.push_back({pos, parent});
  return it->second;
}

void Automaton::close(int32_t pos, int32_t parent, std::vector<int32_t>& tops, bool& can_end, bool& escaped) {
  uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(pos)) << 32) | static_cast<uint32_t>(parent);
  if (!visited_.insert(key).second) return;  // nullable loops (`(x?)*`) reach the same configuration again
  const Program::Element& e = program_.elements[pos];
  switch (e.kind) {
    case Program::kByteSet:
      if (program_.byte_sets[e.value] != ByteSet{}) tops.push_back(node(pos, parent));  // empty: a dead end
      return;
    case Program::kEnd:
      if (parent == -1) {
        can_end = true;
      } else if (parent == kUnknownCaller) {
        escaped = true;
      } else {
        Node n = nodes_[parent];
        close(n.pos, n.parent, tops, can_end, escaped);
      }
      return;
    case Program::kRuleRef: {
      int32_t ret = pos + 1;
      int32_t frame = program_.elements[ret].kind == Program::kEnd ? parent : node(ret, parent);
      for (int32_t alt : program_.rule_alternatives[e.value]) close(alt, frame, tops, can_end, escaped);
      return;
    }
  }
}

int32_t Automaton::intern(std::vector<int32_t> tops, bool can_end, bool escaped) {
  std::sort(tops.begin(), tops.end());
  tops.erase(std::unique(tops.begin(), tops.end()), tops.end());
  tops.push_back((can_end ? 1 : 0) | (escaped ? 2 : 0));
  auto it = state_ids_.find(tops);
  if (it != state_ids_.end()) return it->second;
  int32_t id = static_cast<int32_t>(states_.size());
  State s;
  s.nodes.assign(tops.begin(), tops.end() - 1);
  s.can_end = can_end;
  s.escaped = escaped;
  states_.push_back(std::move(s));
  state_ids_.emplace(std::move(tops), id);
  return id;
}

int32_t Automaton::step(int32_t state, uint8_t byte) {
  State* s = &states_[state];
  if (s->next != nullptr && (*s->next)[byte] >= 0) return (*s->next)[byte];
  std::vector<int32_t> tops;
  bool can_end = false, escaped = false;
  visited_.clear();
  for (int32_t id : s->nodes) {
    Node n = nodes_[id];
    if (program_.byte_sets[program_.elements[n.pos].value].has(byte)) {
      close(n.pos + 1, n.parent, tops, can_end, escaped);
    }
  }
  int32_t next = tops.empty() && !can_end && !escaped ? kDead : intern(std::move(tops), can_end, escaped);
  s = &states_[state];  // intern may have moved states_
  if (s->next == nullptr) {
    s->next = std::make_unique<std::array<int32_t, 256>>();
    s->next->fill(-1);
  }
  (*s->next)[byte] = next;
  return next;
}

int32_t Automaton::walk(int32_t state, std::string_view bytes) {
  for (char c : bytes) {
    if (state == kDead) return kDead;
    state = step(state, static_cast<uint8_t>(c));
  }
  return state;
}

std::shared_ptr<const std::vector<uint32_t>> Automaton::mask(int32_t state) {
  if (states_[state].mask != nullptr) return states_[state].mask;
  auto m = compute_mask(state);
  const int64_t bytes = static_cast<int64_t>(m->size()) * 4;
  if (mask_budget_->fetch_sub(bytes) >= bytes) {
    states_[state].mask = m;
    cached_mask_bytes_ += bytes;
  } else {
    *mask_budget_ += bytes;
  }
  return m;
}

std::shared_ptr<const Automaton::ContextFree> Automaton::context_free(int32_t top_node) {
  // The top frames with the rest of the stack cut off (or kept whole where it is shallower).
  int32_t frames[kContextDepth];
  int depth = 0;
  int32_t at_node = top_node;
  for (; depth < kContextDepth && at_node >= 0; ++depth) {
    frames[depth] = nodes_[at_node].pos;
    at_node = nodes_[at_node].parent;
  }
  int32_t truncated = at_node == -1 ? -1 : kUnknownCaller;
  for (int k = depth - 1; k >= 0; --k) truncated = node(frames[k], truncated);
  auto it = context_free_.find(truncated);
  if (it != context_free_.end()) return it->second;
  // Walk the byte-sorted tokens from the position with its caller unknown, keeping the state after each prefix
  // byte (depth) of the previous token: a token resumes at the depth it shares with its predecessor, and every
  // token that extends a dead prefix shares its verdict. A token is accepted if it ends alive (inside the rule or
  // exactly where it returns), rejected if it dies before any path returned, uncertain if it dies after one did
  // (the caller, unknown here, might take the rest).
  auto cf = std::make_shared<ContextFree>();
  cf->accepted.assign(tokens_.num_words, 0);
  const int32_t probe = intern({truncated}, false, false);
  std::vector<int32_t> at(tokens_.max_token_length + 1, kDead);
  std::vector<char> returned(tokens_.max_token_length + 1, 0);  // some prefix of length <= d returned
  at[0] = probe;
  int32_t dead_prefix = INT32_MAX;
  bool dead_returned = false;
  const auto& ids = tokens_.sorted_ids;
  for (size_t i = 0; i < ids.size(); ++i) {
    int32_t shared = tokens_.shared_prefix[i];
    if (shared >= dead_prefix) {
      if (dead_returned) cf->uncertain.push_back(ids[i]);
      continue;
    }
    dead_prefix = INT32_MAX;
    const std::string& b = tokens_.token_bytes[ids[i]];
    int32_t len = static_cast<int32_t>(b.size());
    int32_t d = shared;
    for (; d < len; ++d) {
      int32_t n = next_state(at[d], static_cast<uint8_t>(b[d]));
      if (n == kDead) {
        dead_prefix = d + 1;
        dead_returned = returned[d];
        if (dead_returned) cf->uncertain.push_back(ids[i]);
        break;
      }
      at[d + 1] = n;
      returned[d + 1] = returned[d] || states_[n].escaped;
    }
    if (d == len) cf->accepted[ids[i] >> 5] |= 1u << (ids[i] & 31);
  }
  const int64_t bytes = static_cast<int64_t>(cf->accepted.size() + cf->uncertain.size()) * 4;
  if (mask_budget_->fetch_sub(bytes) >= bytes) {
    cached_mask_bytes_ += bytes;
    context_free_.emplace(truncated, cf);
  } else {
    *mask_budget_ += bytes;
  }
  return cf;
}

std::shared_ptr<const std::vector<uint32_t>> Automaton::compute_mask(int32_t state) {
  // Context-free verdicts of each stack's top position, then the uncertain tokens walked with the real stacks.
  auto out = std::make_shared<std::vector<uint32_t>>(tokens_.num_words, 0u);
  std::vector<std::shared_ptr<const ContextFree>> entries;
  const std::vector<int32_t> tops = states_[state].nodes;  // copied: context_free() may grow states_
  for (int32_t id : tops) {
    auto cf = context_free(id);
    if (std::find(entries.begin(), entries.end(), cf) == entries.end()) entries.push_back(std::move(cf));
  }
  std::vector<int32_t> candidates;
  for (const auto& cf : entries) {
    for (int32_t w = 0; w < tokens_.num_words; ++w) (*out)[w] |= cf->accepted[w];
    candidates.insert(candidates.end(), cf->uncertain.begin(), cf->uncertain.end());
  }
  if (entries.size() > 1) {
    const auto& tb = tokens_.token_bytes;
    std::sort(candidates.begin(), candidates.end(),
              [&](int32_t a, int32_t b) { return tb[a] != tb[b] ? tb[a] < tb[b] : a < b; });
    candidates.erase(std::unique(candidates.begin(), candidates.end()), candidates.end());
  }
  std::vector<int32_t> at(tokens_.max_token_length + 1, kDead);
  at[0] = state;
  int32_t dead_prefix = INT32_MAX;
  const std::string* prev = nullptr;
  for (int32_t t : candidates) {
    const std::string& b = tokens_.token_bytes[t];
    int32_t shared = 0;
    if (prev != nullptr) {
      int32_t limit = static_cast<int32_t>(std::min(prev->size(), b.size()));
      while (shared < limit && (*prev)[shared] == b[shared]) ++shared;
    }
    prev = &b;
    if (shared >= dead_prefix) continue;
    dead_prefix = INT32_MAX;
    int32_t len = static_cast<int32_t>(b.size());
    int32_t d = shared;
    for (; d < len; ++d) {
      int32_t n = next_state(at[d], static_cast<uint8_t>(b[d]));
      if (n == kDead) {
        dead_prefix = d + 1;
        break;
      }
      at[d + 1] = n;
    }
    if (d == len) (*out)[t >> 5] |= 1u << (t & 31);
  }
  return out;
}

}  // namespace llmserve::structured
