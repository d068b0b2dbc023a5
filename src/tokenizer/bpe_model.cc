// BPE model: byte-level (GPT-2/Llama-3/Qwen) and SentencePiece-style (byte_fallback, fuse_unk, ignore_merges).
// Merging applies the lowest-rank adjacent pair first, leftmost on ties (HF's heap order), in O(n log n).
#include <algorithm>
#include <atomic>
#include <functional>
#include <string>
#include <vector>

#include "tokenizer/model.h"
#include "tokenizer/unicode.h"

namespace llmserve {
namespace {

using json_util::Json;

// Open-addressing map (left id, right id) -> (rank, merged id); lookups dominate BPE time, so key and value
// share one 16-byte slot (one cache line touch per probe).
class MergeTable {
 public:
  void reserve(size_t n) {
    size_t cap = 16;
    shift_ = 60;
    while (cap < n * 2) {
      cap <<= 1;
      --shift_;
    }
    slots_.assign(cap, Slot{kEmpty, 0, 0});
    mask_ = cap - 1;
  }
  void insert_or_assign(int32_t a, int32_t b, int32_t rank, int32_t new_id) {
    uint64_t key = make_key(a, b);
    size_t i = slot(key);
    while (slots_[i].key != kEmpty && slots_[i].key != key) i = (i + 1) & mask_;
    slots_[i] = Slot{key, rank, new_id};
  }
  // Returns false if (a, b) is not a merge.
  bool find(int32_t a, int32_t b, int32_t* rank, int32_t* new_id) const {
    uint64_t key = make_key(a, b);
    for (size_t i = slot(key);; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.key == key) {
        *rank = s.rank;
        *new_id = s.new_id;
        return true;
      }
      if (s.key == kEmpty) return false;
    }
  }

 private:
  struct Slot {
    uint64_t key;
    int32_t rank;
    int32_t new_id;
  };
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  static uint64_t make_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  // Fibonacci hashing: the top bits of the product depend on every bit of the key.
  size_t slot(uint64_t key) const { return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> shift_); }
  std::vector<Slot> slots_;
  size_t mask_ = 0;
  int shift_ = 60;
};

std::atomic<uint64_t> g_next_model_serial{1};

// Per-thread memo of piece -> ids, as HF's BPE cache; keyed by model serial so models never share entries.
struct WordCache {
  uint64_t owner = 0;
  std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> map;
};
constexpr size_t kMaxCachedPieceBytes = 256;
constexpr std::string_view kMetaspace = "\u2581";
constexpr size_t kMaxCacheEntries = 10000;

class BpeModel : public Model {
 public:
  Status load(const Json& j, const std::string& path);
  void tokenize(std::string_view piece, std::vector<int32_t>& out) const override;

 private:
  void merge_word(std::string_view w, std::vector<int32_t>& out) const;
  void cached_merge(std::string_view w, std::vector<int32_t>& out) const;
  int32_t lookup_symbol(std::string_view s, bool is_first, bool is_last) const;

  MergeTable merges_;
  std::vector<int32_t> rank_to_new_id_;  // merge rank (its index in the file) -> merged token id
  std::optional<int32_t> unk_id_;
  std::string continuing_subword_prefix_;
  std::string end_of_word_suffix_;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  std::vector<int32_t> byte_ids_;  // id of "<0xXX>" per byte, -1 if absent
  std::vector<int32_t> bmp_ids_;   // id of each single BMP code point token, -1 if absent
  // True when no merge can ever span "x\u2581" (x != \u2581): every token holding U+2581 has it only in a
  // leading run, and U+2581 is itself a token. Then a long SentencePiece-style word can be split before each
  // such "\u2581" and merged piece by piece (with the word cache) without changing the result.
  bool metaspace_split_safe_ = false;
  uint64_t serial_ = g_next_model_serial.fetch_add(1);
};

