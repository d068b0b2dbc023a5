// PagedRunner: block allocation and ForwardBatch construction for mixed prefill + decode steps.
#include "runtime/paged_runner.h"

#include <algorithm>

#include "kernels/ops.h"

namespace llmserve {

PagedRunner::PagedRunner(CausalLM& model, PagedRunnerOptions options) : model_(model), options_(options) {
  const ModelConfig& c = model.config();
  int64_t num_blocks = options_.num_blocks;
  if (num_blocks <= 0) num_blocks = (options_.max_num_tokens_cached + options_.block_size - 1) / options_.block_size;
  kv_cache_.num_blocks = num_blocks;
  kv_cache_.block_size = options_.block_size;
  const Shape shape = {num_blocks, options_.block_size, c.num_key_value_heads, c.head_dim};
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    kv_cache_.key.push_back(Tensor::empty(shape, DType::kF32));
    kv_cache_.value.push_back(Tensor::empty(shape, DType::kF32));
  }
  free_blocks_.reserve(num_blocks);
  for (int64_t b = num_blocks - 1; b >= 0; --b) free_blocks_.push_back(static_cast<int32_t>(b));
}

Status PagedRunner::ensure_blocks(RunnerSequence& seq, int64_t num_tokens) {
  const int64_t needed = (num_tokens + options_.block_size - 1) / options_.block_size;
  const int64_t missing = needed - static_cast<int64_t>(seq.block_ids.size());
  if (missing > static_cast<int64_t>(free_blocks_.size())) {
    return resource_exhausted("KV cache full: need " + std::to_string(missing) + " more blocks, " +
                              std::to_string(free_blocks_.size()) + " free of " + std::to_string(num_blocks()));
  }
  for (int64_t i = 0; i < missing; ++i) {
    seq.block_ids.push_back(free_blocks_.back());
    free_blocks_.pop_back();
  }
  return ok_status();
}

void PagedRunner::release(RunnerSequence& seq) {
  for (auto it = seq.block_ids.rbegin(); it != seq.block_ids.rend(); ++it) free_blocks_.push_back(*it);
  seq.block_ids.clear();
  seq.num_computed_tokens = 0;
}

