// The CUTLASS 3.x kernel template of the fp8 / int8 scaled GEMM (cutlass_scaled_mm.h): TMA warp-specialised wgmma
// mainloop from the collective builder, scales and bias applied by an epilogue visitor tree, so the accumulator goes
// from registers to bf16 / f16 in one pass (no f32 scratch, no second kernel). Included by one .cu per input type.
#pragma once

#include <cuda_runtime_api.h>
#include <cutlass/cutlass.h>
#include <cutlass/gemm/device/gemm_universal_adapter.h>

#include <cute/tensor.hpp>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/epilogue/fusion/sm90_callbacks_tma_warpspecialized.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/kernel/gemm_universal.hpp>
#include <type_traits>

#include "core/cuda_stream.h"
#include "core/logging.h"
#include "kernels/cuda/cutlass_scaled_mm.h"

namespace llmserve::cuda::cutlass_mm {

using cute::_0;
using cute::_1;
using cute::Int;
using cute::Shape;
using cute::Stride;
namespace fusion = cutlass::epilogue::fusion;

// out = sa(row) * (sb(col) * acc) + bias(col). sa and sb are each a vector or a scalar chosen at run time (a `bool`
// stride: 1 walks the vector, 0 reads element 0), so one kernel serves per-tensor, per-token and per-channel scales;
// a null bias reads as 0.
template <class TileShape, class ElementOut>
struct ScaledEpilogue {
  using Acc = fusion::Sm90AccFetch;
  // Alignment 1: the per-token scales are read one float at a time (any address, any m), as the row broadcasts do.
  using ScaleA = fusion::Sm90ColBroadcast<0, TileShape, float, float, Stride<bool, _0, _0>, 1>;
  using ScaleB = fusion::Sm90RowBroadcast<0, TileShape, float, float, Stride<_0, bool, _0>>;
  using Bias = fusion::Sm90RowBroadcast<0, TileShape, float, float, Stride<_0, _1, _0>>;
  using ScaledAcc = fusion::Sm90EVT<
      fusion::Sm90Compute<cutlass::multiplies, float, float, cutlass::FloatRoundStyle::round_to_nearest>, ScaleB, Acc>;
  using Tree = fusion::Sm90EVT<
      fusion::Sm90Compute<cutlass::multiply_add, ElementOut, float, cutlass::FloatRoundStyle::round_to_nearest>, ScaleA,
      ScaledAcc, Bias>;

  static typename Tree::Arguments arguments(const CutlassScaledMM& p) {
    typename ScaleA::Arguments a{p.a_scales, 0.f, {p.a_per_token, {}, {}}};
    typename ScaleB::Arguments b{p.b_scales, 0.f, {{}, p.b_per_channel, {}}};
    typename Bias::Arguments bias{p.bias, 0.f, {}};
    return {a, {b, {}, {}}, bias, {}};
  }
};

// One kernel: Element (cutlass::float_e4m3_t or int8_t) in, ElementOut (bfloat16_t / half_t) out, one tile and
// cluster shape, one kernel schedule (with its matching epilogue schedule).
template <class Element, class ElementOut, class TileShape, class ClusterShape, class KernelSchedule,
          class EpilogueSchedule>
struct ScaledGemm {
  using ElementAcc = std::conditional_t<std::is_same_v<Element, int8_t>, int32_t, float>;
  static constexpr int kAlignIn = 16 / sizeof(Element);  // 16 bytes: TMA's granule
  static constexpr int kAlignOut = 16 / sizeof(ElementOut);
  using Epilogue = ScaledEpilogue<TileShape, ElementOut>;
  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, ElementAcc, float, void, cutlass::layout::RowMajor, kAlignOut,
      ElementOut, cutlass::layout::RowMajor, kAlignOut, EpilogueSchedule, typename Epilogue::Tree>::CollectiveOp;
  // a [m, k] row-major is CUTLASS's A; b [n, k] row-major is its column-major B (k contiguous in both).
  using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Element, cutlass::layout::RowMajor, kAlignIn, Element,
      cutlass::layout::ColumnMajor, kAlignIn, ElementAcc, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename CollectiveEpilogue::SharedStorage))>,
      KernelSchedule>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, CollectiveMainloop, CollectiveEpilogue,
                                                      cutlass::gemm::PersistentScheduler>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
};

// The persistent tile scheduler's order of output tiles: CUTLASS's defaults (no swizzle, raster order by its
// heuristic) unless a kernel measured better.
struct TileOrder {
  int max_swizzle = 1;
  cutlass::gemm::kernel::detail::RasterOrderOptions raster =
      cutlass::gemm::kernel::detail::RasterOrderOptions::Heuristic;
};

