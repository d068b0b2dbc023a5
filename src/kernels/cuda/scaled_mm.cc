// ops::scaled_mm on CUDA: m <= 16 a weight-streaming GEMV (scaled_gemv.cu); above that on Hopper, for block-FP8 with
// a bf16 output and no bias up to 256 rows, DeepGEMM's kernel (deep_gemm_block_fp8.h, NVRTC-compiled per shape), then
// the CUTLASS kernels (cutlass_scaled_mm.h: fp8 and int8 with the scales in the epilogue, block-FP8 with them in the
// mainloop) for bf16 / f16 outputs whose operands TMA can address. Elsewhere (another GPU, f32 out, misaligned)
// cuBLASLt. FP8 e4m3 x e4m3 -> bf16/f16/f32 with cuBLASLt's own scaling where it has an algorithm: per-tensor scalars
// (SCALAR_32F), per-token x per-channel vectors (OUTER_VEC_32F), and DeepSeek-style per-token-group-128 activations x
// 128x128 weight blocks (VEC128_32F / BLK128x128_32F). Where the heuristic offers none (asked once per shape and mode;
// an H200 with CUDA 13.0 had none for OUTER_VEC_32F): vector scales run the fp8 GEMM with unit scalar scales into an
// f32 scratch, then a scale epilogue (out = acc * sa[row] * sb[col] + bias); block scales run one unit-scaled fp8 GEMM
// per 128-column block of k (exact products, f32 sums) and an epilogue accumulating partial * sa[row, kb] * sb[col /
// 128, kb]. INT8: cuBLASLt i8 x i8 -> i32 into the scratch, then the scale epilogue. Shapes no cuBLASLt algorithm takes
// (k not a multiple of 16, unaligned operands) go to a plain tiled kernel (scaled_mm_fallback.cu).
// LLMSERVE_SCALED_MM_FORCE_FALLBACK=1 skips CUTLASS and cuBLASLt's own scaling (every scale mode takes its epilogue
// fallback), =2 also skips cuBLASLt and the GEMV (the tiled kernel), so a GPU test runs every path on any machine. The
// path each mode takes is logged once. The row-major problem is posed as out^T = b(op T) a^T, so cuBLASLt's A is our
// weight b and its B our activations a: A's scale is b_scales. Plans are cached per shape and mode; scale pointers are
// set per call (graph-capturable: no allocation once the scratch has grown at the warm-up's largest batch).
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "core/cuda_stream.h"
#include "core/env.h"
#include "core/logging.h"
#include "kernels/cuda/cublaslt_plan.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/cutlass_scaled_mm.h"
#include "kernels/cuda/deep_gemm_block_fp8.h"

