// FlashInfer's Hopper (SM90, wgmma + TMA, warp-specialised) paged prefill kernel behind launch_prefill_sm90:
// PagedAttentionParams and the runner's work lists (kernels/prefill_schedule.h) mapped onto its parameters.
// Included by one .cu per dtype (their instantiations compile in parallel).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <flashinfer/attention/hopper/default_params.cuh>
#include <flashinfer/attention/hopper/prefill_sm90.cuh>
#include <flashinfer/attention/hopper/variants.cuh>
#include <type_traits>

#include "core/logging.h"
#include "kernels/cuda/attention_common.cuh"
#include "kernels/prefill_schedule.h"

namespace llmserve::cuda {

template <typename T, int HD>
void launch_prefill_sm90(const PagedAttentionParams& p, cudaStream_t stream) {
  using DT = std::conditional_t<std::is_same_v<T, __nv_bfloat16>, cutlass::bfloat16_t, cutlass::half_t>;
  using Params = flashinfer::BatchPrefillPagedParams<DT, DT, DT, int32_t>;
  static_assert(HD == 64 || HD == 128, "the SM90 prefill path is instantiated for head_dim 64 and 128");
  CHECK(p.prefill_schedule != nullptr && p.sliding_window <= 0) << "launch_prefill_sm90: no usable schedule";
  Params fp{};
  fp.q_ptr = static_cast<DT*>(const_cast<void*>(p.query));
  fp.k_ptr = static_cast<DT*>(const_cast<void*>(p.key_cache));
  fp.v_ptr = static_cast<DT*>(const_cast<void*>(p.value_cache));
  fp.o_ptr = static_cast<DT*>(p.out);
  fp.lse_ptr = nullptr;  // not written when null
  // The schedule's rows (prefill_schedule.h): the kernel reads its works, the block table through row 3's offsets.
  int32_t* rows = const_cast<int32_t*>(p.prefill_schedule);
  const int64_t w = p.prefill_schedule_width;
  fp.work_indptr = rows;
  fp.qo_tile_indices = rows + 1 * w;
  fp.qo_indptr = rows + 2 * w;
  fp.kv_indptr = rows + 3 * w;
  fp.qo_lens = rows + 4 * w;
  fp.kv_lens = rows + 5 * w;
  fp.head_indices = rows + 6 * w;
  fp.batch_indices = rows + 7 * w;
  fp.kv_indices = const_cast<int32_t*>(p.block_table);
  fp.additional_params.sm_scale = p.scale;
  fp.additional_params.logits_soft_cap = 0.f;
  fp.q_stride_n = p.query_row_stride;
  fp.q_stride_h = HD;
  fp.o_stride_n = p.out_row_stride;
  fp.o_stride_h = HD;
  // Cache [num_blocks, block_size, num_kv_heads, HD]: a token's kv heads adjacent, a block's tokens adjacent.
  fp.k_stride_n = fp.v_stride_n = static_cast<int64_t>(p.num_kv_heads) * HD;
  fp.k_stride_h = fp.v_stride_h = HD;
  fp.k_page_stride = fp.v_page_stride = static_cast<int64_t>(p.block_size) * p.num_kv_heads * HD;
  fp.nnz_qo = p.num_tokens;
  fp.num_qo_heads = p.num_heads;
  fp.num_kv_heads = p.num_kv_heads;
  fp.group_size = p.num_heads / p.num_kv_heads;
  fp.page_size = p.block_size;
  fp.window_left = -1;
  fp.causal = true;
  const cudaError_t err = flashinfer::BatchPrefillWithPagedKVCacheDispatched<
      HD, HD, flashinfer::MaskMode::kCausal, /*LEFT_SLIDING_WINDOW=*/false, /*SAME_SCHEDULE_FOR_ALL_HEADS=*/false,
      flashinfer::StandardAttention, Params>(fp, /*enable_pdl=*/false, stream);
  CHECK(err == cudaSuccess) << "FlashInfer SM90 prefill: " << cudaGetErrorString(err);
}

}  // namespace llmserve::cuda