StatusOr<Tensor> PagedRunner::step(const std::vector<RunnerSequence*>& seqs) {
  const int64_t num_reqs = static_cast<int64_t>(seqs.size());
  CHECK_GT(num_reqs, 0);
  // How many tokens each sequence computes now, then blocks for all of them (all-or-nothing per step).
  std::vector<int64_t> num_new(num_reqs);
  int64_t num_tokens = 0, max_blocks = 0, max_query = 0, max_seq = 0, num_decode = 0;
  for (int64_t r = 0; r < num_reqs; ++r) {
    const RunnerSequence& s = *seqs[r];
    int64_t pending = static_cast<int64_t>(s.token_ids.size()) - s.num_computed_tokens;
    CHECK_GT(pending, 0) << "sequence " << r << " has nothing to compute";
    if (options_.max_chunk_tokens > 0) pending = std::min(pending, options_.max_chunk_tokens);
    num_new[r] = pending;
    num_tokens += pending;
    max_query = std::max(max_query, pending);
    max_seq = std::max(max_seq, s.num_computed_tokens + pending);
    if (pending == 1 && num_decode == r) ++num_decode;  // decode requests at the front of the batch
  }
  std::vector<size_t> had_blocks(num_reqs);
  for (int64_t r = 0; r < num_reqs; ++r) had_blocks[r] = seqs[r]->block_ids.size();
  for (int64_t r = 0; r < num_reqs; ++r) {
    Status s = ensure_blocks(*seqs[r], seqs[r]->num_computed_tokens + num_new[r]);
    if (!s.ok()) {  // undo this step's allocations
      for (int64_t q = 0; q <= r; ++q) {
        while (seqs[q]->block_ids.size() > had_blocks[q]) {
          free_blocks_.push_back(seqs[q]->block_ids.back());
          seqs[q]->block_ids.pop_back();
        }
      }
      return s;
    }
    max_blocks = std::max<int64_t>(max_blocks, static_cast<int64_t>(seqs[r]->block_ids.size()));
  }

  ForwardBatch batch;
  batch.input_ids = Tensor::empty({num_tokens}, DType::kI32);
  batch.positions = Tensor::empty({num_tokens}, DType::kI64);
  batch.logits_indices = Tensor::empty({num_reqs}, DType::kI32);
  ops::AttentionMetadata& md = batch.attention;
  md.query_start_loc = Tensor::empty({num_reqs + 1}, DType::kI32);
  md.seq_lens = Tensor::empty({num_reqs}, DType::kI32);
  md.block_table = Tensor::zeros({num_reqs, std::max<int64_t>(1, max_blocks)}, DType::kI32);
  md.slot_mapping = Tensor::empty({num_tokens}, DType::kI64);
  md.num_reqs = num_reqs;
  md.num_decode_tokens = num_decode;
  md.max_query_len = max_query;
  md.max_seq_len = max_seq;
  int32_t* ids = batch.input_ids.data<int32_t>();
  int64_t* pos = batch.positions.data<int64_t>();
  int64_t* slots = md.slot_mapping.data<int64_t>();
  int32_t* qsl = md.query_start_loc.data<int32_t>();
  int32_t* lens = md.seq_lens.data<int32_t>();
  int32_t* table = md.block_table.data<int32_t>();
  const int64_t bs = options_.block_size;
  int64_t t = 0;
  qsl[0] = 0;
  for (int64_t r = 0; r < num_reqs; ++r) {
    RunnerSequence& s = *seqs[r];
    for (int64_t j = 0; j < num_new[r]; ++j, ++t) {
      const int64_t p = s.num_computed_tokens + j;
      ids[t] = s.token_ids[p];
      pos[t] = p;
      slots[t] = static_cast<int64_t>(s.block_ids[p / bs]) * bs + p % bs;
    }
    qsl[r + 1] = static_cast<int32_t>(t);
    lens[r] = static_cast<int32_t>(s.num_computed_tokens + num_new[r]);
    std::copy(s.block_ids.begin(), s.block_ids.end(), table + r * md.block_table.size(1));
    batch.logits_indices.data<int32_t>()[r] = static_cast<int32_t>(t - 1);
  }
  Tensor logits = Tensor::empty({num_reqs, model_.config().vocab_size}, DType::kF32);
  model_.forward(batch, kv_cache_, logits);
  for (int64_t r = 0; r < num_reqs; ++r) seqs[r]->num_computed_tokens += num_new[r];
  return logits;
}

StatusOr<std::vector<std::vector<int32_t>>> greedy_generate(PagedRunner& runner,
                                                            const std::vector<std::vector<int32_t>>& prompts,
                                                            int64_t max_new_tokens,
                                                            const std::vector<int32_t>& stop_ids) {
  std::vector<RunnerSequence> seqs(prompts.size());
  std::vector<std::vector<int32_t>> outputs(prompts.size());
  std::vector<bool> done(prompts.size(), max_new_tokens <= 0);
  for (size_t i = 0; i < prompts.size(); ++i) {
    if (prompts[i].empty()) return invalid_argument("prompt " + std::to_string(i) + " is empty");
    seqs[i].token_ids = prompts[i];
  }
  Status status;
  while (true) {
    std::vector<RunnerSequence*> active;
    std::vector<size_t> index;
    for (size_t i = 0; i < seqs.size(); ++i) {
      if (!done[i]) {
        active.push_back(&seqs[i]);
        index.push_back(i);
      }
    }
    if (active.empty()) break;
    StatusOr<Tensor> logits = runner.step(active);
    if (!logits.ok()) {
      status = logits.status();
      break;
    }
    // Chunked prefill: a sequence still in its prompt has no next token yet.
    Tensor next = Tensor::empty({static_cast<int64_t>(active.size())}, DType::kI32);
    ops::argmax(next, *logits);
    for (size_t a = 0; a < active.size(); ++a) {
      RunnerSequence& s = *active[a];
      if (s.num_computed_tokens < static_cast<int64_t>(s.token_ids.size())) continue;
      const int32_t id = next.data<int32_t>()[a];
      std::vector<int32_t>& out = outputs[index[a]];
      out.push_back(id);
      s.token_ids.push_back(id);
      const bool stop = std::find(stop_ids.begin(), stop_ids.end(), id) != stop_ids.end();
      if (stop || static_cast<int64_t>(out.size()) >= max_new_tokens) done[index[a]] = true;
    }
  }
  for (RunnerSequence& s : seqs) runner.release(s);
  if (!status.ok()) return status;
  return outputs;
}

}  // namespace llmserve
