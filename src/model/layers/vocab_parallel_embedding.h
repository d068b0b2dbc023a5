// VocabParallelEmbedding (token ids -> rows of the embedding table) and ParallelLMHead (hidden rows -> logits over
// the vocabulary), the vocabulary split over ranks as vLLM splits it: rank r holds rows [r * P, (r + 1) * P) with
// P = ceil(vocab / world_size), the last rank's tail zero-padded. The embedding is a masked lookup of the rank's rows
// all-reduced over ranks (exactly one rank contributes each row); the head computes the rank's logit columns and
// all-gathers them (the sampler needs the whole row: top-k/top-p, penalties and logprobs are over the full vocab).
#pragma once

#include "core/arena.h"
#include "core/tensor.h"
#include "model/layers/communicator.h"
#include "model/layers/parameter.h"

namespace llmserve {

class VocabParallelEmbedding {
 public:
  VocabParallelEmbedding(Communicator& comm, int64_t num_embeddings, int64_t embedding_dim, DType dtype);
  VocabParallelEmbedding(const VocabParallelEmbedding&) = delete;
  VocabParallelEmbedding& operator=(const VocabParallelEmbedding&) = delete;
  // out [n, dim] = weight[ids] (ids [n] i32, on the device); all-reduced over ranks when world_size > 1.
  void forward(Tensor& out, const Tensor& ids) const;
  const Tensor& weight() const { return weight_.data; }
  void named_parameters(const std::string& prefix, NamedParameters& out) {
    out.emplace_back(prefix + ".weight", &weight_);
  }
  int64_t num_embeddings_per_partition() const { return per_partition_; }  // P
  int64_t vocab_start() const { return vocab_start_; }                     // rank * P

 protected:
  // Reads only this rank's rows of the [num_embeddings, dim] checkpoint tensor.
  Status load(Parameter& p, WeightSource& weights, const std::string& checkpoint_name) const;

  Communicator* comm_;
  int64_t num_embeddings_, per_partition_, vocab_start_;
  Parameter weight_;  // [P, dim]
};

class ParallelLMHead : public VocabParallelEmbedding {
 public:
  using VocabParallelEmbedding::VocabParallelEmbedding;
  // tie_word_embeddings: use the embedding table (loaded) instead of an own weight (the same rows on every rank).
  void tie_to(const VocabParallelEmbedding& embedding) { weight_.data = embedding.weight(); }

  // world_size > 1: the rank's logit columns [rows, P] and the all-gather's [world * rows, P] (f32).
  struct Activations {
    ArenaRegion local, gathered;
  };
  Activations plan_activations(int64_t max_rows, ArenaPlanner& planner) const;
  // logits [n, vocab] (f32) = hidden [n, dim] W^T. With world_size > 1 every rank takes part in the all-gather;
  // an undefined `logits` (a rank that does not sample) skips only the final copy.
  void forward(Tensor& logits, const Tensor& hidden, const Arena* arena, const Activations& act) const;
};

}  // namespace llmserve
