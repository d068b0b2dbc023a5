// BlockPool: the fixed set of KV-cache blocks, their ref counts, the free queue and the prefix-cache index.
// Invariants: a block is in the free queue iff its ref_cnt is 0; a cached block (serial != 0) is findable by its
// hash until it is handed out again by get_new_blocks(), which evicts the least recently freed block first.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

namespace llmserve {

// Identity of a full block's content: hash of (parent hash, token ids, extra key). Its value only narrows the
// search; a hit is confirmed by comparing the tokens, the extra key and the exact parent block (see serial).
using BlockHashFn = std::function<uint64_t(uint64_t parent_hash, std::span<const int32_t> token_ids, uint64_t extra)>;

// The default hash: a 64-bit multiply-xorshift mix over the inputs (fast, well distributed, not cryptographic).
uint64_t default_block_hash(uint64_t parent_hash, std::span<const int32_t> token_ids, uint64_t extra);

class BlockPool {
 public:
  BlockPool(int32_t num_blocks, int32_t block_size, bool enable_caching);

  int32_t num_blocks() const { return num_blocks_; }
  int32_t block_size() const { return block_size_; }
  int32_t num_free_blocks() const { return num_free_; }
  // Fraction of blocks in use (ref_cnt > 0), in [0, 1].
  double usage() const { return 1.0 - static_cast<double>(num_free_) / num_blocks_; }

  // Pops `n` blocks from the front of the free queue (evicting their cache entries), each with ref_cnt 1.
  // CHECKs n <= num_free_blocks(): callers ask first.
  std::vector<int32_t> get_new_blocks(int32_t n);
  // Appends `n` new blocks to `out` (same as get_new_blocks, without a temporary vector).
  void append_new_blocks(int32_t n, std::vector<int32_t>& out);

  // The cached block holding exactly `token_ids` after the block whose serial is `parent_serial` (0: first
  // block), with extra key `extra`, or nullopt. Never returns a block whose content differs.
  std::optional<int32_t> find_cached_block(uint64_t hash, uint64_t parent_serial, std::span<const int32_t> token_ids,
                                           uint64_t extra) const;
  // Registers a full, in-use block under `hash`; returns its new serial (unique for the pool's lifetime).
  // A block that is already cached keeps its entry and serial.
  uint64_t cache_block(int32_t block_id, uint64_t hash, uint64_t parent_serial, std::span<const int32_t> token_ids,
                       uint64_t extra);
  // The serial of a cached block, 0 if it is not cached.
  uint64_t serial(int32_t block_id) const { return blocks_[block_id].serial; }

  // ref_cnt++ for each block, taking free (cached) ones out of the free queue.
  void touch(std::span<const int32_t> block_ids);
  // ref_cnt-- for each block in the given order; blocks reaching 0 go to the back of the free queue, so the
  // first ones given are evicted first. Callers pass a request's blocks tail first.
  void free_blocks(std::span<const int32_t> block_ids);

  int32_t ref_cnt(int32_t block_id) const { return blocks_[block_id].ref_cnt; }
  // Number of blocks findable in the prefix-cache index.
  int64_t num_cached_blocks() const { return num_cached_; }
  // Drops every cache entry; false (and nothing done) unless every block is free.
  bool reset_prefix_cache();
  // Block ids of the free queue, front (next evicted) first. O(num_blocks); tests only.
  std::vector<int32_t> free_queue() const;

 private:
  struct Block {
    int32_t ref_cnt = 0;
    int32_t prev = -1;  // free-queue links; -1 at the ends
    int32_t next = -1;
    bool in_free_queue = false;
    uint64_t hash = 0;
    uint64_t serial = 0;         // 0: not cached
    uint64_t parent_serial = 0;  // serial of the preceding block when this one was cached
    uint64_t extra = 0;
    int32_t next_same_hash = -1;  // next cached block with the same hash
  };
  void push_back_free(int32_t id);
  void remove_free(int32_t id);
  void evict(int32_t id);
  std::span<const int32_t> tokens_of(int32_t id) const {
    return {block_tokens_.data() + static_cast<size_t>(id) * block_size_, static_cast<size_t>(block_size_)};
  }

  int32_t num_blocks_;
  int32_t block_size_;
  bool enable_caching_;
  std::vector<Block> blocks_;
  std::vector<int32_t> block_tokens_;  // [num_blocks, block_size] token ids of cached blocks
  int32_t free_head_ = -1;
  int32_t free_tail_ = -1;
  int32_t num_free_ = 0;
  int64_t num_cached_ = 0;
  uint64_t next_serial_ = 1;
  // hash -> first cached block with that hash; the rest follow next_same_hash (several when contents collide
  // or the same content was cached twice).
  std::unordered_map<uint64_t, int32_t> hash_to_block_;
};

}  // namespace llmserve
