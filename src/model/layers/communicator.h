// Communicator: the collectives tensor-parallel layers call (rank, world size, all-reduce, all-gather, broadcast), so
// tensor parallelism plugs in without touching layers. SingleProcessCommunicator is world size 1; the in-process CPU
// group and NCCL live in runtime/ (cpu_communicator.h, nccl_communicator.h). Every rank calls every collective in
// the same order with the same shapes; on CUDA a call is queued on the current stream and never waits on the host.
#pragma once

#include "core/tensor.h"

namespace llmserve {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // t = sum of t over ranks, in place.
  virtual void all_reduce(Tensor& t) = 0;
  // out [world_size * n, ...] = every rank's in [n, ...], in rank order (dim 0).
  virtual void all_gather(Tensor& out, const Tensor& in) = 0;
  // t = root's t on every rank, in place (same shape and dtype everywhere).
  virtual void broadcast(Tensor& t, int root) = 0;
};

// One process, one device: all_reduce is the identity and all_gather a copy.
class SingleProcessCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  void all_reduce(Tensor& t) override;
  void all_gather(Tensor& out, const Tensor& in) override;
  void broadcast(Tensor& t, int root) override;
};

// The process-wide world-size-1 communicator (stateless).
Communicator& single_process_communicator();

}  // namespace llmserve
