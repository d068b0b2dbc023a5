// SamplerParamBuffer: the Sampler's per-row parameters (temperature, top-k/p, min-p, Philox seeds and offsets,
// penalty scalars, and the CSR lists of the logits processors) at fixed offsets of one persistent device buffer,
// filled through a pinned host mirror of the same layout and uploaded in at most one copy per batch. Invariant: the
// mirror's rows [0, n) always hold the values of the batch last prepared; a row's constant values are rewritten only
// when a different request (by SamplerRequest::row_key) sits in it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/cuda_event.h"
#include "core/tensor.h"
#include "kernels/ops.h"

namespace llmserve {

struct SamplerRequest;  // runtime/sampler.h

// The device views one batch's sampling ops read (prefixes of the persistent buffer; valid until the next
// prepare()). Tensors of a step nobody needs are left undefined, and their flags false.
struct SamplerBatchParams {
  bool any_stop_ids = false;  // some row is below min_tokens with stop ids: mask_tokens
  bool any_bias = false;      // some row has a logit_bias: apply_logit_bias
  bool any_penalty = false;   // some row has a penalty on: apply_penalties
  bool any_temperature = false;
  bool any_filter = false;  // some sampling row has top-k / top-p / min-p on
  ops::TokenLists stop_ids;
  ops::LogitBiasParams logit_bias;
  ops::PenaltyParams penalties;
  ops::SamplingFilterParams filter;
  ops::SampleParams sample;  // temperatures, seeds, offsets (defined when sampling rows are needed)
};

class SamplerParamBuffer {
 public:
  // Sized for `max_num_reqs` rows on `device` (0: allocated on first use). Rows beyond it, or lists beyond the
  // pool's capacity, grow the buffer at the start of prepare() (never between its upload and the ops that read it).
  SamplerParamBuffer(int64_t max_num_reqs, Device device);

  // Writes the batch's parameters into the mirror and uploads the sections it needs in one copy on the current
  // stream. `need_sampling`: temperature/filter/seed/offset rows are needed (false for an all-greedy batch on a
  // device, which takes the argmax). `unseeded_key`: the Philox key of rows without a seed. `requests` were
  // validated (Sampler::sample).
  SamplerBatchParams prepare(std::span<const SamplerRequest> requests, Device device, int64_t vocab, bool need_sampling,
                             uint64_t unseeded_key);

  // The device buffer's base (tests check it does not move while the capacity suffices); null before first use.
  const void* device_base() const { return device_.defined() ? device_.raw_data() : nullptr; }
  int64_t max_num_reqs() const { return layout_.rows; }

 private:
  // Byte offsets of the sections (16-byte aligned), in upload order: the sampling rows first (an unfiltered batch
  // uploads only temperature, seed and offset), then the processors' scalars and CSR offsets, then the id pool.
  struct Layout {
    int64_t rows = 0;      // row capacity
    int64_t pool_ids = 0;  // capacity of the pool in 4-byte elements
    size_t temperature = 0, seed = 0, offset = 0, top_k = 0, top_p = 0, min_p = 0;
    size_t repetition = 0, frequency = 0, presence = 0;
    size_t stop_offsets = 0, bias_offsets = 0, prompt_offsets = 0, output_offsets = 0;
    size_t pool = 0, total = 0;
    static Layout plan(int64_t rows, int64_t pool_ids);
  };
  // (Re)allocates the mirror and the device buffer for `rows` and `pool_ids` (the previous upload has completed)
  // and forgets which request sat in each row.
  void allocate(int64_t rows, int64_t pool_ids, Device device);
  template <typename T>
  T* host(size_t offset) const {
    return reinterpret_cast<T*>(mirror_.data<uint8_t>() + offset);
  }
  Tensor view(size_t offset, int64_t numel, DType dtype) const;

  Layout layout_;
  Device device_of_buffer_;
  Tensor mirror_;   // u8 [layout_.total]: pinned host memory on CUDA; the device buffer itself on the CPU
  Tensor device_;   // u8 [layout_.total] on the device (== mirror_ on the CPU)
  Event uploaded_;  // recorded after each upload: the mirror is rewritten only once the copy has read it
  std::vector<uint64_t> row_keys_;  // the request (SamplerRequest::row_key) whose constants each row holds; 0: none
};

}  // namespace llmserve