namespace llmserve::cuda {

// out = acc * sa(row) * sb(col) (+ bias) from an unscaled i32 or f32 accumulator (scaled_mm_epilogue.cu).
void scaled_mm_scale_epilogue(Tensor& out, const Tensor& acc, const Tensor& a_scales, const Tensor& b_scales,
                              const Tensor* bias);
// Adds block kb's partial [m, n] times its scales into total; the last block writes out (+ bias) instead.
void scaled_mm_block_accumulate(Tensor& out, Tensor& total, const Tensor& partial, const Tensor& a_scales,
                                const Tensor& b_scales, int64_t kb, const Tensor* bias);
// Any shape, any scale mode: a plain tiled kernel (scaled_mm_fallback.cu).
void scaled_mm_tiled(Tensor& out, const Tensor& a, const Tensor& a_scales, const Tensor& b, const Tensor& b_scales,
                     const Tensor* bias);
// Transposes scales [rows, groups] into out [groups, ld >= rows], zero past rows (scaled_mm_epilogue.cu).
void transpose_scales(Tensor& out, const Tensor& in);
// out [n] f32 = in [n] (f32, f16 or bf16).
void widen_to_f32(Tensor& out, const Tensor& in);
// out[:] = scale[0] (a per-tensor scale as an outer vector).
void broadcast_scale(Tensor& out, const Tensor& scale);
// Decode-sized m: the weight-streaming GEMV (scaled_gemv.cu), every scale mode; needs k % 16 == 0 and 16-byte
// aligned operands.
bool scaled_gemv_applies(const Tensor& a, const Tensor& b);
void scaled_gemv(Tensor& out, const Tensor& a, const Tensor& a_scales, const Tensor& b, const Tensor& b_scales,
                 const Tensor* bias);

namespace {

enum class ScaleMode { kTensor, kVector, kBlock };

cudaDataType_t out_type(DType dtype) {
  switch (dtype) {
    case DType::kBF16:
      return CUDA_R_16BF;
    case DType::kF16:
      return CUDA_R_16F;
    default:
      return CUDA_R_32F;
  }
}

using Plan = LtPlan;  // cublaslt_plan.h

// (m, n, k, leading dimension of both operands, int8, weight scale mode, activation scale mode, out dtype, the
// alignment in bytes cuBLASLt may assume of every pointer)
using PlanKey = std::tuple<int64_t, int64_t, int64_t, int64_t, bool, int, int, int, uint32_t>;

// Largest power of two (<= 256) dividing every address.
uint32_t alignment_of(std::initializer_list<uintptr_t> addresses) {
  uint32_t align = 256;
  for (uintptr_t p : addresses) {
    while (align > 1 && p % align != 0) align /= 2;
  }
  return align;
}

class ScaledMMContext {
 public:
  ScaledMMContext() {
    LT_CHECK(cublasLtCreate(&handle_));
    CHECK(cudaMalloc(&workspace_, kLtWorkspaceBytes) == cudaSuccess) << "scaled_mm: cudaMalloc of the workspace";
    CHECK(cudaMalloc(&one_, sizeof(float)) == cudaSuccess) << "scaled_mm: cudaMalloc of the unit scale";
    const float one = 1.0f;
    CHECK(cudaMemcpy(one_, &one, sizeof(one), cudaMemcpyHostToDevice) == cudaSuccess) << "scaled_mm: unit scale";
  }

  Plan* plan(const PlanKey& key) {
    auto it = plans_.find(key);
    if (it == plans_.end()) it = plans_.emplace(key, build(key)).first;
    return it->second->found ? it->second.get() : nullptr;
  }

  void run(Plan& plan, const void* a, const void* b, void* d, const void* scale_a, const void* scale_b, bool int8) {
    if (!int8) {
      LT_CHECK(
          cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &scale_a, sizeof(scale_a)));
      LT_CHECK(
          cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &scale_b, sizeof(scale_b)));
      const float alpha = 1.f, beta = 0.f;
      LT_CHECK(cublasLtMatmul(handle_, plan.desc, &alpha, a, plan.a, b, plan.b, &beta, d, plan.c, d, plan.c, &plan.algo,
                              workspace_, kLtWorkspaceBytes, current_stream()));
    } else {
      const int32_t alpha = 1, beta = 0;
      LT_CHECK(cublasLtMatmul(handle_, plan.desc, &alpha, a, plan.a, b, plan.b, &beta, d, plan.c, d, plan.c, &plan.algo,
                              workspace_, kLtWorkspaceBytes, current_stream()));
    }
  }

  // An unscaled accumulator [m, n] of 4-byte `dtype` (i32 or f32) in scratch slot 0 or 1 (grown on demand, reused by
  // every call on this device's stream).
  Tensor accumulator(int slot, int64_t m, int64_t n, DType dtype, Device device) {
    Tensor& t = acc_[slot];
    if (!t.defined() || t.numel() < m * n) {
      if (t.defined()) outgrown_.push_back(t);  // a captured graph may still use it: never freed
      t = Tensor::empty({m * n}, DType::kF32, device);
    }
    return Tensor::from_blob(t.raw_data(), {m, n}, dtype, nullptr, device);
  }
  // A device 1.0f: the unit scale of the fp8 GEMMs whose scales an epilogue applies.
  const void* one() const { return one_; }
  // A per-tensor scale broadcast to `len` entries (slot 0: the weight side, 1: the activation side).
  Tensor broadcast(int slot, int64_t len, Device device) {
    Tensor& t = broadcast_[slot];
    if (!t.defined() || t.numel() < len) {
      if (t.defined()) outgrown_.push_back(t);
      t = Tensor::empty({len}, DType::kF32, device);
    }
    return t.slice(0, 0, len);
  }
  // Transposed block scales [groups, ld] (slot 0: the activations', 1: the weights'; same growth rule).
  Tensor transposed_scales(int slot, int64_t groups, int64_t ld, Device device) {
    return grown(scales_t_[slot], groups * ld, device).view({groups, ld});
  }
  // The bias as the f32 [n] CUTLASS's epilogue reads.
  Tensor bias_f32(int64_t n, Device device) { return grown(bias_f32_, n, device); }
  // CUTLASS's workspace (16-byte granules).
  void* workspace(size_t bytes, Device device) {
    return grown(cutlass_workspace_, static_cast<int64_t>((bytes + 15) / 16) * 4, device).raw_data();
  }

