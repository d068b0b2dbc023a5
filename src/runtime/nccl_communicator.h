// NcclCommunicator: one rank's collectives over NCCL (CUDA builds with NCCL only). Each call is queued on the calling
// thread's current stream (cuda::current_stream) and returns without any host synchronisation, so the calls can be
// captured inside a CUDA graph. Ranks join through a unique id made once (new_nccl_unique_id) and handed to every
// rank — by memory within a process, over TCP across nodes (tcp_rendezvous.h).
#pragma once

#include <memory>
#include <string>

#include "core/status.h"
#include "model/layers/communicator.h"

namespace llmserve {

// True when this build has NCCL (LLMSERVE_WITH_NCCL).
bool nccl_available();

// ncclGetUniqueId, as the opaque bytes to send to the other ranks (kNcclUniqueIdBytes of them).
inline constexpr size_t kNcclUniqueIdBytes = 128;
StatusOr<std::string> new_nccl_unique_id();

class NcclCommunicator final : public Communicator {
 public:
  // Joins rank `rank` of `world_size` on CUDA device `device` (made current on the calling thread). Blocks until
  // every rank joined (ncclCommInitRank). Errors name the NCCL error.
  static StatusOr<std::unique_ptr<NcclCommunicator>> create(const std::string& unique_id, int world_size, int rank,
                                                            int device);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  // Tensors: contiguous, on this rank's device; dtypes f32, bf16, f16 (all_reduce), any of u8 / i32 / i64 too
  // (all_gather, broadcast). A wrong tensor or an NCCL error aborts (CHECK): the runner is trusted.
  void all_reduce(Tensor& t) override;
  void all_gather(Tensor& out, const Tensor& in) override;
  void broadcast(Tensor& t, int root) override;

 private:
  struct Impl;
  NcclCommunicator(std::unique_ptr<Impl> impl, int world_size, int rank);
  std::unique_ptr<Impl> impl_;
  int world_size_, rank_;
};

}  // namespace llmserve