Status BpeModel::load(const Json& j, const std::string& path) {
  const Json* vocab = json_util::find(j, "vocab");
  if (vocab == nullptr || !vocab->is_object()) return json_util::field_error(path + ".vocab", "expected an object");
  vocab_.reserve(vocab->size());
  for (auto it = vocab->begin(); it != vocab->end(); ++it) {
    if (!it->is_number_integer()) return json_util::field_error(path + ".vocab." + it.key(), "expected an integer id");
    vocab_[it.key()] = it->get<int32_t>();
  }
  RETURN_IF_ERROR(index_vocab(path + ".vocab"));
  ASSIGN_OR_RETURN(continuing_subword_prefix_, json_util::get_string_or(j, "continuing_subword_prefix", path, ""));
  ASSIGN_OR_RETURN(end_of_word_suffix_, json_util::get_string_or(j, "end_of_word_suffix", path, ""));
  ASSIGN_OR_RETURN(fuse_unk_, json_util::get_bool_or(j, "fuse_unk", path, false));
  ASSIGN_OR_RETURN(byte_fallback_, json_util::get_bool_or(j, "byte_fallback", path, false));
  ASSIGN_OR_RETURN(ignore_merges_, json_util::get_bool_or(j, "ignore_merges", path, false));
  ASSIGN_OR_RETURN(double dropout, json_util::get_double_or(j, "dropout", path, 0.0));
  if (dropout != 0.0) return json_util::field_error(path + ".dropout", "BPE dropout is not supported (use null)");
  if (json_util::find(j, "unk_token") != nullptr) {
    ASSIGN_OR_RETURN(std::string unk, json_util::get_string(j, "unk_token", path));
    // HF only fails when an unknown character actually needs the missing unk token; we resolve it up front.
    if (auto id = token_to_id(unk)) unk_id_ = *id;
  }

  const Json* merges = json_util::find(j, "merges");
  size_t num_merges = merges == nullptr ? 0 : merges->size();
  if (merges != nullptr && !merges->is_array()) return json_util::field_error(path + ".merges", "expected a list");
  merges_.reserve(num_merges);
  rank_to_new_id_.reserve(num_merges);
  std::string prefix = continuing_subword_prefix_;
  for (size_t i = 0; i < num_merges; ++i) {
    const Json& m = (*merges)[i];
    std::string where = path + ".merges[" + std::to_string(i) + "]";
    std::string a, b;
    if (m.is_string()) {
      const std::string& s = m.get_ref<const std::string&>();
      size_t sp = s.find(' ');
      if (sp == std::string::npos) return json_util::field_error(where, "expected \"left right\"");
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      a = m[0].get<std::string>();
      b = m[1].get<std::string>();
    } else {
      return json_util::field_error(where, "expected \"left right\" or [\"left\", \"right\"]");
    }
    auto a_id = token_to_id(a), b_id = token_to_id(b);
    if (!a_id || !b_id) return json_util::field_error(where, "merge token not in the vocabulary");
    std::string merged = a;
    merged.append(!prefix.empty() && b.compare(0, prefix.size(), prefix) == 0 ? b.substr(prefix.size()) : b);
    auto new_id = token_to_id(merged);
    if (!new_id) return json_util::field_error(where, "merged token '" + merged + "' not in the vocabulary");
    merges_.insert_or_assign(*a_id, *b_id, static_cast<int32_t>(i), *new_id);
    rank_to_new_id_.push_back(*new_id);
  }

  byte_ids_.assign(256, -1);
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    if (auto id = token_to_id(name)) {
      byte_ids_[b] = *id;
    }
  }
  bmp_ids_.assign(0x10000, -1);
  if (continuing_subword_prefix_.empty() && end_of_word_suffix_.empty()) {
    for (const auto& [token, id] : vocab_) {
      size_t pos = 0;
      if (token.empty()) continue;
      char32_t cp = unicode::next_code_point(token, &pos);
      if (pos == token.size() && cp < 0x10000) bmp_ids_[cp] = id;
    }
  }
  metaspace_split_safe_ =
      continuing_subword_prefix_.empty() && end_of_word_suffix_.empty() && token_to_id(kMetaspace).has_value();
  for (const auto& [token, id] : vocab_) {
    if (!metaspace_split_safe_) break;
    size_t lead = 0;
    while (token.compare(lead, kMetaspace.size(), kMetaspace) == 0) lead += kMetaspace.size();
    if (token.find(kMetaspace, lead) != std::string::npos) metaspace_split_safe_ = false;
  }
  return ok_status();
}

int32_t BpeModel::lookup_symbol(std::string_view s, bool is_first, bool is_last) const {
  bool affixed = (!is_first && !continuing_subword_prefix_.empty()) || (is_last && !end_of_word_suffix_.empty());
  if (!affixed) {
    if (continuing_subword_prefix_.empty() && end_of_word_suffix_.empty() && s.size() <= 3) {
      size_t pos = 0;
      char32_t cp = unicode::next_code_point(s, &pos);
      return bmp_ids_[cp];
    }
    auto id = token_to_id(s);
    return id ? *id : -1;
  }
  std::string key;
  if (!is_first) key = continuing_subword_prefix_;
  key.append(s);
  if (is_last) key.append(end_of_word_suffix_);
  auto id = token_to_id(key);
  return id ? *id : -1;
}

struct Symbol {
  int32_t id;
  int32_t prev;
  int32_t next;
  int32_t len;  // bytes; 0 marks a symbol merged into its left neighbour
};
// A merge candidate packed as (rank << 32 | left symbol position): one integer compare orders the heap by rank,
// then leftmost position, as HF's heap does. The merged id is rank_to_new_id_[rank].
using Candidate = uint64_t;
inline Candidate make_candidate(int32_t rank, int32_t pos) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(rank)) << 32) | static_cast<uint32_t>(pos);
}

