// ModelRunner: SchedulerOutput deltas -> persistent request state -> step inputs at fixed offsets (one host->device
// copy) -> ForwardBatch of views -> logits (a prefix of the persistent logits) -> Sampler.
#include "runtime/model_runner.h"

#include <algorithm>
#include <span>

#include "core/logging.h"
#include "engine/scheduler.h"
#include "kernels/ops.h"
#include "runtime/cuda_graph_runner.h"

namespace llmserve {

SamplingSettings to_sampling_settings(const SamplingParams &p, const std::vector<int32_t> &all_stop_token_ids) {
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
  s.all_stop_token_ids = all_stop_token_ids;
  s.logprobs = p.logprobs;
  return s;
}

ModelRunner::Limits ModelRunner::resolve_limits(const ModelRunnerConfig &config) {
  CHECK_GT(config.num_blocks, 0);
  CHECK_GT(config.block_size, 0);
  const SchedulerConfig defaults;
  const int64_t cache_tokens = static_cast<int64_t>(config.num_blocks) * config.block_size;
  Limits l;
  l.max_num_tokens =
      std::min(config.max_num_tokens > 0 ? config.max_num_tokens : defaults.max_num_batched_tokens, cache_tokens);
  l.max_num_reqs =
      std::min<int64_t>(config.max_num_reqs > 0 ? config.max_num_reqs : defaults.max_num_seqs, l.max_num_tokens);
  l.max_blocks_per_seq =
      config.max_model_len > 0
          ? std::min<int64_t>((config.max_model_len + config.block_size - 1) / config.block_size, config.num_blocks)
          : config.num_blocks;
  return l;
}

ModelRunner::InputLayout ModelRunner::InputLayout::plan(const Limits &limits) {
  // The six per-step arrays are rows of one pitched region (pitch: the widest, max_num_tokens 8-byte elements), so a
  // step copies each array's used prefix in one pitched copy; the block table follows at its own row stride.
  InputLayout l;
  const int64_t tokens = limits.max_num_tokens, reqs = limits.max_num_reqs;
  l.pitch = (static_cast<size_t>(std::max(tokens * 8, (reqs + 1) * 4)) + 15) / 16 * 16;
  l.query_start_loc = 0;
  l.seq_lens = l.pitch;
  l.input_ids = 2 * l.pitch;
  l.logits_indices = 3 * l.pitch;
  l.positions = 4 * l.pitch;
  l.slot_mapping = 5 * l.pitch;
  l.block_table = 6 * l.pitch;
  l.total = l.block_table + static_cast<size_t>(reqs * limits.max_blocks_per_seq) * 4;
  return l;
}

ModelRunner::ModelRunner(CausalLM &model, ModelRunnerConfig config)
    : model_(model),
      device_(model.device()),
      config_(std::move(config)),
      limits_(resolve_limits(config_)),
      layout_(InputLayout::plan(limits_)),
      sampler_(config_.seed, limits_.max_num_reqs, device_) {
  const ModelConfig &c = model.config();
  const bool use_graphs =
      !device_.is_cpu() && captures_full_decode(config_.cuda_graph_mode) && model.cuda_graph_capturable();
  if (use_graphs) {
    graph_padding_ = std::make_unique<CudaGraphPadding>(
        resolve_capture_sizes(config_.cuda_graph_capture_sizes, limits_.max_num_reqs, limits_.max_num_tokens));
    if (graph_padding_->sizes().empty()) graph_padding_.reset();
  }
  // With graphs, one extra block past the manager's: the scratch block padded rows read (never written: their
  // slots are -1), so padding never touches a request's blocks and needs none reserved from the manager.
  if (graph_padding_) scratch_block_ = config_.num_blocks;
  kv_cache_.num_blocks = config_.num_blocks + (graph_padding_ ? 1 : 0);
  kv_cache_.block_size = config_.block_size;
  const KVCacheSpec spec = model.kv_cache_spec();
  const Shape shape = spec.layer_shape(kv_cache_.num_blocks, config_.block_size);
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    kv_cache_.key.push_back(Tensor::zeros(shape, model.activation_dtype(), device_));
    if (spec.has_value) kv_cache_.value.push_back(Tensor::zeros(shape, model.activation_dtype(), device_));
  }
  // The persistent step buffers, allocated once: a step's inputs at fixed offsets and the sampling rows' logits.
  const int64_t input_bytes = static_cast<int64_t>(layout_.total);
  host_inputs_ =
      device_.is_cpu() ? Tensor::empty({input_bytes}, DType::kU8) : Tensor::empty_pinned({input_bytes}, DType::kU8);
  std::fill_n(host_inputs_.data<uint8_t>(), input_bytes, 0);  // block-table rows start zeroed
  device_inputs_ = device_.is_cpu() ? host_inputs_ : Tensor::empty({input_bytes}, DType::kU8, device_);
  inputs_copied_ = Event(device_);
  block_table_widths_.assign(static_cast<size_t>(limits_.max_num_reqs), 0);
  logits_ = Tensor::empty({limits_.max_num_reqs, c.vocab_size}, DType::kF32, device_);
  if (!device_.is_cpu()) {
    sampled_ids_ = std::make_unique<SampledIdsTransfer>(device_, limits_.max_num_reqs);
    scatter_host_ = Tensor::empty_pinned({limits_.max_num_reqs, 2}, DType::kI32);
    scatter_device_ = Tensor::empty({limits_.max_num_reqs, 2}, DType::kI32, device_);
    scatter_copied_ = Event(device_);
  }
  // The model's per-step activations: one allocation for the largest step (a profiling runner's arena is counted
  // in the profile's peak); at most one logits row per scheduled token (prompt logprobs).
  activations_ =
      std::make_unique<ActivationMemory>(model_, ActivationLimits{limits_.max_num_tokens, limits_.max_num_tokens});
  if (!device_.is_cpu()) {
    // The attention kernels' split-K scratch, allocated once (never inside a step) and zeroed: its leading
    // counters must start at zero (the kernels keep them there). Sized as it always was: its size decides the
    // kernels' split count, so changing it would change the sums' order.
    const int64_t elems = model.attention_workspace_elems(std::max<int64_t>(config_.max_num_tokens, 256),
                                                          std::max<int64_t>(config_.max_model_len, 0));
    if (elems > 0) attention_workspace_ = Tensor::zeros({elems}, DType::kF32, device_);
    // The Hopper attention kernels' work lists, sized for the largest step.
    schedules_ = AttentionSchedules(model, limits_.max_num_tokens, limits_.max_num_reqs, attention_workspace_);
  }
  static bool logged_mode = false;  // one line per process: every engine of a process gets the same flags
  const CudaGraphMode mode = config_.cuda_graph_mode;
  if (mode != CudaGraphMode::kNone && !logged_mode) {
    logged_mode = true;
    if (device_.is_cpu()) {
      LOG(INFO) << "cudagraph_mode " << cuda_graph_mode_name(mode) << ": eager on cpu (the CPU backend has no graphs)";
    } else if (!model.cuda_graph_capturable()) {
      LOG(INFO) << "cudagraph_mode " << cuda_graph_mode_name(mode)
                << ": eager (tensor-parallel ranks launch on their own threads; per-rank graphs are not built)";
    } else if (!graph_padding_) {
      LOG(INFO) << "cudagraph_mode " << cuda_graph_mode_name(mode)
                << ": PIECEWISE graphs are not built and no FULL capture size fits; every batch runs eagerly";
    } else {
      LOG(INFO) << "cudagraph_mode " << cuda_graph_mode_name(mode) << ": FULL graphs for uniform decode batches of "
                << "up to " << graph_padding_->sizes().back()
                << " requests; prefill, mixed and larger batches run eagerly (PIECEWISE graphs are not built)";
    }
  }
  if (graph_padding_ && !config_.run_graph_batches_eagerly) capture_cuda_graphs();
}

