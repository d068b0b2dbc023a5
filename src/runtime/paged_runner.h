// PagedRunner: runs a CausalLM over a set of sequences whose K/V live in a paged block cache. It owns the
// cache and a free list of blocks, builds ForwardBatch (ids, positions, slot mapping, block tables) for a
// mixed prefill + decode step, and returns each sequence's last-token logits. The engine's scheduler and
// KVCacheManager replace the block bookkeeping here; the batch construction is what the ModelRunner keeps.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/status.h"
#include "model/causal_lm.h"

namespace llmserve {

struct RunnerSequence {
  std::vector<int32_t> token_ids;  // prompt followed by generated tokens
  int64_t num_computed_tokens = 0; // tokens whose K/V are in the cache
  std::vector<int32_t> block_ids;  // physical blocks, in logical order
};

struct PagedRunnerOptions {
  int64_t block_size = 16;
  int64_t num_blocks = 0;           // 0: enough for max_num_tokens_cached tokens
  int64_t max_num_tokens_cached = 4096;
  int64_t max_chunk_tokens = 0;     // > 0: a step computes at most this many tokens of each sequence
};

class PagedRunner {
 public:
  PagedRunner(CausalLM& model, PagedRunnerOptions options);

  // Computes the pending tokens (num_computed_tokens .. size) of every sequence in `seqs` (capped at
  // max_chunk_tokens each) in one forward pass, allocating blocks as needed. Returns logits
  // [seqs.size(), vocab] for each sequence's last computed token. ResourceExhausted when the blocks run out
  // (nothing is computed then and the sequences keep the blocks they had).
  StatusOr<Tensor> step(const std::vector<RunnerSequence*>& seqs);

  // Returns the sequence's blocks to the free list.
  void release(RunnerSequence& seq);

  int64_t num_free_blocks() const { return static_cast<int64_t>(free_blocks_.size()); }
  int64_t num_blocks() const { return kv_cache_.num_blocks; }
  const CausalLM& model() const { return model_; }

 private:
  Status ensure_blocks(RunnerSequence& seq, int64_t num_tokens);

  CausalLM& model_;
  PagedRunnerOptions options_;
  KVCacheTensors kv_cache_;
  std::vector<int32_t> free_blocks_;  // stack: the most recently freed block is reused first
};

// Greedy decoding of each prompt for up to max_new_tokens, stopping early at any id in stop_ids. All prompts
// run as one batch. Returns the generated ids per prompt.
StatusOr<std::vector<std::vector<int32_t>>> greedy_generate(PagedRunner& runner,
                                                            const std::vector<std::vector<int32_t>>& prompts,
                                                            int64_t max_new_tokens,
                                                            const std::vector<int32_t>& stop_ids);

}  // namespace llmserve
