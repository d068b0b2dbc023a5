// KVCacheManager: prefix-cache lookup walks the request's hash chain block by block and stops at the first
// miss; allocation counts cached-but-free blocks it would revive, so it never promises blocks it cannot give.
#include "engine/kv_cache_manager.h"

#include <algorithm>

#include "core/logging.h"

namespace llmserve {

KVCacheManager::KVCacheManager(KVCacheConfig config)
    : pool_(config.num_blocks, config.block_size, config.enable_prefix_caching),
      enable_caching_(config.enable_prefix_caching),
      hash_fn_(config.hash_fn ? std::move(config.hash_fn) : BlockHashFn(default_block_hash)) {}

void KVCacheManager::update_block_hashes(Request& req) const {
  const int64_t bs = pool_.block_size();
  const int64_t num_full = req.num_tokens() / bs;
  auto& hashes = req.block_hashes;
  while (static_cast<int64_t>(hashes.size()) < num_full) {
    const size_t i = hashes.size();
    const uint64_t parent = i == 0 ? 0 : hashes[i - 1];
    std::span<const int32_t> tokens(req.token_ids().data() + i * bs, static_cast<size_t>(bs));
    hashes.push_back(hash_fn_(parent, tokens, req.cache_salt()));
  }
}

std::pair<KVCacheBlocks, int64_t> KVCacheManager::get_computed_blocks(Request& req) {
  KVCacheBlocks out;
  // Requests that want prompt logprobs must run every prompt token through the model.
  if (!enable_caching_ || req.sampling_params().prompt_logprobs.has_value()) return {out, 0};
  update_block_hashes(req);
  const int64_t bs = pool_.block_size();
  const int64_t max_hit_blocks = (req.num_tokens() - 1) / bs;
  uint64_t parent_serial = 0;
  for (int64_t i = 0; i < max_hit_blocks; ++i) {
    std::span<const int32_t> tokens(req.token_ids().data() + i * bs, static_cast<size_t>(bs));
    auto id = pool_.find_cached_block(req.block_hashes[i], parent_serial, tokens, req.cache_salt());
    if (!id) break;
    out.block_ids_.push_back(*id);
    parent_serial = pool_.serial(*id);
  }
  const int64_t num_tokens = static_cast<int64_t>(out.block_ids_.size()) * bs;
  return {std::move(out), num_tokens};
}

int32_t KVCacheManager::num_blocks_needed(const RequestBlocks* rb, const Request& req, int64_t num_new_tokens,
                                          const KVCacheBlocks* new_computed_blocks,
                                          int64_t num_new_computed_tokens) const {
  const int64_t bs = pool_.block_size();
  const int64_t total = req.num_computed_tokens + num_new_computed_tokens + num_new_tokens;
  const int64_t required = (total + bs - 1) / bs;
  const int64_t have = (rb ? static_cast<int64_t>(rb->block_ids.size()) : 0) +
                       (new_computed_blocks ? static_cast<int64_t>(new_computed_blocks->size()) : 0);
  return static_cast<int32_t>(std::max<int64_t>(0, required - have));
}

bool KVCacheManager::can_allocate(const Request& req, int64_t num_new_tokens, const KVCacheBlocks* new_computed_blocks,
                                  int64_t num_new_computed_tokens) const {
  const RequestBlocks* rb = find(req);
  const int32_t num_new_blocks =
      num_blocks_needed(rb, req, num_new_tokens, new_computed_blocks, num_new_computed_tokens);
  // Computed blocks sitting in the free queue leave it when we take them, shrinking what is left to allocate.
  int32_t num_revived = 0;
  if (new_computed_blocks) {
    for (int32_t id : new_computed_blocks->block_ids()) num_revived += pool_.ref_cnt(id) == 0;
  }
  return num_new_blocks <= pool_.num_free_blocks() - num_revived;
}

std::optional<KVCacheBlocks> KVCacheManager::allocate_slots(Request& req, int64_t num_new_tokens,
                                                            const KVCacheBlocks* new_computed_blocks,
                                                            int64_t num_new_computed_tokens) {
  CHECK_GE(num_new_tokens, 0);
  // A sampled token not returned yet (async scheduling's placeholder) may be computed: its id reaches the step on
  // the device. It is hashed into the prefix cache only once known.
  CHECK_LE(req.num_computed_tokens + num_new_computed_tokens + num_new_tokens,
           req.num_tokens() + req.num_output_placeholders)
      << "request " << req.request_id() << " schedules tokens it does not have";
  if (new_computed_blocks == nullptr && req.kv_slot_.index >= 0) {
    // Decode fast path: the blocks held already cover the new tokens and no block becomes full.
    const RequestBlocks& held = slots_[static_cast<size_t>(req.kv_slot_.index)];
    const int64_t bs = pool_.block_size();
    const int64_t total = req.num_computed_tokens + num_new_computed_tokens + num_new_tokens;
    if ((total + bs - 1) / bs <= static_cast<int64_t>(held.block_ids.size()) &&
        (!enable_caching_ || total / bs <= held.num_cached_blocks)) {
      return KVCacheBlocks();
    }
  }
  if (!can_allocate(req, num_new_tokens, new_computed_blocks, num_new_computed_tokens)) return std::nullopt;
  if (req.kv_slot_.index < 0) {
    if (free_slots_.empty()) {
      req.kv_slot_.index = static_cast<int32_t>(slots_.size());
      slots_.emplace_back();
    } else {
      req.kv_slot_.index = free_slots_.back();
      free_slots_.pop_back();
    }
  }
  RequestBlocks& rb = slots_[static_cast<size_t>(req.kv_slot_.index)];
  const int32_t num_new_blocks =
      num_blocks_needed(&rb, req, num_new_tokens, new_computed_blocks, num_new_computed_tokens);
  if (new_computed_blocks) {
    CHECK(rb.block_ids.empty() || new_computed_blocks->empty()) << "prefix hit for a request holding blocks";
    pool_.touch(new_computed_blocks->block_ids());
    rb.block_ids.insert(rb.block_ids.end(), new_computed_blocks->block_ids().begin(),
                        new_computed_blocks->block_ids().end());
    if (!new_computed_blocks->empty()) rb.num_cached_blocks = static_cast<int32_t>(new_computed_blocks->size());
    if (enable_caching_ && !req.sampling_params().prompt_logprobs.has_value()) {
      ++stats_.requests;
      stats_.queries += req.num_tokens();
      stats_.hits += num_new_computed_tokens;
      ++total_stats_.requests;
      total_stats_.queries += req.num_tokens();
      total_stats_.hits += num_new_computed_tokens;
    }
  }
  KVCacheBlocks out;
  if (num_new_blocks > 0) {
    out.block_ids_.reserve(num_new_blocks);
    pool_.append_new_blocks(num_new_blocks, out.block_ids_);
    rb.block_ids.insert(rb.block_ids.end(), out.block_ids_.begin(), out.block_ids_.end());
  }
  if (enable_caching_) {
    cache_full_blocks(req, rb,
                      std::min(req.num_computed_tokens + num_new_computed_tokens + num_new_tokens, req.num_tokens()));
  }
  return out;
}

void KVCacheManager::cache_full_blocks(Request& req, RequestBlocks& rb, int64_t num_tokens) {
  const int64_t bs = pool_.block_size();
  const int32_t num_full = static_cast<int32_t>(num_tokens / bs);
  if (rb.num_cached_blocks >= num_full) return;
  update_block_hashes(req);
  uint64_t parent_serial = rb.num_cached_blocks == 0 ? 0 : pool_.serial(rb.block_ids[rb.num_cached_blocks - 1]);
  for (int32_t i = rb.num_cached_blocks; i < num_full; ++i) {
    std::span<const int32_t> tokens(req.token_ids().data() + static_cast<int64_t>(i) * bs, static_cast<size_t>(bs));
    parent_serial = pool_.cache_block(rb.block_ids[i], req.block_hashes[i], parent_serial, tokens, req.cache_salt());
  }
  rb.num_cached_blocks = num_full;
}

void KVCacheManager::free(Request& req) {
  if (req.kv_slot_.index < 0) return;
  RequestBlocks& rb = slots_[static_cast<size_t>(req.kv_slot_.index)];
  std::reverse(rb.block_ids.begin(), rb.block_ids.end());
  pool_.free_blocks(rb.block_ids);
  rb.block_ids.clear();  // keeps its capacity for the slot's next owner
  rb.num_cached_blocks = 0;
  free_slots_.push_back(req.kv_slot_.index);
  req.kv_slot_.index = -1;
}

const std::vector<int32_t>& KVCacheManager::get_block_ids(const Request& req) const {
  static const std::vector<int32_t> kEmpty;
  const RequestBlocks* rb = find(req);
  return rb ? rb->block_ids : kEmpty;
}

PrefixCacheStats KVCacheManager::take_prefix_cache_stats() {
  PrefixCacheStats s = stats_;
  stats_ = {};
  return s;
}

}  // namespace llmserve