std::vector<int64_t> ModelRunner::cuda_graph_sizes() const {
  return graphs_ ? graph_padding_->sizes() : std::vector<int64_t>{};
}

size_t ModelRunner::cuda_graph_bytes() const { return graphs_ ? graphs_->graph_bytes() : 0; }

size_t ModelRunner::cuda_graph_bytes(int64_t size) const { return graphs_ ? graphs_->graph_bytes(size) : 0; }

void ModelRunner::capture_cuda_graphs() {
  graphs_ = std::make_unique<CudaGraphRunner>(device_);
  const std::vector<int64_t> &sizes = graph_padding_->sizes();
  // Largest first (vLLM's order): a later, smaller graph's kernels are a subset in shape of what was warmed up.
  for (auto it = sizes.rbegin(); it != sizes.rend(); ++it) {
    const int64_t size = *it;
    inputs_copied_.synchronize();
    fill_padding(0, size);
    plan_attention(size, size);
    upload_inputs(size, size, 1);
    bind_batch(size, size, size, size, 1, graph_max_seq_len());
    Tensor logits = logits_.slice(0, 0, size);
    graphs_->capture(size, [&] { model_.forward(batch_, kv_cache_, logits); });
  }
  LOG(INFO) << "CUDA graphs: captured " << graphs_->num_graphs() << " FULL decode graphs (sizes " << sizes.front()
            << ".." << sizes.back() << ") in " << graphs_->capture_seconds() << " s, "
            << graphs_->graph_bytes() / (1024.0 * 1024.0) << " MiB";
}

