// moe_gemm's tile path on Hopper (cutlass_moe_gemm.h): one CUTLASS 3.x ptr-array grouped GEMM over the experts, each
// expert a group of (its pairs' rows) x N x K with TMA loads and wgmma in a warp-specialized kernel (ping-pong or
// cooperative, by the rows per expert), f32 accumulation. The group sizes stay on the device (moe_align's offsets): a
// setup kernel writes each group's shape, pointers and strides into device arrays, and CUTLASS gets no host problem
// shapes (its persistent scheduler then launches one CTA per SM and walks the groups' tiles on the device), so nothing
// syncs with the host and the call can be captured in a CUDA graph once the warm-up has sized the scratch.
#include <cutlass/cutlass.h>
#include <cutlass/gemm/device/gemm_universal_adapter.h>

#include <atomic>
#include <cute/tensor.hpp>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/dispatch_policy.hpp>
#include <cutlass/gemm/group_array_problem_shape.hpp>
#include <cutlass/gemm/kernel/gemm_universal.hpp>
#include <mutex>
#include <type_traits>
#include <vector>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/cutlass_moe_gemm.h"

namespace llmserve::cuda {
namespace {

using ProblemShape = cutlass::gemm::GroupProblemShape<cute::Shape<int, int, int>>;  // (M, N, K) per group
using GroupShape = ProblemShape::UnderlyingProblemShape;

template <typename T>
struct CutlassElement;
template <>
struct CutlassElement<__nv_bfloat16> {
  using type = cutlass::bfloat16_t;
};
template <>
struct CutlassElement<__half> {
  using type = cutlass::half_t;
};

// Every operand is (rows, K or N) with a 64-bit leading stride and unit inner stride.
using RowStride = cute::Stride<int64_t, cute::Int<1>, cute::Int<0>>;

// The two tile configurations, by the rows an expert holds. 64 x 256 x 64 ping-pong: each of the two consumer warp
// groups owns a whole 64-row tile (one computes while the other stores, which hides the epilogue of a short K such as
// the down projection's 768), and 64-row tiles waste less than 128 on experts holding ~128 rows (Qwen3-30B-A3B at
// 2048 tokens: 16384 pairs over 128 experts). 128 x 256 x 64 cooperative: both warp groups on one tile, twice the
// FLOPs per byte loaded, for experts holding several hundred rows.
struct PingpongTiles {
  using TileShape = cute::Shape<cute::_64, cute::_256, cute::_64>;
  using KernelSchedule = cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpong;
  using EpilogueSchedule = cutlass::epilogue::PtrArrayTmaWarpSpecializedPingpong;
};
struct CooperativeTiles {
  using TileShape = cute::Shape<cute::_128, cute::_256, cute::_64>;
  using KernelSchedule = cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative;
  using EpilogueSchedule = cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative;
};

// A [M_e, K] row-major (the expert's input rows), B the expert's weight [N, K] (CUTLASS's column-major K x N), D
// [M_e, N] row-major into out; no C (the epilogue only stores alpha * acc); one CTA per cluster.
template <typename T, typename Tiles>
struct GroupedGemm {
  using Element = typename CutlassElement<T>::type;
  using TileShape = typename Tiles::TileShape;
  using ClusterShape = cute::Shape<cute::_1, cute::_1, cute::_1>;
  static constexpr int kAlignment = 8;  // elements per 16 bytes
  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, cutlass::layout::RowMajor*, kAlignment,
      Element, cutlass::layout::RowMajor*, kAlignment, typename Tiles::EpilogueSchedule,
      cutlass::epilogue::fusion::LinearCombination<Element, float>>::CollectiveOp;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Element, cutlass::layout::RowMajor*, kAlignment, Element,
      cutlass::layout::ColumnMajor*, kAlignment, float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      typename Tiles::KernelSchedule>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<ProblemShape, Mainloop, Epilogue>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
  static_assert(std::is_same_v<typename Kernel::InternalStrideA, RowStride> &&
                    std::is_same_v<typename Kernel::InternalStrideB, RowStride> &&
                    std::is_same_v<typename Kernel::InternalStrideD, RowStride>,
                "moe_groups_kernel writes every stride as (leading, 1, 0)");
};

// Experts averaging at least this many rows (capacity / experts) take CooperativeTiles, fewer PingpongTiles.
constexpr int64_t kCooperativeMinRows = 256;
std::atomic<int64_t> forced_tile_rows{0};  // set_moe_gemm_cutlass_tile_rows

// The per-group argument arrays CUTLASS reads on the device, carved from one buffer.
template <typename T>
struct GroupArrays {
  using Element = typename CutlassElement<T>::type;
  GroupShape* shapes;
  const Element** a;
  const Element** b;
  Element** d;
  RowStride* stride_a;
  RowStride* stride_b;
  RowStride* stride_d;