  std::mutex& mutex() { return mu_; }

 private:
  std::unique_ptr<Plan> build(const PlanKey& key) {
    const auto [m, n, k, ld, int8, w_mode, x_mode, out_dtype, align] = key;
    auto plan = std::make_unique<Plan>();
    LT_CHECK(cublasLtMatmulDescCreate(&plan->desc, int8 ? CUBLAS_COMPUTE_32I : CUBLAS_COMPUTE_32F,
                                      int8 ? CUDA_R_32I : CUDA_R_32F));
    const cublasOperation_t trans_a = CUBLAS_OP_T, trans_b = CUBLAS_OP_N;
    LT_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof(trans_a)));
    LT_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof(trans_b)));
    if (!int8) {
      auto mode = [](int m_) -> cublasLtMatmulMatrixScale_t {
        switch (static_cast<ScaleMode>(m_)) {
          case ScaleMode::kTensor:
            return CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
          case ScaleMode::kVector:
            return CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
          case ScaleMode::kBlock:
            break;
        }
        return CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
      };
      const cublasLtMatmulMatrixScale_t a_mode = mode(w_mode);
      const cublasLtMatmulMatrixScale_t b_mode =
          static_cast<ScaleMode>(x_mode) == ScaleMode::kBlock ? CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F : mode(x_mode);
      LT_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &a_mode, sizeof(a_mode)));
      LT_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &b_mode, sizeof(b_mode)));
    }
    const cudaDataType_t in = int8 ? CUDA_R_8I : CUDA_R_8F_E4M3;
    const cudaDataType_t out = int8 ? CUDA_R_32I : out_type(static_cast<DType>(out_dtype));
    // Column-major views: weight [n, ld] row-major = k x n (ld); x = k x m (ld); out = n x m (ld n). ld > k: a
    // 128-column block of k (the block-scale fallback).
    LT_CHECK(cublasLtMatrixLayoutCreate(&plan->a, in, k, n, ld));
    LT_CHECK(cublasLtMatrixLayoutCreate(&plan->b, in, k, m, ld));
    LT_CHECK(cublasLtMatrixLayoutCreate(&plan->c, out, n, m, n));
    choose_lt_algo(handle_, plan.get(), align, align, align);
    return plan;
  }

  // The first `numel` f32 of `t`, reallocated when too small (the old buffer kept: a captured graph may use it).
  Tensor grown(Tensor& t, int64_t numel, Device device) {
    if (!t.defined() || t.numel() < numel) {
      if (t.defined()) outgrown_.push_back(t);
      t = Tensor::empty({numel}, DType::kF32, device);
    }
    return t.slice(0, 0, numel);
  }

  std::mutex mu_;
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  void* one_ = nullptr;
  std::map<PlanKey, std::unique_ptr<Plan>> plans_;
  Tensor acc_[2], scales_t_[2], broadcast_[2], bias_f32_, cutlass_workspace_;
  std::vector<Tensor> outgrown_;
};

ScaledMMContext& context() {
  static std::mutex mu;
  static ScaledMMContext* contexts[16] = {};
  int device = 0;
  CHECK(cudaGetDevice(&device) == cudaSuccess && device >= 0 && device < 16) << "scaled_mm: cudaGetDevice";
  std::lock_guard<std::mutex> lock(mu);
  if (contexts[device] == nullptr) contexts[device] = new ScaledMMContext();  // lives until exit
  return *contexts[device];
}

ScaleMode mode_of(const Tensor& scales, bool block) {
  if (scales.numel() == 1 && scales.dim() <= 1) return ScaleMode::kTensor;
  return block ? ScaleMode::kBlock : ScaleMode::kVector;
}

// 0: every fast path; 1: no cuBLASLt scale modes (the unit-scaled GEMMs + epilogues); 2: only the tiled kernel.
// Read at every call: the tests switch it between calls.
int forced_fallback() { return static_cast<int>(int_from_env_or_die("LLMSERVE_SCALED_MM_FORCE_FALLBACK", 0, 2, 0)); }

