// Pushdown recognizer with interned stack sets. Rule references in tail position push no frame, so `x*` loops keep
// one stack and their states repeat (and hit the mask cache) instead of growing with the output.
#include "structured/automaton.h"

#include <algorithm>

#include "core/logging.h"

namespace llmserve::structured {

size_t Automaton::VectorHash::operator()(const std::vector<int32_t>& v) const {
  uint64_t h = 1469598103934665603ull;
  for (int32_t x : v) h = (h ^ static_cast<uint32_t>(x)) * 1099511628211ull;
  return static_cast<size_t>(h);
}

Automaton::Automaton(const Program& program, const TokenIndex& tokens,
                     std::shared_ptr<std::atomic<int64_t>> mask_budget)
    : program_(program), tokens_(tokens), mask_budget_(std::move(mask_budget)) {
  intern({}, false);  // kDead
  std::vector<int32_t> tops;
  bool can_end = false;
  visited_.clear();
  for (int32_t alt : program_.rule_alternatives[program_.root]) close(alt, -1, tops, can_end);
  start_ = intern(std::move(tops), can_end);
}

Automaton::~Automaton() { *mask_budget_ += cached_mask_bytes_; }

int32_t Automaton::node(int32_t pos, int32_t parent) {
  uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(pos)) << 32) | static_cast<uint32_t>(parent);
  auto [it, inserted] = node_ids_.emplace(key, static_cast<int32_t>(nodes_.size()));
  if (inserted) nodes_.push_back({pos, parent});
  return it->second;
}

void Automaton::close(int32_t pos, int32_t parent, std::vector<int32_t>& tops, bool& can_end) {
  uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(pos)) << 32) | static_cast<uint32_t>(parent);
  if (!visited_.insert(key).second) return;  // nullable loops (`(x?)*`) reach the same configuration again
  const Program::Element& e = program_.elements[pos];
  switch (e.kind) {
    case Program::kByteSet: tops.push_back(node(pos, parent)); return;
    case Program::kEnd:
      if (parent < 0) {
        can_end = true;
      } else {
        Node n = nodes_[parent];
        close(n.pos, n.parent, tops, can_end);
      }
      return;
    case Program::kRuleRef: {
      int32_t ret = pos + 1;
      int32_t frame = program_.elements[ret].kind == Program::kEnd ? parent : node(ret, parent);
      for (int32_t alt : program_.rule_alternatives[e.value]) close(alt, frame, tops, can_end);
      return;
    }
  }
}

int32_t Automaton::intern(std::vector<int32_t> tops, bool can_end) {
  std::sort(tops.begin(), tops.end());
  tops.erase(std::unique(tops.begin(), tops.end()), tops.end());
  tops.push_back(can_end ? 1 : 0);
  auto it = state_ids_.find(tops);
  if (it != state_ids_.end()) return it->second;
  int32_t id = static_cast<int32_t>(states_.size());
  State s;
  s.nodes.assign(tops.begin(), tops.end() - 1);
  s.can_end = can_end;
  states_.push_back(std::move(s));
  state_ids_.emplace(std::move(tops), id);
  return id;
}

int32_t Automaton::step(int32_t state, uint8_t byte) {
  State* s = &states_[state];
  if (s->next != nullptr && (*s->next)[byte] >= 0) return (*s->next)[byte];
  std::vector<int32_t> tops;
  bool can_end = false;
  visited_.clear();
  for (int32_t id : s->nodes) {
    Node n = nodes_[id];
    if (program_.byte_sets[program_.elements[n.pos].value].has(byte)) close(n.pos + 1, n.parent, tops, can_end);
  }
  int32_t next = tops.empty() && !can_end ? kDead : intern(std::move(tops), can_end);
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

std::shared_ptr<const std::vector<uint32_t>> Automaton::compute_mask(int32_t state) {
  // Walk the byte-sorted tokens keeping the state after each prefix byte (depth) of the previous token: a token
  // resumes at the depth it shares with its predecessor, and every token that extends a dead prefix is skipped.
  auto out = std::make_shared<std::vector<uint32_t>>(tokens_.num_words, 0u);
  std::vector<int32_t> at(tokens_.max_token_length + 1, kDead);
  at[0] = state;
  int32_t dead_prefix = INT32_MAX;  // length of a prefix known dead (from an earlier token)
  const auto& ids = tokens_.sorted_ids;
  for (size_t i = 0; i < ids.size(); ++i) {
    int32_t shared = tokens_.shared_prefix[i];
    if (shared >= dead_prefix) continue;
    dead_prefix = INT32_MAX;
    const std::string& b = tokens_.token_bytes[ids[i]];
    int32_t len = static_cast<int32_t>(b.size());
    int32_t d = shared;
    for (; d < len; ++d) {
      int32_t s = at[d];
      const State& st = states_[s];
      int32_t n = (st.next != nullptr) ? (*st.next)[static_cast<uint8_t>(b[d])] : -1;
      if (n < 0) n = step(s, static_cast<uint8_t>(b[d]));
      if (n == kDead) {
        dead_prefix = d + 1;
        break;
      }
      at[d + 1] = n;
    }
    if (d == len) (*out)[ids[i] >> 5] |= 1u << (ids[i] & 31);
  }
  return out;
}

}  // namespace llmserve::structured
