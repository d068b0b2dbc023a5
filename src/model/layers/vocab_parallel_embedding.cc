// Embedding lookup and the vocabulary projection through ops::embedding / ops::linear.
#include "model/layers/vocab_parallel_embedding.h"

#include "core/logging.h"
#include "kernels/ops.h"

namespace llmserve {

VocabParallelEmbedding::VocabParallelEmbedding(Communicator& comm, int64_t num_embeddings, int64_t embedding_dim,
                                               DType dtype)
    : comm_(&comm) {
  CHECK_EQ(comm.world_size(), 1) << "a vocabulary split over ranks is not supported yet";
  weight_.shape = {num_embeddings, embedding_dim};
  weight_.dtype = dtype;
  weight_.output_dim = 0;
  weight_.weight_loader = load_whole_parameter;
}

void VocabParallelEmbedding::forward(Tensor& out, const Tensor& ids) const { ops::embedding(out, ids, weight_.data); }

void ParallelLMHead::forward(Tensor& logits, const Tensor& hidden) const {
  ops::linear(logits, hidden, weight_.data, nullptr);
}

}  // namespace llmserve