const char* mode_name(bool int8, ScaleMode w_mode, ScaleMode x_mode) {
  if (int8) return "int8";
  if (w_mode == ScaleMode::kBlock) return "fp8 per-token-group x 128-block";
  if (w_mode == ScaleMode::kTensor && x_mode == ScaleMode::kTensor) return "fp8 per-tensor";
  if (w_mode == ScaleMode::kVector && x_mode == ScaleMode::kVector) return "fp8 per-token x per-channel";
  return "fp8 per-tensor x vector";
}

// Logs once per (mode, path) which way scaled_mm went on this machine.
void log_path(const char* mode, const std::string& path) {
  static std::mutex mu;
  static std::set<std::string> logged;
  std::lock_guard<std::mutex> lock(mu);
  if (logged.insert(std::string(mode) + "|" + path).second) LOG(INFO) << "scaled_mm: " << mode << " via " << path;
}

// The problem as the Hopper kernels take it (plain pointers, no bias yet); block scales are left null, to be
// transposed into aligned scratch by the caller that takes the problem.
CutlassScaledMM hopper_problem(Tensor& out, const Tensor& a, const Tensor& a_scales, const Tensor& b,
                               const Tensor& b_scales, bool block) {
  CutlassScaledMM p;
  p.out = out.raw_data();
  p.a = a.raw_data();
  p.b = b.raw_data();
  p.m = a.size(0);
  p.k = a.size(1);
  p.n = b.size(0);
  p.out_f16 = out.dtype() == DType::kF16;
  p.a_per_token = a_scales.numel() > 1;
  p.b_per_channel = b_scales.numel() > 1;
  p.a_scales = block ? nullptr : a_scales.data<float>();
  p.b_scales = block ? nullptr : b_scales.data<float>();
  p.a_scales_ld = block ? (p.m + 3) / 4 * 4 : 0;
  return p;
}

// The activations' block scales [m, k / 128] transposed token-major into scratch [k / 128, p.a_scales_ld] (slot 0),
// the layout the Hopper block-FP8 kernels load with TMA.
const float* token_major_scales(ScaledMMContext& ctx, const CutlassScaledMM& p, const Tensor& a_scales) {
  Tensor sa = ctx.transposed_scales(0, a_scales.size(1), p.a_scales_ld, a_scales.device());
  transpose_scales(sa, a_scales);
  return sa.data<float>();
}

// The most rows DeepGEMM takes. Measured on an H200 at the Mistral-7B MLP shapes (bench/RESULTS.md, 2026-12-02):
// per layer (gate_up + down) it is 22% faster than CUTLASS's blockwise kernel at m = 32, 17% at 128, 4% at 256 (its
// 64-row tiles and narrower n tiles waste less on small m), and 10% slower at 512, 6-16% slower at 1024-8192, where
// CUTLASS's mainloop overlaps the scale promotion with the next k tile's MMAs and DeepGEMM's waits for each.
constexpr int64_t kDeepGemmMaxRows = 256;

// DeepGEMM's block-FP8 kernel (deep_gemm_block_fp8.h), Hopper's first choice for block scales up to kDeepGemmMaxRows
// rows (decode batches and short prefill chunks): runs it and returns nullptr, or returns why it did not run.
const char* try_deep_gemm(ScaledMMContext& ctx, Tensor& out, const Tensor& a, const Tensor& a_scales, const Tensor& b,
                          const Tensor& b_scales, const Tensor* bias) {
  if (out.dtype() == DType::kF32) return "f32 output";
  if (bias != nullptr) return "a bias (its epilogue adds none)";
  if (a.size(0) > kDeepGemmMaxRows) return "more rows than where it beats CUTLASS";
  CutlassScaledMM p = hopper_problem(out, a, a_scales, b, b_scales, true);
  if (const char* why = deep_gemm_block_fp8_rejects(p)) return why;
  p.a_scales = token_major_scales(ctx, p, a_scales);
  p.b_scales = b_scales.data<float>();  // DeepGEMM reads the op's [n / 128, k / 128]
  return deep_gemm_block_fp8(p) ? nullptr : "its kernel for this shape is not compiled (see the log)";
}

