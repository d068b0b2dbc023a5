// Work lists of the Hopper (SM90) prefill attention kernel, FlashInfer's warp-specialised wgmma kernel behind
// ops::paged_attention on CUDA: planned on the host once per step from the step's lengths, used by every layer.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace llmserve::ops {

// The kernel's work lists: a persistent grid of num_ctas CTAs, CTA c running works [row0[c], row0[c + 1]) in turn;
// a work is one query tile of one head of one prefill request. Rows of `rows` [kPrefillScheduleRows, width] i32:
// 0 work_indptr (num_ctas + 1), then per work: 1 query tile index within the request, 2 the request's first token
// row, 3 its block-table row offset (row * block-table stride: the kernel reads block ids there), 4 query length,
// 5 context length (seq_lens), 6 query head, 7 request index.
inline constexpr int64_t kPrefillScheduleRows = 8;

// What a schedule was planned for; ops::paged_attention uses it only when these match the call (else, and when
// `rows` is undefined, the portable prefill kernel runs).
struct PrefillSchedule {
  Tensor rows;            // [kPrefillScheduleRows, width] i32 on the device
  int64_t num_heads = 0;  // query heads
  int64_t head_dim = 0;
  int64_t num_ctas = 0;   // persistent CTAs: the device's SM count
  int64_t num_works = 0;  // 0: no prefill request in the step (nothing planned)
};

// Query rows per work (the kernel's CTA tile) for head_dim; 0 when the kernel has no such head size (64, 128).
int64_t prefill_schedule_tile(int64_t head_dim);

// Columns a step of up to max_num_tokens tokens over max_num_reqs requests needs (the most works, or num_ctas + 1).
int64_t prefill_schedule_width(int64_t max_num_tokens, int64_t max_num_reqs, int64_t num_heads, int64_t head_dim,
                               int64_t num_ctas);

// The SM count of `device` when it is a CUDA device of compute capability 9.0 in a CUDA build (the Hopper kernels
// whose work lists the host plans, this one and the MLA one of mla_schedule.h, are built for sm_90a only), else 0.
int64_t sm90_sm_count(const Device& device);

// CTAs the kernel runs on `device` (its SM count) when it can run there: sm90_sm_count, and LLMSERVE_SM90_PREFILL
// (0 / 1, default 1: the A/B switch) not 0; else 0.
int64_t sm90_prefill_ctas(const Device& device);

// Plans the step's prefill requests (those after the first num_decode, which the decode kernel runs) into the
// host rows [kPrefillScheduleRows, width]: each request's query tiles x num_heads works, largest first, each to
// the CTA with the least work so far (cost: the keys a tile visits under the causal mask, plus a fixed per-tile
// cost). query_start_loc [num_reqs + 1], seq_lens [num_reqs] on the host. Returns the number of works (0: no
// prefill request); CHECK-fails when they exceed `width` (sized by prefill_schedule_width) or a length is invalid.
int64_t plan_prefill_schedule(int32_t* rows, int64_t width, const int32_t* query_start_loc, const int32_t* seq_lens,
                              int64_t num_reqs, int64_t num_decode, int64_t block_table_stride, int64_t num_heads,
                              int64_t head_dim, int64_t num_ctas);

}  // namespace llmserve::ops
