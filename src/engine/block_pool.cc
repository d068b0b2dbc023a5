// BlockPool: intrusive doubly-linked free queue (O(1) pop/remove/append) over a flat block array, plus the
// hash -> blocks index of the prefix cache. Eviction is lazy: a cached block stays findable while it sits free.
#include "engine/block_pool.h"

#include <algorithm>
#include <cstring>

#include "core/logging.h"

namespace llmserve {
namespace {

inline uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  h ^= h >> 31;
  h *= 0xbf58476d1ce4e5b9ULL;
  h ^= h >> 29;
  return h;
}

}  // namespace

uint64_t default_block_hash(uint64_t parent_hash, std::span<const int32_t> token_ids, uint64_t extra) {
  uint64_t h = mix(0x6a09e667f3bcc908ULL, parent_hash);
  h = mix(h, extra);
  for (int32_t t : token_ids) h = mix(h, static_cast<uint32_t>(t));
  return mix(h, token_ids.size());
}

BlockPool::BlockPool(int32_t num_blocks, int32_t block_size, bool enable_caching)
    : num_blocks_(num_blocks), block_size_(block_size), enable_caching_(enable_caching), blocks_(num_blocks) {
  CHECK_GT(num_blocks, 0);
  CHECK_GT(block_size, 0);
  if (enable_caching_) {
    block_tokens_.assign(static_cast<size_t>(num_blocks) * block_size, 0);
    hash_to_block_.reserve(static_cast<size_t>(num_blocks));
  }
  for (int32_t i = 0; i < num_blocks; ++i) push_back_free(i);
}

void BlockPool::push_back_free(int32_t id) {
  Block& b = blocks_[id];
  CHECK(!b.in_free_queue) << "block " << id;
  b.prev = free_tail_;
  b.next = -1;
  if (free_tail_ >= 0)
    blocks_[free_tail_].next = id;
  else
    free_head_ = id;
  free_tail_ = id;
  b.in_free_queue = true;
  ++num_free_;
}

void BlockPool::remove_free(int32_t id) {
  Block& b = blocks_[id];
  CHECK(b.in_free_queue) << "block " << id;
  if (b.prev >= 0)
    blocks_[b.prev].next = b.next;
  else
    free_head_ = b.next;
  if (b.next >= 0)
    blocks_[b.next].prev = b.prev;
  else
    free_tail_ = b.prev;
  b.prev = b.next = -1;
  b.in_free_queue = false;
  --num_free_;
}

void BlockPool::evict(int32_t id) {
  Block& b = blocks_[id];
  if (b.serial == 0) return;
  auto it = hash_to_block_.find(b.hash);
  CHECK(it != hash_to_block_.end()) << "cached block " << id << " missing from the index";
  if (it->second == id) {
    if (b.next_same_hash < 0)
      hash_to_block_.erase(it);
    else
      it->second = b.next_same_hash;
  } else {
    int32_t prev = it->second;
    while (blocks_[prev].next_same_hash != id) {
      prev = blocks_[prev].next_same_hash;
      CHECK_GE(prev, 0) << "cached block " << id << " missing from its hash chain";
    }
    blocks_[prev].next_same_hash = b.next_same_hash;
  }
  b.next_same_hash = -1;
  b.serial = 0;
  --num_cached_;
}

void BlockPool::append_new_blocks(int32_t n, std::vector<int32_t>& out) {
  CHECK_LE(n, num_free_) << "get_new_blocks without a capacity check";
  for (int32_t i = 0; i < n; ++i) {
    const int32_t id = free_head_;
    remove_free(id);
    evict(id);
    blocks_[id].ref_cnt = 1;
    out.push_back(id);
  }
}

std::vector<int32_t> BlockPool::get_new_blocks(int32_t n) {
  std::vector<int32_t> out;
  out.reserve(n);
  append_new_blocks(n, out);
  return out;
}

std::optional<int32_t> BlockPool::find_cached_block(uint64_t hash, uint64_t parent_serial,
                                                    std::span<const int32_t> token_ids, uint64_t extra) const {
  if (!enable_caching_ || static_cast<int32_t>(token_ids.size()) != block_size_) return std::nullopt;
  auto it = hash_to_block_.find(hash);
  if (it == hash_to_block_.end()) return std::nullopt;
  for (int32_t id = it->second; id >= 0; id = blocks_[id].next_same_hash) {
    const Block& b = blocks_[id];
    // The hash only narrows the search: the same parent block, extra key and tokens make the content equal.
    if (b.parent_serial == parent_serial && b.extra == extra &&
        std::memcmp(tokens_of(id).data(), token_ids.data(), token_ids.size_bytes()) == 0) {
      return id;
    }
  }
  return std::nullopt;
}

uint64_t BlockPool::cache_block(int32_t block_id, uint64_t hash, uint64_t parent_serial,
                                std::span<const int32_t> token_ids, uint64_t extra) {
  CHECK(enable_caching_);
  CHECK_EQ(static_cast<int32_t>(token_ids.size()), block_size_);
  Block& b = blocks_[block_id];
  CHECK_GT(b.ref_cnt, 0) << "caching free block " << block_id;
  if (b.serial != 0) return b.serial;
  b.hash = hash;
  b.parent_serial = parent_serial;
  b.extra = extra;
  b.serial = next_serial_++;
  std::memcpy(block_tokens_.data() + static_cast<size_t>(block_id) * block_size_, token_ids.data(),
              token_ids.size_bytes());
  auto [it, inserted] = hash_to_block_.try_emplace(hash, block_id);
  if (!inserted) {
    b.next_same_hash = it->second;
    it->second = block_id;
  }
  ++num_cached_;
  return b.serial;
}

void BlockPool::touch(std::span<const int32_t> block_ids) {
  for (int32_t id : block_ids) {
    Block& b = blocks_[id];
    if (b.ref_cnt == 0) remove_free(id);
    ++b.ref_cnt;
  }
}

void BlockPool::free_blocks(std::span<const int32_t> block_ids) {
  for (int32_t id : block_ids) {
    Block& b = blocks_[id];
    CHECK_GT(b.ref_cnt, 0) << "double free of block " << id;
    if (--b.ref_cnt == 0) push_back_free(id);
  }
}

bool BlockPool::reset_prefix_cache() {
  if (num_free_ != num_blocks_) return false;
  for (auto& b : blocks_) {
    b.serial = 0;
    b.next_same_hash = -1;
  }
  hash_to_block_.clear();
  num_cached_ = 0;
  return true;
}

std::vector<int32_t> BlockPool::free_queue() const {
  std::vector<int32_t> out;
  for (int32_t id = free_head_; id >= 0; id = blocks_[id].next) out.push_back(id);
  return out;
}

}  // namespace llmserve
