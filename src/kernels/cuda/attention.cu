// Entry point of CUDA paged attention: builds PagedAttentionParams from the tensors, checks them, and picks the
// kernels from one dispatch table over dtype x head_dim (decode + prefill fast paths); anything not in the
// table, or not 16-byte aligned, runs the generic kernel. Every launch goes to current_stream(); nothing here
// reads device memory or allocates, so a call can be captured in a CUDA graph.
#include <string>

#include "core/cuda_stream.h"
#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/ops.h"

namespace llmserve::cuda {
namespace {

static_assert(kSplitCounterElems == ops::kPagedAttentionWorkspaceCounters, "one size for the split-K counters");

using LaunchFn = void (*)(const PagedAttentionParams&, cudaStream_t);

struct AttentionKernels {
  DType dtype;
  int head_dim;
  LaunchFn decode;
  LaunchFn prefill;
  LaunchFn prefill_sm90 = nullptr;  // FlashInfer's Hopper kernel, when the step planned its work lists
};

// The one dispatch table (STYLE.md): add a row (and its instantiations) to give a head_dim a fast path.
constexpr AttentionKernels kAttentionKernels[] = {
    {DType::kBF16, 16, &launch_decode<__nv_bfloat16, 16>, &launch_prefill<__nv_bfloat16, 16>},
    {DType::kBF16, 32, &launch_decode<__nv_bfloat16, 32>, &launch_prefill<__nv_bfloat16, 32>},
    {DType::kBF16, 64, &launch_decode<__nv_bfloat16, 64>, &launch_prefill<__nv_bfloat16, 64>,
     &launch_prefill_sm90<__nv_bfloat16, 64>},
    {DType::kBF16, 128, &launch_decode<__nv_bfloat16, 128>, &launch_prefill<__nv_bfloat16, 128>,
     &launch_prefill_sm90<__nv_bfloat16, 128>},
    {DType::kF16, 16, &launch_decode<__half, 16>, &launch_prefill<__half, 16>},
    {DType::kF16, 32, &launch_decode<__half, 32>, &launch_prefill<__half, 32>},
    {DType::kF16, 64, &launch_decode<__half, 64>, &launch_prefill<__half, 64>, &launch_prefill_sm90<__half, 64>},
    {DType::kF16, 128, &launch_decode<__half, 128>, &launch_prefill<__half, 128>, &launch_prefill_sm90<__half, 128>},
};

const AttentionKernels* find_kernels(DType dtype, int head_dim) {
  for (const AttentionKernels& k : kAttentionKernels)
    if (k.dtype == dtype && k.head_dim == head_dim) return &k;
  return nullptr;
}

// The fast kernels load 16-byte chunks of query rows and cache rows.
bool vector_friendly(const PagedAttentionParams& p) {
  const int64_t esize = static_cast<int64_t>(dtype_size(p.dtype));
  return aligned16(p.query) && aligned16(p.key_cache) && aligned16(p.value_cache) &&
         (p.query_row_stride * esize) % 16 == 0 && reinterpret_cast<uintptr_t>(p.out) % 4 == 0 &&
         (p.out_row_stride * esize) % 4 == 0;
}

// The SM90 kernel stores whole 16-byte output chunks; its persistent grid is the device's SM count, which the
// schedule must have been planned for (else its CTAs would read past the work lists).
bool sm90_prefill_fits(const PagedAttentionParams& p, const ops::PrefillSchedule& s) {
  const int64_t esize = static_cast<int64_t>(dtype_size(p.dtype));
  if (!s.rows.defined() || s.num_works == 0 || s.num_heads != p.num_heads || s.head_dim != p.head_dim ||
      p.sliding_window > 0 || !aligned16(p.out) || (p.out_row_stride * esize) % 16 != 0) {
    return false;
  }
  return s.num_ctas == num_sms();
}

std::string field(const char* name, int64_t v) { return std::string(name) + " = " + std::to_string(v); }

}  // namespace

Status PagedAttentionParams::check() const {
  if (out == nullptr || query == nullptr || key_cache == nullptr || value_cache == nullptr)
    return invalid_argument("paged_attention: null out / query / cache pointer");
  if (query_start_loc == nullptr || seq_lens == nullptr || block_table == nullptr)
    return invalid_argument("paged_attention: null metadata pointer");
  if (dtype != DType::kF32 && dtype != DType::kF16 && dtype != DType::kBF16)
    return invalid_argument(std::string("paged_attention: dtype ") + std::string(dtype_name(dtype)));
  if (num_heads <= 0 || num_kv_heads <= 0 || num_heads % num_kv_heads != 0)
    return invalid_argument("paged_attention: " + field("num_heads", num_heads) + ", " +
                            field("num_kv_heads", num_kv_heads));
  if (head_dim <= 0 || head_dim > kGenericMaxHeadDim)
    return invalid_argument("paged_attention: " + field("head_dim", head_dim));
  if (block_size <= 0) return invalid_argument("paged_attention: " + field("block_size", block_size));
  if (num_tokens < 0 || num_reqs < 0) return invalid_argument("paged_attention: negative num_tokens / num_reqs");
  if (num_decode_reqs < 0 || num_decode_reqs > num_reqs || num_decode_reqs > num_tokens)
    return invalid_argument("paged_attention: " + field("num_decode_tokens", num_decode_reqs));
  if (max_query_len < 0 || max_seq_len < 0)
    return invalid_argument("paged_attention: " + field("max_query_len", max_query_len));
  if (workspace != nullptr && workspace_elems <= 0)
    return invalid_argument("paged_attention: " + field("workspace elems", workspace_elems));
  if (!(scale == scale)) return invalid_argument("paged_attention: scale is NaN");
  return ok_status();
}

void paged_attention(Tensor& out, const Tensor& query, const Tensor& key_cache, const Tensor& value_cache,
                     const ops::AttentionMetadata& md, float scale, int64_t sliding_window) {
  PagedAttentionParams p;
  p.out = out.raw_data();
  p.query = query.raw_data();
  p.key_cache = key_cache.raw_data();
  p.value_cache = value_cache.raw_data();
  p.out_row_stride = out.stride(0);
  p.query_row_stride = query.stride(0);
  p.query_start_loc = md.query_start_loc.data<int32_t>();
  p.seq_lens = md.seq_lens.data<int32_t>();
  p.block_table = md.block_table.data<int32_t>();
  p.block_table_stride = md.block_table.stride(0);
  if (md.workspace.defined()) {
    p.workspace = md.workspace.data<float>();
    p.workspace_elems = md.workspace.numel();
  }
  p.dtype = query.dtype();
  p.num_tokens = static_cast<int>(query.size(0));
  p.num_heads = static_cast<int>(query.size(1));
  p.head_dim = static_cast<int>(query.size(2));
  p.num_kv_heads = static_cast<int>(key_cache.size(2));
  p.block_size = static_cast<int>(key_cache.size(1));
  p.num_reqs = static_cast<int>(md.num_reqs);
  p.num_decode_reqs = static_cast<int>(md.num_decode_tokens);
  // Unknown (0) max_query_len: every non-decode token could belong to one request.
  p.max_query_len = static_cast<int>(md.max_query_len > 0                   ? md.max_query_len
                                     : md.num_decode_tokens < query.size(0) ? query.size(0) - md.num_decode_tokens
                                                                            : 0);
  p.max_seq_len = static_cast<int>(md.max_seq_len);
  p.scale = scale;
  p.sliding_window = sliding_window > 0 ? static_cast<int>(std::min<int64_t>(sliding_window, INT32_MAX)) : 0;
  const Status st = p.check();
  CHECK(st.ok()) << st.message();
  if (p.num_tokens == 0) return;

  cudaStream_t stream = current_stream();
  const AttentionKernels* k = find_kernels(p.dtype, p.head_dim);
  if (k == nullptr || !vector_friendly(p)) return launch_generic(p, stream);
  k->decode(p, stream);
  if (k->prefill_sm90 != nullptr && sm90_prefill_fits(p, md.prefill_schedule)) {
    const ops::PrefillSchedule& s = md.prefill_schedule;
    CHECK(s.rows.device() == query.device() && s.rows.dtype() == DType::kI32 && s.rows.is_contiguous() &&
          s.rows.dim() == 2 && s.rows.size(0) == ops::kPrefillScheduleRows && s.rows.size(1) >= s.num_ctas + 1)
        << "paged_attention: prefill_schedule " << s.rows.to_string();
    p.prefill_schedule = s.rows.data<int32_t>();
    p.prefill_schedule_width = s.rows.size(1);
    k->prefill_sm90(p, stream);
  } else {
    k->prefill(p, stream);
  }
  launch_zero_padding(p, stream);
}

void register_attention_kernels() { ops::paged_attention.register_kernel(DeviceType::kCUDA, paged_attention); }

}  // namespace llmserve::cuda
