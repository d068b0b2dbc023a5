// KVCacheManager: which blocks each request holds, prefix-cache lookups over the request's block-hash chain,
// and the paired can_allocate() / allocate_slots() calls whose failure is a value (nullopt), never a crash.
// Invariant: a request's blocks cover ceil((num_computed_tokens + scheduled) / block_size) blocks, and every
// full block of known tokens is registered in the prefix cache (when enabled) as soon as it is allocated.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/block_pool.h"
#include "engine/request.h"

namespace llmserve {

struct KVCacheConfig {
  int32_t num_blocks = 0;
  int32_t block_size = 16;  // tokens per block
  bool enable_prefix_caching = true;
  BlockHashFn hash_fn{};  // empty: default_block_hash (tests inject colliding ones)
};

// Block ids handed from the cache manager to the scheduler; the scheduler only forwards them to the runner.
class KVCacheBlocks {
 public:
  KVCacheBlocks() = default;
  const std::vector<int32_t>& block_ids() const { return block_ids_; }
  bool empty() const { return block_ids_.empty(); }
  size_t size() const { return block_ids_.size(); }
  // Moves the ids out (leaves this empty).
  std::vector<int32_t> take_block_ids() { return std::move(block_ids_); }

 private:
  friend class KVCacheManager;
  std::vector<int32_t> block_ids_;
};

// Counters in tokens, as vLLM reports them: queries = prompt tokens looked up, hits = tokens served from cache.
struct PrefixCacheStats {
  int64_t requests = 0;
  int64_t queries = 0;
  int64_t hits = 0;
};

class KVCacheManager {
 public:
  explicit KVCacheManager(KVCacheConfig config);

  int32_t block_size() const { return pool_.block_size(); }
  double usage() const { return pool_.usage(); }
  bool prefix_caching_enabled() const { return enable_caching_; }

  // Extends req.block_hashes over every full block of req.token_ids() (idempotent, incremental).
  void update_block_hashes(Request& req) const;

  // The longest cached prefix of the request (whole blocks, leaving at least its last token to compute, since
  // the runner needs that token's logits) and the number of tokens it covers. Takes no references yet.
  std::pair<KVCacheBlocks, int64_t> get_computed_blocks(Request& req);

  // Whether allocate_slots() with the same arguments would succeed.
  bool can_allocate(const Request& req, int64_t num_new_tokens, const KVCacheBlocks* new_computed_blocks = nullptr,
                    int64_t num_new_computed_tokens = 0) const;
  // Reserves room for `num_new_tokens` tokens after req.num_computed_tokens + num_new_computed_tokens, taking a
  // reference on `new_computed_blocks` (from get_computed_blocks; their presence counts a prefix-cache query).
  // Returns the newly allocated blocks (maybe none), or nullopt with nothing changed when blocks run out.
  std::optional<KVCacheBlocks> allocate_slots(Request& req, int64_t num_new_tokens,
                                              const KVCacheBlocks* new_computed_blocks = nullptr,
                                              int64_t num_new_computed_tokens = 0);
  // Releases every block of the request (tail first, so its tail is evicted before the shared head).
  // No-op for a request holding nothing.
  void free(Request& req);

  // All block ids of a request in logical order (empty if it holds none).
  const std::vector<int32_t>& get_block_ids(const Request& req) const;
  // Requests holding blocks.
  int64_t num_requests() const { return static_cast<int64_t>(slots_.size() - free_slots_.size()); }

  // Counters since the previous call (then reset), and since construction.
  PrefixCacheStats take_prefix_cache_stats();
  const PrefixCacheStats& total_prefix_cache_stats() const { return total_stats_; }

  const BlockPool& block_pool() const { return pool_; }
  bool reset_prefix_cache() { return pool_.reset_prefix_cache(); }

 private:
  struct RequestBlocks {
    std::vector<int32_t> block_ids;
    int32_t num_cached_blocks = 0;  // leading blocks already registered in the prefix cache
  };
  const RequestBlocks* find(const Request& req) const {
    return req.kv_slot_.index < 0 ? nullptr : &slots_[static_cast<size_t>(req.kv_slot_.index)];
  }
  int32_t num_blocks_needed(const RequestBlocks* rb, const Request& req, int64_t num_new_tokens,
                            const KVCacheBlocks* new_computed_blocks, int64_t num_new_computed_tokens) const;
  void cache_full_blocks(Request& req, RequestBlocks& rb, int64_t num_tokens);

  BlockPool pool_;
  bool enable_caching_;
  BlockHashFn hash_fn_;
  // Per-request records indexed by Request::kv_slot_ (a vector, not a map keyed by id: the decode hot path
  // touches it for every running request every step).
  std::vector<RequestBlocks> slots_;
  std::vector<int32_t> free_slots_;
  PrefixCacheStats stats_;
  PrefixCacheStats total_stats_;
};

}  // namespace llmserve
