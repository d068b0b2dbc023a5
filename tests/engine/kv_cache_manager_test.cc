// BlockPool / KVCacheManager: hash chain, hits only on identical content (collisions forced with an injected
// hash), LRU eviction order, ref counts with shared prefixes, n > 1 sharing, prefix-cache counters.
#include "engine/kv_cache_manager.h"

#include <gtest/gtest.h>

#include <numeric>
#include <random>

namespace llmserve {
namespace {

Request make_request(const std::string& id, std::vector<int32_t> prompt, uint64_t salt = 0) {
  EngineCoreRequest r;
  r.request_id = id;
  r.prompt_token_ids = std::move(prompt);
  r.cache_salt = salt;
  return Request(std::move(r));
}

std::vector<int32_t> iota_tokens(int n, int start = 0) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

// Admits a request the way the scheduler does: prefix lookup, then allocation of the rest.
int64_t admit(KVCacheManager& kv, Request& req) {
  auto [computed, num_hit] = kv.get_computed_blocks(req);
  auto blocks = kv.allocate_slots(req, req.num_tokens() - num_hit, &computed, num_hit);
  EXPECT_TRUE(blocks.has_value());
  req.num_computed_tokens = req.num_tokens();
  return num_hit;
}

TEST(BlockHashTest, ChainDependsOnParentTokensAndExtra) {
  std::vector<int32_t> a = iota_tokens(4), b = iota_tokens(4);
  EXPECT_EQ(default_block_hash(0, a, 0), default_block_hash(0, b, 0));
  b[3] = 99;
  EXPECT_NE(default_block_hash(0, a, 0), default_block_hash(0, b, 0));
  EXPECT_NE(default_block_hash(0, a, 0), default_block_hash(1, a, 0));
  EXPECT_NE(default_block_hash(0, a, 0), default_block_hash(0, a, 7));

  KVCacheManager kv({.num_blocks = 8, .block_size = 4});
  Request r = make_request("r", iota_tokens(11));
  kv.update_block_hashes(r);
  ASSERT_EQ(r.block_hashes.size(), 2u);  // only full blocks
  std::vector<int32_t> t0(r.token_ids().begin(), r.token_ids().begin() + 4);
  std::vector<int32_t> t1(r.token_ids().begin() + 4, r.token_ids().begin() + 8);
  EXPECT_EQ(r.block_hashes[0], default_block_hash(0, t0, 0));
  EXPECT_EQ(r.block_hashes[1], default_block_hash(r.block_hashes[0], t1, 0));
  r.append_output_token(5);
  kv.update_block_hashes(r);
  EXPECT_EQ(r.block_hashes.size(), 3u);
}

TEST(KVCacheManagerTest, PrefixHitSharesBlocksAndCountsRefs) {
  KVCacheManager kv({.num_blocks = 10, .block_size = 4});
  Request a = make_request("a", iota_tokens(10));
  EXPECT_EQ(admit(kv, a), 0);
  EXPECT_EQ(kv.get_block_ids(a).size(), 3u);
  EXPECT_EQ(kv.block_pool().num_cached_blocks(), 2);  // 2 full blocks registered

  // Same first 9 tokens, then different: the two full blocks are shared.
  std::vector<int32_t> pb = iota_tokens(10);
  pb[9] = 500;
  Request b = make_request("b", pb);
  EXPECT_EQ(admit(kv, b), 8);
  const auto ab = kv.get_block_ids(a);
  const auto bb = kv.get_block_ids(b);
  ASSERT_EQ(bb.size(), 3u);
  EXPECT_EQ(ab[0], bb[0]);
  EXPECT_EQ(ab[1], bb[1]);
  EXPECT_NE(ab[2], bb[2]);
  EXPECT_EQ(kv.block_pool().ref_cnt(ab[0]), 2);
  EXPECT_EQ(kv.block_pool().ref_cnt(ab[2]), 1);
  EXPECT_EQ(kv.block_pool().num_free_blocks(), 10 - 4);

  // A prompt that is exactly two blocks hits only one: its last token must be computed for logits.
  Request c = make_request("c", iota_tokens(8));
  EXPECT_EQ(admit(kv, c), 4);

  const PrefixCacheStats s = kv.take_prefix_cache_stats();
  EXPECT_EQ(s.requests, 3);
  EXPECT_EQ(s.queries, 10 + 10 + 8);
  EXPECT_EQ(s.hits, 0 + 8 + 4);
  EXPECT_EQ(kv.take_prefix_cache_stats().queries, 0);  // reset after take
  EXPECT_EQ(kv.total_prefix_cache_stats().hits, 12);

  const int32_t shared = ab[0];
  kv.free(a);
  EXPECT_EQ(kv.block_pool().ref_cnt(shared), 2);
  kv.free(b);
  kv.free(c);
  EXPECT_EQ(kv.block_pool().num_free_blocks(), 10);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(kv.block_pool().ref_cnt(i), 0);
  EXPECT_EQ(kv.num_requests(), 0);
}

TEST(KVCacheManagerTest, CollidingHashesNeverServeWrongContent) {
  // Every block hashes to the same value: only the token / parent / salt comparison can tell them apart.
  KVCacheManager kv({.num_blocks = 32,
                     .block_size = 4,
                     .hash_fn = [](uint64_t, std::span<const int32_t>, uint64_t) -> uint64_t { return 42; }});
  Request a = make_request("a", {1, 2, 3, 4, 5, 6, 7, 8, 9});
  admit(kv, a);
  // Different first block: no hit although every hash matches.
  Request b = make_request("b", {1, 2, 3, 0, 5, 6, 7, 8, 9});
  EXPECT_EQ(admit(kv, b), 0);
  // Same second block content after a different first block: the parent check rejects it.
  Request c = make_request("c", {9, 9, 9, 9, 5, 6, 7, 8, 9});
  EXPECT_EQ(admit(kv, c), 0);
  // Different salt: no hit.
  Request d = make_request("d", {1, 2, 3, 4, 5, 6, 7, 8, 9}, /*salt=*/7);
  EXPECT_EQ(admit(kv, d), 0);
  // Identical content: full hit on both blocks.
  Request e = make_request("e", {1, 2, 3, 4, 5, 6, 7, 8, 10});
  EXPECT_EQ(admit(kv, e), 8);
  EXPECT_EQ(kv.get_block_ids(e)[0], kv.get_block_ids(a)[0]);
  EXPECT_EQ(kv.get_block_ids(e)[1], kv.get_block_ids(a)[1]);
  // After "b"'s first block was cached, a request matching b's blocks hits b's blocks, not a's.
  Request f = make_request("f", {1, 2, 3, 0, 5, 6, 7, 8, 1});
  EXPECT_EQ(admit(kv, f), 8);
  EXPECT_EQ(kv.get_block_ids(f)[1], kv.get_block_ids(b)[1]);
}

TEST(BlockPoolTest, ChildOfAnEvictedParentIsNeverServedThroughANewParent) {
  // The pool itself allows freeing a parent before its child; the child must then stay unreachable from a
  // re-cached copy of the parent, because that copy is a different block (a new serial).
  BlockPool pool(4, 2, /*enable_caching=*/true);
  const std::vector<int32_t> t0 = {1, 2}, t1 = {3, 4};
  auto ids = pool.get_new_blocks(2);
  const uint64_t s0 = pool.cache_block(ids[0], 11, 0, t0, 0);
  const uint64_t s1 = pool.cache_block(ids[1], 22, s0, t1, 0);
  EXPECT_NE(s0, s1);
  EXPECT_EQ(pool.find_cached_block(22, s0, t1, 0), ids[1]);
  EXPECT_FALSE(pool.find_cached_block(22, s0 + 100, t1, 0).has_value());  // wrong parent
  pool.free_blocks(std::vector<int32_t>{ids[0], ids[1]});                 // parent first: it is evicted first
  EXPECT_EQ(pool.free_queue(), (std::vector<int32_t>{2, 3, ids[0], ids[1]}));
  auto more = pool.get_new_blocks(3);  // takes 2, 3 and the parent
  EXPECT_EQ(more[2], ids[0]);
  EXPECT_EQ(pool.serial(ids[0]), 0u);
  EXPECT_FALSE(pool.find_cached_block(11, 0, t0, 0).has_value());
  // The same content cached again in another block gets a new serial; the old child is not its child.
  const uint64_t s0b = pool.cache_block(more[0], 11, 0, t0, 0);
  EXPECT_NE(s0b, s0);
  EXPECT_EQ(pool.find_cached_block(11, 0, t0, 0), more[0]);
  EXPECT_FALSE(pool.find_cached_block(22, s0b, t1, 0).has_value());
  EXPECT_EQ(pool.num_cached_blocks(), 2);
  EXPECT_FALSE(pool.reset_prefix_cache());  // blocks in use
  pool.free_blocks(more);
  EXPECT_TRUE(pool.reset_prefix_cache());
  EXPECT_EQ(pool.num_cached_blocks(), 0);
  EXPECT_EQ(pool.num_free_blocks(), 4);
}

TEST(KVCacheManagerTest, LruEvictionOrder) {
  // Four requests of two blocks (one full, one partial) freed in order a, b, c, d: each frees its tail first,
  // and allocation takes the least recently freed block first.
  KVCacheManager kv({.num_blocks = 8, .block_size = 2});
  std::vector<Request> reqs;
  for (int i = 0; i < 4; ++i) reqs.push_back(make_request(std::string(1, 'a' + i), {10 * i, 10 * i + 1, 10 * i + 2}));
  std::vector<std::vector<int32_t>> held;
  for (auto& r : reqs) {
    admit(kv, r);
    held.push_back(kv.get_block_ids(r));
  }
  EXPECT_EQ(kv.block_pool().num_free_blocks(), 0);
  Request extra = make_request("x", {1, 1, 1});
  EXPECT_FALSE(kv.can_allocate(extra, 3));
  EXPECT_FALSE(kv.allocate_slots(extra, 3).has_value());  // failure is a value; nothing changed
  EXPECT_EQ(kv.num_requests(), 4);
  for (auto& r : reqs) kv.free(r);
  std::vector<int32_t> expected_queue;
  for (const auto& h : held) expected_queue.insert(expected_queue.end(), {h[1], h[0]});
  EXPECT_EQ(kv.block_pool().free_queue(), expected_queue);
  // A prefix hit on b's head takes it out of the free queue; b2's own new block is a's tail.
  Request b2 = make_request("b2", {10, 11, 99});
  EXPECT_EQ(admit(kv, b2), 2);
  EXPECT_EQ(kv.get_block_ids(b2), (std::vector<int32_t>{held[1][0], held[0][1]}));
  // Next evictions: a's head, then b's tail (b's head is in use).
  Request n1 = make_request("n1", {5, 5, 5});
  ASSERT_TRUE(kv.allocate_slots(n1, 3));
  EXPECT_EQ(kv.get_block_ids(n1), (std::vector<int32_t>{held[0][0], held[1][1]}));
  // a's prefix is gone, c's and d's survive.
  Request a2 = make_request("a2", {0, 1, 2});
  Request c2 = make_request("c2", {20, 21, 22});
  Request d2 = make_request("d2", {30, 31, 32});
  EXPECT_EQ(kv.get_computed_blocks(a2).second, 0);
  EXPECT_EQ(kv.get_computed_blocks(c2).second, 2);
  EXPECT_EQ(kv.get_computed_blocks(d2).second, 2);
  kv.free(n1);
  kv.free(b2);
  EXPECT_EQ(kv.block_pool().num_free_blocks(), 8);
}

TEST(KVCacheManagerTest, CanAllocateCountsRevivedFreeBlocks) {
  // A prefix hit on a cached block in the free queue consumes a free block: can_allocate must see that.
  KVCacheManager kv({.num_blocks = 3, .block_size = 2});
  Request a = make_request("a", {1, 2, 3});
  admit(kv, a);
  kv.free(a);  // 2 blocks free, one cached ({1,2})
  Request hold = make_request("hold", {8});
  ASSERT_TRUE(kv.allocate_slots(hold, 1));
  EXPECT_EQ(kv.block_pool().num_free_blocks(), 2);
  Request b = make_request("b", {1, 2, 3, 4, 5});  // hits {1,2}; needs 2 more blocks, only 1 other is free
  auto [computed, hit] = kv.get_computed_blocks(b);
  EXPECT_EQ(hit, 2);
  EXPECT_FALSE(kv.can_allocate(b, 3, &computed, hit));
  EXPECT_FALSE(kv.allocate_slots(b, 3, &computed, hit).has_value());
  EXPECT_EQ(kv.block_pool().ref_cnt(computed.block_ids()[0]), 0);    // untouched on failure
  EXPECT_TRUE(kv.allocate_slots(b, 1, &computed, hit).has_value());  // chunk that fits
  kv.free(b);
  kv.free(hold);
  EXPECT_EQ(kv.block_pool().num_free_blocks(), 3);
}

TEST(KVCacheManagerTest, ParallelSamplingSharesPromptBlocks) {
  // n = 4 children of one 37-token prompt admitted in turn: every full prompt block is held by all four.
  KVCacheManager kv({.num_blocks = 40, .block_size = 8});
  std::vector<int32_t> prompt = iota_tokens(37, 100);
  std::vector<Request> kids;
  for (int i = 0; i < 4; ++i) kids.push_back(make_request(std::to_string(i) + "_req", prompt));
  for (int i = 0; i < 4; ++i) EXPECT_EQ(admit(kv, kids[i]), i == 0 ? 0 : 32);
  const auto b0 = kv.get_block_ids(kids[0]);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(kv.block_pool().ref_cnt(b0[i]), 4);
  EXPECT_EQ(kv.block_pool().ref_cnt(b0[4]), 1);  // the partial last block is private
  EXPECT_EQ(kv.block_pool().num_free_blocks(), 40 - 4 - 4);
  // Decoding diverges: each child appends its own tokens into its own tail block.
  for (int i = 0; i < 4; ++i) {
    kids[i].append_output_token(1000 + i);
    ASSERT_TRUE(kv.allocate_slots(kids[i], 1));
    kids[i].num_computed_tokens += 1;
  }
  for (auto& k : kids) kv.free(k);
  EXPECT_EQ(kv.block_pool().num_free_blocks(), 40);
}

TEST(KVCacheManagerTest, PromptLogprobsSkipTheCacheAndCachingCanBeOff) {
  KVCacheManager kv({.num_blocks = 8, .block_size = 2});
  Request a = make_request("a", {1, 2, 3, 4, 5});
  admit(kv, a);
  EngineCoreRequest er;
  er.request_id = "b";
  er.prompt_token_ids = {1, 2, 3, 4, 5};
  er.sampling_params.prompt_logprobs = 2;
  Request b(er);
  EXPECT_EQ(admit(kv, b), 0);
  kv.free(a);
  kv.free(b);

  KVCacheManager off({.num_blocks = 8, .block_size = 2, .enable_prefix_caching = false});
  Request c = make_request("c", {1, 2, 3, 4, 5});
  Request d = make_request("d", {1, 2, 3, 4, 5});
  admit(off, c);
  EXPECT_EQ(admit(off, d), 0);
  EXPECT_EQ(off.block_pool().num_cached_blocks(), 0);
}

}  // namespace
}  // namespace llmserve

namespace llmserve {
namespace {

TEST(KVCacheManagerTest, MovedFromRequestHoldsNothing) {
  KVCacheManager kv({.num_blocks = 4, .block_size = 2});
  Request a = make_request("a", {1, 2, 3});
  admit(kv, a);
  Request b = std::move(a);
  EXPECT_TRUE(kv.get_block_ids(a).empty());  // NOLINT(bugprone-use-after-move): checking the moved-from state
  EXPECT_EQ(kv.get_block_ids(b).size(), 2u);
  kv.free(a);  // no-op
  EXPECT_EQ(kv.block_pool().num_free_blocks(), 2);
  kv.free(b);
  EXPECT_EQ(kv.block_pool().num_free_blocks(), 4);
  EXPECT_EQ(kv.num_requests(), 0);
}

}  // namespace
}  // namespace llmserve
