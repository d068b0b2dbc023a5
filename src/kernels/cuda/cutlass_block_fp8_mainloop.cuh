// Block-FP8's mainloop with the scale promotion overlapped with the tensor cores: CUTLASS's blockwise-scaling
// collective with its consumer loop (mma) replaced. Included by cutlass_scaled_mm_blockwise.cu.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>

namespace llmserve::cuda::cutlass_mm {

// CUTLASS's loop issues a k tile's wgmma batch into a temporary, waits for it (wgmma.wait_group 0), then promotes
// it (accum += temp * scale: 64 FFMA per thread) while the tensor cores sit idle until the next batch. This one
// keeps two temporaries: it issues k tile j + 1's batch, waits only for tile j's (wait_group 1), hands tile j's
// stage back to the producer and promotes tile j while tile j + 1 runs. The same f32 operations per element in the
// same order (accum is cleared first; CUTLASS adds the first tile to the fresh fragment), so the same results; 64
// more registers per thread (3 x 64 accumulators, no spills: the cooperative schedule gives a consumer 232). 3-6%
// faster at the Mistral-7B MLP shapes (bench/RESULTS.md, 2026-11-27). Everything but mma() (TMA loads, scale copies,
// shared storage, mma_tail, which releases the last stage as CUTLASS's loop leaves it) is the base's.
template <class Base>
struct OverlappedPromotionMainloop : Base {
  using typename Base::ElementBlockScale;
  using typename Base::MainloopPipeline;
  using typename Base::Params;
  using typename Base::PipelineState;
  using typename Base::SmemLayoutA;
  using typename Base::SmemLayoutB;
  using typename Base::SmemLayoutSFA;
  using typename Base::SmemLayoutSFB;
  using typename Base::TensorStorage;
  using typename Base::TiledMma;
  using typename Base::TileShape;

  // One promotion per k tile (a 128-deep scale block is one 128-deep tile), activation scales per row, one weight
  // scale per tile: the (1, 128, 128) granularity of block-FP8 checkpoints, the only one this loop is written for.
  static_assert(Base::ScalePromotionInterval == cute::size<2>(TileShape{}) / cute::tile_size<2>(TiledMma{}));
  static_assert(Base::ScaleMsPerTile > 1 && Base::ScaleNsPerTile == 1);

