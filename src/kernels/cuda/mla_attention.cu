// Entry point of CUDA multi-head latent attention (ops::mla_attention): builds MlaAttentionParams from the tensors,
// checks them, and runs FlashInfer's Hopper kernel (mla_attention_sm90.cu) when the step planned its work lists and
// the call matches them, else the tensor-core kernel (mla_attention_mma.cu) where it applies, else the simple kernel
// here (CUDA cores; f32 and any L, R): one CTA per (token, head), warps over keys with an online softmax each, merged
// through shared memory. Every launch goes to current_stream(); nothing reads device memory on the host or
// allocates, so a call can be captured in a CUDA graph.
#include <atomic>
#include <string>

#include "core/cuda_stream.h"
#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/mla_attention.h"
#include "kernels/cuda/mla_attention_sm90.h"
#include "kernels/ops.h"

namespace llmserve::cuda {
namespace {

constexpr int kSimpleThreads = 128, kSimpleWarps = kSimpleThreads / 32;
constexpr int kPerLane = kMlaMaxRowDim / 32;  // row values per lane

// Heads per tensor-core CTA (0: by the batch); set_mla_heads_per_cta.
int g_mla_heads_per_cta = 0;
// Calls that ran the SM90 kernel (mla_sm90_calls); atomic: ranks of one process call the op from their threads.
std::atomic<int64_t> g_mla_sm90_calls{0};

// out[t, head] for one (token, head): lane l owns the row's columns l, l + 32, ...; warp w the keys w, w + 4, ...
template <typename T>
__global__ void __launch_bounds__(kSimpleThreads) mla_simple_kernel(const MlaAttentionParams p) {
  const int t = blockIdx.x, head = blockIdx.y, tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int dim = p.latent_dim + p.rope_dim, L = p.latent_dim;
  T* out = static_cast<T*>(p.out) + static_cast<int64_t>(t) * p.out_row_stride + static_cast<int64_t>(head) * L;
  if (t >= p.query_start_loc[p.num_reqs]) {  // padding token
    for (int d = tid; d < L; d += kSimpleThreads) out[d] = from_float<T>(0.f);
    return;
  }
  const int r = token_request(p.query_start_loc, p.num_reqs, t);
  const int q_begin = p.query_start_loc[r], q_end = p.query_start_loc[r + 1];
  const int ctx = max(0, p.seq_lens[r] - (q_end - q_begin) + (t - q_begin) + 1);
  const T* query =
      static_cast<const T*>(p.query) + static_cast<int64_t>(t) * p.query_row_stride + static_cast<int64_t>(head) * dim;
  const T* cache = static_cast<const T*>(p.cache);
  const int32_t* bt = p.block_table + static_cast<int64_t>(r) * p.block_table_stride;

  float q[kPerLane], acc[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int d = lane + 32 * i;
    q[i] = d < dim ? load_f(query + d) * p.scale : 0.f;
    acc[i] = 0.f;
  }
  float m = -INFINITY, l = 0.f;
  for (int key = warp; key < ctx; key += kSimpleWarps) {
    const int b = key / p.block_size;
    const T* row = cache + (static_cast<int64_t>(bt[b]) * p.block_size + (key - b * p.block_size)) * dim;
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int d = lane + 32 * i;
      if (d < dim) s = fmaf(q[i], load_f(row + d), s);
    }
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    const float m_new = fmaxf(m, s);
    // expf, not __expf: this is the f32 path, held to 1e-5 of the CPU (m = -inf: alpha 0; acc and l are 0).
    const float alpha = expf(m - m_new), pr = expf(s - m_new);
    l = l * alpha + pr;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int d = lane + 32 * i;
      if (d < L) acc[i] = acc[i] * alpha + pr * load_f(row + d);
    }
    m = m_new;
  }
  __shared__ float sm_m[kSimpleWarps], sm_l[kSimpleWarps], sm_acc[kSimpleWarps][kMlaMaxRowDim];
  if (lane == 0) {
    sm_m[warp] = m;
    sm_l[warp] = l;
  }
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int d = lane + 32 * i;
    if (d < L) sm_acc[warp][d] = acc[i];
  }
  __syncthreads();
  float mx = -INFINITY;
  for (int w = 0; w < kSimpleWarps; ++w) mx = fmaxf(mx, sm_m[w]);
  for (int d = tid; d < L; d += kSimpleThreads) {
    float sum = 0.f, lsum = 0.f;
    if (mx != -INFINITY) {  // no key at all (an empty context): zeros
      for (int w = 0; w < kSimpleWarps; ++w) {
        const float wt = expf(sm_m[w] - mx);
        sum += wt * sm_acc[w][d];
        lsum += wt * sm_l[w];
      }
    }
    out[d] = from_float<T>(lsum > 0.f ? sum / lsum : 0.f);
  }
}

std::string field(const char* name, int64_t v) { return std::string(name) + " = " + std::to_string(v); }

