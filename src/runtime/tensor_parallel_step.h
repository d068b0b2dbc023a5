// What a tensor-parallel rank needs to know about a step besides its input arrays: the arrays' shapes, the host-side
// attention counts and the KV cache's shape — shared memory for the ranks of node 0, a fixed-size header broadcast
// from rank 0 for the ranks of other nodes (TensorParallelControl). Invariant: decode(encode(x)) == x.
#pragma once

#include <array>
#include <cstdint>

#include "core/tensor.h"
#include "model/causal_lm.h"

namespace llmserve {

// The step input arrays a rank copies from rank 0, in broadcast order.
enum TensorParallelInput {
  kTpInputIds,
  kTpPositions,
  kTpLogitsIndices,
  kTpQueryStartLoc,
  kTpSeqLens,
  kTpBlockTable,
  kTpSlotMapping,
  kTpNumInputs
};

struct TensorShape {
  bool defined = false;
  Shape shape, strides;  // 1 or 2 dims
  DType dtype = DType::kI32;
};

struct StepShapes {
  std::array<TensorShape, kTpNumInputs> inputs;
  int64_t num_reqs = 0, num_decode_tokens = 0, max_query_len = 0, max_seq_len = 0;
  int64_t workspace_numel = 0;  // 0: no split-K workspace
  int64_t num_layers = 0;
  Shape cache_shape;  // per layer: KVCacheSpec::layer_shape, e.g. [num_blocks, block_size, kv_heads_per_rank, head_dim]
  DType cache_dtype = DType::kF32;
};

// The shapes of a step's batch and cache (the inputs' device data is not read).
StepShapes step_shapes(const ForwardBatch& batch, const KVCacheTensors& cache);

// The control messages rank 0 sends ranks of other nodes, one per model call that involves them.
enum class TpCommand : int64_t { kForward = 1, kPlanActivations = 2, kReleaseActivations = 3, kShutdown = 4 };

struct TpMessage {
  TpCommand command = TpCommand::kShutdown;
  StepShapes step;              // kForward
  ActivationLimits limits;      // kPlanActivations
  bool release_caches = false;  // kReleaseActivations: the outermost arena went (its runner is gone)
};

inline constexpr size_t kTpHeaderWords = 80;
using TpHeader = std::array<int64_t, kTpHeaderWords>;
TpHeader encode(const TpMessage& message);
TpMessage decode(const TpHeader& header);  // CHECKs a header that encode did not make

}  // namespace llmserve