int64_t ModelRunner::graph_size_for(int64_t num_reqs, int64_t num_tokens, int64_t num_logits) const {
  if (!graph_padding_ || (!graphs_ && !config_.run_graph_batches_eagerly)) return 0;
  if (num_tokens != num_reqs || num_logits != num_reqs) return 0;
  return graph_padding_->padded_size(num_reqs);
}

ModelRunner::HostRows ModelRunner::host_rows() {
  uint8_t *host = host_inputs_.data<uint8_t>();
  const InputLayout &L = layout_;
  auto i64 = [&](size_t offset) { return reinterpret_cast<int64_t *>(host + offset); };
  auto i32 = [&](size_t offset) { return reinterpret_cast<int32_t *>(host + offset); };
  return {i64(L.positions), i64(L.slot_mapping),   i32(L.input_ids),  i32(L.query_start_loc),
          i32(L.seq_lens),  i32(L.logits_indices), i32(L.block_table)};
}

void ModelRunner::fill_padding(int64_t first, int64_t padded) {
  const auto [pos, slots, ids, qsl, lens, logits_idx, table] = host_rows();
  if (first == 0) qsl[0] = 0;
  for (int64_t r = first; r < padded; ++r) {  // uniform decode: row r is token r
    ids[r] = 0;
    pos[r] = 0;
    slots[r] = -1;
    qsl[r + 1] = static_cast<int32_t>(r + 1);
    lens[r] = 1;
    logits_idx[r] = static_cast<int32_t>(r);
    table[r * limits_.max_blocks_per_seq] = scratch_block_;
    block_table_widths_[r] = std::max<int64_t>(block_table_widths_[r], 1);
  }
}

ModelRunner::~ModelRunner() = default;

size_t ModelRunner::kv_block_bytes(const CausalLM &model, int32_t block_size) {
  return static_cast<size_t>(model.config().num_hidden_layers) * block_size *
         model.kv_cache_spec().bytes_per_token(model.activation_dtype());
}

ModelRunner::StepAddresses ModelRunner::last_step_addresses() const {
  const ForwardBatch &b = batch_;
  const ops::AttentionMetadata &md = b.attention;
  return {b.input_ids.raw_data(),     b.positions.raw_data(),
          md.slot_mapping.raw_data(), md.query_start_loc.raw_data(),
          md.seq_lens.raw_data(),     b.logits_indices.raw_data(),
          md.block_table.raw_data(),  step_logits_.defined() ? step_logits_.raw_data() : nullptr,
          sampler_.params_base()};
}

