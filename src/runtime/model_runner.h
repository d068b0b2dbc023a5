// ModelRunner: the engine core's ModelExecutor on a CausalLM, on the CPU or a CUDA device (the model's). It keeps
// persistent per-request state (token ids, block ids, computed count, sampling settings) updated only from
// SchedulerOutput deltas — it never sees a Request — builds one ForwardBatch for the mixed prefill + decode step,
// runs the model and the Sampler and returns the sampled ids (and, for requests that asked, the logprobs of their
// prompt tokens). Invariant: a request's state mirrors the scheduler's (same tokens, blocks, computed count), and
// each prompt position's logprobs are reported exactly once, even across preemption. On CUDA a step's inputs are packed into one page-locked host
// buffer and reach the device in one copy into a persistent device buffer; the only host wait is the copy of the
// sampled ids (and logprobs when asked for) back.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "engine/engine_core.h"
#include "engine/sampling_params.h"
#include "model/causal_lm.h"
#include "runtime/sampler.h"

namespace llmserve {

struct ModelRunnerConfig {
  int32_t num_blocks = 0;              // KV cache blocks (the KVCacheManager's num_blocks)
  int32_t block_size = 16;             // tokens per block (the KVCacheManager's block_size)
  // Sizes of the persistent input buffers (they grow if a step needs more; 0: small defaults).
  int64_t max_num_tokens = 0;          // the scheduler's max_num_batched_tokens
  int64_t max_num_reqs = 0;            // max_num_seqs
  int64_t max_model_len = 0;           // block-table width = max_model_len / block_size
  std::vector<int32_t> eos_token_ids;  // suppressed below min_tokens (with
                                       // stop_token_ids) unless ignore_eos
  uint64_t seed = 0;                   // engine-wide seed of unseeded requests
};

// The Sampler's settings for one request (vLLM's SamplingParams ->
// SamplingMetadata).
SamplingSettings to_sampling_settings(const SamplingParams &params, const std::vector<int32_t> &eos_token_ids);

class ModelRunner : public ModelExecutor {
 public:
  // `model` must outlive the runner. Allocates the KV cache on the model's device, in its activation dtype: per
  // layer [num_blocks, block_size, kv_heads, head_dim] for keys and for values.
  ModelRunner(CausalLM &model, ModelRunnerConfig config);
  ~ModelRunner() override;
  ModelRunner(const ModelRunner &) = delete;
  ModelRunner &operator=(const ModelRunner &) = delete;

  // Bytes of one KV block over all layers (keys and values) for `model`.
  static size_t kv_block_bytes(const CausalLM &model, int32_t block_size);

  // Memory profiling: runs the model once over `num_tokens` prompt tokens spread over `num_reqs` requests (no
  // sampling; the logits and a logprobs-sized scratch are allocated as a sampling step would). Needs
  // num_blocks >= num_tokens / block_size + num_reqs. Leaves no request state behind.
  void profile_run(int64_t num_tokens, int64_t num_reqs);

  // Applies the deltas, runs the scheduled tokens, samples for every request
  // whose prompt is now complete. InvalidArgument if a request's sampling
  // settings are rejected by the Sampler (nothing is sampled then; the frontend
  // validates them first). CHECKs the deltas' consistency (unknown ids, blocks
  // not covering tokens).
  StatusOr<ModelRunnerOutput> execute(const SchedulerOutput &scheduler_output) override;

  // Requests the runner holds state for (running or preempted).
  int64_t num_requests() const { return static_cast<int64_t>(requests_.size()); }
  const CausalLM &model() const { return model_; }

 private:
  struct RequestState {
    std::vector<int32_t> token_ids;  // prompt followed by sampled ids
    int64_t num_prompt_tokens = 0;
    std::vector<int32_t> block_ids;  // physical blocks in logical order
    int64_t num_computed_tokens = 0;
    SamplingSettings sampling;
    std::optional<int32_t> prompt_logprobs;  // top-k per prompt position; nullopt: not asked
    // Next prompt position whose logprob is owed (position 0 has none). Survives preemption, so a recomputed
    // prompt does not report its logprobs twice.
    int64_t next_prompt_logprob_pos = 1;
  };
  // Prompt positions [first, first + count) whose logprobs this step computes for one request: the logits of
  // position p - 1 score prompt token p. The last prompt position scores the first sampled token instead.
  struct PromptLogprobRange {
    int64_t first = 0;
    int64_t count = 0;
  };
  PromptLogprobRange prompt_logprob_range(const RequestState &s, int64_t num_new) const;
  // Fills out.prompt_logprobs from logits rows [first_row, first_row + sum of counts) (in batch order).
  void compute_prompt_logprobs(const Tensor &logits, int64_t first_row, const std::vector<RequestState *> &reqs,
                               const std::vector<PromptLogprobRange> &ranges, ModelRunnerOutput &out);
  void apply_deltas(const SchedulerOutput &out);
  // Runs the model over the scheduled tokens; returns logits [rows.size() + sum of ranges' counts, vocab] (f32, on
  // the model's device): the last scheduled token of each request in `rows`, then the rows scoring prompt tokens
  // (ranges, batch order; empty `ranges`: none).
  Tensor run_model(const std::vector<RequestState *> &reqs, const std::vector<int64_t> &num_new,
                   const std::vector<size_t> &rows, const std::vector<PromptLogprobRange> &ranges);
  // Host (pinned on CUDA) and device buffers of at least `bytes`.
  void reserve_input_buffers(size_t bytes);

  CausalLM &model_;
  Device device_;
  ModelRunnerConfig config_;
  KVCacheTensors kv_cache_;
  Sampler sampler_;
  std::unordered_map<std::string, RequestState> requests_;
  Tensor host_inputs_;    // u8: the packed step inputs, filled on the host
  Tensor device_inputs_;  // u8: the same layout on the device (== host_inputs_ on CPU)
  void *inputs_copied_ = nullptr;  // CUDA: cudaEvent_t recorded after the step's input copy
  Tensor attention_workspace_;     // CUDA: paged attention's split-K scratch (f32), undefined when unused
  std::unique_ptr<ActivationMemory> activations_;  // the model's arena, bound while this runner lives
};

}  // namespace llmserve