  template <class FrgTensorC>
  CUTLASS_DEVICE void mma(MainloopPipeline pipeline, PipelineState smem_pipe_read, FrgTensorC& accum, int k_tile_count,
                          int thread_idx, TensorStorage& shared_tensors, Params const& /*mainloop_params*/) {
    using namespace cute;
    namespace GMMA = cute::GMMA;
    Tensor sA = make_tensor(make_smem_ptr(shared_tensors.smem_A.data()), SmemLayoutA{});  // (BLK_M, BLK_K, PIPE)
    Tensor sB = make_tensor(make_smem_ptr(shared_tensors.smem_B.data()), SmemLayoutB{});  // (BLK_N, BLK_K, PIPE)
    // The scales' shared-memory tiles seen as (BLK_M, BLK_N, (BLK_K, PIPE)) broadcasts, as the base lays them out.
    Tensor sSFA = make_tensor(
        make_smem_ptr(shared_tensors.smem_SFA.data()),
        make_layout(make_shape(get<0>(shape(SmemLayoutSFA{})), get<1>(TileShape{}),
                               make_shape(get<1>(shape(SmemLayoutSFA{})), get<2>(shape(SmemLayoutSFA{})))),
                    make_stride(get<0>(stride(SmemLayoutSFA{})), _0{},
                                make_stride(get<1>(stride(SmemLayoutSFA{})), get<2>(stride(SmemLayoutSFA{}))))));
    Tensor sSFB = make_tensor(
        make_smem_ptr(shared_tensors.smem_SFB.data()),
        make_layout(make_shape(get<0>(TileShape{}), get<0>(shape(SmemLayoutSFB{})),
                               make_shape(get<1>(shape(SmemLayoutSFB{})), get<2>(shape(SmemLayoutSFB{})))),
                    make_stride(_0{}, get<0>(stride(SmemLayoutSFB{})),
                                make_stride(get<1>(stride(SmemLayoutSFB{})), get<2>(stride(SmemLayoutSFB{}))))));

    constexpr int kWarpGroups = size(TiledMma{}) / cutlass::NumThreadsPerWarpGroup;
    const Layout warp_group_thread_layout = make_layout(Int<kWarpGroups>{}, Int<cutlass::NumThreadsPerWarpGroup>{});
    const int warp_group_idx = __shfl_sync(0xFFFFFFFF, thread_idx / cutlass::NumThreadsPerWarpGroup, 0);
    TiledMma tiled_mma;
    auto thread_mma = tiled_mma.get_slice(warp_group_thread_layout(warp_group_idx));
    Tensor tCsSFA = tiled_mma.get_slice(thread_idx).partition_C(sSFA);  // (MMA, MMA_M, MMA_N, (MMA_K, PIPE))
    Tensor tCsSFB = tiled_mma.get_slice(thread_idx).partition_C(sSFB);
    Tensor tCrA = thread_mma.make_fragment_A(thread_mma.partition_A(sA));  // (MMA, MMA_M, MMA_K, PIPE)
    Tensor tCrB = thread_mma.make_fragment_B(thread_mma.partition_B(sB));  // (MMA, MMA_N, MMA_K, PIPE)

    // Two partial sums and their scales (per row; the weight's one scale is folded into them at load).
    Tensor part0 = make_fragment_like(accum), part1 = make_fragment_like(accum);
    Tensor scale0 = make_tensor_like<ElementBlockScale>(tCsSFA(_, _, _, _0{}));
    Tensor scale1 = make_tensor_like<ElementBlockScale>(tCsSFA(_, _, _, _0{}));
    Tensor scale_b = make_tensor_like<ElementBlockScale>(tCsSFB(_, _, _, _0{}));

    // Waits for the next k tile's stage, reads its scales, issues its wgmma batch into `part` (not waited for).
    auto issue = [&](auto& part, auto& scale) {
      pipeline.consumer_wait(smem_pipe_read);
      const int stage = smem_pipe_read.index();
      copy(tCsSFA(_, _, _, make_coord(_0{}, stage)), scale);
      copy(tCsSFB(_, _, _, make_coord(_0{}, stage)), scale_b);
      const ElementBlockScale b = scale_b(_0{});
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < size(filter_zeros(scale)); ++i) filter_zeros(scale)(i) = filter_zeros(scale)(i) * b;
      tiled_mma.accumulate_ = GMMA::ScaleOut::Zero;
      warpgroup_fence_operand(part);
      warpgroup_arrive();
      CUTLASS_PRAGMA_UNROLL
      for (int k_block = 0; k_block < size<2>(tCrA); ++k_block) {
        cute::gemm(tiled_mma, tCrA(_, _, k_block, stage), tCrB(_, _, k_block, stage), part);
        tiled_mma.accumulate_ = GMMA::ScaleOut::One;
      }
      warpgroup_commit_batch();
      warpgroup_fence_operand(part);
      ++smem_pipe_read;
    };
    // accum += a finished batch's partial sum x its scales (the caller has waited for the batch).
    PipelineState smem_pipe_release = smem_pipe_read;
    auto promote = [&](auto& part, auto& scale) {
      warpgroup_fence_operand(part);
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < size(accum); ++i) accum(i) += part(i) * scale(i);
      warpgroup_fence_operand(accum);
    };
    auto release = [&] {  // the oldest stage still held (the last tile's is mma_tail's)
      pipeline.consumer_release(smem_pipe_release);
      ++smem_pipe_release;
    };

    // Straight-line steps only (no branch between a batch's issue and its wait), so that ptxas can see which batch
    // each wgmma.wait_group leaves in flight: with a data-dependent branch there (a loop over single tiles that
    // issues the next one only if it exists) it reports C7514 and serialises every wgmma.
    clear(accum);
    warpgroup_fence_operand(accum);
    issue(part0, scale0);  // tile 0
    int unissued = k_tile_count - 1;
    CUTLASS_PRAGMA_NO_UNROLL
    for (; unissued >= 2; unissued -= 2) {  // tile j in part0 in flight; issues j + 1 and j + 2
      issue(part1, scale1);
      warpgroup_wait<1>();
      release();
      promote(part0, scale0);
      issue(part0, scale0);
      warpgroup_wait<1>();
      release();
      promote(part1, scale1);
    }
    if (unissued == 1) {
      issue(part1, scale1);
      warpgroup_wait<1>();
      release();
      promote(part0, scale0);
      warpgroup_wait<0>();
      promote(part1, scale1);
    } else {
      warpgroup_wait<0>();
      promote(part0, scale0);
    }
    warpgroup_fence_operand(accum);
  }
};

}  // namespace llmserve::cuda::cutlass_mm