// The CUTLASS kernels (cutlass_scaled_mm_*.cu), Hopper's path above the GEMV: runs them and returns nullptr, or returns
// why they cannot take this call (then nothing ran). Block scales are transposed into the M/N-major layout the
// blockwise kernel reads (the activations' rows padded to 4 for TMA); a 16-bit bias is widened to f32.
const char* try_cutlass(ScaledMMContext& ctx, Tensor& out, const Tensor& a, const Tensor& a_scales, const Tensor& b,
                        const Tensor& b_scales, const Tensor* bias, bool int8, bool block) {
  if (out.dtype() == DType::kF32) return "f32 output (the CUTLASS kernels write bf16 / f16)";
  CutlassScaledMM p = hopper_problem(out, a, a_scales, b, b_scales, block);
  if (const char* why = cutlass_scaled_mm_rejects(p, block)) return why;
  if (block) {
    p.a_scales = token_major_scales(ctx, p, a_scales);
    Tensor sb = ctx.transposed_scales(1, b_scales.size(1), b_scales.size(0), a.device());
    transpose_scales(sb, b_scales);
    p.b_scales = sb.data<float>();
  }
  if (bias != nullptr) {
    if (bias->dtype() == DType::kF32) {
      p.bias = bias->data<float>();
    } else {
      Tensor wide = ctx.bias_f32(p.n, a.device());
      widen_to_f32(wide, *bias);
      p.bias = wide.data<float>();
    }
  }
  const Device device = a.device();
  p.workspace = [&ctx, device](size_t bytes) { return ctx.workspace(bytes, device); };
  if (block) {
    cutlass_scaled_mm_block_fp8(p);
  } else if (int8) {
    cutlass_scaled_mm_int8(p);
  } else {
    cutlass_scaled_mm_fp8(p);
  }
  return nullptr;
}

