// Varlen paged prefill attention in the FlashAttention-2 style, bf16 / f16: a CTA of 4 warps owns 64 query rows
// of one request and one head, streams 64-key tiles of K/V from the paged cache (via the block table, so
// chunked prefill and prefix-cache hits read their earlier context) into shared memory with cp.async, double
// buffered so the next tile loads while this one is computed, and runs QK^T and PV on
// tensor cores (mma.sync m16n8k16, f32 accumulation) with an online softmax in registers (exp2 domain).
// Invariant: each CTA writes exactly its rows < query_len; masked scores are -inf and never turn into NaN.
#include <algorithm>

#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/cuda_common.cuh"

namespace llmserve::cuda {
namespace {

constexpr int kBlockM = 64, kBlockN = 64, kThreads = 128;

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldmatrix_x2(uint32_t (&r)[2], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldmatrix_x2_trans(uint32_t (&r)[2], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(smem_addr(p)));
}

// d += a (16x16, row) * b (16x8, col), f32 accumulators.
__device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2], __nv_bfloat16) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
__device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2], __half) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

template <int HD>
__host__ __device__ constexpr int smem_stride() {
  return HD + 8;  // +16 bytes per row: the 8 rows of an ldmatrix land in distinct banks
}
template <typename T, int HD>
__host__ __device__ constexpr int smem_bytes() {
  return (kBlockM + 4 * kBlockN) * smem_stride<HD>() * static_cast<int>(sizeof(T));  // Q, then K and V twice
}

