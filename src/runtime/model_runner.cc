// ModelRunner: SchedulerOutput deltas -> persistent request state -> packed step inputs (one host->device copy)
// -> ForwardBatch -> logits -> Sampler.
#include "runtime/model_runner.h"

#include <algorithm>
#include <span>

#include "core/logging.h"
#include "kernels/ops.h"

#ifdef LLMSERVE_WITH_CUDA
#include <cuda_runtime_api.h>

#include "core/cuda_allocator.h"
#include "core/cuda_stream.h"
#endif

namespace llmserve {

SamplingSettings to_sampling_settings(const SamplingParams &p, const std::vector<int32_t> &eos_token_ids) {
  SamplingSettings s;
  s.temperature = static_cast<float>(p.temperature);
  s.top_p = static_cast<float>(p.top_p);
  s.top_k = p.top_k;
  s.min_p = static_cast<float>(p.min_p);
  s.seed = p.seed;
  s.presence_penalty = static_cast<float>(p.presence_penalty);
  s.frequency_penalty = static_cast<float>(p.frequency_penalty);
  s.repetition_penalty = static_cast<float>(p.repetition_penalty);
  for (const auto &[id, bias] : p.logit_bias) s.logit_bias[id] += static_cast<float>(bias);
  s.min_tokens = static_cast<int32_t>(std::min<int64_t>(p.min_tokens, INT32_MAX));
  s.all_stop_token_ids = p.stop_token_ids;
  // vLLM's all_stop_token_ids: the EOS ids join the stop ids unless ignore_eos
  // (then EOS is an ordinary token).
  if (!p.ignore_eos)
    s.all_stop_token_ids.insert(s.all_stop_token_ids.end(), eos_token_ids.begin(), eos_token_ids.end());
  s.logprobs = p.logprobs;
  return s;
}

ModelRunner::ModelRunner(CausalLM &model, ModelRunnerConfig config)
    : model_(model), device_(model.device()), config_(std::move(config)), sampler_(config_.seed) {
  CHECK_GT(config_.num_blocks, 0);
  CHECK_GT(config_.block_size, 0);
  const ModelConfig &c = model.config();
  kv_cache_.num_blocks = config_.num_blocks;
  kv_cache_.block_size = config_.block_size;
  const Shape shape = {config_.num_blocks, config_.block_size, c.num_key_value_heads, c.head_dim};
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    kv_cache_.key.push_back(Tensor::zeros(shape, model.activation_dtype(), device_));
    kv_cache_.value.push_back(Tensor::zeros(shape, model.activation_dtype(), device_));
  }
  // The persistent input buffers, sized for the largest step the scheduler can make.
  const int64_t tokens = std::max<int64_t>(config_.max_num_tokens, 256);
  const int64_t reqs = std::max<int64_t>(config_.max_num_reqs, 16);
  const int64_t blocks = std::max<int64_t>((config_.max_model_len + config_.block_size - 1) / config_.block_size, 16);
  reserve_input_buffers(static_cast<size_t>(tokens * 20 + reqs * (16 + 4 * blocks) + 256));
  // The model's per-step activations: one allocation for the largest step (a profiling runner's arena is counted
  // in the profile's peak); at most one logits row per scheduled token.
  activations_ = std::make_unique<ActivationMemory>(model_, ActivationLimits{tokens, tokens});
#ifdef LLMSERVE_WITH_CUDA
  if (!device_.is_cpu()) {
    // The attention kernels' split-K scratch, allocated once (never inside a step) and zeroed: its leading
    // counters must start at zero (the kernels keep them there).
    const int64_t elems = ops::paged_attention_workspace_elems(tokens, c.num_attention_heads, c.head_dim,
                                                               std::max<int64_t>(config_.max_model_len, 0));
    if (elems > 0) attention_workspace_ = Tensor::zeros({elems}, DType::kF32, device_);
    cudaEvent_t event = nullptr;
    cuda::check_cuda(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreate");
    inputs_copied_ = event;
  }
#endif
}

ModelRunner::~ModelRunner() {
#ifdef LLMSERVE_WITH_CUDA
  if (inputs_copied_ != nullptr) cudaEventDestroy(static_cast<cudaEvent_t>(inputs_copied_));
#endif
}

size_t ModelRunner::kv_block_bytes(const CausalLM &model, int32_t block_size) {
  const ModelConfig &c = model.config();
  return 2 * static_cast<size_t>(c.num_hidden_layers) * block_size * c.num_key_value_heads * c.head_dim *
         dtype_size(model.activation_dtype());
}

void ModelRunner::reserve_input_buffers(size_t bytes) {
  if (host_inputs_.defined() && static_cast<size_t>(host_inputs_.numel()) >= bytes) return;
  const int64_t n =
      static_cast<int64_t>(std::max(bytes, static_cast<size_t>(host_inputs_.defined() ? host_inputs_.numel() * 2 : 0)));
#ifdef LLMSERVE_WITH_CUDA
  if (inputs_copied_ != nullptr)
    cuda::check_cuda(cudaEventSynchronize(static_cast<cudaEvent_t>(inputs_copied_)), "cudaEventSynchronize");
#endif
  if (device_.is_cpu()) {
    host_inputs_ = Tensor::empty({n}, DType::kU8);
    device_inputs_ = host_inputs_;
  } else {
    host_inputs_ = Tensor::empty_pinned({n}, DType::kU8);
    device_inputs_ = Tensor::empty({n}, DType::kU8, device_);
  }
}

void ModelRunner::apply_deltas(const SchedulerOutput &out) {
  for (const std::string &id : out.finished_req_ids) requests_.erase(id);
  // A preempted request keeps its tokens (it is recomputed from them) but loses
  // its blocks.
  for (const std::string &id : out.preempted_req_ids) {
    auto it = requests_.find(id);
    if (it == requests_.end()) continue;
    it->second.block_ids.clear();
    it->second.num_computed_tokens = 0;
  }
  for (const NewRequestData &n : out.scheduled_new_reqs) {
    RequestState &s = requests_[n.req_id];
    s.token_ids = n.prompt_token_ids;
    s.num_prompt_tokens = static_cast<int64_t>(n.prompt_token_ids.size());
    s.block_ids = n.block_ids;
    s.num_computed_tokens = n.num_computed_tokens;
    s.sampling = to_sampling_settings(n.sampling_params, config_.eos_token_ids);
    s.prompt_logprobs = n.sampling_params.prompt_logprobs;
    s.next_prompt_logprob_pos = 1;
  }
  for (const CachedRequestData &c : out.scheduled_cached_reqs) {
    auto it = requests_.find(c.req_id);
    CHECK(it != requests_.end()) << "runner has no state for cached request " << c.req_id;
    RequestState &s = it->second;
    if (c.resumed_from_preemption) {
      s.block_ids = c.new_block_ids;
    } else {
      s.block_ids.insert(s.block_ids.end(), c.new_block_ids.begin(), c.new_block_ids.end());
    }
    s.num_computed_tokens = c.num_computed_tokens;
  }
}

ModelRunner::PromptLogprobRange ModelRunner::prompt_logprob_range(const RequestState &s, int64_t num_new) const {
  if (!s.prompt_logprobs) return {};
  // Computing positions [c, c + num_new) scores tokens c + 1 .. c + num_new; the prompt ones are those
  // <= num_prompt_tokens - 1, and those already reported (before a preemption) are skipped.
  const int64_t first = std::max(s.num_computed_tokens + 1, s.next_prompt_logprob_pos);
  const int64_t last = std::min(s.num_computed_tokens + num_new, s.num_prompt_tokens - 1);
  return {first, std::max<int64_t>(0, last - first + 1)};
}

namespace {

// Byte offsets of the step's input arrays inside the packed buffer (16-byte aligned sections).
struct InputLayout {
  size_t positions, slots, ids, qsl, seq_lens, logits_idx, block_table, total;
  InputLayout(int64_t num_tokens, int64_t num_reqs, int64_t num_logits, int64_t max_blocks) {
    size_t off = 0;
    auto take = [&off](size_t bytes) {
      const size_t at = off;
      off += (bytes + 15) / 16 * 16;
      return at;
    };
    positions = take(num_tokens * 8);
    slots = take(num_tokens * 8);
    ids = take(num_tokens * 4);
    qsl = take((num_reqs + 1) * 4);
    seq_lens = take(num_reqs * 4);
    logits_idx = take(num_logits * 4);
    block_table = take(num_reqs * max_blocks * 4);
    total = off;
  }
};

}  // namespace

Tensor ModelRunner::run_model(const std::vector<RequestState *> &reqs, const std::vector<int64_t> &num_new,
                              const std::vector<size_t> &rows, const std::vector<PromptLogprobRange> &ranges) {
  const int64_t num_reqs = static_cast<int64_t>(reqs.size());
  int64_t num_logits = static_cast<int64_t>(rows.size());
  for (const PromptLogprobRange &range : ranges) num_logits += range.count;
  int64_t num_tokens = 0, max_blocks = 1, max_query = 0, max_seq = 0, num_decode = 0;
  for (int64_t r = 0; r < num_reqs; ++r) {
    num_tokens += num_new[r];
    max_query = std::max(max_query, num_new[r]);
    max_seq = std::max(max_seq, reqs[r]->num_computed_tokens + num_new[r]);
    max_blocks = std::max<int64_t>(max_blocks, static_cast<int64_t>(reqs[r]->block_ids.size()));
    if (num_new[r] == 1 && num_decode == r) ++num_decode;  // decode requests at the front of the batch
  }
  const InputLayout L(num_tokens, num_reqs, num_logits, max_blocks);
  reserve_input_buffers(L.total);
#ifdef LLMSERVE_WITH_CUDA
  // The previous step's copy must have read the host buffer before it is overwritten.
  if (inputs_copied_ != nullptr)
    cuda::check_cuda(cudaEventSynchronize(static_cast<cudaEvent_t>(inputs_copied_)), "cudaEventSynchronize");
#endif
  auto *host = host_inputs_.data<uint8_t>();
  auto *pos = reinterpret_cast<int64_t *>(host + L.positions);
  auto *slots = reinterpret_cast<int64_t *>(host + L.slots);
  auto *ids = reinterpret_cast<int32_t *>(host + L.ids);
  auto *qsl = reinterpret_cast<int32_t *>(host + L.qsl);
  auto *lens = reinterpret_cast<int32_t *>(host + L.seq_lens);
  auto *logits_idx = reinterpret_cast<int32_t *>(host + L.logits_idx);
  auto *table = reinterpret_cast<int32_t *>(host + L.block_table);
  const int64_t bs = config_.block_size;
  int64_t t = 0;
  qsl[0] = 0;
  for (int64_t r = 0; r < num_reqs; ++r) {
    const RequestState &s = *reqs[r];
    const int64_t end = s.num_computed_tokens + num_new[r];
    CHECK_LE(end, static_cast<int64_t>(s.token_ids.size())) << "scheduled past the known tokens";
    CHECK_LE(end, static_cast<int64_t>(s.block_ids.size()) * bs) << "blocks do not cover the scheduled tokens";
    for (int64_t p = s.num_computed_tokens; p < end; ++p, ++t) {
      const int32_t block = s.block_ids[p / bs];
      CHECK(block >= 0 && block < config_.num_blocks) << "block id " << block << " outside the cache";
      ids[t] = s.token_ids[p];
      pos[t] = p;
      slots[t] = static_cast<int64_t>(block) * bs + p % bs;
    }
    qsl[r + 1] = static_cast<int32_t>(t);
    lens[r] = static_cast<int32_t>(end);
    int32_t *row = table + r * max_blocks;
    std::copy(s.block_ids.begin(), s.block_ids.end(), row);
    std::fill(row + s.block_ids.size(), row + max_blocks, 0);
  }
  for (size_t i = 0; i < rows.size(); ++i) logits_idx[i] = qsl[rows[i] + 1] - 1;
  // Prompt position q is scored by the row of position q - 1.
  int64_t next_row = static_cast<int64_t>(rows.size());
  for (size_t r = 0; r < ranges.size(); ++r) {
    for (int64_t q = ranges[r].first; q < ranges[r].first + ranges[r].count; ++q) {
      logits_idx[next_row++] = qsl[r] + static_cast<int32_t>(q - 1 - reqs[r]->num_computed_tokens);
    }
  }

  // One host -> device copy of everything the step reads.
  uint8_t *dev = device_inputs_.data<uint8_t>();
#ifdef LLMSERVE_WITH_CUDA
  if (!device_.is_cpu()) {
    cudaStream_t stream = cuda::current_stream();
    cuda::check_cuda(cudaMemcpyAsync(dev, host, L.total, cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync");
    cuda::check_cuda(cudaEventRecord(static_cast<cudaEvent_t>(inputs_copied_), stream), "cudaEventRecord");
  }
#endif
  auto view = [&](size_t off, Shape shape, DType dtype) {
    return Tensor::from_blob(dev + off, std::move(shape), dtype, nullptr, device_);
  };
  ForwardBatch batch;
  batch.input_ids = view(L.ids, {num_tokens}, DType::kI32);
  batch.positions = view(L.positions, {num_tokens}, DType::kI64);
  batch.logits_indices = view(L.logits_idx, {num_logits}, DType::kI32);
  ops::AttentionMetadata &md = batch.attention;
  md.query_start_loc = view(L.qsl, {num_reqs + 1}, DType::kI32);
  md.seq_lens = view(L.seq_lens, {num_reqs}, DType::kI32);
  md.block_table = view(L.block_table, {num_reqs, max_blocks}, DType::kI32);
  md.slot_mapping = view(L.slots, {num_tokens}, DType::kI64);
  md.num_reqs = num_reqs;
  md.num_decode_tokens = num_decode;
  md.max_query_len = max_query;
  md.max_seq_len = max_seq;
  md.workspace = attention_workspace_;
  Tensor logits = Tensor::empty({num_logits, model_.config().vocab_size}, DType::kF32, device_);
  model_.forward(batch, kv_cache_, logits);
  return logits;
}

void ModelRunner::profile_run(int64_t num_tokens, int64_t num_reqs) {
  CHECK(num_tokens >= num_reqs && num_reqs >= 1) << "profile_run(" << num_tokens << ", " << num_reqs << ")";
  const int64_t bs = config_.block_size;
  std::vector<RequestState> states(num_reqs);
  std::vector<RequestState *> reqs;
  std::vector<int64_t> num_new;
  std::vector<size_t> rows;
  int32_t next_block = 0;
  const int32_t vocab = static_cast<int32_t>(model_.config().vocab_size);
  for (int64_t r = 0; r < num_reqs; ++r) {
    RequestState &s = states[r];
    const int64_t len = num_tokens / num_reqs + (r < num_tokens % num_reqs ? 1 : 0);
    for (int64_t i = 0; i < len; ++i) s.token_ids.push_back(static_cast<int32_t>((r * 7919 + i * 104729) % vocab));
    for (int64_t b = 0; b < (len + bs - 1) / bs; ++b) {
      CHECK_LT(next_block, config_.num_blocks) << "profile_run needs more KV blocks";
      s.block_ids.push_back(next_block++);
    }
    reqs.push_back(&s);
    num_new.push_back(len);
    rows.push_back(static_cast<size_t>(r));
  }
  Tensor logits = run_model(reqs, num_new, rows, {});
  Tensor logprobs_scratch = Tensor::empty(logits.shape(), DType::kF32, device_);  // the sampler's log_softmax
  (void)logprobs_scratch;
#ifdef LLMSERVE_WITH_CUDA
  if (!device_.is_cpu()) cuda::check_cuda(cudaStreamSynchronize(cuda::current_stream()), "profile_run");
#endif
}

void ModelRunner::compute_prompt_logprobs(const Tensor &logits, int64_t first_row,
                                          const std::vector<RequestState *> &reqs,
                                          const std::vector<PromptLogprobRange> &ranges, ModelRunnerOutput &out) {
  const int64_t num_rows = logits.size(0) - first_row;
  int64_t k = 0;
  std::vector<int32_t> targets;
  targets.reserve(static_cast<size_t>(num_rows));
  for (size_t r = 0; r < reqs.size(); ++r) {
    if (ranges[r].count == 0) continue;
    k = std::max<int64_t>(k, *reqs[r]->prompt_logprobs);
    for (int64_t q = ranges[r].first; q < ranges[r].first + ranges[r].count; ++q) {
      targets.push_back(reqs[r]->token_ids[q]);
    }
  }
  CHECK_EQ(static_cast<int64_t>(targets.size()), num_rows);
  // vLLM's prompt logprobs: log_softmax of the raw logits (no penalties, bias or temperature). Computed on the
  // host: a rare, prefill-only request feature, not worth device scratch.
  Tensor logprobs = logits.slice(0, first_row, first_row + num_rows).to(Device::cpu());
  ops::log_softmax(logprobs, logprobs);
  Tensor token_logprobs = Tensor::empty({num_rows}, DType::kF32), ranks = Tensor::empty({num_rows}, DType::kI32);
  ops::gather_token_logprobs(token_logprobs, ranks, logprobs,
                             Tensor::from_i32(targets, {static_cast<int64_t>(targets.size())}));
  Tensor top_values, top_ids;  // [num_rows, k]; undefined when every request asked for k = 0
  if (k > 0) {
    top_values = Tensor::empty({num_rows, k}, DType::kF32);
    top_ids = Tensor::empty({num_rows, k}, DType::kI32);
    ops::top_k(top_values, top_ids, logprobs, k);
  }
  out.prompt_logprobs.resize(reqs.size());
  int64_t row = 0;
  for (size_t r = 0; r < reqs.size(); ++r) {
    RequestState &s = *reqs[r];
    if (ranges[r].count == 0) continue;
    const int64_t want = *s.prompt_logprobs;
    std::vector<TokenLogprobs> &list = out.prompt_logprobs[r];
    list.resize(static_cast<size_t>(ranges[r].count));
    for (TokenLogprobs &lp : list) {
      lp.token_ids.push_back(targets[row]);
      lp.logprobs.push_back(token_logprobs.data<float>()[row]);
      lp.sampled_token_rank = ranks.data<int32_t>()[row];
      if (want > 0) {
        lp.token_ids.insert(lp.token_ids.end(), top_ids.data<int32_t>() + row * k,
                            top_ids.data<int32_t>() + row * k + want);
        lp.logprobs.insert(lp.logprobs.end(), top_values.data<float>() + row * k,
                           top_values.data<float>() + row * k + want);
      }
      ++row;
    }
    s.next_prompt_logprob_pos = ranges[r].first + ranges[r].count;
  }
}

StatusOr<ModelRunnerOutput> ModelRunner::execute(const SchedulerOutput &scheduler_output) {
  apply_deltas(scheduler_output);
  ModelRunnerOutput out;
  const size_t num_reqs = scheduler_output.num_scheduled_tokens.size();
  if (num_reqs == 0) return out;
  std::vector<RequestState *> reqs(num_reqs);
  std::vector<int64_t> num_new(num_reqs);
  std::vector<PromptLogprobRange> ranges(num_reqs);
  bool any_prompt_logprobs = false;
  out.req_ids.resize(num_reqs);
  out.sampled_token_ids.resize(num_reqs);
  for (size_t r = 0; r < num_reqs; ++r) {
    const ScheduledTokens &st = scheduler_output.num_scheduled_tokens[r];
    auto it = requests_.find(st.req_id);
    CHECK(it != requests_.end()) << "runner has no state for scheduled request " << st.req_id;
    CHECK_GT(st.num_tokens, 0) << st.req_id;
    reqs[r] = &it->second;
    num_new[r] = st.num_tokens;
    ranges[r] = prompt_logprob_range(it->second, st.num_tokens);
    any_prompt_logprobs |= ranges[r].count > 0;
    out.req_ids[r] = st.req_id;
  }
  // Rows whose prompt is complete after this step sample; a partial prefill chunk samples nothing, so only the
  // sampling rows go through the vocabulary projection.
  std::vector<size_t> rows;
  for (size_t r = 0; r < num_reqs; ++r) {
    if (reqs[r]->num_computed_tokens + num_new[r] == static_cast<int64_t>(reqs[r]->token_ids.size())) {
      rows.push_back(r);
    }
  }
  Tensor logits = run_model(reqs, num_new, rows, any_prompt_logprobs ? ranges : std::vector<PromptLogprobRange>{});
  const int64_t num_rows = static_cast<int64_t>(rows.size());
  // Before sampling: the sampler edits its logits in place.
  if (any_prompt_logprobs) compute_prompt_logprobs(logits, num_rows, reqs, ranges, out);
  for (size_t r = 0; r < num_reqs; ++r) reqs[r]->num_computed_tokens += num_new[r];
  Tensor to_sample = any_prompt_logprobs ? logits.slice(0, 0, num_rows) : logits;
  if (rows.empty()) return out;
  std::vector<SamplerRequest> sreqs(rows.size());
  bool want_logprobs = false;
  for (size_t i = 0; i < rows.size(); ++i) {
    const RequestState &s = *reqs[rows[i]];
    const int64_t num_outputs = static_cast<int64_t>(s.token_ids.size()) - s.num_prompt_tokens;
    sreqs[i].sampling = &s.sampling;
    sreqs[i].prompt_token_ids = std::span<const int32_t>(s.token_ids.data(), s.num_prompt_tokens);
    sreqs[i].output_token_ids = std::span<const int32_t>(s.token_ids.data() + s.num_prompt_tokens, num_outputs);
    sreqs[i].step = num_outputs;
    want_logprobs |= s.sampling.logprobs.has_value();
  }
  ASSIGN_OR_RETURN(SamplerOutput sampled, sampler_.sample(to_sample, sreqs));
  if (want_logprobs) out.logprobs.resize(num_reqs);
  for (size_t i = 0; i < rows.size(); ++i) {
    RequestState &s = *reqs[rows[i]];
    const int32_t id = sampled.sampled_token_ids.data<int32_t>()[i];
    s.token_ids.push_back(id);
    out.sampled_token_ids[rows[i]].push_back(id);
    if (!s.sampling.logprobs) continue;
    const int64_t width = sampled.logprobs.size(1);
    const int64_t k = *s.sampling.logprobs < 0 ? width - 1 : std::min<int64_t>(*s.sampling.logprobs, width - 1);
    TokenLogprobs lp;
    lp.token_ids.assign(sampled.logprob_token_ids.data<int32_t>() + i * width,
                        sampled.logprob_token_ids.data<int32_t>() + i * width + 1 + k);
    lp.logprobs.assign(sampled.logprobs.data<float>() + i * width, sampled.logprobs.data<float>() + i * width + 1 + k);
    lp.sampled_token_rank = sampled.sampled_token_ranks.data<int32_t>()[i];
    out.logprobs[rows[i]].push_back(std::move(lp));
  }
  return out;
}

}  // namespace llmserve
