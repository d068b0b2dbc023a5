// FlashInfer's Hopper multi-head latent attention kernel (flashinfer/attention/mla_hopper.cuh: wgmma, one producer
// and one consumer warpgroup, a persistent cooperative grid with a grid-wide barrier before the split-K merge) behind
// ops::mla_attention, over the runner's host-planned work lists (kernels/mla_schedule.h). Only the step's device
// buffers are read at run time, at fixed addresses: a call can be captured in a CUDA graph.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/mla_attention.h"

namespace llmserve::cuda {

// One step's plan as the kernel reads it.
struct MlaSm90Work {
  const int32_t* rows = nullptr;  // [ops::kMlaScheduleRows, width] i32 on the device (kernels/mla_schedule.h)
  int64_t width = 0;
  int ctas_per_tile = 0;   // grid x: 1 or 2
  int num_groups = 0;      // grid y; ctas_per_tile * num_groups <= the SM count (all CTAs co-resident)
  int64_t num_tokens = 0;  // tokens the plan covers (query_start_loc[num_reqs]); out rows past it are zeroed here
  // Split-K scratch (ops::mla_partial_bytes(partial_rows, L, 2) bytes, 16-byte aligned): partial_rows x L outputs
  // of p.dtype, then partial_rows f32 log-sum-exps; partial_rows is the scratch's capacity (>= the rows the plan
  // uses), so the layout is the same for every plan. Null only when no plan splits anything.
  void* partial = nullptr;
  int64_t partial_rows = 0;
};

// Whether the kernel takes p (and a cache of cache_elems elements): an sm_90a build, bf16, L = 512, R = 64, 16-byte
// aligned query / cache / out rows, and every element offset the kernel forms in 32 bits (query and out rows of
// num_tokens, the cache's elements, a request's keys through its block-table row) below 2^32, and heads dividing the
// kernel's tile (a power of two <= 128: the kernel bounds a tile's causal keys by its end row / heads, rounded down,
// which is exact only then; a decode-only batch would also be exact for any heads <= 128).
bool mla_sm90_applies(const MlaAttentionParams& p, int64_t cache_elems);

// Runs the kernel over w's works on stream (p.check() must hold; w planned by ops::plan_mla_schedule for this
// call's lengths, heads and the device's SM count). Aborts if the launch fails.
void launch_mla_sm90(const MlaAttentionParams& p, const MlaSm90Work& w, cudaStream_t stream);

}  // namespace llmserve::cuda
