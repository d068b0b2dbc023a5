// CpuCommunicatorGroup: the collectives of N ranks that are threads of one process on the CPU (shared memory and a
// barrier), so the whole tensor-parallel path — sharded weights, split heads, all-reduce, logits all-gather — runs
// in CI without GPUs. Deterministic: a sum is taken in rank order 0..N-1, so repeated runs agree bit for bit.
#pragma once

#include <barrier>
#include <memory>
#include <vector>

#include "model/layers/communicator.h"

namespace llmserve {

class CpuCommunicatorGroup {
 public:
  explicit CpuCommunicatorGroup(int world_size);
  ~CpuCommunicatorGroup();
  CpuCommunicatorGroup(const CpuCommunicatorGroup&) = delete;
  CpuCommunicatorGroup& operator=(const CpuCommunicatorGroup&) = delete;

  int world_size() const { return world_size_; }
  // The communicator of rank r: its collectives must be called from one thread per rank (each blocks until every
  // rank of the group has called the same collective). Tensors: on the CPU, contiguous; all_reduce needs a float
  // dtype (f32, bf16, f16; the sum is accumulated in f32).
  Communicator& rank(int r);

 private:
  class Rank;
  // What each rank posts before the first barrier of a collective: its buffer, element count and dtype.
  struct Slot {
    void* data = nullptr;
    int64_t numel = 0;
    DType dtype = DType::kF32;
  };
  int world_size_;
  std::barrier<> barrier_;
  std::vector<Slot> slots_;  // [world_size]: written by rank r only, read by all after the barrier
  std::vector<std::unique_ptr<Rank>> ranks_;
};

}  // namespace llmserve
