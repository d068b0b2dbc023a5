// SampledIdsTransfer: async scheduling's output path on CUDA. A step's sampled ids stay in one of two persistent
// device buffers (the next step's input ids are scattered from there), and a side stream copies them to page-locked
// host memory once the sampling kernels are done; the host waits only for that copy, when it needs the ids.
// Invariant: a slot is rewritten (device buffer and host copy) only after its previous ids were collected (wait).
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace llmserve {

class SampledIdsTransfer {
 public:
  static constexpr int kSlots = 2;  // steps in flight under async scheduling

  // `device` must be a CUDA device (CHECKed; a build without CUDA aborts). Buffers of `max_rows` ids per slot.
  SampledIdsTransfer(Device device, int64_t max_rows);
  ~SampledIdsTransfer();
  SampledIdsTransfer(const SampledIdsTransfer&) = delete;
  SampledIdsTransfer& operator=(const SampledIdsTransfer&) = delete;

  // [max_rows] i32 on the device: where the Sampler writes the ids of a step using `slot`.
  const Tensor& device_ids(int slot) const { return device_ids_[slot]; }
  // Queues, on the side stream and after the work queued so far on the current stream, the copy of the first `n`
  // ids of `slot` to the host. Never blocks the host.
  void start_copy(int slot, int64_t n);
  // Blocks until `slot`'s copy is done; returns its ids on the host.
  const int32_t* wait(int slot) const;

 private:
  Tensor device_ids_[kSlots];
  Tensor host_ids_[kSlots];      // page-locked
  void* side_stream_ = nullptr;  // cudaStream_t
  void* sampled_[kSlots] = {};   // cudaEvent_t: the sampling kernels are done (current stream)
  void* copied_[kSlots] = {};    // cudaEvent_t: the host copy is done (side stream)
};

}  // namespace llmserve
