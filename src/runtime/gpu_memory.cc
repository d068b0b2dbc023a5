// KV-cache sizing from a profiling forward (see gpu_memory.h).
#include "runtime/gpu_memory.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "runtime/model_runner.h"

#ifdef LLMSERVE_WITH_CUDA
#include <cuda_runtime_api.h>

#include "core/cuda_allocator.h"
#endif

namespace llmserve {

StatusOr<KVCachePlan> plan_gpu_kv_cache(CausalLM& model, int32_t block_size, int64_t max_num_batched_tokens,
                                        int64_t max_num_seqs, int64_t max_model_len, double gpu_memory_utilization,
                                        const ModelRunnerConfig& graphs) {
  if (!(gpu_memory_utilization > 0.0 && gpu_memory_utilization <= 1.0)) {
    return invalid_argument("--gpu-memory-utilization " + std::to_string(gpu_memory_utilization) +
                            " must be in (0, 1]");
  }
#ifdef LLMSERVE_WITH_CUDA
  // Tensor parallelism: every rank's device is measured and the smallest per-rank budget decides (each rank holds
  // the same number of blocks of its own kv heads). One device otherwise.
  std::vector<int> devs;
  for (const Device& d : model.devices()) devs.push_back(d.index);
  KVCachePlan plan;
  plan.block_bytes = ModelRunner::kv_block_bytes(model, block_size);
  const int64_t tokens = std::max<int64_t>(1, max_num_batched_tokens);
  const int64_t reqs = std::clamp<int64_t>(max_num_seqs, 1, tokens);
  // The profiled requests share the token budget, and each must fit max_model_len (its block-table row): a small
  // max_num_seqs with a large budget (4 x 1024 tokens at max_model_len 512 crashed the server, 2026-11-26) profiles
  // more requests than max_num_seqs; their extra logits rows only add a margin.
  const int64_t profile_reqs =
      max_model_len > 0 ? std::min(tokens, std::max(reqs, (tokens + max_model_len - 1) / max_model_len)) : reqs;
  std::vector<size_t> peaks(devs.size());
  for (int d : devs) cuda::empty_cache(d);  // synchronises; what stays reserved is what is in use
  {
    std::vector<size_t> in_use_before;
    for (int d : devs) {
      in_use_before.push_back(cuda::allocator_stats(d).in_use);
      cuda::reset_peak(d);
    }
    ModelRunnerConfig rc;
    rc.block_size = block_size;
    rc.num_blocks = static_cast<int32_t>(tokens / block_size + profile_reqs + 1);
    rc.max_num_tokens = tokens;
    rc.max_num_reqs = profile_reqs;
    rc.max_model_len = max_model_len;
    const std::vector<int64_t> sizes = captures_full_decode(graphs.cuda_graph_mode) && model.cuda_graph_capturable()
                                           ? resolve_capture_sizes(graphs.cuda_graph_capture_sizes, reqs, tokens)
                                           : std::vector<int64_t>{};
    // The two largest sizes are captured here (largest first, as the real runner does): the first pays the warm-up's
    // one-time allocations, the second only its own graph (every graph has the same kernels, the smaller sizes no
    // more nodes). Estimate: the first + (n - 1) x twice the second (measured on an H100, M: 34 MiB, then ~0.2 MiB
    // per graph; the largest-times-n estimate reserved 1192 MiB for 40 MiB of graphs).
    if (!sizes.empty()) {
      rc.cuda_graph_mode = graphs.cuda_graph_mode;
      rc.cuda_graph_capture_sizes = {sizes.back()};
      if (sizes.size() >= 2)
        rc.cuda_graph_capture_sizes.insert(rc.cuda_graph_capture_sizes.begin(), sizes[sizes.size() - 2]);
    }
    ModelRunner runner(model, rc);
    if (!sizes.empty()) {
      const size_t first = runner.cuda_graph_bytes(sizes.back());
      // At least 1 MiB each: free memory moves in 2 MiB pages, so one small graph can read as 0.
      const size_t each =
          std::max<size_t>(sizes.size() >= 2 ? 2 * runner.cuda_graph_bytes(sizes[sizes.size() - 2]) : first, 1 << 20);
      plan.cuda_graph_bytes = first + each * (sizes.size() - 1) + plan.block_bytes;
    }
    runner.profile_run(tokens, profile_reqs);
    // The runner is built inside the measured window, so its persistent buffers (step inputs, [max_num_seqs, vocab]
    // logits, sampler arrays, attention workspace) count in the peak with the forward's activations. Its own
    // (small) KV cache is counted too: a margin, not an error. Other ranks: their arenas and caches, made on their
    // threads inside the window, count on their devices.
    for (size_t i = 0; i < devs.size(); ++i) peaks[i] = cuda::allocator_stats(devs[i]).peak_in_use - in_use_before[i];
  }
  plan.budget_bytes = 0;
  plan.num_blocks = INT32_MAX;
  size_t limiting = 0;  // the rank whose device leaves the fewest blocks (reported)
  int current = 0;
  cuda::check_cuda(cudaGetDevice(&current), "cudaGetDevice");
  for (size_t i = 0; i < devs.size(); ++i) {
    cuda::empty_cache(devs[i]);
    size_t free_bytes = 0, total_bytes = 0;
    cuda::check_cuda(cudaSetDevice(devs[i]), "cudaSetDevice");
    cuda::check_cuda(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
    const size_t budget = static_cast<size_t>(gpu_memory_utilization * static_cast<double>(total_bytes));
    // The budget is this process's (vLLM's per-instance meaning): what it took on the device since its first
    // allocation there counts, other processes' memory does not; and never more than is free.
    const size_t free_at_start = cuda::free_bytes_before_first_allocation(devs[i]);
    const size_t used = free_at_start > free_bytes ? free_at_start - free_bytes : total_bytes - free_bytes;
    const double reserved = static_cast<double>(peaks[i]) + static_cast<double>(plan.cuda_graph_bytes);
    const double left =
        std::min(static_cast<double>(budget) - static_cast<double>(used), static_cast<double>(free_bytes)) - reserved;
    const int64_t blocks = left > 0 ? static_cast<int64_t>(left / static_cast<double>(plan.block_bytes)) : 0;
    if (i == 0 || blocks < plan.num_blocks) {
      limiting = i;
      plan.num_blocks = std::min<int64_t>(blocks, INT32_MAX);
      plan.total_bytes = total_bytes;
      plan.used_before_bytes = used;
      plan.free_bytes = free_bytes;
      plan.budget_bytes = budget;
      plan.activation_peak_bytes = peaks[i];
    }
  }
  cuda::check_cuda(cudaSetDevice(current), "cudaSetDevice");
  const double gib = 1024.0 * 1024.0 * 1024.0;
  char line[768];
  std::snprintf(line, sizeof(line),
                "GPU memory: total %.2f GiB, budget %.2f GiB (utilization %.2f), this process after loading %.2f GiB "
                "(free %.2f GiB), activation peak %.2f GiB (profiled at %lld tokens / %lld seqs), CUDA graphs %.1f MiB; "
                "KV cache: %lld blocks of %d tokens (%.2f GiB, %lld tokens); maximal concurrency at max_model_len %lld: "
                "%.2fx",
                plan.total_bytes / gib, plan.budget_bytes / gib, gpu_memory_utilization, plan.used_before_bytes / gib,
                plan.free_bytes / gib, plan.activation_peak_bytes / gib, static_cast<long long>(tokens),
                static_cast<long long>(profile_reqs), plan.cuda_graph_bytes / (1024.0 * 1024.0),
                static_cast<long long>(plan.num_blocks), block_size, plan.num_blocks * plan.block_bytes / gib,
                static_cast<long long>(plan.num_blocks * block_size), static_cast<long long>(max_model_len),
                max_model_len > 0 ? static_cast<double>(plan.num_blocks * block_size) / max_model_len : 0.0);
  plan.summary = line;
  if (devs.size() > 1) {
    plan.summary += " (per rank, " + std::to_string(devs.size()) +
                    " ranks; the figures are cuda:" + std::to_string(devs[limiting]) +
                    "'s, the rank leaving the fewest blocks)";
  }
  if (plan.num_blocks < 1 || plan.num_blocks * block_size < max_model_len) {
    return invalid_argument("--gpu-memory-utilization " + std::to_string(gpu_memory_utilization) + " leaves room for " +
                            std::to_string(plan.num_blocks * block_size) +
                            " KV-cache tokens, fewer than max_model_len " + std::to_string(max_model_len) + " (" +
                            plan.summary + ")");
  }
  return plan;
#else
  (void)model, (void)block_size, (void)max_num_batched_tokens, (void)max_num_seqs, (void)max_model_len, (void)graphs;
  return invalid_argument("--gpu-memory-utilization: this build has no CUDA support");
#endif
}

}  // namespace llmserve
