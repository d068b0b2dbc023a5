// VocabParallelEmbedding (token ids -> rows of the embedding table) and ParallelLMHead (hidden rows -> logits over
// the vocabulary), the vocabulary split over ranks. World size 1 today: a split vocabulary needs a masked lookup and
// a column all-gather of logits, which the ops do not offer yet (CHECKed, not silently wrong).
#pragma once

#include "core/tensor.h"
#include "model/layers/communicator.h"
#include "model/layers/parameter.h"

namespace llmserve {

class VocabParallelEmbedding {
 public:
  VocabParallelEmbedding(Communicator& comm, int64_t num_embeddings, int64_t embedding_dim, DType dtype);
  VocabParallelEmbedding(const VocabParallelEmbedding&) = delete;
  VocabParallelEmbedding& operator=(const VocabParallelEmbedding&) = delete;
  // out [n, dim] = weight[ids] (ids [n] i32, on the device).
  void forward(Tensor& out, const Tensor& ids) const;
  const Tensor& weight() const { return weight_.data; }
  void named_parameters(const std::string& prefix, NamedParameters& out) {
    out.emplace_back(prefix + ".weight", &weight_);
  }

 protected:
  Communicator* comm_;
  Parameter weight_;  // [num_embeddings / world_size, dim]
};

class ParallelLMHead : public VocabParallelEmbedding {
 public:
  using VocabParallelEmbedding::VocabParallelEmbedding;
  // tie_word_embeddings: use the embedding table (loaded) instead of an own weight.
  void tie_to(const VocabParallelEmbedding& embedding) { weight_.data = embedding.weight(); }
  // logits [n, vocab] (f32) = hidden [n, dim] W^T.
  void forward(Tensor& logits, const Tensor& hidden) const;
};

}  // namespace llmserve