// Runs one GemmUniversalAdapter on the current stream (shared by the epilogue-scaled and block-scaled kernels:
// `mainloop` and `epilogue_fusion` are their kernel-specific argument parts).
template <class Gemm>
void run_gemm(const CutlassScaledMM& p, typename Gemm::GemmKernel::MainloopArguments mainloop,
              typename Gemm::GemmKernel::CollectiveEpilogue::FusionCallbacks::Arguments epilogue_fusion,
              const char* what, TileOrder order = {}) {
  using Kernel = typename Gemm::GemmKernel;
  using ElementOut = typename Kernel::ElementD;
  const typename Kernel::StrideD stride_d{p.n, Int<1>{}, int64_t{0}};
  typename Gemm::Arguments args{cutlass::gemm::GemmUniversalMode::kGemm,
                                {static_cast<int>(p.m), static_cast<int>(p.n), static_cast<int>(p.k), 1},
                                mainloop,
                                {epilogue_fusion, nullptr, stride_d, static_cast<ElementOut*>(p.out), stride_d}};
  args.scheduler.max_swizzle_size = order.max_swizzle;
  args.scheduler.raster_order = order.raster;
  Gemm gemm;
  const cutlass::Status can = gemm.can_implement(args);
  CHECK(can == cutlass::Status::kSuccess) << what << ": CUTLASS refuses m " << p.m << " n " << p.n << " k " << p.k
                                          << ": " << cutlass::cutlassGetStatusString(can);
  const size_t bytes = Gemm::get_workspace_size(args);
  void* workspace = bytes == 0 ? nullptr : p.workspace(bytes);
  const cutlass::Status st = gemm.run(args, workspace, current_stream());
  CHECK(st == cutlass::Status::kSuccess) << what << ": " << cutlass::cutlassGetStatusString(st);
  const cudaError_t err = cudaGetLastError();
  CHECK(err == cudaSuccess) << what << ": " << cudaGetErrorString(err);
}

template <class Config>
void run_scaled(const CutlassScaledMM& p, const char* what, TileOrder order = {}) {
  using Gemm = typename Config::Gemm;
  using Kernel = typename Gemm::GemmKernel;
  using Element = typename Config::CollectiveMainloop::ElementA;
  const typename Kernel::StrideA stride_a{p.k, Int<1>{}, int64_t{0}};
  const typename Kernel::StrideB stride_b{p.k, Int<1>{}, int64_t{0}};
  typename Kernel::MainloopArguments mainloop{static_cast<const Element*>(p.a), stride_a,
                                              static_cast<const Element*>(p.b), stride_b};
  run_gemm<Gemm>(p, mainloop, Config::Epilogue::arguments(p), what, order);
}

// M buckets: up to 256 tokens (decode batches, short chunks: weight-streaming-bound) 64-row tiles on the ping-pong
// schedule (one warpgroup's epilogue overlaps the other's MMAs; more CTAs over the weight than 128 x 256 tiles would
// give, and less padding); above that 128 x 256 tiles on the cooperative schedule (both warpgroups on one tile: the
// most operand reuse per loaded byte, for prefill-sized GEMMs). With a MidSchedule (fp8, where it was measured),
// 257 to kMidM rows take 128 x 128 tiles on it without a cluster: twice the CTAs of 128 x 256 tiles, so a narrow
// weight still fills the GPU (Mistral-7B's down, 4096 rows, at m = 512: 64 tiles of 128 x 256 for 132 SMs, 74 -> 46
// us; its gate_up 104 -> 92 us; M's fp8 512-token prefill 9.28 -> 7.65 ms, 1024 tokens -3%; at 2048 rows neither tile
// wins: bench/RESULTS.md, 2026-12-02, fourteenth session).
constexpr int64_t kSmallM = 256;
constexpr int64_t kMidM = 1024;
// Past 4096 rows the large bucket's tiles go in swizzled groups of 8 along m (the blockwise kernel's order), so the
// CTAs running at once share weight tiles in L2: Mistral-7B's gate_up at m = 8192 ran 3-4% faster (fp8 and int8), its
// down 0.5-2%, while at 2048-4096 rows the default order was 1-2% faster (bench/RESULTS.md, 2026-12-02, fourteenth
// session).
constexpr int64_t kSwizzleMinM = 4097;

template <class Element, class SmallSchedule, class LargeSchedule, class MidSchedule = void>
void dispatch_by_m(const CutlassScaledMM& p, const char* what) {
  using cutlass::epilogue::TmaWarpSpecialized;
  using cutlass::epilogue::TmaWarpSpecializedCooperative;
  using Small = Shape<Int<64>, Int<128>, Int<128>>;
  using Mid = Shape<Int<128>, Int<128>, Int<128>>;
  using Large = Shape<Int<128>, Int<256>, Int<128>>;
  using Cluster1 = Shape<_1, _1, _1>;
  using Cluster2 = Shape<Int<2>, _1, _1>;
  auto go = [&](auto out) {
    using Out = decltype(out);
    if (p.m <= kSmallM) {
      return run_scaled<ScaledGemm<Element, Out, Small, Cluster1, SmallSchedule, TmaWarpSpecialized>>(p, what);
    }
    if constexpr (!std::is_void_v<MidSchedule>) {
      if (p.m <= kMidM) {
        return run_scaled<ScaledGemm<Element, Out, Mid, Cluster1, MidSchedule, TmaWarpSpecialized>>(p, what);
      }
    }
    const TileOrder order =
        p.m >= kSwizzleMinM ? TileOrder{8, cutlass::gemm::kernel::detail::RasterOrderOptions::AlongM} : TileOrder{};
    run_scaled<ScaledGemm<Element, Out, Large, Cluster2, LargeSchedule, TmaWarpSpecializedCooperative>>(p, what, order);
  };
  if (p.out_f16) {
    go(cutlass::half_t{});
  } else {
    go(cutlass::bfloat16_t{});
  }
}

}  // namespace llmserve::cuda::cutlass_mm
