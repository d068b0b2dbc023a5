// What the two cuBLASLt users (gemm.cc: ops::linear; scaled_mm.cc: ops::scaled_mm) share: the status check, the
// workspace size, a cached matmul plan (descriptors + chosen algorithm) and the heuristic query that fills it.
#pragma once

#include <cublasLt.h>

#include <cstddef>
#include <cstdint>

#include "core/logging.h"

namespace llmserve::cuda {

inline constexpr size_t kLtWorkspaceBytes = size_t{32} << 20;  // NVIDIA's recommendation for Hopper

#define LT_CHECK(expr)                                                                         \
  do {                                                                                         \
    const cublasStatus_t lt_status_ = (expr);                                                  \
    CHECK(lt_status_ == CUBLAS_STATUS_SUCCESS) << #expr << ": cublasLt status " << lt_status_; \
  } while (0)

// Descriptors and the chosen algorithm of one cached matmul shape; per-call pointers are set at the call.
struct LtPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool found = false;
  LtPlan() = default;
  LtPlan(const LtPlan&) = delete;
  LtPlan& operator=(const LtPlan&) = delete;
  ~LtPlan() {
    if (desc) cublasLtMatmulDescDestroy(desc);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (c) cublasLtMatrixLayoutDestroy(c);
  }
};

// Asks cuBLASLt for its best algorithm for `plan`'s descriptors (C doubles as D) within kLtWorkspaceBytes and the
// given pointer alignments (bytes); sets plan->algo and plan->found (false: none, the caller falls back).
inline void choose_lt_algo(cublasLtHandle_t handle, LtPlan* plan, uint32_t align_a, uint32_t align_b,
                           uint32_t align_c) {
  cublasLtMatmulPreference_t pref;
  LT_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t workspace = kLtWorkspaceBytes;
  LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                                sizeof(workspace)));
  LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a,
                                                sizeof(align_a)));
  LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b,
                                                sizeof(align_b)));
  LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c,
                                                sizeof(align_c)));
  LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_c,
                                                sizeof(align_c)));
  cublasLtMatmulHeuristicResult_t result{};
  int count = 0;
  const cublasStatus_t status =
      cublasLtMatmulAlgoGetHeuristic(handle, plan->desc, plan->a, plan->b, plan->c, plan->c, pref, 1, &result, &count);
  cublasLtMatmulPreferenceDestroy(pref);
  if (status == CUBLAS_STATUS_SUCCESS && count > 0 && result.state == CUBLAS_STATUS_SUCCESS) {
    plan->algo = result.algo;
    plan->found = true;
  }
}

}  // namespace llmserve::cuda