  // Bytes for `groups` groups (each array 256-byte aligned).
  static int64_t bytes(int64_t groups) {
    int64_t total = 0;
    for (int64_t size : sizes()) total += (size * groups + 255) / 256 * 256;
    return total;
  }
  static GroupArrays carve(void* base, int64_t groups) {
    auto* p = static_cast<char*>(base);
    const std::vector<int64_t> s = sizes();
    void* parts[7];
    for (int i = 0; i < 7; ++i) {
      parts[i] = p;
      p += (s[i] * groups + 255) / 256 * 256;
    }
    return {static_cast<GroupShape*>(parts[0]),     static_cast<const Element**>(parts[1]),
            static_cast<const Element**>(parts[2]), static_cast<Element**>(parts[3]),
            static_cast<RowStride*>(parts[4]),      static_cast<RowStride*>(parts[5]),
            static_cast<RowStride*>(parts[6])};
  }
  static std::vector<int64_t> sizes() {
    return {sizeof(GroupShape), sizeof(Element*),  sizeof(Element*), sizeof(Element*),
            sizeof(RowStride),  sizeof(RowStride), sizeof(RowStride)};
  }
};

constexpr int kSetupThreads = 256;

// Block e fills group e: its rows are the leading ones of [offsets[e], offsets[e + 1]) with a pair (moe_align puts
// the expert's pairs first, then its -1 padding), found by bisection; the padding rows of out get zeros (the op's
// contract) in 16-byte words (n % 8 == 0). An expert without pairs is a group of 0 rows, which the scheduler skips.
template <typename T>
__global__ void __launch_bounds__(kSetupThreads)
    moe_groups_kernel(GroupArrays<T> g, const typename GroupArrays<T>::Element* a, int64_t lda,
                      const typename GroupArrays<T>::Element* weight, typename GroupArrays<T>::Element* out,
                      int64_t ldd, const int32_t* sorted_pairs, const int32_t* offsets, int n, int k) {
  __shared__ int rows;
  const int e = blockIdx.x;
  const int begin = offsets[e], end = offsets[e + 1];
  if (threadIdx.x == 0) {
    int lo = begin, hi = end;
    while (lo < hi) {
      const int mid = lo + (hi - lo) / 2;
      if (sorted_pairs[mid] >= 0) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    rows = lo - begin;
    g.shapes[e] = cute::make_shape(rows, n, k);
    g.a[e] = a + begin * lda;
    g.b[e] = weight + static_cast<int64_t>(e) * n * k;
    g.d[e] = out + begin * ldd;
    g.stride_a[e] = cute::make_stride(lda, cute::Int<1>{}, cute::Int<0>{});
    g.stride_b[e] = cute::make_stride(static_cast<int64_t>(k), cute::Int<1>{}, cute::Int<0>{});
    g.stride_d[e] = cute::make_stride(ldd, cute::Int<1>{}, cute::Int<0>{});
  }
  __syncthreads();
  const int64_t words = n / 8, pad_begin = begin + rows;
  for (int64_t i = threadIdx.x; i < (end - pad_begin) * words; i += kSetupThreads) {
    const int64_t r = pad_begin + i / words;
    reinterpret_cast<uint4*>(out + r * ldd)[i % words] = make_uint4(0, 0, 0, 0);
  }
}

// Row r (< offsets[E], with a pair p) of the dense A = token row p / top_k of x, in 16-byte words (k % 8 == 0).
constexpr int kGatherThreads = 128;

template <typename T>
__global__ void __launch_bounds__(kGatherThreads)
    moe_gather_rows_kernel(T* a, const T* x, int64_t x_stride, const int32_t* sorted_pairs, const int32_t* offsets,
                           int num_experts, int64_t k, int top_k) {
  const int64_t r = blockIdx.x;
  if (r >= offsets[num_experts]) return;
  const int pair = sorted_pairs[r];
  if (pair < 0) return;  // padding: not part of any group
  const uint4* src = reinterpret_cast<const uint4*>(x + static_cast<int64_t>(pair / top_k) * x_stride);
  uint4* dst = reinterpret_cast<uint4*>(a + r * k);
  for (int64_t w = threadIdx.x; w < k / 8; w += kGatherThreads) dst[w] = src[w];
}

// Per-device scratch (the group arrays, the gathered rows, CUTLASS's workspace), grown on demand and shared by every
// call on the device's stream (layers run in order; the arrays are rewritten by each call's setup kernel before its
// GEMM reads them). The warm-up forward before each graph capture sizes it; an outgrown buffer is kept, never freed,
// since a captured graph may still use its address.
struct Scratch {
  Tensor groups, rows, workspace;
  std::vector<Tensor> outgrown;
};

void* grown(Scratch& s, Tensor& t, int64_t bytes, Device device) {
  if (!t.defined() || t.numel() < bytes) {
    if (t.defined()) s.outgrown.push_back(t);
    t = Tensor::empty({std::max<int64_t>(bytes, 256)}, DType::kU8, device);
  }
  return t.raw_data();
}

std::mutex scratch_mu;
Scratch scratch_by_device[16];

// One grouped GEMM over the arrays moe_groups_kernel filled (queued before it on the same stream).
template <typename G, typename T>
void run_gemm(Scratch& s, const GroupArrays<T>& arrays, int64_t groups, Device device) {
  cutlass::KernelHardwareInfo hw;
  hw.device_id = device.index;
  hw.sm_count = num_sms();
  typename G::Gemm::Arguments args{cutlass::gemm::GemmUniversalMode::kGrouped,
                                   {static_cast<int>(groups), arrays.shapes, nullptr},
                                   {arrays.a, arrays.stride_a, arrays.b, arrays.stride_b},
                                   {{}, nullptr, nullptr, arrays.d, arrays.stride_d},
                                   hw};
  args.epilogue.thread.alpha = 1.f;
  args.epilogue.thread.beta = 0.f;
  typename G::Gemm gemm;
  void* workspace = grown(s, s.workspace, static_cast<int64_t>(G::Gemm::get_workspace_size(args)), device);
  cutlass::Status status = gemm.can_implement(args);
  CHECK(status == cutlass::Status::kSuccess) << "moe_gemm_cutlass: " << cutlassGetStatusString(status);
  status = gemm.initialize(args, workspace, stream());
  CHECK(status == cutlass::Status::kSuccess) << "moe_gemm_cutlass: initialize: " << cutlassGetStatusString(status);
  status = gemm.run(stream());
  CHECK(status == cutlass::Status::kSuccess) << "moe_gemm_cutlass: run: " << cutlassGetStatusString(status);
  check_launch("moe_gemm_cutlass");
}

template <typename T>
void run_grouped(Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& sorted_pairs,
                 const Tensor& expert_offsets, int64_t gather_top_k) {
  using Element = typename GroupArrays<T>::Element;
  const int64_t capacity = out.size(0), groups = weight.size(0), n = weight.size(1), k = weight.size(2);
  const Device device = out.device();
  CHECK(device.index >= 0 && device.index < 16) << "moe_gemm_cutlass: device " << device.index;
  std::lock_guard<std::mutex> lock(scratch_mu);
  Scratch& s = scratch_by_device[device.index];
  const GroupArrays<T> arrays =
      GroupArrays<T>::carve(grown(s, s.groups, GroupArrays<T>::bytes(groups), device), groups);
  const int32_t* pairs = sorted_pairs.data<int32_t>();
  const int32_t* offsets = expert_offsets.data<int32_t>();
  const Element* a = reinterpret_cast<const Element*>(x.data<T>());
  int64_t lda = x.stride(0);
  if (gather_top_k > 0) {
    T* dense = static_cast<T*>(grown(s, s.rows, capacity * k * static_cast<int64_t>(sizeof(T)), device));
    moe_gather_rows_kernel<T><<<static_cast<unsigned>(capacity), kGatherThreads, 0, stream()>>>(
        dense, x.data<T>(), x.stride(0), pairs, offsets, static_cast<int>(groups), k, static_cast<int>(gather_top_k));
    check_launch("moe_gather_rows_kernel");
    a = reinterpret_cast<const Element*>(dense);
    lda = k;
  }
  Element* d = reinterpret_cast<Element*>(out.data<T>());
  moe_groups_kernel<T><<<static_cast<unsigned>(groups), kSetupThreads, 0, stream()>>>(
      arrays, a, lda, reinterpret_cast<const Element*>(weight.data<T>()), d, out.stride(0), pairs, offsets,
      static_cast<int>(n), static_cast<int>(k));
  check_launch("moe_groups_kernel");
  const int64_t forced = forced_tile_rows.load(std::memory_order_relaxed);
  const bool cooperative = forced != 0 ? forced == 128 : capacity >= kCooperativeMinRows * groups;
  if (cooperative) {
    run_gemm<GroupedGemm<T, CooperativeTiles>>(s, arrays, groups, device);
  } else {
    run_gemm<GroupedGemm<T, PingpongTiles>>(s, arrays, groups, device);
  }
}

// Whether the current device runs sm_90a code (cached per device).
bool device_is_sm90() {
  return once_per_device([] {
    int device = 0, major = 0, minor = 0;
    CHECK(cudaGetDevice(&device) == cudaSuccess) << "cudaGetDevice";
    CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess);
    CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) == cudaSuccess);
    return major == 9 && minor == 0;
  });
}

}  // namespace