void BpeModel::merge_word(std::string_view w, std::vector<int32_t>& out) const {
  thread_local std::vector<Symbol> syms;
  thread_local std::vector<Candidate> heap;
  syms.clear();
  heap.clear();
  auto add = [&](int32_t id, int32_t len) {
    int32_t n = static_cast<int32_t>(syms.size());
    syms.push_back({id, n - 1, -1, len});
    if (n > 0) syms[n - 1].next = n;
  };
  int32_t unk_pending = -1, unk_len = 0;
  size_t pos = 0;
  while (pos < w.size()) {
    size_t start = pos;
    pos += std::min(unicode::utf8_length(static_cast<unsigned char>(w[pos])), w.size() - pos);
    std::string_view ch = w.substr(start, pos - start);
    int32_t byte_len = static_cast<int32_t>(ch.size());
    int32_t id = lookup_symbol(ch, start == 0, pos == w.size());
    if (id >= 0) {
      if (unk_pending >= 0) {
        add(unk_pending, unk_len);
        unk_pending = -1;
      }
      add(id, byte_len);
      continue;
    }
    if (byte_fallback_) {
      bool ok = true;
      for (unsigned char b : ch) ok = ok && byte_ids_[b] >= 0;
      if (ok) {
        // As in HF, byte tokens go in before a pending unk is flushed.
        for (unsigned char b : ch) add(byte_ids_[b], 1);
        continue;
      }
    }
    if (unk_id_) {
      if (unk_pending >= 0 && fuse_unk_) {
        unk_len += byte_len;
      } else {
        if (unk_pending >= 0) add(unk_pending, unk_len);
        unk_pending = *unk_id_;
        unk_len = byte_len;
      }
    }
  }
  if (unk_pending >= 0) add(unk_pending, unk_len);

  int32_t rank, new_id;
  for (size_t i = 0; i + 1 < syms.size(); ++i) {
    if (merges_.find(syms[i].id, syms[i + 1].id, &rank, &new_id)) {
      heap.push_back(make_candidate(rank, static_cast<int32_t>(i)));
    }
  }
  std::greater<Candidate> min_first;
  std::make_heap(heap.begin(), heap.end(), min_first);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), min_first);
    Candidate top = heap.back();
    heap.pop_back();
    int32_t top_pos = static_cast<int32_t>(top & 0xFFFFFFFFu);
    int32_t top_new_id = rank_to_new_id_[top >> 32];
    Symbol& left = syms[top_pos];
    if (left.len == 0 || left.next < 0) continue;
    int32_t right_pos = left.next;
    Symbol& right = syms[right_pos];
    // Same staleness rule as HF: the current pair must still merge into the candidate's token.
    if (!merges_.find(left.id, right.id, &rank, &new_id) || new_id != top_new_id) continue;
    left.id = new_id;
    left.len += right.len;
    left.next = right.next;
    right.len = 0;
    if (left.next >= 0) syms[left.next].prev = top_pos;
    if (left.prev >= 0 && merges_.find(syms[left.prev].id, left.id, &rank, &new_id)) {
      heap.push_back(make_candidate(rank, left.prev));
      std::push_heap(heap.begin(), heap.end(), min_first);
    }
    if (left.next >= 0 && merges_.find(left.id, syms[left.next].id, &rank, &new_id)) {
      heap.push_back(make_candidate(rank, top_pos));
      std::push_heap(heap.begin(), heap.end(), min_first);
    }
  }
  for (int32_t i = syms.empty() ? -1 : 0; i >= 0; i = syms[i].next) out.push_back(syms[i].id);
}

void BpeModel::tokenize(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  if (ignore_merges_) {
    if (auto id = token_to_id(piece)) {
      out.push_back(*id);
      return;
    }
  }
  if (!metaspace_split_safe_ || piece.size() < kMaxCachedPieceBytes) {
    cached_merge(piece, out);
    return;
  }
  // Split before every U+2581 that follows another character (see metaspace_split_safe_).
  size_t start = 0;
  for (size_t pos = piece.find(kMetaspace, 1); pos != std::string_view::npos; pos = piece.find(kMetaspace, pos + 1)) {
    if (pos >= kMetaspace.size() && piece.compare(pos - kMetaspace.size(), kMetaspace.size(), kMetaspace) == 0) {
      continue;  // inside a run of U+2581
    }
    cached_merge(piece.substr(start, pos - start), out);
    start = pos;
  }
  cached_merge(piece.substr(start), out);
}

void BpeModel::cached_merge(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.size() >= kMaxCachedPieceBytes) {
    merge_word(piece, out);
    return;
  }
  thread_local std::vector<WordCache> caches(4);
  WordCache* cache = nullptr;
  for (auto& c : caches) {
    if (c.owner == serial_) cache = &c;
  }
  if (cache == nullptr) {
    // Reuse the least recently claimed slot (round robin).
    thread_local size_t next_slot = 0;
    cache = &caches[next_slot++ % caches.size()];
    cache->owner = serial_;
    cache->map.clear();
  }
  auto it = cache->map.find(piece);
  if (it != cache->map.end()) {
    out.insert(out.end(), it->second.begin(), it->second.end());
    return;
  }
  size_t before = out.size();
  merge_word(piece, out);
  if (cache->map.size() >= kMaxCacheEntries) cache->map.clear();
  cache->map.emplace(std::string(piece), std::vector<int32_t>(out.begin() + before, out.end()));
}

}  // namespace

StatusOr<std::unique_ptr<Model>> make_bpe_model(const Json& j, const std::string& path) {
  auto model = std::make_unique<BpeModel>();
  RETURN_IF_ERROR(model->load(j, path));
  return std::unique_ptr<Model>(std::move(model));
}

}  // namespace llmserve
