// ModelRunner: SchedulerOutput deltas -> persistent request state ->
// ForwardBatch -> logits -> Sampler.
#include "runtime/model_runner.h"

#include <algorithm>
#include <span>

#include "core/logging.h"

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

Tensor ModelRunner::run_model(const std::vector<RequestState *> &reqs, const std::vector<int64_t> &num_new) {
  const int64_t num_reqs = static_cast<int64_t>(reqs.size());
  int64_t num_tokens = 0, max_blocks = 1, max_query = 0, max_seq = 0, num_decode = 0;
  for (int64_t r = 0; r < num_reqs; ++r) {
    num_tokens += num_new[r];
    max_query = std::max(max_query, num_new[r]);
    max_seq = std::max(max_seq, reqs[r]->num_computed_tokens + num_new[r]);
    max_blocks = std::max<int64_t>(max_blocks, static_cast<int64_t>(reqs[r]->block_ids.size()));
    if (num_new[r] == 1 && num_decode == r) ++num_decode;  // decode requests at the front of the batch
  }
  ForwardBatch batch;
  batch.input_ids = Tensor::empty({num_tokens}, DType::kI32);
  batch.positions = Tensor::empty({num_tokens}, DType::kI64);
  batch.logits_indices = Tensor::empty({num_reqs}, DType::kI64);
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
    std::copy(s.block_ids.begin(), s.block_ids.end(), table + r * max_blocks);
    batch.logits_indices.data<int64_t>()[r] = t - 1;
  }
  Tensor logits = Tensor::empty({num_reqs, model_.config().vocab_size}, DType::kF32);
  model_.forward(batch, kv_cache_, logits);
  return logits;
}

StatusOr<ModelRunnerOutput> ModelRunner::execute(const SchedulerOutput &scheduler_output) {
  apply_deltas(scheduler_output);
  ModelRunnerOutput out;
  const size_t num_reqs = scheduler_output.num_scheduled_tokens.size();
  if (num_reqs == 0) return out;
  std::vector<RequestState *> reqs(num_reqs);
  std::vector<int64_t> num_new(num_reqs);
  out.req_ids.resize(num_reqs);
  out.sampled_token_ids.resize(num_reqs);
  for (size_t r = 0; r < num_reqs; ++r) {
    const ScheduledTokens &st = scheduler_output.num_scheduled_tokens[r];
    auto it = requests_.find(st.req_id);
    CHECK(it != requests_.end()) << "runner has no state for scheduled request " << st.req_id;
    CHECK_GT(st.num_tokens, 0) << st.req_id;
    reqs[r] = &it->second;
    num_new[r] = st.num_tokens;
    out.req_ids[r] = st.req_id;
  }
  Tensor logits = run_model(reqs, num_new);

  // Rows whose prompt is now complete sample; a partial prefill chunk samples
  // nothing.
  std::vector<size_t> rows;
  for (size_t r = 0; r < num_reqs; ++r) {
    reqs[r]->num_computed_tokens += num_new[r];
    if (reqs[r]->num_computed_tokens == static_cast<int64_t>(reqs[r]->token_ids.size())) rows.push_back(r);
  }
  if (rows.empty()) return out;
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
  return out;
}

}  // namespace llmserve
