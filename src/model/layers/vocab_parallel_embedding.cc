// Vocabulary-parallel embedding lookup and projection through ops::embedding / masked_embedding / linear and the
// communicator's all-reduce / all-gather.
#include "model/layers/vocab_parallel_embedding.h"

#include <algorithm>

#include "core/logging.h"
#include "kernels/ops.h"

namespace llmserve {

VocabParallelEmbedding::VocabParallelEmbedding(Communicator& comm, int64_t num_embeddings, int64_t embedding_dim,
                                               DType dtype)
    : comm_(&comm),
      num_embeddings_(num_embeddings),
      per_partition_((num_embeddings + comm.world_size() - 1) / comm.world_size()),
      vocab_start_(per_partition_ * comm.rank()) {
  weight_.shape = {per_partition_, embedding_dim};
  weight_.dtype = dtype;
  weight_.output_dim = 0;
  weight_.weight_loader = [this](Parameter& p, WeightSource& w, const std::string& name, const std::string& shard) {
    CHECK(shard.empty()) << name << ": an embedding has no shard '" << shard << "'";
    return load(p, w, name);
  };
}

Status VocabParallelEmbedding::load(Parameter& p, WeightSource& weights, const std::string& checkpoint_name) const {
  const Shape full = {num_embeddings_, p.shape[1]};
  if (comm_->world_size() == 1) {
    ASSIGN_OR_RETURN(p.data, weights.get(checkpoint_name, full, p.dtype));
    return ok_status();
  }
  const int64_t rows = std::clamp<int64_t>(num_embeddings_ - vocab_start_, 0, per_partition_);
  ASSIGN_OR_RETURN(Tensor mine,
                   weights.get_slice(checkpoint_name, full, p.dtype, 0, vocab_start_, vocab_start_ + rows));
  if (rows == per_partition_) {
    p.data = mine;
    return ok_status();
  }
  // The last rank's padding rows: zeros (no id reaches them; their logits are dropped after the gather).
  p.data = Tensor::zeros(p.shape, p.dtype, mine.device());
  if (rows > 0) {
    Tensor dst = p.data.slice(0, 0, rows);
    dst.copy_from(mine);
  }
  return ok_status();
}

void VocabParallelEmbedding::forward(Tensor& out, const Tensor& ids) const {
  if (comm_->world_size() == 1) {
    ops::embedding(out, ids, weight_.data);
    return;
  }
  ops::masked_embedding(out, ids, weight_.data, vocab_start_);
  comm_->all_reduce(out);
}

ParallelLMHead::Activations ParallelLMHead::plan_activations(int64_t max_rows, ArenaPlanner& planner) const {
  Activations a;
  if (comm_->world_size() == 1) return a;
  a.local = planner.reserve("lm_head.local", {max_rows, per_partition_}, DType::kF32, "max_num_logits");
  a.gathered = planner.reserve("lm_head.gathered", {comm_->world_size() * max_rows, per_partition_}, DType::kF32,
                               "max_num_logits");
  return a;
}

void ParallelLMHead::forward(Tensor& logits, const Tensor& hidden, const Arena* arena, const Activations& act) const {
  const int world = comm_->world_size();
  if (world == 1) {
    ops::linear(logits, hidden, weight_.data, nullptr);
    return;
  }
  CHECK(arena != nullptr && act.local.valid()) << "lm_head: activations not planned for " << world << " ranks";
  const int64_t n = hidden.size(0);
  Tensor local = arena->view(act.local, n);
  ops::linear(local, hidden, weight_.data, nullptr);
  Tensor gathered = arena->view(act.gathered, world * n);  // [world, n, P] as rows
  comm_->all_gather(gathered, local);
  if (!logits.defined()) return;
  CHECK(logits.shape() == (Shape{n, num_embeddings_})) << "lm_head: logits " << logits.to_string();
  for (int r = 0; r < world; ++r) {
    const int64_t first = r * per_partition_, cols = std::min(per_partition_, num_embeddings_ - first);
    if (cols <= 0) break;
    Tensor dst = logits.slice(1, first, first + cols);
    dst.copy_from(gathered.slice(0, r * n, (r + 1) * n).slice(1, 0, cols));
  }
}

}  // namespace llmserve