template <typename T, int HD>
__global__ void __launch_bounds__(kThreads) prefill_kernel(const PagedAttentionParams p) {
  constexpr int kStride = smem_stride<HD>();
  constexpr int kChunks = HD / 8;  // 16-byte chunks per row
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sq = reinterpret_cast<T*>(smem_raw);
  // Double-buffered K/V tiles after Q: K of buffer b, then V of buffer b (arithmetic, not a pointer array: a
  // run-time index into an array would put it in local memory).
  auto sk_buf = [&](int b) { return sq + (kBlockM + b * kBlockN) * kStride; };
  auto sv_buf = [&](int b) { return sq + (kBlockM + (2 + b) * kBlockN) * kStride; };

  const int r = p.num_decode_reqs + blockIdx.z, head = blockIdx.y, row0 = blockIdx.x * kBlockM;
  const int q_begin = p.query_start_loc[r];
  const int qlen = p.query_start_loc[r + 1] - q_begin;
  if (row0 >= qlen) return;
  const int rows = min(kBlockM, qlen - row0);
  const int seq = p.seq_lens[r];
  const int ctx0 = seq - qlen;  // position of query row 0
  const int kv_head = head / (p.num_heads / p.num_kv_heads);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;

  const T* query = static_cast<const T*>(p.query);
  for (int i = tid; i < kBlockM * kChunks; i += kThreads) {
    const int row = i / kChunks, ch = i % kChunks;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (row < rows) v = load_chunk(query + (q_begin + row0 + row) * p.query_row_stride + head * HD + ch * 8);
    *reinterpret_cast<uint4*>(sq + row * kStride + ch * 8) = v;
  }
  __syncthreads();
  uint32_t qf[HD / 16][4];
#pragma unroll
  for (int kk = 0; kk < HD / 16; ++kk)
    ldmatrix_x4(qf[kk], sq + (warp * 16 + lane % 16) * kStride + kk * 16 + (lane / 16) * 8);

  float o[HD / 8][4];
#pragma unroll
  for (int dt = 0; dt < HD / 8; ++dt) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.f;
  float m_a = -INFINITY, m_b = -INFINITY, l_a = 0.f, l_b = 0.f;  // rows lane/4 and lane/4 + 8 of this warp
  const float scale_log2 = p.scale * 1.4426950408889634f;
  const int pos_a = ctx0 + row0 + warp * 16 + lane / 4, pos_b = pos_a + 8;
  const int kv_end = ctx0 + row0 + rows;  // one past the last row's position
  const int kv_begin = p.sliding_window > 0 ? max(0, ctx0 + row0 - p.sliding_window + 1) : 0;
  const T* kc = static_cast<const T*>(p.key_cache);
  const T* vc = static_cast<const T*>(p.value_cache);
  const int32_t* bt = p.block_table + r * p.block_table_stride;

  // Tile [n0, n0 + kBlockN) of K and V -> buffer b, asynchronously (zeros past kv_end).
  auto issue_tile = [&](int n0, int b) {
    for (int i = tid; i < kBlockN * kChunks; i += kThreads) {
      const int row = i / kChunks, ch = i % kChunks, key = n0 + row;
      const bool valid = key < kv_end;
      const int64_t off =
          valid ? cache_offset(bt, key, p.block_size, p.num_kv_heads, kv_head, HD) + ch * 8 : int64_t{0};
      cp_async16(sk_buf(b) + row * kStride + ch * 8, kc + off, valid);
      cp_async16(sv_buf(b) + row * kStride + ch * 8, vc + off, valid);
    }
  };
  if (kv_begin < kv_end) issue_tile(kv_begin, 0);
  cp_async_commit();
  int buf = 0;
  for (int n0 = kv_begin; n0 < kv_end; n0 += kBlockN, buf ^= 1) {
    // The next tile streams into the other buffer (consumed last iteration) while this one is computed.
    if (n0 + kBlockN < kv_end) issue_tile(n0 + kBlockN, buf ^ 1);
    cp_async_commit();
    cp_async_wait<1>();  // this tile's group has landed (for this thread) ...
    __syncthreads();     // ... and for every thread
    const T* sk = sk_buf(buf);
    const T* sv = sv_buf(buf);

    float s[kBlockN / 8][4];
#pragma unroll
    for (int nt = 0; nt < kBlockN / 8; ++nt) {
      s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
#pragma unroll
      for (int kk = 0; kk < HD / 16; ++kk) {
        uint32_t b[2];
        ldmatrix_x2(b, sk + (nt * 8 + lane % 8) * kStride + kk * 16 + ((lane / 8) % 2) * 8);
        mma(s[nt], qf[kk], b, T());
      }
    }
    float mx_a = -INFINITY, mx_b = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < kBlockN / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = n0 + nt * 8 + (lane % 4) * 2 + (e & 1);
        const int pos = e < 2 ? pos_a : pos_b;
        const bool ok = key <= pos && key < kv_end && (p.sliding_window <= 0 || key > pos - p.sliding_window);
        s[nt][e] = ok ? s[nt][e] * scale_log2 : -INFINITY;
      }
      mx_a = fmaxf(mx_a, fmaxf(s[nt][0], s[nt][1]));
      mx_b = fmaxf(mx_b, fmaxf(s[nt][2], s[nt][3]));
    }
#pragma unroll
    for (int off = 1; off <= 2; off <<= 1) {
      mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, off));
      mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, off));
    }
    const float new_a = fmaxf(m_a, mx_a), new_b = fmaxf(m_b, mx_b);
    // A row with no valid key so far keeps max -inf: subtract 0 instead so exp2(-inf) = 0, never NaN.
    const float sub_a = new_a == -INFINITY ? 0.f : new_a, sub_b = new_b == -INFINITY ? 0.f : new_b;
    const float alpha_a = exp2f(m_a - sub_a), alpha_b = exp2f(m_b - sub_b);
    m_a = new_a;
    m_b = new_b;
    float sum_a = 0.f, sum_b = 0.f;
#pragma unroll
    for (int nt = 0; nt < kBlockN / 8; ++nt) {
      s[nt][0] = exp2f(s[nt][0] - sub_a);
      s[nt][1] = exp2f(s[nt][1] - sub_a);
      s[nt][2] = exp2f(s[nt][2] - sub_b);
      s[nt][3] = exp2f(s[nt][3] - sub_b);
      sum_a += s[nt][0] + s[nt][1];
      sum_b += s[nt][2] + s[nt][3];
    }
    l_a = l_a * alpha_a + sum_a;
    l_b = l_b * alpha_b + sum_b;
