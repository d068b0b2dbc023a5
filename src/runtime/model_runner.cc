// ModelRunner: SchedulerOutput deltas -> persistent request state ->
// ForwardBatch -> logits -> Sampler.
#include "runtime/model_runner.h"

#include <algorithm>
#include <span>

#include "core/logging.h"
#include "kernels/ops.h"

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
    : model_(model), config_(std::move(config)), sampler_(config_.seed) {
  CHECK_GT(config_.num_blocks, 0);
  CHECK_GT(config_.block_size, 0);
  const ModelConfig &c = model.config();
  kv_cache_.num_blocks = config_.num_blocks;
  kv_cache_.block_size = config_.block_size;
  const Shape shape = {config_.num_blocks, config_.block_size, c.num_key_value_heads, c.head_dim};
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    kv_cache_.key.push_back(Tensor::zeros(shape, DType::kF32));
    kv_cache_.value.push_back(Tensor::zeros(shape, DType::kF32));
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

Tensor ModelRunner::run_model(const std::vector<RequestState *> &reqs, const std::vector<int64_t> &num_new,
                              const std::vector<PromptLogprobRange> &ranges) {
  const int64_t num_reqs = static_cast<int64_t>(reqs.size());
  int64_t num_tokens = 0, max_blocks = 1, max_query = 0, max_seq = 0, num_decode = 0, num_logits = num_reqs;
  for (int64_t r = 0; r < num_reqs; ++r) {
    num_tokens += num_new[r];
    num_logits += ranges[r].count;
    max_query = std::max(max_query, num_new[r]);
    max_seq = std::max(max_seq, reqs[r]->num_computed_tokens + num_new[r]);
    max_blocks = std::max<int64_t>(max_blocks, static_cast<int64_t>(reqs[r]->block_ids.size()));
    if (num_new[r] == 1 && num_decode == r) ++num_decode;  // decode requests at the front of the batch
  }
  ForwardBatch batch;
  batch.input_ids = Tensor::empty({num_tokens}, DType::kI32);
  batch.positions = Tensor::empty({num_tokens}, DType::kI64);
  batch.logits_indices = Tensor::empty({num_logits}, DType::kI64);
  ops::AttentionMetadata &md = batch.attention;
  md.query_start_loc = Tensor::empty({num_reqs + 1}, DType::kI32);
  md.seq_lens = Tensor::empty({num_reqs}, DType::kI32);
  md.block_table = Tensor::zeros({num_reqs, max_blocks}, DType::kI32);
  md.slot_mapping = Tensor::empty({num_tokens}, DType::kI64);
  md.num_reqs = num_reqs;
  md.num_decode_tokens = num_decode;
  md.max_query_len = max_query;
  md.max_seq_len = max_seq;
  int32_t *ids = batch.input_ids.data<int32_t>();
  int64_t *pos = batch.positions.data<int64_t>();
  int64_t *slots = md.slot_mapping.data<int64_t>();
  int32_t *qsl = md.query_start_loc.data<int32_t>();
  int32_t *lens = md.seq_lens.data<int32_t>();
  int32_t *table = md.block_table.data<int32_t>();
  int64_t *logits_rows = batch.logits_indices.data<int64_t>();
  int64_t next_prompt_row = num_reqs;
  const int64_t bs = config_.block_size;
  int64_t t = 0;
  qsl[0] = 0;
  for (int64_t r = 0; r < num_reqs; ++r) {
    const RequestState &s = *reqs[r];
    const int64_t end = s.num_computed_tokens + num_new[r];
    CHECK_LE(end, static_cast<int64_t>(s.token_ids.size())) << "scheduled past the known tokens";
    CHECK_LE(end, static_cast<int64_t>(s.block_ids.size()) * bs) << "blocks do not cover the scheduled tokens";
    const int64_t first_token = t;
    for (int64_t p = s.num_computed_tokens; p < end; ++p, ++t) {
      const int32_t block = s.block_ids[p / bs];
      CHECK(block >= 0 && block < config_.num_blocks) << "block id " << block << " outside the cache";
      ids[t] = s.token_ids[p];
      pos[t] = p;
      slots[t] = static_cast<int64_t>(block) * bs + p % bs;
    }
    qsl[r + 1] = static_cast<int32_t>(t);
    lens[r] = static_cast<int32_t>(end);
    std::copy(s.block_ids.begin(), s.block_ids.end(), table + r * max_blocks);
    logits_rows[r] = t - 1;
    // Prompt position q is scored by the row of position q - 1.
    for (int64_t q = ranges[r].first; q < ranges[r].first + ranges[r].count; ++q) {
      logits_rows[next_prompt_row++] = first_token + (q - 1 - s.num_computed_tokens);
    }
  }
  Tensor logits = Tensor::empty({num_logits, model_.config().vocab_size}, DType::kF32);
  model_.forward(batch, kv_cache_, logits);
  return logits;
}

void ModelRunner::compute_prompt_logprobs(const Tensor &logits, int64_t first_row,
                                          const std::vector<RequestState *> &reqs,
                                          const std::vector<PromptLogprobRange> &ranges, ModelRunnerOutput &out) {
  const int64_t num_rows = logits.size(0) - first_row;
  const int64_t vocab = logits.size(1);
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
  // vLLM's prompt logprobs: log_softmax of the raw logits (no penalties, bias or temperature).
  Tensor logprobs = Tensor::empty({num_rows, vocab}, DType::kF32);
  ops::log_softmax(logprobs, logits.slice(0, first_row, first_row + num_rows));
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

Status ModelRunner::sample(Tensor logits, const std::vector<RequestState *> &reqs, ModelRunnerOutput &out) {
  // Rows whose prompt is now complete sample; a partial prefill chunk samples
  // nothing.
  const size_t num_reqs = reqs.size();
  std::vector<size_t> rows;
  for (size_t r = 0; r < num_reqs; ++r) {
    if (reqs[r]->num_computed_tokens == static_cast<int64_t>(reqs[r]->token_ids.size())) rows.push_back(r);
  }
  if (rows.empty()) return ok_status();
  const int64_t vocab = model_.config().vocab_size;
  Tensor to_sample = logits;
  if (rows.size() != num_reqs) {
    to_sample = Tensor::empty({static_cast<int64_t>(rows.size()), vocab}, DType::kF32);
    for (size_t i = 0; i < rows.size(); ++i) {
      std::copy_n(logits.data<float>() + rows[i] * vocab, vocab, to_sample.data<float>() + i * vocab);
    }
  }
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
  return ok_status();
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
  Tensor logits = run_model(reqs, num_new, ranges);
  for (size_t r = 0; r < num_reqs; ++r) reqs[r]->num_computed_tokens += num_new[r];
  const int64_t n = static_cast<int64_t>(num_reqs);
  if (!any_prompt_logprobs) {
    RETURN_IF_ERROR(sample(logits, reqs, out));
    return out;
  }
  // Before sampling: the sampler edits its logits in place.
  compute_prompt_logprobs(logits, n, reqs, ranges, out);
  RETURN_IF_ERROR(sample(logits.slice(0, 0, n), reqs, out));
  return out;
}

}  // namespace llmserve