void scaled_mm(Tensor& out, const Tensor& a, const Tensor& a_scales, const Tensor& b, const Tensor& b_scales,
               const Tensor* bias) {
  const int64_t m = a.size(0), k = a.size(1), n = b.size(0);
  if (m == 0 || n == 0) return;
  const int force = forced_fallback();
  const bool int8 = a.dtype() == DType::kI8;
  const bool block = b_scales.dim() == 2;
  const ScaleMode w_base = mode_of(b_scales, block), x_base = mode_of(a_scales, block);
  const char* mode = mode_name(int8, w_base, x_base);
  if (force < 2 && scaled_gemv_applies(a, b)) return scaled_gemv(out, a, a_scales, b, b_scales, bias);
  ScaledMMContext& ctx = context();
  std::lock_guard<std::mutex> lock(ctx.mutex());
  auto tiled = [&](const char* why) {
    log_path(mode, why);
    scaled_mm_tiled(out, a, a_scales, b, b_scales, bias);
  };
  constexpr const char* kNoAlgorithm = "the tiled fallback kernel (cuBLASLt has no algorithm for this shape)";
  if (force >= 2) return tiled("the tiled fallback kernel (LLMSERVE_SCALED_MM_FORCE_FALLBACK=2)");
  if (force == 0 && block) {
    const char* why = try_deep_gemm(ctx, out, a, a_scales, b, b_scales, bias);
    if (why == nullptr) return log_path(mode, "DeepGEMM's block-fp8 kernel (NVRTC-compiled)");
    log_path(mode, std::string("DeepGEMM does not apply: ") + why);
  }
  if (force == 0) {
    const char* why = try_cutlass(ctx, out, a, a_scales, b, b_scales, bias, int8, block);
    if (why == nullptr) {
      log_path(mode, block ? "CUTLASS blockwise-scaled fp8 GEMM" : "CUTLASS GEMM, scales in the epilogue");
      return;
    }
    log_path(mode, std::string("cuBLASLt / fallbacks: CUTLASS does not apply: ") + why);
  }
  const int out_dtype = static_cast<int>(out.dtype()), f32 = static_cast<int>(DType::kF32);
  const int unit = static_cast<int>(ScaleMode::kTensor);
  const auto address = [](const Tensor& t) { return reinterpret_cast<uintptr_t>(t.raw_data()); };
  if (int8) {
    Tensor acc = ctx.accumulator(0, m, n, DType::kI32, a.device());
    Plan* plan = ctx.plan(
        {m, n, k, k, true, 0, 0, static_cast<int>(DType::kI32), alignment_of({address(a), address(b), address(acc)})});
    if (plan == nullptr) return tiled(kNoAlgorithm);
    log_path(mode, "cuBLASLt i8 -> i32 + scale epilogue");
    ctx.run(*plan, b.raw_data(), a.raw_data(), acc.raw_data(), nullptr, nullptr, true);
    scaled_mm_scale_epilogue(out, acc, a_scales, b_scales, bias);
    return;
  }
  // One per-tensor and one vector side (static activations x per-channel weights, or the reverse): cuBLASLt's
  // outer-vector mode wants vectors on both, so the scalar side is broadcast on the device (graph-safe).
  const bool mixed = !block && w_base != x_base;
  const ScaleMode w_mode = mixed ? ScaleMode::kVector : w_base, x_mode = mixed ? ScaleMode::kVector : x_base;
  Plan* plan = force == 0 ? ctx.plan({m, n, k, k, false, static_cast<int>(w_mode), static_cast<int>(x_mode), out_dtype,
                                      alignment_of({address(a), address(b), address(out)})})
                          : nullptr;
  if (plan != nullptr) {
    log_path(mode, block ? "cuBLASLt VEC128_32F x BLK128x128_32F"
                         : (w_mode == ScaleMode::kTensor ? "cuBLASLt SCALAR_32F" : "cuBLASLt OUTER_VEC_32F"));
    const void* x_scales = a_scales.raw_data();
    const void* w_scales = b_scales.raw_data();
    if (mixed && a_scales.numel() == 1) {
      Tensor t = ctx.broadcast(1, m, a.device());
      broadcast_scale(t, a_scales);
      x_scales = t.raw_data();
    } else if (mixed) {
      Tensor t = ctx.broadcast(0, n, a.device());
      broadcast_scale(t, b_scales);
      w_scales = t.raw_data();
    }
    if (x_mode == ScaleMode::kBlock) {  // cuBLASLt's VEC128 scales of its B (our tokens) are token-major: [groups, m]
      Tensor t = ctx.transposed_scales(0, a_scales.size(1), m, a.device());
      transpose_scales(t, a_scales);
      x_scales = t.raw_data();
    }
    ctx.run(*plan, b.raw_data(), a.raw_data(), out.raw_data(), w_scales, x_scales, false);
    if (bias != nullptr) add_bias(out, *bias);
    return;
  }
  if (block) {  // one unit-scaled fp8 GEMM per 128-column block of k (k % 128 == 0: checked by the op)
    Tensor partial = ctx.accumulator(0, m, n, DType::kF32, a.device());
    Tensor total = ctx.accumulator(1, m, n, DType::kF32, a.device());
    // Block kb starts kb * 128 bytes into each row: at most 128-byte alignment.
    Plan* unit_plan =
        ctx.plan({m, n, 128, k, false, unit, unit, f32, alignment_of({address(a), address(b), address(partial), 128})});
    if (unit_plan == nullptr) return tiled(kNoAlgorithm);
    log_path(mode, "per-128-block unit-scaled cuBLASLt fp8 GEMMs + f32 block-scale epilogue");
    const auto* ap = static_cast<const uint8_t*>(a.raw_data());
    const auto* bp = static_cast<const uint8_t*>(b.raw_data());
    for (int64_t kb = 0; kb < k / 128; ++kb) {
      ctx.run(*unit_plan, bp + kb * 128, ap + kb * 128, partial.raw_data(), ctx.one(), ctx.one(), false);
      scaled_mm_block_accumulate(out, total, partial, a_scales, b_scales, kb, bias);
    }
    return;
  }
  Tensor acc = ctx.accumulator(0, m, n, DType::kF32, a.device());
  Plan* unit_plan =
      ctx.plan({m, n, k, k, false, unit, unit, f32, alignment_of({address(a), address(b), address(acc)})});
  if (unit_plan == nullptr) return tiled(kNoAlgorithm);
  log_path(mode, "unit-scaled cuBLASLt fp8 GEMM (f32) + scale epilogue");
  ctx.run(*unit_plan, b.raw_data(), a.raw_data(), acc.raw_data(), ctx.one(), ctx.one(), false);
  scaled_mm_scale_epilogue(out, acc, a_scales, b_scales, bias);
}

}  // namespace

void register_scaled_mm_kernels() { ops::scaled_mm.register_kernel(DeviceType::kCUDA, scaled_mm); }

}  // namespace llmserve::cuda