#pragma unroll
    for (int dt = 0; dt < HD / 8; ++dt) {
      o[dt][0] *= alpha_a;
      o[dt][1] *= alpha_a;
      o[dt][2] *= alpha_b;
      o[dt][3] *= alpha_b;
    }
    // P (C layout of two n8 tiles) is exactly the A layout of one k16 step.
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk) {
      const uint32_t a[4] = {pack2<T>(s[2 * kk][0], s[2 * kk][1]), pack2<T>(s[2 * kk][2], s[2 * kk][3]),
                             pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                             pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
      for (int dt = 0; dt < HD / 8; ++dt) {
        uint32_t b[2];
        ldmatrix_x2_trans(b, sv + (kk * 16 + lane % 16) * kStride + dt * 8);
        mma(o[dt], a, b, T());
      }
    }
    __syncthreads();  // every warp is done with this buffer before the next iteration refills it
  }
  cp_async_wait<0>();  // no copy may still target shared memory when the CTA exits

#pragma unroll
  for (int off = 1; off <= 2; off <<= 1) {
    l_a += __shfl_xor_sync(0xffffffffu, l_a, off);
    l_b += __shfl_xor_sync(0xffffffffu, l_b, off);
  }
  const float inv_a = l_a > 0.f ? 1.f / l_a : 0.f, inv_b = l_b > 0.f ? 1.f / l_b : 0.f;
  const int ra = warp * 16 + lane / 4, rb = ra + 8;
  T* out = static_cast<T*>(p.out);
#pragma unroll
  for (int dt = 0; dt < HD / 8; ++dt) {
    const int col = head * HD + dt * 8 + (lane % 4) * 2;
    if (ra < rows)
      *reinterpret_cast<uint32_t*>(out + (q_begin + row0 + ra) * p.out_row_stride + col) =
          pack2<T>(o[dt][0] * inv_a, o[dt][1] * inv_a);
    if (rb < rows)
      *reinterpret_cast<uint32_t*>(out + (q_begin + row0 + rb) * p.out_row_stride + col) =
          pack2<T>(o[dt][2] * inv_b, o[dt][3] * inv_b);
  }
}

}  // namespace

template <typename T, int HD>
void launch_prefill(const PagedAttentionParams& p, cudaStream_t stream) {
  const int num_prefill = p.num_reqs - p.num_decode_reqs;
  if (num_prefill <= 0 || p.max_query_len <= 0) return;
  constexpr int kSmem = smem_bytes<T, HD>();
  static const bool attr_set = [] {
    return cudaFuncSetAttribute(prefill_kernel<T, HD>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem) ==
           cudaSuccess;
  }();
  CHECK(attr_set) << "prefill_kernel: cannot get " << kSmem << " bytes of shared memory";
  dim3 grid(static_cast<unsigned>((p.max_query_len + kBlockM - 1) / kBlockM), static_cast<unsigned>(p.num_heads),
            static_cast<unsigned>(num_prefill));
  prefill_kernel<T, HD><<<grid, kThreads, kSmem, stream>>>(p);
  check_launch("prefill_kernel");
}

#define LLMSERVE_PREFILL(T, HD) template void launch_prefill<T, HD>(const PagedAttentionParams&, cudaStream_t);
LLMSERVE_PREFILL(__nv_bfloat16, 16)
LLMSERVE_PREFILL(__nv_bfloat16, 32)
LLMSERVE_PREFILL(__nv_bfloat16, 64)
LLMSERVE_PREFILL(__nv_bfloat16, 128)
LLMSERVE_PREFILL(__half, 16)
LLMSERVE_PREFILL(__half, 32)
LLMSERVE_PREFILL(__half, 64)
LLMSERVE_PREFILL(__half, 128)
#undef LLMSERVE_PREFILL

}  // namespace llmserve::cuda