void ModelRunner::apply_deltas(const SchedulerOutput &out) {
  for (const std::string &id : out.finished_req_ids) requests_.erase(id);
  // A preempted request keeps its tokens (it is recomputed from them) but loses
  // its blocks.
  for (const std::string &id : out.preempted_req_ids) {
    auto it = requests_.find(id);
    if (it == requests_.end()) continue;
    RequestState &s = it->second;
    s.block_ids.clear();
    s.num_computed_tokens = 0;
    // Sampled by a step still outstanding: the scheduler discards that token (ModelExecutor's contract).
    if (s.outstanding_sample_step >= 0) {
      s.token_ids.pop_back();
      s.outstanding_sample_step = -1;
    }
  }
  for (const NewRequestData &n : out.scheduled_new_reqs) {
    RequestState &s = requests_[n.req_id];
    s.token_ids = n.prompt_token_ids;
    s.num_prompt_tokens = static_cast<int64_t>(n.prompt_token_ids.size());
    s.block_ids = n.block_ids;
    s.num_computed_tokens = n.num_computed_tokens;
    s.sampling = to_sampling_settings(n.sampling_params, n.all_stop_token_ids);
    s.prompt_logprobs = n.sampling_params.prompt_logprobs;
    s.next_prompt_logprob_pos = 1;
    s.row_key = next_row_key_++;
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

int64_t ModelRunner::fill_inputs(const std::vector<RequestState *> &reqs, const std::vector<int64_t> &num_new,
                                 const std::vector<size_t> &rows, const std::vector<PromptLogprobRange> &ranges) {
  const int64_t num_reqs = static_cast<int64_t>(reqs.size());
  const auto [pos, slots, ids, qsl, lens, logits_idx, table] = host_rows();
  const int64_t bs = config_.block_size, width = limits_.max_blocks_per_seq;
  scatter_pairs_.clear();
  int64_t t = 0, max_blocks = 1;
  qsl[0] = 0;
  for (int64_t r = 0; r < num_reqs; ++r) {
    const RequestState &s = *reqs[r];
    const int64_t end = s.num_computed_tokens + num_new[r];
    const int64_t num_blocks = static_cast<int64_t>(s.block_ids.size());
    CHECK_LE(end, static_cast<int64_t>(s.token_ids.size())) << "scheduled past the known tokens";
    CHECK_LE(end, num_blocks * bs) << "blocks do not cover the scheduled tokens";
    CHECK_LE(num_blocks, width) << "a request holds " << num_blocks << " blocks, more than max_blocks_per_seq " << width
                                << " (max_model_len " << config_.max_model_len << ")";
    CHECK_LE(t + num_new[r], limits_.max_num_tokens) << "step exceeds max_num_tokens " << limits_.max_num_tokens;
    for (int64_t p = s.num_computed_tokens; p < end; ++p, ++t) {
      const int32_t block = s.block_ids[p / bs];
      CHECK(block >= 0 && block < config_.num_blocks) << "block id " << block << " outside the cache";
      ids[t] = s.token_ids[p];
      if (ids[t] == kPlaceholderId) {
        // Sampled by the previous step, still on the device: scattered in after the input copy.
        CHECK(p + 1 == static_cast<int64_t>(s.token_ids.size()) && s.outstanding_sample_step == running_step_ - 1)
            << "an unknown token id that is not the previous step's";
        scatter_pairs_.push_back(static_cast<int32_t>(t));
        scatter_pairs_.push_back(s.placeholder_row);
        ids[t] = 0;
      }
      pos[t] = p;
      slots[t] = static_cast<int64_t>(block) * bs + p % bs;
    }
    qsl[r + 1] = static_cast<int32_t>(t);
    lens[r] = static_cast<int32_t>(end);
    // Row r at its fixed stride: the request's blocks, then zeros (only entries a previous step wrote are cleared).
    int32_t *row = table + r * width;
    std::copy(s.block_ids.begin(), s.block_ids.end(), row);
    int64_t &written = block_table_widths_[r];
    if (written > num_blocks) std::fill(row + num_blocks, row + written, 0);
    written = num_blocks;
    max_blocks = std::max(max_blocks, num_blocks);
  }
  for (size_t i = 0; i < rows.size(); ++i) logits_idx[i] = qsl[rows[i] + 1] - 1;
  // Prompt position q is scored by the row of position q - 1.
  int64_t next_row = static_cast<int64_t>(rows.size());
  for (size_t r = 0; r < ranges.size(); ++r) {
    for (int64_t q = ranges[r].first; q < ranges[r].first + ranges[r].count; ++q) {
      logits_idx[next_row++] = qsl[r] + static_cast<int32_t>(q - 1 - reqs[r]->num_computed_tokens);
    }
  }
  return max_blocks;
}

Tensor ModelRunner::run_model(const std::vector<RequestState *> &reqs, const std::vector<int64_t> &num_new,
                              const std::vector<size_t> &rows, const std::vector<PromptLogprobRange> &ranges) {
  const int64_t num_reqs = static_cast<int64_t>(reqs.size());
  CHECK_LE(num_reqs, limits_.max_num_reqs) << "step exceeds max_num_reqs " << limits_.max_num_reqs;
  int64_t num_logits = static_cast<int64_t>(rows.size());
  for (const PromptLogprobRange &range : ranges) num_logits += range.count;
  int64_t num_tokens = 0, max_query = 0, max_seq = 0, num_decode = 0;
  for (int64_t r = 0; r < num_reqs; ++r) {
    num_tokens += num_new[r];
    max_query = std::max(max_query, num_new[r]);
    max_seq = std::max(max_seq, reqs[r]->num_computed_tokens + num_new[r]);
    if (num_new[r] == 1 && num_decode == r) ++num_decode;  // decode requests at the front of the batch
  }
  CHECK_LE(num_tokens, limits_.max_num_tokens) << "step exceeds max_num_tokens " << limits_.max_num_tokens;
  // Each logits row is a distinct scheduled token (a prompt-logprob row is never a request's last token).
  CHECK_LE(num_logits, num_tokens) << "more logits rows than scheduled tokens";
  // The previous step's copy must have read the host buffer before it is overwritten.
  inputs_copied_.synchronize();
  const int64_t max_blocks = fill_inputs(reqs, num_new, rows, ranges);
  // A uniform decode batch padded up to a capture size replays its graph: the metadata's host values are the
  // graph's (all rows decode, max_query_len 1, max_seq_len the block table's reach), the padded rows' logits are
  // computed but only the real rows' are returned.
  const int64_t graph_size = graph_size_for(num_reqs, num_tokens, num_logits);
  last_graph_size_ = graph_size;
  if (graph_size > 0) {
    fill_padding(num_reqs, graph_size);
    plan_attention(graph_size, graph_size);  // the padded batch, which the graph runs
    upload_inputs(graph_size, graph_size, max_blocks);
    bind_batch(graph_size, graph_size, graph_size, graph_size, 1, graph_max_seq_len());
    scatter_placeholder_ids(batch_.input_ids);  // async scheduling: the previous step's ids, still on the device
    if (graphs_) {
      graphs_->replay(graph_size);
    } else {  // run_graph_batches_eagerly: the captured forward's very inputs, eagerly
      Tensor logits = logits_.slice(0, 0, graph_size);
      model_.forward(batch_, kv_cache_, logits);
    }
    step_logits_ = logits_.slice(0, 0, num_logits);
    return step_logits_;
  }
  plan_attention(num_reqs, num_decode);
  upload_inputs(num_tokens, num_reqs, max_blocks);
  bind_batch(num_tokens, num_reqs, num_logits, num_decode, max_query, max_seq);
  // The sampling rows fit the persistent logits (at most one per request). Prompt-logprob rows (a rare prefill
  // feature) can number up to max_num_tokens: a persistent [max_num_tokens, vocab] f32 buffer would be gigabytes
  // for a large vocabulary, so a step that has them uses a scratch allocated for that step.
  step_logits_ = num_logits <= limits_.max_num_reqs
                     ? logits_.slice(0, 0, num_logits)
                     : Tensor::empty({num_logits, model_.config().vocab_size}, DType::kF32, device_);
  scatter_placeholder_ids(batch_.input_ids);
  model_.forward(batch_, kv_cache_, step_logits_);
  return step_logits_;
}

void ModelRunner::plan_attention(int64_t num_reqs, int64_t num_decode) {
  const HostRows rows = host_rows();
  schedules_.plan(rows.query_start_loc, rows.seq_lens, num_reqs, num_decode, limits_.max_blocks_per_seq);
}

void ModelRunner::upload_inputs(int64_t num_tokens, int64_t num_reqs, int64_t max_blocks) {
  // Two pitched host -> device copies of only what this step wrote (a decode step's inputs are a few KB whatever
  // the capacities): the used prefix of the six arrays (at most num_tokens 8-byte elements each; num_reqs + 1 <=
  // 2 num_tokens 4-byte ones), and the used columns of the block table's num_reqs rows; then the planned work lists'.
  if (device_.is_cpu()) return;
  const InputLayout &L = layout_;
  auto pitched = [](const Tensor &buffer, size_t offset, int64_t rows, int64_t row_bytes, int64_t pitch) {
    return buffer.slice(0, static_cast<int64_t>(offset), buffer.numel()).as_strided({rows, row_bytes}, {pitch, 1});
  };
  const int64_t pitch = static_cast<int64_t>(L.pitch), width = std::min(num_tokens * 8, pitch);
  pitched(device_inputs_, 0, 6, width, pitch).copy_from(pitched(host_inputs_, 0, 6, width, pitch));
  const int64_t table_pitch = limits_.max_blocks_per_seq * 4;
  pitched(device_inputs_, L.block_table, num_reqs, max_blocks * 4, table_pitch)
      .copy_from(pitched(host_inputs_, L.block_table, num_reqs, max_blocks * 4, table_pitch));
  schedules_.upload();
  inputs_copied_.record();
}

void ModelRunner::bind_batch(int64_t num_tokens, int64_t num_reqs, int64_t num_logits, int64_t num_decode,
                             int64_t max_query, int64_t max_seq) {
  uint8_t *dev = device_inputs_.data<uint8_t>();
  auto view = [&](size_t off, Shape shape, DType dtype) {
    return Tensor::from_blob(dev + off, std::move(shape), dtype, nullptr, device_);
  };
  const InputLayout &L = layout_;
  ForwardBatch &batch = batch_;
  batch.input_ids = view(L.input_ids, {num_tokens}, DType::kI32);
  batch.positions = view(L.positions, {num_tokens}, DType::kI64);
  batch.logits_indices = view(L.logits_indices, {num_logits}, DType::kI32);
  ops::AttentionMetadata &md = batch.attention;
  md.query_start_loc = view(L.query_start_loc, {num_reqs + 1}, DType::kI32);
  md.seq_lens = view(L.seq_lens, {num_reqs}, DType::kI32);
  // [num_reqs, max_blocks_per_seq] at the fixed row stride. On the device only this step's columns were copied:
  // entries past a request's blocks hold zeros or an earlier step's (valid) ids, and the kernels never read them.
  md.block_table = view(L.block_table, {num_reqs, limits_.max_blocks_per_seq}, DType::kI32);
  md.slot_mapping = view(L.slot_mapping, {num_tokens}, DType::kI64);
  md.num_reqs = num_reqs;
  md.num_decode_tokens = num_decode;
  md.max_query_len = max_query;
  md.max_seq_len = max_seq;
  md.workspace = attention_workspace_;
  schedules_.bind(md);
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
  // The logits are a prefix of the persistent buffer (allocated, like every persistent buffer, by the constructor,
  // so the profile counts them); the sampler's raw-logprobs scratch is allocated as a sampling step would.
  Tensor logits = run_model(reqs, num_new, rows, {});
  Tensor logprobs_scratch = Tensor::empty(logits.shape(), DType::kF32, device_);
  (void)logprobs_scratch;
  synchronize_current_stream(device_);
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
  ASSIGN_OR_RETURN(const StepHandle handle, execute_async(scheduler_output));
  return wait(handle);
}

StatusOr<ModelExecutor::StepHandle> ModelRunner::execute_async(const SchedulerOutput &scheduler_output) {
  // Two slots of device ids: a third step would overwrite ids nobody collected.
  CHECK_LT(outstanding_.size(), static_cast<size_t>(SampledIdsTransfer::kSlots)) << "at most two steps outstanding";
  // The next step's inputs read this one's sampled ids: it is sampled before another is launched.
  CHECK(!pending_sample_) << "step launched while step " << pending_sample_->handle << " waits for its sampling";
  const StepHandle handle = next_step_handle_++;
  OutstandingStep step{handle, ModelRunnerOutput{}, {}};
  step.output = run_step(scheduler_output, handle, &step.on_device);
  outstanding_.push_back(std::move(step));
  return handle;
}

StatusOr<ModelRunnerOutput> ModelRunner::wait(StepHandle handle) {
  CHECK(!outstanding_.empty() && outstanding_.front().handle == handle) << "wait(" << handle << ") out of order";
  CHECK(!pending_sample_ || pending_sample_->handle != handle) << "step " << handle << " waited for before sampling";
  OutstandingStep step = std::move(outstanding_.front());
  outstanding_.pop_front();
  StatusOr<ModelRunnerOutput> out = std::move(step.output);
  if (out.ok() && !step.on_device.empty()) collect_device_ids(step, &*out);
  if (out.ok()) {
    for (const RequestId &id : out->req_ids) {
      auto it = requests_.find(id.str());
      if (it != requests_.end() && it->second.outstanding_sample_step == handle)
        it->second.outstanding_sample_step = -1;
    }
  }
  return out;
}

void ModelRunner::collect_device_ids(const OutstandingStep &step, ModelRunnerOutput *out) {
  const int32_t *ids = sampled_ids_->wait(static_cast<int>(step.handle % SampledIdsTransfer::kSlots));
  for (const DeviceSampledId &d : step.on_device) {
    const int32_t id = ids[d.row];
    if (out != nullptr) out->sampled_token_ids[d.batch_row].push_back(id);
    auto it = requests_.find(d.req_id.str());
    if (it == requests_.end() || it->second.row_key != d.row_key) continue;  // finished since
    std::vector<int32_t> &tokens = it->second.token_ids;
    // Gone when a preemption dropped it; already written when penalties needed it early.
    if (d.token_index < static_cast<int64_t>(tokens.size()) && tokens[d.token_index] == kPlaceholderId) {
      tokens[d.token_index] = id;
    }
  }
}

void ModelRunner::resolve_placeholders_for_penalties(const std::vector<RequestState *> &reqs,
                                                     const std::vector<size_t> &rows) {
  bool needed = false;
  for (size_t r : rows) {
    const RequestState &s = *reqs[r];
    const SamplingSettings &p = s.sampling;
    const bool penalties = p.repetition_penalty != 1.f || p.frequency_penalty != 0.f || p.presence_penalty != 0.f;
    needed |= penalties && s.token_ids.back() == kPlaceholderId;
  }
  if (!needed) return;
  // Only the previous step's ids can be unknown (the one before was waited for before this step was launched).
  CHECK(!outstanding_.empty() && outstanding_.back().handle == running_step_ - 1);
  collect_device_ids(outstanding_.back(), nullptr);
}

void ModelRunner::scatter_placeholder_ids(Tensor &input_ids) {
  if (scatter_pairs_.empty()) return;
  const int64_t n = static_cast<int64_t>(scatter_pairs_.size()) / 2;
  scatter_copied_.synchronize();  // the previous scatter's copy has read the staging buffer
  std::copy(scatter_pairs_.begin(), scatter_pairs_.end(), scatter_host_.data<int32_t>());
  Tensor index = scatter_device_.slice(0, 0, n);
  index.copy_from(scatter_host_.slice(0, 0, n));
  scatter_copied_.record();
  const int prev_slot = static_cast<int>((running_step_ - 1) % SampledIdsTransfer::kSlots);
  ops::scatter_sampled_ids(input_ids, sampled_ids_->device_ids(prev_slot), index);
}

StatusOr<ModelRunnerOutput> ModelRunner::run_step(const SchedulerOutput &scheduler_output, StepHandle handle,
                                                  std::vector<DeviceSampledId> *on_device) {
  running_step_ = handle;
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
  if (scheduler_output.grammar_bitmask_deferred) {
    pending_sample_ = PendingSample{handle, std::move(reqs), std::move(rows), std::move(to_sample)};
    return out;
  }
  RETURN_IF_ERROR(sample_rows(scheduler_output, handle, reqs, rows, to_sample, out, on_device));
  return out;
}

Status ModelRunner::sample_deferred(StepHandle handle, const SchedulerOutput &scheduler_output) {
  CHECK(pending_sample_ && pending_sample_->handle == handle) << "step " << handle << " has no deferred sampling";
  CHECK(!outstanding_.empty() && outstanding_.back().handle == handle);
  PendingSample pending = std::move(*pending_sample_);
  pending_sample_.reset();
  OutstandingStep &step = outstanding_.back();
  if (!step.output.ok()) return ok_status();  // wait() reports the forward's error
  running_step_ = handle;
  Status sampled =
      sample_rows(scheduler_output, handle, pending.reqs, pending.rows, pending.logits, *step.output, &step.on_device);
  if (!sampled.ok()) step.output = sampled;
  return ok_status();
}

Status ModelRunner::sample_rows(const SchedulerOutput &scheduler_output, StepHandle handle,
                                const std::vector<RequestState *> &reqs, const std::vector<size_t> &rows,
                                Tensor &to_sample, ModelRunnerOutput &out, std::vector<DeviceSampledId> *on_device) {
  if (rows.empty()) return ok_status();
  const size_t num_reqs = reqs.size();
  std::vector<SamplerRequest> sreqs(rows.size());
  bool want_logprobs = false;
  // Structured output: the scheduler's bitmask row of each constrained request that samples now.
  std::unordered_map<std::string_view, size_t> bitmask_row;
  for (size_t k = 0; k < scheduler_output.structured_output_req_ids.size(); ++k) {
    bitmask_row.emplace(scheduler_output.structured_output_req_ids[k].str(), k);
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    const RequestState &s = *reqs[rows[i]];
    const int64_t num_outputs = static_cast<int64_t>(s.token_ids.size()) - s.num_prompt_tokens;
    sreqs[i].sampling = &s.sampling;
    sreqs[i].prompt_token_ids = std::span<const int32_t>(s.token_ids.data(), s.num_prompt_tokens);
    sreqs[i].output_token_ids = std::span<const int32_t>(s.token_ids.data() + s.num_prompt_tokens, num_outputs);
    sreqs[i].step = num_outputs;
    sreqs[i].row_key = s.row_key;
    want_logprobs |= s.sampling.logprobs.has_value();
    if (auto m = bitmask_row.find(out.req_ids[rows[i]].str()); m != bitmask_row.end()) {
      const int32_t words = scheduler_output.grammar_bitmask_words;
      sreqs[i].allowed_token_bitmask = scheduler_output.grammar_bitmask.data() + m->second * words;
      sreqs[i].bitmask_words = words;
    }
  }
  resolve_placeholders_for_penalties(reqs, rows);
  const int slot = static_cast<int>(handle % SampledIdsTransfer::kSlots);
  ASSIGN_OR_RETURN(SamplerOutput sampled,
                   sampler_.sample(to_sample, sreqs, sampled_ids_ ? &sampled_ids_->device_ids(slot) : nullptr));
  // CUDA without logprobs: the ids stay on the device; a side stream brings them to the host for wait().
  const bool ids_on_device = !sampled.sampled_token_ids.defined();
  if (ids_on_device) sampled_ids_->start_copy(slot, static_cast<int64_t>(rows.size()));
  if (want_logprobs) out.logprobs.resize(num_reqs);
  for (size_t i = 0; i < rows.size(); ++i) {
    RequestState &s = *reqs[rows[i]];
    if (ids_on_device) {
      s.token_ids.push_back(kPlaceholderId);
      s.placeholder_row = static_cast<int32_t>(i);
      s.outstanding_sample_step = handle;
      on_device->push_back({out.req_ids[rows[i]], s.row_key, rows[i], static_cast<int32_t>(i),
                            static_cast<int64_t>(s.token_ids.size()) - 1});
      continue;
    }
    const int32_t id = sampled.sampled_token_ids.data<int32_t>()[i];
    s.token_ids.push_back(id);
    s.outstanding_sample_step = handle;
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
  return ok_status();
}

}  // namespace llmserve
