// The W4A16 tensor-core GEMM (m > 32) on Hopper: CUTLASS 3.x's mixed-input collective (the int4 operand goes through
// registers, where it becomes bf16 and meets its group's scale and zero term before a register-sourced wgmma). We
// compute D^T [n, m] = W [n, k] X^T so that the narrow operand is A (wgmma takes only A from registers) and D^T
// column-major is out [m, n] row-major, which keeps the TMA epilogue.
//
// Weights arrive in ops::w4a16_gemm_pack's layout: nibble (q ^ 8) = q - 8 as int4b_t, each 16 x 16 block ordered so a
// thread's 8 values of one wgmma k16 step are one 32-bit word, in the order [0 2 4 6 1 3 5 7] that the converter
// turns into 4 bf16 pairs with one lop3 and one sub each (CUTLASS's LayoutAwareConvert for this shuffle). So the kernel
// computes w = (q - 8) s + zt with zt = (8 - z) s: GPTQ symmetric (z = 8 everywhere) has no zero term and runs the
// scale-only kernel; AWQ / asymmetric GPTQ the with-zero one. Three tile shapes: 128 x 32 for up to 32 tokens and
// 128 x 64 for up to 64 (one column of tiles: the weight is read once; the narrower tile measured 9% faster at batch-32
// decode, bench/RESULTS.md), 128 x 128 above; all on the stream-K scheduler, which splits k when the weight has fewer
// 128-row tiles than the GPU has SMs (o_proj and down at decode batch sizes).
#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/gemm/kernel/tile_scheduler.hpp"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/w4a16_gemm.h"

