// ModelRunner: the engine core's ModelExecutor on a CausalLM, on the CPU or a CUDA device (the model's). It keeps
// persistent per-request state (token ids, block ids, computed count, sampling settings) updated only from
// SchedulerOutput deltas — it never sees a Request — builds one ForwardBatch for the mixed prefill + decode step,
// runs the model and the Sampler and returns the sampled ids (and, for requests that asked, the logprobs of their
// prompt tokens). Invariant: a request's state mirrors the scheduler's (same tokens, blocks, computed count), and
// each prompt position's logprobs are reported exactly once, even across preemption. A step's inputs sit at fixed
// offsets of persistent buffers sized once at construction (never reallocated; a step beyond them is a CHECK naming
// the limit) and reach the device in one copy from a page-locked mirror; the sampling rows' logits live in one
// persistent buffer. The only host wait is the copy of the sampled ids (and logprobs when asked for) back.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/cuda_event.h"
#include "core/status.h"
#include "engine/engine_core.h"
#include "engine/sampling_params.h"
#include "model/causal_lm.h"
#include "runtime/attention_schedules.h"
#include "runtime/cuda_graph_config.h"
#include "runtime/sampled_ids_transfer.h"
#include "runtime/sampler.h"

namespace llmserve {

class CudaGraphRunner;

struct ModelRunnerConfig {
  int32_t num_blocks = 0;   // KV cache blocks (the KVCacheManager's num_blocks)
  int32_t block_size = 16;  // tokens per block (the KVCacheManager's block_size)
  // Capacities of the persistent buffers, fixed at construction; a larger step is a CHECK naming the limit. 0: the
  // scheduler's default (SchedulerConfig), and always at most what the KV cache can hold (ModelRunner::Limits).
  int64_t max_num_tokens = 0;  // the scheduler's max_num_batched_tokens
  int64_t max_num_reqs = 0;    // max_num_seqs
  int64_t max_model_len = 0;   // block-table row width = ceil(max_model_len / block_size); 0: num_blocks
  uint64_t seed = 0;           // engine-wide seed of unseeded requests
  // CUDA graphs (ignored on the CPU, which always runs eagerly): FULL graphs of uniform decode batches at these
  // sizes (empty: vLLM's defaults), captured by the constructor. The engine's default is full_and_piecewise; a bare
  // runner's is none.
  CudaGraphMode cuda_graph_mode = CudaGraphMode::kNone;
  std::vector<int64_t> cuda_graph_capture_sizes;
  // Tests: a batch that would replay a graph runs its exact padded inputs and metadata eagerly instead (nothing is
  // captured), so graph replays can be checked bit for bit against the same kernels run eagerly.
  bool run_graph_batches_eagerly = false;
};

// The Sampler's settings for one request (vLLM's SamplingParams ->
// SamplingMetadata). `all_stop_token_ids`: the request's stop-id set (engine's all_stop_token_ids), masked
// below min_tokens.
SamplingSettings to_sampling_settings(const SamplingParams &params, const std::vector<int32_t> &all_stop_token_ids);

class ModelRunner : public ModelExecutor {
 public:
  // `model` must outlive the runner. Allocates the KV cache on the model's device, in its activation dtype: per
  // layer the model's KVCacheSpec::layer_shape (e.g. [num_blocks, block_size, kv_heads, head_dim]) for keys and,
  // when the spec has them, for values.
  ModelRunner(CausalLM &model, ModelRunnerConfig config);
  ~ModelRunner() override;
  ModelRunner(const ModelRunner &) = delete;
  ModelRunner &operator=(const ModelRunner &) = delete;

  // Bytes of one KV block over all layers (every cache tensor of its KVCacheSpec) for `model`.
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
  // The split form (ModelExecutor). On the CPU the step runs within execute_async. On CUDA execute_async queues the
  // step and returns without waiting for it: the sampled ids stay on the device (the next step scatters them into
  // its input ids, ops::scatter_sampled_ids) and reach pinned host memory on a side stream; wait() blocks on that
  // copy only (SampledIdsTransfer). Logprobs, prompt logprobs and penalties over a not yet known id make the step
  // wait for the ids as execute() does. A step's sampled token stays "outstanding" until wait(), so a preemption in
  // between drops it from the runner's state as the scheduler drops it from the request.
  StatusOr<StepHandle> execute_async(const SchedulerOutput &scheduler_output) override;
  StatusOr<ModelRunnerOutput> wait(StepHandle handle) override;
  // Deferred sampling (ModelExecutor): a step marked grammar_bitmask_deferred runs its forward in execute_async and
  // keeps its logits; sample_deferred samples them with the bitmask (on CUDA, queued behind the forward). No step is
  // launched in between (CHECKed): the next step's inputs read these ids.
  bool can_defer_sampling() const override { return true; }
  Status sample_deferred(StepHandle handle, const SchedulerOutput &scheduler_output) override;