// The SM90 kernel's work for this call when the step planned one that matches it (kernels/mla_schedule.h): the
// heads and the SM count it was planned for, and a call the kernel takes. Else rows stays null and our own kernels
// run. The split-K partials live in the workspace past its counters, laid out for all the rows it holds whatever
// this plan uses: a captured graph keeps these addresses while later plans split differently.
MlaSm90Work sm90_work(const MlaAttentionParams& p, const ops::AttentionMetadata& md, const Tensor& cache) {
  MlaSm90Work w;
  const ops::MlaSchedule& s = md.mla_schedule;
  if (!s.rows.defined() || s.num_works == 0 || s.num_heads != p.num_heads || s.num_ctas != num_sms() ||
      s.num_tokens > p.num_tokens || !mla_sm90_applies(p, cache.numel())) {
    return w;
  }
  CHECK(s.rows.device() == cache.device() && s.rows.dtype() == DType::kI32 && s.rows.is_contiguous() &&
        s.rows.dim() == 2 && s.rows.size(0) == ops::kMlaScheduleRows && s.rows.size(1) >= s.num_ctas + 1)
      << "mla_attention: mla_schedule " << s.rows.to_string();
  if (p.workspace != nullptr) {
    const int64_t scratch = (p.workspace_elems - kSplitCounterElems) * static_cast<int64_t>(sizeof(float));
    w.partial = p.workspace + kSplitCounterElems;
    w.partial_rows = ops::mla_partial_capacity(scratch, p.latent_dim, 2);
  }
  CHECK_LE(s.partial_rows, w.partial_rows) << "mla_attention: the plan's partial rows exceed the workspace's";
  w.rows = s.rows.data<int32_t>();
  w.width = s.rows.size(1);
  w.ctas_per_tile = static_cast<int>(s.ctas_per_tile);
  w.num_groups = static_cast<int>(s.num_groups);
  w.num_tokens = s.num_tokens;
  return w;
}

}  // namespace

Status MlaAttentionParams::check() const {
  if (out == nullptr || query == nullptr || cache == nullptr)
    return invalid_argument("mla_attention: null out / query / cache pointer");
  if (query_start_loc == nullptr || seq_lens == nullptr || block_table == nullptr)
    return invalid_argument("mla_attention: null metadata pointer");
  if (dtype != DType::kF32 && dtype != DType::kF16 && dtype != DType::kBF16)
    return invalid_argument(std::string("mla_attention: dtype ") + std::string(dtype_name(dtype)));
  if (num_heads <= 0 || num_heads > 65535) return invalid_argument("mla_attention: " + field("num_heads", num_heads));
  if (latent_dim <= 0 || latent_dim % 16 != 0 || rope_dim < 0 || rope_dim % 16 != 0 || row_dim() > kMlaMaxRowDim)
    return invalid_argument("mla_attention: " + field("L", latent_dim) + ", " + field("R", rope_dim) +
                            " (want multiples of 16, L > 0, L + R <= " + std::to_string(kMlaMaxRowDim) + ")");
  if (block_size <= 0) return invalid_argument("mla_attention: " + field("block_size", block_size));
  if (num_tokens < 0 || num_reqs < 0) return invalid_argument("mla_attention: negative num_tokens / num_reqs");
  if (max_seq_len < 0) return invalid_argument("mla_attention: " + field("max_seq_len", max_seq_len));
  if (workspace != nullptr && workspace_elems <= kSplitCounterElems)
    return invalid_argument("mla_attention: " + field("workspace elems", workspace_elems));
  if (!(scale == scale)) return invalid_argument("mla_attention: scale is NaN");
  return ok_status();
}

void launch_mla_simple(const MlaAttentionParams& p, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(p.num_tokens), static_cast<unsigned>(p.num_heads));
  dispatch_float(p.dtype, "mla_attention", [&](auto t) {
    using T = decltype(t);
    mla_simple_kernel<T><<<grid, kSimpleThreads, 0, stream>>>(p);
  });
  check_launch("mla_simple_kernel");
}

int64_t mla_sm90_calls() { return g_mla_sm90_calls.load(std::memory_order_relaxed); }

void set_mla_heads_per_cta(int heads) {
  CHECK(heads == 0 || heads == 16 || heads == 64) << "set_mla_heads_per_cta: " << heads << " (want 0, 16 or 64)";
  g_mla_heads_per_cta = heads;
}

void mla_attention(Tensor& out, const Tensor& query, const Tensor& latent_cache, const ops::AttentionMetadata& md,
                   float scale) {
  MlaAttentionParams p;
  p.out = out.raw_data();
  p.query = query.raw_data();
  p.cache = latent_cache.raw_data();
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
  p.latent_dim = static_cast<int>(out.size(2));
  p.rope_dim = static_cast<int>(query.size(2) - out.size(2));
  p.block_size = static_cast<int>(latent_cache.size(1));
  p.num_reqs = static_cast<int>(md.num_reqs);
  p.max_seq_len = static_cast<int>(md.max_seq_len);
  p.scale = scale;
  const Status st = p.check();
  CHECK(st.ok()) << st.message();
  if (p.num_tokens == 0) return;
  cudaStream_t stream = current_stream();
  if (const MlaSm90Work w = sm90_work(p, md, latent_cache); w.rows != nullptr) {
    g_mla_sm90_calls.fetch_add(1, std::memory_order_relaxed);
    return launch_mla_sm90(p, w, stream);
  }
  if (mla_mma_applies(p)) return launch_mla_mma(p, g_mla_heads_per_cta, stream);
  launch_mla_simple(p, stream);
}

void register_mla_attention_kernels() { ops::mla_attention.register_kernel(DeviceType::kCUDA, mla_attention); }

}  // namespace llmserve::cuda