namespace llmserve::cuda {
namespace {

using namespace cute;

using Mma = cutlass::bfloat16_t;
using Quant = cutlass::int4b_t;

// The 16 x 16 block of the packed weight: (row r, column c) -> nibble offset within the block's 256. Row r = r0 + 8 r1,
// column c = c0 + 2 c1 + 8 c2: offset 32 r0 + r1 + 4 c0 + 8 c1 + 2 c2. Thread (g = r0, t = c1) of the wgmma A fragment
// holds (g, 2t + c0), (g + 8, ...), (g, 2t + 8 + c0), (g + 8, ...) — its values 0..7 in the fragment's order — in the
// nibbles 0 4 1 5 2 6 3 7 of word 4 g + t: the [0 2 4 6 1 3 5 7] order. The same map as
// cutlass::compute_memory_reordering_atom<bf16, Layout<_1, _1>, Layout<Shape<_2, _4>, Stride<_4, _1>>>() (checked on
// the host while writing this); ops::w4a16_gemm_pack and the CPU reference spell it out independently.
using QuantAtom = cute::Layout<cute::Shape<cute::Shape<_8, _2>, cute::Shape<_2, _4, _2>>,
                               cute::Stride<cute::Stride<_32, _1>, cute::Stride<_4, _8, _2>>>;
// The whole weight: blocks tiled with n fastest (block (i, j) at nibble 256 (i + j n / 16) when unsliced); the stride
// between k-column blocks is set at run time to the packed tensor's pitch, so a row slice keeps it.
using LayoutQ = decltype(tile_to_shape(QuantAtom{}, make_shape(int{}, int{}, int{})));
using StrideX = cutlass::detail::TagToStrideB_t<cutlass::layout::ColumnMajor>;  // x [m, k]: (m, k, l) k-major
using StrideScale = cute::Stride<_1, int64_t, int64_t>;                         // [groups, n]: n-major

LayoutQ layout_q(int n, int k, int64_t pitch_nibbles) {
  LayoutQ l = tile_to_shape(QuantAtom{}, make_shape(n, k, 1));
  auto stride = l.stride();
  get<1, 1>(stride) = static_cast<std::remove_reference_t<decltype(get<1, 1>(stride))>>(pitch_nibbles);
  return LayoutQ(l.shape(), stride);
}

constexpr int kTileK = 64;  // 128 bytes of bf16 per row of x: the 128-byte swizzle

template <class TileShape, bool kWithZero>
struct Config {
  using Cluster = cute::Shape<_1, _1, _1>;
  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, Cluster,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, cutlass::layout::ColumnMajor, 8, Mma,
      cutlass::layout::ColumnMajor, 8, cutlass::epilogue::TmaWarpSpecializedCooperative>::CollectiveOp;
  using QuantOperand = cute::conditional_t<kWithZero, cute::tuple<Quant, Mma, Mma>, cute::tuple<Quant, Mma>>;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, QuantOperand, LayoutQ, 32, Mma, cutlass::layout::ColumnMajor,
      8, float, TileShape, Cluster,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      cutlass::gemm::KernelTmaWarpSpecializedCooperative>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>, Mainloop, Epilogue,
                                                      cutlass::gemm::StreamKScheduler>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
};

using DecodeTile = cute::Shape<_128, _32, Int<kTileK>>;
using SmallTile = cute::Shape<_128, _64, Int<kTileK>>;
using LargeTile = cute::Shape<_128, _128, Int<kTileK>>;
constexpr int64_t kDecodeTileMaxRows = 32, kSmallTileMaxRows = 64;

template <class Gemm>
typename Gemm::Arguments arguments(Tensor& out, const Tensor& x, const W4GemmParams& p) {
  const int m = static_cast<int>(x.size(0)), n = static_cast<int>(p.n), k = static_cast<int>(p.k);
  const int group_size = static_cast<int>(p.k / p.groups);
  const StrideX stride_x = make_stride(static_cast<int64_t>(x.stride(0)), _1{}, int64_t{0});
  const StrideScale stride_s = make_stride(_1{}, p.scales_ld, int64_t{0});
  using StrideD = typename Gemm::GemmKernel::StrideD;
  StrideD stride_d{};
  get<1>(stride_d) = out.stride(0);
  const auto* q = reinterpret_cast<const Quant*>(p.packed);
  const auto* xp = reinterpret_cast<const Mma*>(x.raw_data());
  const auto* s = reinterpret_cast<const Mma*>(p.scales);
  auto* d = reinterpret_cast<Mma*>(out.raw_data());
  cutlass::KernelHardwareInfo hw;
  hw.device_id = out.device().index;
  hw.sm_count = num_sms();
  typename Gemm::Arguments args;
  if constexpr (Gemm::GemmKernel::CollectiveMainloop::KernelConversionMode ==
                cutlass::detail::ConversionMode::ConvertAndScaleWithZero) {
    args = typename Gemm::Arguments{cutlass::gemm::GemmUniversalMode::kGemm,
                                    {n, m, k, 1},
                                    {q, layout_q(n, k, 2 * p.packed_ld), xp, stride_x, s, stride_s, group_size,
                                     reinterpret_cast<const Mma*>(p.zeros)},
                                    {{1.0f, 0.0f}, nullptr, {}, d, stride_d},
                                    hw};
  } else {
    args = typename Gemm::Arguments{cutlass::gemm::GemmUniversalMode::kGemm,
                                    {n, m, k, 1},
                                    {q, layout_q(n, k, 2 * p.packed_ld), xp, stride_x, s, stride_s, group_size},
                                    {{1.0f, 0.0f}, nullptr, {}, d, stride_d},
                                    hw};
  }
  return args;
}

// Calls f with the Gemm type that serves m rows of this weight.
template <class F>
auto with_gemm(int64_t m, const W4GemmParams& p, F&& f) {
  const bool zero = p.zeros != nullptr;
  if (m <= kDecodeTileMaxRows) {
    return zero ? f(typename Config<DecodeTile, true>::Gemm{}) : f(typename Config<DecodeTile, false>::Gemm{});
  }
  if (m <= kSmallTileMaxRows) {
    return zero ? f(typename Config<SmallTile, true>::Gemm{}) : f(typename Config<SmallTile, false>::Gemm{});
  }
  return zero ? f(typename Config<LargeTile, true>::Gemm{}) : f(typename Config<LargeTile, false>::Gemm{});
}

}  // namespace

bool w4a16_cutlass_applies(const Tensor& out, const Tensor& x, const W4GemmParams& p) {
  const bool groups_ok = p.groups == 1 ? p.k % kTileK == 0 : (p.k % p.groups == 0 && (p.k / p.groups) % kTileK == 0);
  const bool sizes_ok = p.n % 16 == 0 && p.k % kTileK == 0 && p.n < (int64_t{1} << 27) && p.k < (int64_t{1} << 27) &&
                        x.size(0) < (int64_t{1} << 31);
  const bool aligned = aligned16(p.packed) && p.packed_ld % 16 == 0 && aligned16(p.scales) && p.scales_ld % 8 == 0 &&
                       (p.zeros == nullptr || aligned16(p.zeros)) && aligned16(x.raw_data()) && x.stride(0) % 8 == 0 &&
                       aligned16(out.raw_data()) && out.stride(0) % 8 == 0;
  return x.dtype() == DType::kBF16 && out.dtype() == DType::kBF16 && groups_ok && sizes_ok && aligned;
}

size_t w4a16_cutlass_workspace_bytes(int64_t m, const W4GemmParams& p) {
  // Shapes only: the arguments' pointers are never followed by the query.
  Tensor x = Tensor::from_blob(nullptr, {m, p.k}, DType::kBF16, nullptr, Device::cuda());
  Tensor out = Tensor::from_blob(nullptr, {m, p.n}, DType::kBF16, nullptr, Device::cuda());
  return with_gemm(m, p, [&](auto gemm) {
    using Gemm = decltype(gemm);
    return Gemm::get_workspace_size(arguments<Gemm>(out, x, p));
  });
}

void w4a16_cutlass_gemm(Tensor& out, const Tensor& x, const W4GemmParams& p, void* workspace) {
  with_gemm(x.size(0), p, [&](auto gemm) {
    using Gemm = decltype(gemm);
    const typename Gemm::Arguments args = arguments<Gemm>(out, x, p);
    CHECK(gemm.can_implement(args) == cutlass::Status::kSuccess)
        << "w4a16_gemm: CUTLASS cannot implement m " << x.size(0) << " n " << p.n << " k " << p.k << " groups "
        << p.groups;
    CHECK(gemm.initialize(args, workspace, stream()) == cutlass::Status::kSuccess) << "w4a16_gemm: initialize";
    CHECK(gemm.run(stream()) == cutlass::Status::kSuccess) << "w4a16_gemm: launch";
    check_launch("w4a16_gemm");
    return 0;
  });
}

}  // namespace llmserve::cuda
