// BPE model: byte-level (GPT-2/Llama-3/Qwen) and SentencePiece-style (byte_fallback, fuse_unk, ignore_merges).
// Merging applies the lowest-rank adjacent pair first, leftmost on ties (HF's heap order), in O(n log n).
#include <algorithm>
#include <atomic>
#include <string>
#include <vector>

#include "tokenizer/model.h"
#include "tokenizer/unicode.h"

namespace llmserve {
namespace {

using json_util::Json;

// Open-addressing map (left id, right id) -> (rank, merged id); lookups dominate BPE time.
class MergeTable {
 public:
  void reserve(size_t n) {
    size_t cap = 16;
    shift_ = 60;
    while (cap < n * 2) {
      cap <<= 1;
      --shift_;
    }
    keys_.assign(cap, kEmpty);
    values_.assign(cap, {0, 0});
    mask_ = cap - 1;
  }
  void insert_or_assign(int32_t a, int32_t b, int32_t rank, int32_t new_id) {
    uint64_t key = make_key(a, b);
    size_t i = slot(key);
    while (keys_[i] != kEmpty && keys_[i] != key) i = (i + 1) & mask_;
    keys_[i] = key;
    values_[i] = {rank, new_id};
  }
  // Returns false if (a, b) is not a merge.
  bool find(int32_t a, int32_t b, int32_t* rank, int32_t* new_id) const {
    uint64_t key = make_key(a, b);
    for (size_t i = slot(key);; i = (i + 1) & mask_) {
      if (keys_[i] == key) {
        *rank = values_[i].first;
        *new_id = values_[i].second;
        return true;
      }
      if (keys_[i] == kEmpty) return false;
    }
  }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  static uint64_t make_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  // Fibonacci hashing: the top bits of the product depend on every bit of the key.
  size_t slot(uint64_t key) const { return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> shift_); }
  std::vector<uint64_t> keys_;
  std::vector<std::pair<int32_t, int32_t>> values_;
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
constexpr size_t kMaxCacheEntries = 10000;

class BpeModel : public Model {
 public:
  Status load(const Json& j, const std::string& path);
  void tokenize(std::string_view piece, std::vector<int32_t>& out) const override;

 private:
  void merge_word(std::string_view w, std::vector<int32_t>& out) const;
  int32_t lookup_symbol(std::string_view s, bool is_first, bool is_last) const;

  MergeTable merges_;
  std::optional<int32_t> unk_id_;
  std::string continuing_subword_prefix_;
  std::string end_of_word_suffix_;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  std::vector<int32_t> byte_ids_;  // id of "<0xXX>" per byte, -1 if absent
  std::vector<int32_t> bmp_ids_;   // id of each single BMP code point token, -1 if absent
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
struct Candidate {
  int32_t rank;
  int32_t pos;
  int32_t new_id;
  // std heap is a max-heap: "greater" candidates come out last, so invert on (rank, pos).
  bool operator<(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
};

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
      heap.push_back({rank, static_cast<int32_t>(i), new_id});
    }
  }
  std::make_heap(heap.begin(), heap.end());
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end());
    Candidate top = heap.back();
    heap.pop_back();
    Symbol& left = syms[top.pos];
    if (left.len == 0 || left.next < 0) continue;
    int32_t right_pos = left.next;
    Symbol& right = syms[right_pos];
    if (!merges_.find(left.id, right.id, &rank, &new_id) || new_id != top.new_id) continue;
    left.id = new_id;
    left.len += right.len;
    left.next = right.next;
    right.len = 0;
    if (left.next >= 0) syms[left.next].prev = top.pos;
    if (left.prev >= 0 && merges_.find(syms[left.prev].id, left.id, &rank, &new_id)) {
      heap.push_back({rank, left.prev, new_id});
      std::push_heap(heap.begin(), heap.end());
    }
    if (left.next >= 0 && merges_.find(left.id, syms[left.next].id, &rank, &new_id)) {
      heap.push_back({rank, top.pos, new_id});
      std::push_heap(heap.begin(), heap.end());
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
