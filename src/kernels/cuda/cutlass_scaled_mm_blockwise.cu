// Block-FP8 (DeepSeek-V3 / Qwen3-FP8 checkpoints) on CUTLASS 3.x: e4m3 x e4m3 with activations scaled per token and
// 128-column group and weights per 128 x 128 block. The scales change along k, so they cannot wait for the epilogue:
// the mainloop multiplies each 128-deep k-block's wgmma partial sum by its scales while promoting it into the f32
// accumulator (CUTLASS's blockwise-scaling collective, its promotion overlapped with the next k-block's wgmma:
// cutlass_block_fp8_mainloop.cuh); the epilogue only adds the bias and rounds to bf16 / f16.
#include <cutlass/detail/blockwise_scale_layout.hpp>

#include "kernels/cuda/cutlass_block_fp8_mainloop.cuh"
#include "kernels/cuda/cutlass_scaled_mm.cuh"

namespace llmserve::cuda {
namespace {

using namespace cutlass_mm;

// Scale granularity (m, n, k) = (1, 128, 128): one activation scale per token and k-block, one weight scale per
// 128 x 128 block. Both scale tensors M/N-major ([k / 128, m] and [k / 128, n / 128]), the layout Hopper's kernel
// reads.
using ScaleConfig = cutlass::detail::Sm90BlockwiseScaleConfig<1, 128, 128>;
using LayoutSFA = decltype(ScaleConfig::deduce_layoutSFA());
using LayoutSFB = decltype(ScaleConfig::deduce_layoutSFB());

// out = acc + bias(col) (a null bias reads as 0).
template <class TileShape, class ElementOut>
struct BiasEpilogue {
  using Bias = fusion::Sm90RowBroadcast<0, TileShape, float, float, Stride<_0, _1, _0>>;
  using Tree =
      fusion::Sm90EVT<fusion::Sm90Compute<cutlass::plus, ElementOut, float, cutlass::FloatRoundStyle::round_to_nearest>,
                      fusion::Sm90AccFetch, Bias>;
};

// One tile configuration: 128 x 128 x 128 (the n and k tiles equal the weight block, so each k-block of a tile needs
// one weight scale), the cooperative schedule; for m <= 128 a 64-row ping-pong tile would halve the padding, but
// block-FP8 models at decode batch sizes run the GEMV, and each instantiation costs minutes of compile.
template <class ElementOut>
struct BlockGemm {
  using Element = cutlass::float_e4m3_t;
  using TileShape = Shape<Int<128>, Int<128>, Int<128>>;
  using ClusterShape = Shape<_1, _1, _1>;
  static constexpr int kAlignIn = 16, kAlignOut = 16 / sizeof(ElementOut);
  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, cutlass::layout::RowMajor, kAlignOut,
      ElementOut, cutlass::layout::RowMajor, kAlignOut, cutlass::epilogue::TmaWarpSpecializedCooperative,
      typename BiasEpilogue<TileShape, ElementOut>::Tree>::CollectiveOp;
  using CollectiveMainloop = OverlappedPromotionMainloop<typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Element, cute::tuple<cutlass::layout::RowMajor, LayoutSFA>,
      kAlignIn, Element, cute::tuple<cutlass::layout::ColumnMajor, LayoutSFB>, kAlignIn, float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename CollectiveEpilogue::SharedStorage))>,
      cutlass::gemm::KernelTmaWarpSpecializedCooperativeFP8Blockwise>::CollectiveOp>;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, CollectiveMainloop, CollectiveEpilogue,
                                                      cutlass::gemm::PersistentScheduler>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
};

template <class ElementOut>
void run_block(const CutlassScaledMM& p) {
  using Config = BlockGemm<ElementOut>;
  using Kernel = typename Config::Gemm::GemmKernel;
  using Element = typename Config::Element;
  const typename Kernel::StrideA stride_a{p.k, Int<1>{}, int64_t{0}};
  const typename Kernel::StrideB stride_b{p.k, Int<1>{}, int64_t{0}};
  const int m = static_cast<int>(p.m), n = static_cast<int>(p.n), k = static_cast<int>(p.k);
  // The activation scales' rows are a_scales_ld long (m padded so that TMA can load them): that is the m the scale
  // layout sees; the rows past m scale accumulator rows that are never stored.
  const LayoutSFA layout_sfa =
      ScaleConfig::tile_atom_to_shape_SFA(cute::make_shape(static_cast<int>(p.a_scales_ld), n, k, 1));
  const LayoutSFB layout_sfb = ScaleConfig::tile_atom_to_shape_SFB(cute::make_shape(m, n, k, 1));
  typename Kernel::MainloopArguments mainloop{static_cast<const Element*>(p.a),
                                              stride_a,
                                              static_cast<const Element*>(p.b),
                                              stride_b,
                                              p.a_scales,
                                              layout_sfa,
                                              p.b_scales,
                                              layout_sfb};
  typename BiasEpilogue<typename Config::TileShape, ElementOut>::Bias::Arguments bias{p.bias, 0.f, {}};
  // Output tiles in groups of 8 along m, rastered along m: 4-5% faster than CUTLASS's default order at the
  // Mistral-7B MLP shapes at m = 4096-8192, the same at 2048 (bench/RESULTS.md, 2026-11-27); a 2 x 1 cluster
  // (multicast of the weight tile) was not faster.
  const TileOrder order{8, cutlass::gemm::kernel::detail::RasterOrderOptions::AlongM};
  run_gemm<typename Config::Gemm>(p, mainloop, {{}, bias, {}}, "CUTLASS block-fp8 scaled_mm", order);
}

}  // namespace

void cutlass_scaled_mm_block_fp8(const CutlassScaledMM& p) {
  if (p.out_f16) {
    run_block<cutlass::half_t>(p);
  } else {
    run_block<cutlass::bfloat16_t>(p);
  }
}

}  // namespace llmserve::cuda
