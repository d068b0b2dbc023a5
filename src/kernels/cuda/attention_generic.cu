// The plain paged-attention path: one warp per (token, head), lanes over head_dim (up to 8 values each), keys
// one at a time with an online softmax in f32. Any dtype (f32 is the correctness path of the f32 fixture tests
// on the GPU) and any head_dim <= kGenericMaxHeadDim; it also zeroes padding rows. Plus the padding-zeroing
// kernel the fast paths use. Invariant: every row of out is written (attention result or zeros).
#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/cuda_common.cuh"

namespace llmserve::cuda {
namespace {

constexpr int kWarpsPerBlock = 4;
constexpr int kPerLane = kGenericMaxHeadDim / 32;

template <typename T>
__global__ void __launch_bounds__(kWarpsPerBlock * 32) generic_kernel(const PagedAttentionParams p) {
  const int64_t w = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (w >= static_cast<int64_t>(p.num_tokens) * p.num_heads) return;
  const int t = static_cast<int>(w / p.num_heads), head = static_cast<int>(w % p.num_heads);
  const int hd = p.head_dim;
  T* o = static_cast<T*>(p.out) + t * p.out_row_stride + head * hd;
  if (t >= p.query_start_loc[p.num_reqs]) {  // padding token
    for (int d = lane; d < hd; d += 32) o[d] = from_float<T>(0.f);
    return;
  }
  // The request owning t: the last r with query_start_loc[r] <= t (empty requests share their start).
  int lo_r = 0, hi_r = p.num_reqs - 1;
  while (lo_r < hi_r) {
    const int mid = (lo_r + hi_r + 1) / 2;
    if (p.query_start_loc[mid] <= t)
      lo_r = mid;
    else
      hi_r = mid - 1;
  }
  const int r = lo_r;
  const int q_begin = p.query_start_loc[r], qlen = p.query_start_loc[r + 1] - q_begin;
  const int pos = p.seq_lens[r] - qlen + (t - q_begin);
  const int first = p.sliding_window > 0 ? max(0, pos - p.sliding_window + 1) : 0;
  const int kv_head = head / (p.num_heads / p.num_kv_heads);
  const T* q = static_cast<const T*>(p.query) + t * p.query_row_stride + head * hd;
  float qv[kPerLane], acc[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int d = lane + 32 * i;
    qv[i] = d < hd ? to_float(q[d]) * p.scale : 0.f;
    acc[i] = 0.f;
  }
  const T* kc = static_cast<const T*>(p.key_cache);
  const T* vc = static_cast<const T*>(p.value_cache);
  const int32_t* bt = p.block_table + r * p.block_table_stride;
  float m = -INFINITY, l = 0.f;
  for (int k = first; k <= pos; ++k) {
    const int64_t off = cache_offset(bt, k, p.block_size, p.num_kv_heads, kv_head, hd);
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int d = lane + 32 * i;
      if (d < hd) s = fmaf(qv[i], to_float(kc[off + d]), s);
    }
#pragma unroll
    for (int x = 16; x > 0; x >>= 1) s += __shfl_xor_sync(0xffffffffu, s, x);
    const float mx = fmaxf(m, s);
    const float alpha = expf(m - mx), pk = expf(s - mx);
    l = l * alpha + pk;
    m = mx;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int d = lane + 32 * i;
      if (d < hd) acc[i] = fmaf(pk, to_float(vc[off + d]), acc[i] * alpha);
    }
  }
  const float inv = l > 0.f ? 1.f / l : 0.f;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int d = lane + 32 * i;
    if (d < hd) o[d] = from_float<T>(acc[i] * inv);
  }
}

// Rows [query_start_loc[num_reqs], num_tokens) of out = 0. Candidate rows start at num_decode_reqs (each
// decode request owns one token), so a decode-only batch without padding launches nothing.
template <typename T>
__global__ void zero_padding_kernel(const PagedAttentionParams p) {
  const int first = p.query_start_loc[p.num_reqs];
  const int row_elems = p.num_heads * p.head_dim;
  T* out = static_cast<T*>(p.out);
  for (int t = p.num_decode_reqs + blockIdx.x; t < p.num_tokens; t += gridDim.x) {
    if (t < first) continue;
    for (int e = threadIdx.x; e < row_elems; e += blockDim.x) out[t * p.out_row_stride + e] = from_float<T>(0.f);
  }
}

}  // namespace

void launch_generic(const PagedAttentionParams& p, cudaStream_t stream) {
  const int64_t warps = static_cast<int64_t>(p.num_tokens) * p.num_heads;
  if (warps == 0) return;
  const unsigned blocks = static_cast<unsigned>((warps + kWarpsPerBlock - 1) / kWarpsPerBlock);
  switch (p.dtype) {
    case DType::kBF16:
      generic_kernel<__nv_bfloat16><<<blocks, kWarpsPerBlock * 32, 0, stream>>>(p);
      break;
    case DType::kF16:
      generic_kernel<__half><<<blocks, kWarpsPerBlock * 32, 0, stream>>>(p);
      break;
    default:
      generic_kernel<float><<<blocks, kWarpsPerBlock * 32, 0, stream>>>(p);
      break;
  }
  check_launch("generic_kernel");
}

void launch_zero_padding(const PagedAttentionParams& p, cudaStream_t stream) {
  const int candidates = p.num_tokens - p.num_decode_reqs;
  if (candidates <= 0) return;
  const unsigned blocks = static_cast<unsigned>(candidates < 1024 ? candidates : 1024);
  switch (p.dtype) {
    case DType::kBF16:
      zero_padding_kernel<__nv_bfloat16><<<blocks, 128, 0, stream>>>(p);
      break;
    case DType::kF16:
      zero_padding_kernel<__half><<<blocks, 128, 0, stream>>>(p);
      break;
    default:
      zero_padding_kernel<float><<<blocks, 128, 0, stream>>>(p);
      break;
  }
  check_launch("zero_padding_kernel");
}

}  // namespace llmserve::cuda
