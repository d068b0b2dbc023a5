// Work lists of FlashInfer's Hopper (SM90) multi-head latent attention kernel behind ops::mla_attention on CUDA
// (flashinfer/attention/mla_hopper.cuh): planned on the host once per step from the step's lengths, read by every
// layer's call. The kernel reads its lengths from these lists, never from seq_lens, so a list is valid for exactly
// the step it was planned for.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace llmserve::ops {

// The kernel's unit: a tile of kMlaTileRows packed query rows (token-major, head-minor: row = token * heads + head)
// of one request. A grid of (ctas_per_tile, num_groups) persistent CTAs: the ctas_per_tile CTAs of group g run the
// works [row 0[g], row 0[g + 1]) in turn, CTA x taking rows [x * kMlaTileRows, (x + 1) * kMlaTileRows) of each
// work's group tile (ctas_per_tile * kMlaTileRows rows). A work is one group tile over one chunk of its keys.
inline constexpr int64_t kMlaTileRows = 64;
// The kernel's key tile: chunks start at multiples of it.
inline constexpr int64_t kMlaKeyTile = 64;

// Rows of the [kMlaScheduleRows, width] i32 lists, in FlashInfer's MLAParams terms.
enum MlaScheduleRow : int {
  kMlaWorkIndptr = 0,      // [num_groups + 1]: group g runs works [w[g], w[g + 1])
  kMlaQIndptr,             // per work: the request's first token row (query_start_loc[r])
  kMlaKvIndptr,            // per work: the request's block-table row offset (r * block-table stride)
  kMlaPartialIndptr,       // per work: its first row in the partial buffers, -1 when its tile is not split
  kMlaQLen,                // per work: the request's query length
  kMlaKvLen,               // per work: the request's context length (seq_lens[r])
  kMlaQStart,              // per work: the group tile's first packed row within the request
  kMlaKvStart,             // per work: first key of the chunk
  kMlaKvEnd,               // per work: one past its last key
  kMlaMergeStart,          // per CTA (num_ctas entries, 0 when idle): first global packed row it merges
  kMlaMergeEnd,            // per CTA: one past its last
  kMlaMergePartialStart,   // per CTA: the partial row of its first row's first chunk
  kMlaMergePartialEnd,     // per CTA: one past the tile's last partial row
  kMlaMergePartialStride,  // per CTA: partial rows between a row's consecutive chunks (the tile's row count)
  kMlaScheduleRows
};

// What a schedule was planned for; ops::mla_attention uses it only when these match the call (else, and when
// `rows` is undefined, its own kernels run).
struct MlaSchedule {
  Tensor rows;                // [kMlaScheduleRows, width] i32 on the device
  int64_t num_heads = 0;      // query heads
  int64_t num_ctas = 0;       // the device's SM count: ctas_per_tile * num_groups <= num_ctas
  int64_t ctas_per_tile = 0;  // grid x: 2 when num_heads > kMlaTileRows, else 1
  int64_t num_groups = 0;     // grid y: num_ctas / ctas_per_tile
  int64_t num_works = 0;      // 0: nothing planned (no request in the step)
  int64_t num_tokens = 0;     // query_start_loc[num_reqs]: later rows of the call's out are padding
  int64_t partial_rows = 0;   // partial rows the plan uses (<= the capacity it was given)
};

// Columns for steps of up to max_num_tokens tokens over max_num_reqs requests (the most works, or num_ctas + 1).
int64_t mla_schedule_width(int64_t max_num_tokens, int64_t max_num_reqs, int64_t num_heads, int64_t num_ctas);

// The split-K scratch for `rows` partial rows: rows x latent_dim outputs of dtype_bytes each, then (at this byte
// offset, 16-byte aligned) one f32 log-sum-exp per row.
inline int64_t mla_partial_lse_offset(int64_t rows, int64_t latent_dim, int64_t dtype_bytes) {
  return (rows * latent_dim * dtype_bytes + 15) / 16 * 16;
}
inline int64_t mla_partial_bytes(int64_t rows, int64_t latent_dim, int64_t dtype_bytes) {
  return mla_partial_lse_offset(rows, latent_dim, dtype_bytes) + rows * 4;
}

// Partial rows that scratch_bytes (16-byte aligned) hold at latent_dim values of dtype_bytes each.
inline int64_t mla_partial_capacity(int64_t scratch_bytes, int64_t latent_dim, int64_t dtype_bytes) {
  return scratch_bytes > 15 ? (scratch_bytes - 15) / (latent_dim * dtype_bytes + 4) : 0;
}

// CTAs the kernel runs on `device` (its SM count) when it can run there: sm90_sm_count (prefill_schedule.h), and
// LLMSERVE_SM90_MLA (0 / 1, default 1: the A/B switch) not 0; else 0.
int64_t sm90_mla_ctas(const Device& device);

// Plans every request of the step (query_start_loc [num_reqs + 1], seq_lens [num_reqs] on the host; causal, token j
// of request r at position seq_lens[r] - q_len(r) + j) into the host rows [kMlaScheduleRows, width] and returns
// what it planned (rows undefined), writing columns [0, max(num_works, num_ctas + 1)) only (the kernel reads no
// other). Tiles whose keys exceed an even share of the step's keys over the groups are split into chunks (their
// partial results merged by the kernel after a grid-wide barrier) while the partial rows stay within
// max_partial_rows and the split tiles within num_ctas. CHECK-fails when a length is invalid or the works exceed
// `width` (sized by mla_schedule_width).
MlaSchedule plan_mla_schedule(int32_t* rows, int64_t width, const int32_t* query_start_loc, const int32_t* seq_lens,
                              int64_t num_reqs, int64_t block_table_stride, int64_t num_heads, int64_t num_ctas,
                              int64_t max_partial_rows);

}  // namespace llmserve::ops
