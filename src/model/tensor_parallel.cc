// check_tensor_parallel_size / heads_per_rank (see tensor_parallel.h).
#include "model/tensor_parallel.h"

#include <string>

namespace llmserve {

Status check_tensor_parallel_size(const ModelConfig& c, int64_t tp) {
  const std::string size = std::to_string(tp);
  if (tp < 1) return invalid_argument("tensor parallel size must be at least 1 (got " + size + ")");
  if (tp > 1 && c.mla) {
    return invalid_argument("tensor parallel size " + size + ": " + c.architecture +
                            "'s multi-head latent attention is not sharded: it runs with tensor parallel size 1");
  }
  if (tp > 1 && c.moe) {
    return invalid_argument("tensor parallel size " + size + ": " + c.architecture +
                            " is a mixture-of-experts model, and sharding its experts (tensor or expert parallelism) "
                            "is not implemented: it runs with tensor parallel size 1");
  }
  if (c.num_attention_heads % tp != 0) {
    return invalid_argument("Total number of attention heads (" + std::to_string(c.num_attention_heads) +
                            ") must be divisible by tensor parallel size (" + size + ").");
  }
  const int64_t kv = c.num_key_value_heads;
  if (kv >= tp && kv % tp != 0) {
    return invalid_argument("Total number of key/value heads (" + std::to_string(kv) +
                            ") must be divisible by tensor parallel size (" + size + ").");
  }
  if (kv < tp && tp % kv != 0) {
    return invalid_argument("Tensor parallel size (" + size + ") must be divisible by the total number of key/value " +
                            "heads (" + std::to_string(kv) + ") to replicate them over ranks.");
  }
  if (c.intermediate_size % tp != 0) {
    return invalid_argument("intermediate_size (" + std::to_string(c.intermediate_size) +
                            ") must be divisible by tensor parallel size (" + size + ").");
  }
  return ok_status();
}

int64_t heads_per_rank(int64_t total, int64_t tp) { return total >= tp ? total / tp : 1; }

}  // namespace llmserve