  // The capacities the persistent buffers were sized for: the config's, with zeros resolved and each bounded by the
  // KV cache (every scheduled token writes its own slot, every request schedules >= 1 token and holds distinct blocks).
  struct Limits {
    int64_t max_num_tokens = 0;      // tokens per step (also logits rows per step, prompt-logprob rows included)
    int64_t max_num_reqs = 0;        // requests per step: rows of the block table and of the persistent logits
    int64_t max_blocks_per_seq = 0;  // block-table row width (the fixed row stride)
  };
  const Limits &limits() const { return limits_; }

  // Device addresses of the last step's inputs and sampling logits (tests; CUDA graphs rely on them not moving).
  struct StepAddresses {
    const void *input_ids, *positions, *slot_mapping, *query_start_loc, *seq_lens, *logits_indices, *block_table;
    const void *logits;  // the sampling rows' logits (rows [0, num_sampled)); null before the first step
    const void *sampler_params;
  };
  StepAddresses last_step_addresses() const;

  // CUDA graphs: the capture sizes (empty when none were captured), the graphs' device memory, and the size the last
  // step replayed (0: it ran eagerly).
  std::vector<int64_t> cuda_graph_sizes() const;
  size_t cuda_graph_bytes() const;
  size_t cuda_graph_bytes(int64_t size) const;  // the graph of one capture size (0: none)
  int64_t last_step_graph_size() const { return last_graph_size_; }

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
    uint64_t row_key = 0;  // unique per request lifetime: the Sampler keeps a row's parameters while it is the same
    StepHandle outstanding_sample_step = -1;  // the step whose sampled id (token_ids.back()) is not waited for yet
    int32_t placeholder_row = -1;  // while token_ids.back() is kPlaceholderId: its row in that step's device ids
  };
  // A sampled id still on the device: output row `batch_row`, the Sampler's `row`, the request's token `token_index`
  // (of the request whose row_key is `row_key`: an id reused after an abort is another request).
  struct DeviceSampledId {
    RequestId req_id;
    uint64_t row_key;
    size_t batch_row;
    int32_t row;
    int64_t token_index;
  };
  struct OutstandingStep {
    StepHandle handle;
    StatusOr<ModelRunnerOutput> output;
    std::vector<DeviceSampledId> on_device;  // empty when the ids came back within the step
  };
  // A step whose forward ran and whose sampling waits for its grammar bitmask (sample_deferred).
  struct PendingSample {
    StepHandle handle;
    std::vector<RequestState *> reqs;  // the step's batch (stable: nothing is erased before the step is sampled)
    std::vector<size_t> rows;          // the batch rows that sample
    Tensor logits;                     // their logits, rows in `rows` order
  };
  static constexpr int32_t kPlaceholderId = -1;  // a token id the host does not know yet
  StatusOr<ModelRunnerOutput> run_step(const SchedulerOutput &scheduler_output, StepHandle handle,
                                       std::vector<DeviceSampledId> *on_device);
  // Samples `rows` of the batch `reqs` from `to_sample` (edited in place) with the step's bitmask rows, appends the
  // ids (or placeholders, with their `on_device` entries) to the requests and fills `out`'s ids and logprobs.
  Status sample_rows(const SchedulerOutput &scheduler_output, StepHandle handle,
                     const std::vector<RequestState *> &reqs, const std::vector<size_t> &rows, Tensor &to_sample,
                     ModelRunnerOutput &out, std::vector<DeviceSampledId> *on_device);
  // Writes the ids of `step` (waiting for its copy) into the requests' token lists and, with `out`, its output.
  void collect_device_ids(const OutstandingStep &step, ModelRunnerOutput *out);
  // Before sampling rows whose penalties read output ids: the previous step's ids, if still on the device.
  void resolve_placeholders_for_penalties(const std::vector<RequestState *> &reqs, const std::vector<size_t> &rows);
  // CUDA, async: input_ids[position] = the previous step's sampled id for every placeholder fill_inputs found.
  void scatter_placeholder_ids(Tensor &input_ids);
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
  // Writes the step's inputs into the host mirror at their fixed offsets; returns the widest block-table row used.
  int64_t fill_inputs(const std::vector<RequestState *> &reqs, const std::vector<int64_t> &num_new,
                      const std::vector<size_t> &rows, const std::vector<PromptLogprobRange> &ranges);

