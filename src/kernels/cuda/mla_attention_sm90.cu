// FlashInfer's Hopper MLA kernel (see mla_attention_sm90.h): MlaAttentionParams and the work lists mapped onto its
// MLAParams. Our combined cache row [kv_c (512) | k_pe (64)] and query row [W_UK^T q_nope (512) | q_pe (64)] are
// passed as two views with one stride each: ckv / q_nope at the row, kpe / q_pe 512 elements further.
#include <cuda_bf16.h>

#include <algorithm>
#include <flashinfer/attention/mla_hopper.cuh>

#include "core/logging.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/mla_attention_sm90.h"
#include "kernels/mla_schedule.h"

namespace llmserve::cuda {
namespace {

constexpr uint32_t kCkv = kMlaFastLatentDim, kKpe = kMlaFastRopeDim;
constexpr int64_t kMaxOffset = int64_t{1} << 32;  // the kernel forms element offsets in uint32

template <typename T>
void launch_typed(const MlaAttentionParams& p, const MlaSm90Work& w, cudaStream_t stream) {
  using Params = flashinfer::MLAParams<T, T, T, int32_t>;
  Params fp{};
  T* query = static_cast<T*>(const_cast<void*>(p.query));
  T* cache = static_cast<T*>(const_cast<void*>(p.cache));
  fp.q_nope = query;
  fp.q_pe = query + kCkv;
  fp.ckv = cache;
  fp.kpe = cache + kCkv;
  fp.final_o = static_cast<T*>(p.out);
  fp.final_lse = nullptr;  // not written when null
  fp.partial_o = static_cast<T*>(w.partial);
  fp.partial_lse = w.partial == nullptr
                       ? nullptr
                       : reinterpret_cast<float*>(static_cast<char*>(w.partial) +
                                                  ops::mla_partial_lse_offset(w.partial_rows, kCkv, 2));
  // The lists' rows (kernels/mla_schedule.h); the block table is the kernel's kv_indices, each work's kv_indptr
  // its row offset, so the kernel reads block_table[r * stride + key / block_size].
  int32_t* rows = const_cast<int32_t*>(w.rows);
  auto row = [&](int r) { return rows + static_cast<int64_t>(r) * w.width; };
  fp.work_indptr = row(ops::kMlaWorkIndptr);
  fp.q_indptr = row(ops::kMlaQIndptr);
  fp.kv_indptr = row(ops::kMlaKvIndptr);
  fp.partial_indptr = row(ops::kMlaPartialIndptr);
  fp.q_len = row(ops::kMlaQLen);
  fp.kv_len = row(ops::kMlaKvLen);
  fp.q_start = row(ops::kMlaQStart);
  fp.kv_start = row(ops::kMlaKvStart);
  fp.kv_end = row(ops::kMlaKvEnd);
  fp.merge_packed_offset_start = row(ops::kMlaMergeStart);
  fp.merge_packed_offset_end = row(ops::kMlaMergeEnd);
  fp.merge_partial_packed_offset_start = row(ops::kMlaMergePartialStart);
  fp.merge_partial_packed_offset_end = row(ops::kMlaMergePartialEnd);
  fp.merge_partial_stride = row(ops::kMlaMergePartialStride);
  fp.kv_indices = const_cast<int32_t*>(p.block_table);
  fp.block_size = flashinfer::uint_fastdiv(static_cast<uint32_t>(p.block_size));
  fp.num_heads = flashinfer::uint_fastdiv(static_cast<uint32_t>(p.num_heads));
  const uint32_t row_dim = static_cast<uint32_t>(p.row_dim());
  fp.q_nope_stride_n = fp.q_pe_stride_n = static_cast<uint32_t>(p.query_row_stride);
  fp.q_nope_stride_h = fp.q_pe_stride_h = row_dim;
  fp.ckv_stride_page = fp.kpe_stride_page = static_cast<uint32_t>(p.block_size) * row_dim;
  fp.ckv_stride_n = fp.kpe_stride_n = row_dim;
  fp.o_stride_n = static_cast<uint32_t>(p.out_row_stride);
  fp.o_stride_h = kCkv;
  fp.sm_scale = p.scale;
  fp.return_lse_base_on_e = false;
  // Causal as ops::mla_attention (right-aligned: query token j of a request of q tokens over k keys sees keys
  // [0, k - q + j]); a decode token sees its whole context.
  const cudaError_t err = flashinfer::mla::BatchMLAPageAttentionHopper<flashinfer::MaskMode::kCausal, kCkv, kKpe>(
      fp, static_cast<uint32_t>(w.ctas_per_tile), static_cast<uint32_t>(w.num_groups), stream);
  CHECK(err == cudaSuccess) << "FlashInfer SM90 MLA: " << cudaGetErrorString(err);
}

}  // namespace

bool mla_sm90_applies(const MlaAttentionParams& p, int64_t cache_elems) {
  if (p.dtype != DType::kBF16 || p.latent_dim != static_cast<int>(kCkv) || p.rope_dim != static_cast<int>(kKpe))
    return false;
  const int64_t esize = 2;
  if (!aligned16(p.query) || !aligned16(p.cache) || !aligned16(p.out) || (p.query_row_stride * esize) % 16 != 0 ||
      (p.out_row_stride * esize) % 16 != 0) {
    return false;
  }
  // The kernel bounds a tile's causal keys by floor((first packed row + tile rows) / heads): exact when the heads
  // divide the tile (64 rows, 128 above 64 heads); a decode token alone is covered by any heads <= 128.
  const int tile_rows = p.num_heads > 64 ? 128 : 64;
  if (p.num_heads > tile_rows || tile_rows % p.num_heads != 0) return false;
  const int64_t tokens = std::max(p.num_tokens, 1);
  return tokens * p.query_row_stride < kMaxOffset && tokens * p.out_row_stride < kMaxOffset &&
         cache_elems < kMaxOffset && int64_t{p.num_reqs} * p.block_table_stride * p.block_size < kMaxOffset;
}

void launch_mla_sm90(const MlaAttentionParams& p, const MlaSm90Work& w, cudaStream_t stream) {
  CHECK(w.rows != nullptr && w.width > 0 && (w.ctas_per_tile == 1 || w.ctas_per_tile == 2) && w.num_groups > 0 &&
        w.ctas_per_tile * w.num_groups <= num_sms() && w.num_tokens <= p.num_tokens &&
        (w.partial != nullptr || w.partial_rows == 0) && aligned16(w.partial))
      << "launch_mla_sm90: unusable work lists";
  CHECK(p.dtype == DType::kBF16) << "launch_mla_sm90: dtype " << dtype_name(p.dtype) << " (bf16 only)";
  if (w.num_tokens > 0) launch_typed<__nv_bfloat16>(p, w, stream);
  if (w.num_tokens < p.num_tokens) {  // padding tokens: zeros, as the op's contract says
    const size_t pitch = static_cast<size_t>(p.out_row_stride) * 2;
    char* first = static_cast<char*>(p.out) + static_cast<size_t>(w.num_tokens) * pitch;
    const cudaError_t err = cudaMemset2DAsync(first, pitch, 0, static_cast<size_t>(p.num_heads) * kCkv * 2,
                                              static_cast<size_t>(p.num_tokens - w.num_tokens), stream);
    CHECK(err == cudaSuccess) << "launch_mla_sm90: zeroing padding rows: " << cudaGetErrorString(err);
  }
}

}  // namespace llmserve::cuda