void set_moe_gemm_cutlass_tile_rows(int64_t rows) {
  CHECK(rows == 0 || rows == 64 || rows == 128) << "set_moe_gemm_cutlass_tile_rows: " << rows << " (want 0, 64, 128)";
  forced_tile_rows.store(rows, std::memory_order_relaxed);
}

bool moe_gemm_cutlass_applies(const Tensor& out, const Tensor& x, const Tensor& weight) {
  const DType dtype = x.dtype();
  if (dtype != DType::kBF16 && dtype != DType::kF16) return false;
  const int64_t n = weight.size(1), k = weight.size(2);
  return n % 8 == 0 && k % 8 == 0 && x.stride(0) % 8 == 0 && out.stride(0) % 8 == 0 && aligned16(x.raw_data()) &&
         aligned16(out.raw_data()) && aligned16(weight.raw_data()) && n <= INT32_MAX && k <= INT32_MAX &&
         device_is_sm90();
}

void moe_gemm_cutlass(Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& sorted_pairs,
                      const Tensor& expert_offsets, int64_t gather_top_k) {
  if (x.dtype() == DType::kBF16) {
    run_grouped<__nv_bfloat16>(out, x, weight, sorted_pairs, expert_offsets, gather_top_k);
  } else {
    CHECK(x.dtype() == DType::kF16) << "moe_gemm_cutlass: dtype " << dtype_name(x.dtype());
    run_grouped<__half>(out, x, weight, sorted_pairs, expert_offsets, gather_top_k);
  }
}

}  // namespace llmserve::cuda