  // Byte offsets of the step inputs in the persistent buffers, fixed at construction: the six per-step arrays at
  // multiples of one pitch (16-byte aligned), then the block table, so a step copies only the used prefix of each.
  struct InputLayout {
    size_t pitch, query_start_loc, seq_lens, input_ids, logits_indices, positions, slot_mapping, block_table, total;
    static InputLayout plan(const Limits &limits);
  };
  static Limits resolve_limits(const ModelRunnerConfig &config);
  // The host staging rows of layout_, typed (the order structured bindings unpack them in).
  struct HostRows {
    int64_t *positions, *slot_mapping;
    int32_t *input_ids, *query_start_loc, *seq_lens, *logits_indices, *block_table;
  };
  HostRows host_rows();

  // Plans the Hopper attention kernels' work lists (schedules_) for the step in the host rows.
  void plan_attention(int64_t num_reqs, int64_t num_decode);
  // Copies the step's used inputs to the device (two pitched copies, one more per planned work list) and points
  // batch_ at them.
  void upload_inputs(int64_t num_tokens, int64_t num_reqs, int64_t max_blocks);
  void bind_batch(int64_t num_tokens, int64_t num_reqs, int64_t num_logits, int64_t num_decode, int64_t max_query,
                  int64_t max_seq);
  // CUDA graphs (cuda_graph_runner.h). The capture size a step is padded up to: uniform decode batches only
  // (one token and one sampled row per request); 0: eager.
  int64_t graph_size_for(int64_t num_reqs, int64_t num_tokens, int64_t num_logits) const;
  // Host rows [first, padded) as padding: token 0 at position 0, slot -1 (no cache write), seq_len 1 over the
  // scratch block, logits row = its own row (computed, never sampled).
  void fill_padding(int64_t first, int64_t padded);
  // The attention metadata's max_seq_len in every graph: the block table's reach, so no step exceeds it.
  int64_t graph_max_seq_len() const { return limits_.max_blocks_per_seq * config_.block_size; }
  void capture_cuda_graphs();

  CausalLM &model_;
  Device device_;
  ModelRunnerConfig config_;
  Limits limits_;
  InputLayout layout_;
  KVCacheTensors kv_cache_;
  Sampler sampler_;
  std::unordered_map<std::string, RequestState> requests_;
  uint64_t next_row_key_ = 1;
  StepHandle next_step_handle_ = 0;
  StepHandle running_step_ = -1;                 // the step run_step is building
  std::deque<OutstandingStep> outstanding_;      // launched, not waited for; oldest first
  std::optional<PendingSample> pending_sample_;  // the newest outstanding step, while its sampling is deferred
  // CUDA only: the sampled ids' device buffers and host copies, and the placeholder scatter's (position, row) pairs
  // with their page-locked staging and device buffers.
  std::unique_ptr<SampledIdsTransfer> sampled_ids_;
  std::vector<int32_t> scatter_pairs_;    // the step being built: position, row, position, row, ...
  Tensor scatter_host_, scatter_device_;  // [max_num_reqs, 2] i32
  Event scatter_copied_;
  Tensor host_inputs_;    // u8 [layout_.total]: the step inputs, filled on the host (page-locked on CUDA)
  Tensor device_inputs_;  // u8 [layout_.total]: the same layout on the device (== host_inputs_ on CPU)
  Event inputs_copied_;   // recorded after the step's input copy: the mirror is rewritten only once it was read
  std::vector<int64_t> block_table_widths_;  // entries of each host block-table row that may be nonzero
  Tensor logits_;                            // [max_num_reqs, vocab] f32: the sampling rows' logits, a prefix per step
  Tensor attention_workspace_;               // CUDA: paged attention's split-K scratch (f32), undefined when unused
  AttentionSchedules schedules_;  // CUDA on an SM90 device: the Hopper attention kernels' work lists, per step
  ForwardBatch batch_;            // the last step's views of the persistent buffers
  Tensor step_logits_;  // the last step's logits (a prefix of logits_ unless prompt logprobs needed more)
  std::unique_ptr<ActivationMemory> activations_;  // the model's arena, bound while this runner lives
  // CUDA graphs: null when none were captured. Padded rows read the scratch block, one block past the
  // KVCacheManager's num_blocks (allocated only with graphs), which no request ever owns.
  std::unique_ptr<CudaGraphPadding> graph_padding_;
  std::unique_ptr<CudaGraphRunner> graphs_;
  int32_t scratch_block_ = -1;
  int64_t last_graph_size_ = 0;
};

}  // namespace llmserve
