// GPU memory planning (--gpu-memory-utilization): after the weights are loaded, one profiling forward at the
// largest step the scheduler can make measures the activation peak; what is left of
// utilization x total device memory goes to KV-cache blocks. Invariant: weights + activation peak + KV cache
// stay within utilization x total (other processes' memory counts against the budget too). Tensor parallelism: the
// plan is per rank — each rank's device is measured (its shard, its arena, its kv heads' blocks) and the rank leaving
// the fewest blocks sets the count every rank allocates.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"
#include "model/causal_lm.h"
#include "runtime/model_runner.h"

namespace llmserve {

struct KVCachePlan {
  int64_t num_blocks = 0;
  size_t block_bytes = 0;            // one block, all layers, keys and values
  size_t total_bytes = 0;            // device memory
  size_t used_before_bytes = 0;      // taken by this process (weights, workspaces) before the KV cache
  size_t free_bytes = 0;             // free on the device before the KV cache (what every process left)
  size_t activation_peak_bytes = 0;  // the profiling forward's peak above that
  size_t cuda_graph_bytes = 0;       // estimate for the FULL decode graphs (0 without graphs), plus the scratch block
  size_t budget_bytes = 0;           // utilization x total
  std::string summary;               // one line for the log
};

// Runs the profiling forward of `max_num_batched_tokens` tokens over min(max_num_seqs, tokens) requests on the
// model's device and returns the KV-cache plan. The budget is per process, as vLLM's: utilization x total less what
// this process took since its first allocation (other processes on the GPU do not count), and never more than is
// free. InvalidArgument (naming --gpu-memory-utilization) when that leaves no room for a single block, or for
// max_model_len tokens.
// With CUDA graphs (`graphs`: mode and capture sizes as the runner will get them) the profiling runner captures the
// largest size once; that graph's memory times the number of sizes, and the scratch block, leave the budget first.
StatusOr<KVCachePlan> plan_gpu_kv_cache(CausalLM& model, int32_t block_size, int64_t max_num_batched_tokens,
                                        int64_t max_num_seqs, int64_t max_model_len, double gpu_memory_utilization,
                                        const ModelRunnerConfig& graphs = {});

}  // namespace llmserve
