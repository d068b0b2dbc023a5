// ops::linear on CUDA through cuBLASLt: out [m, n] = x [m, k] @ weight [n, k]^T (+ bias), the row-major problem
// posed to column-major cuBLASLt as out^T = weight^T(op T) x^T ("TN"). One handle and one workspace per device,
// made by the first call; for each shape (m, n, k, leading dimensions, dtypes, pointer alignments, bias) the
// descriptors and the heuristic's best algorithm are built once and cached, so a repeated call is a map lookup and
// one cublasLtMatmul on the current stream (graph-capturable: no allocation, no synchronisation). Decode-sized
// 16-bit products go to the GEMV of gemv.cu instead. ops::batched_linear (MLA's per-head products) is the same
// plan with a batch count and strided-batch offsets (one cublasLtMatmul for every batch).
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "core/cuda_stream.h"
#include "core/logging.h"
#include "kernels/cuda/cublaslt_plan.h"
#include "kernels/cuda/cuda_ops.h"

namespace llmserve::cuda {
namespace {

constexpr int kMaxDevices = 16;

cudaDataType_t cuda_type(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return CUDA_R_32F;
    case DType::kF16:
      return CUDA_R_16F;
    case DType::kBF16:
      return CUDA_R_16BF;
    default:
      LOG(FATAL) << "linear: dtype " << dtype_name(dtype) << " has no cuBLASLt path";
  }
  __builtin_unreachable();
}

// Largest power of two (<= 256) dividing the address: the alignment cuBLASLt may assume of a pointer.
uint32_t alignment_of(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  uint32_t align = 256;
  while (align > 1 && a % align != 0) align /= 2;
  return align;
}

struct PlanKey {
  int64_t m, n, k, ldx, ldo;
  // Strided batches (batched_linear): count, then element offsets between consecutive x / weight / out matrices.
  // batch 0: a single product (linear).
  int64_t batch, batch_stride_x, batch_stride_w, batch_stride_o;
  DType x_type, out_type, bias_type;
  bool bias_epilogue;
  uint32_t align_x, align_w, align_out;
  bool operator==(const PlanKey& o) const { return std::memcmp(this, &o, sizeof(PlanKey)) == 0; }
};

struct PlanKeyHash {
  size_t operator()(const PlanKey& key) const {
    const auto* bytes = reinterpret_cast<const unsigned char*>(&key);
    size_t h = 1469598103934665603ull;
    for (size_t i = 0; i < sizeof(PlanKey); ++i) h = (h ^ bytes[i]) * 1099511628211ull;
    return h;
  }
};

// Descriptors and the chosen algorithm for one PlanKey (cublaslt_plan.h); the bias pointer is set per call.
using Plan = LtPlan;

class GemmContext {
 public:
  explicit GemmContext(int device) {
    LT_CHECK(cublasLtCreate(&handle_));
    const cudaError_t err = cudaMalloc(&workspace_, kLtWorkspaceBytes);
    CHECK(err == cudaSuccess) << "linear: cudaMalloc of the cuBLASLt workspace on cuda:" << device << ": "
                              << cudaGetErrorString(err);
  }

  // The cached plan for `key` (built on first use); nullptr when cuBLASLt has no algorithm for it.
  Plan* plan(const PlanKey& key) {
    auto it = plans_.find(key);
    if (it == plans_.end()) it = plans_.emplace(key, build(key)).first;
    return it->second->found ? it->second.get() : nullptr;
  }

  void run(Plan& plan, const Tensor& x, const Tensor& weight, Tensor& out, const void* bias) {
    if (bias != nullptr) {
      LT_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    }
    const float alpha = 1.f, beta = 0.f;
    LT_CHECK(cublasLtMatmul(handle_, plan.desc, &alpha, weight.raw_data(), plan.a, x.raw_data(), plan.b, &beta,
                            out.raw_data(), plan.c, out.raw_data(), plan.c, &plan.algo, workspace_, kLtWorkspaceBytes,
                            current_stream()));
  }

  std::mutex& mutex() { return mu_; }

 private:
  std::unique_ptr<Plan> build(const PlanKey& key) {
    auto plan = std::make_unique<Plan>();
    // f32 operands use CUBLAS_COMPUTE_32F, which never downgrades to TF32 (the fixtures compare exact f32).
    LT_CHECK(cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t trans_a = CUBLAS_OP_T, trans_b = CUBLAS_OP_N;
    LT_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof(trans_a)));
    LT_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof(trans_b)));
    if (key.bias_epilogue) {
      const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
      const int32_t bias_type = cuda_type(key.bias_type);
      LT_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
      LT_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                              sizeof(bias_type)));
    }
    // Column-major views: weight [n, k] row-major = k x n (ld k); x = k x m (ld ldx); out = n x m (ld ldo).
    const cudaDataType_t in = cuda_type(key.x_type), out = cuda_type(key.out_type);
    LT_CHECK(cublasLtMatrixLayoutCreate(&plan->a, in, key.k, key.n, key.k));
    LT_CHECK(cublasLtMatrixLayoutCreate(&plan->b, in, key.k, key.m, key.ldx));
    LT_CHECK(cublasLtMatrixLayoutCreate(&plan->c, out, key.n, key.m, key.ldo));
    if (key.batch > 0) {
      const int32_t count = static_cast<int32_t>(key.batch);
      const std::pair<cublasLtMatrixLayout_t, int64_t> layouts[] = {
          {plan->a, key.batch_stride_w}, {plan->b, key.batch_stride_x}, {plan->c, key.batch_stride_o}};
      for (const auto& [layout, stride] : layouts) {
        LT_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
        LT_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                                  sizeof(stride)));
      }
    }
    choose_lt_algo(handle_, plan.get(), key.align_w, key.align_x, key.align_out);
    return plan;
  }

  std::mutex mu_;
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  std::unordered_map<PlanKey, std::unique_ptr<Plan>, PlanKeyHash> plans_;
};

// The context of the current device (made on first use; lives for the process).
GemmContext& context() {
  static std::mutex mu;
  static GemmContext* contexts[kMaxDevices] = {};
  int device = 0;
  CHECK(cudaGetDevice(&device) == cudaSuccess) << "linear: cudaGetDevice";
  CHECK(device >= 0 && device < kMaxDevices) << "linear: device " << device;
  std::lock_guard<std::mutex> lock(mu);
  if (contexts[device] == nullptr) contexts[device] = new GemmContext(device);  // never freed: used until exit
  return *contexts[device];
}

}  // namespace

void linear(Tensor& out, const Tensor& x, const Tensor& weight, const Tensor* bias) {
  if (gemv_applies(out, x, weight)) return gemv(out, x, weight, bias);
  cublaslt_linear(out, x, weight, bias);
}

void cublaslt_linear(Tensor& out, const Tensor& x, const Tensor& weight, const Tensor* bias) {
  const int64_t m = x.size(0), k = x.size(1), n = weight.size(0);
  if (m == 0 || n == 0) return;
  if (k == 0) {  // an empty sum: out = 0 (+ bias); cuBLASLt rejects k = 0
    const size_t elem = dtype_size(out.dtype());
    CHECK(cudaMemset2DAsync(out.raw_data(), out.stride(0) * elem, 0, n * elem, m, current_stream()) == cudaSuccess);
    if (bias != nullptr) add_bias(out, *bias);
    return;
  }
  PlanKey key;
  std::memset(&key, 0, sizeof(key));  // padding bytes take part in the hash and the comparison
  key.m = m;
  key.n = n;
  key.k = k;
  key.ldx = x.stride(0);
  key.ldo = out.stride(0);
  key.x_type = x.dtype();
  key.out_type = out.dtype();
  key.align_x = alignment_of(x.raw_data());
  key.align_w = alignment_of(weight.raw_data());
  key.align_out = alignment_of(out.raw_data());
  // The bias goes into cuBLASLt's epilogue when it is 16-byte aligned and cuBLASLt has an algorithm for it;
  // otherwise a separate broadcast add follows the product.
  key.bias_epilogue = bias != nullptr && alignment_of(bias->raw_data()) >= 16;
  key.bias_type = bias != nullptr ? bias->dtype() : out.dtype();
  GemmContext& ctx = context();
  std::lock_guard<std::mutex> lock(ctx.mutex());
  Plan* plan = ctx.plan(key);
  if (plan == nullptr && key.bias_epilogue) {
    key.bias_epilogue = false;
    plan = ctx.plan(key);
  }
  CHECK(plan != nullptr) << "linear: cuBLASLt has no algorithm for x " << x.to_string() << " @ weight "
                         << weight.to_string() << "^T -> out " << out.to_string();
  ctx.run(*plan, x, weight, out, key.bias_epilogue ? bias->raw_data() : nullptr);
  if (bias != nullptr && !key.bias_epilogue) add_bias(out, *bias);
}

// out[b] = x[b] @ weight[b]^T for every b: x [B, m, k], weight [B, n, k] contiguous, out [B, m, n]; x and out
// strided in dims 0 and 1 (ops.h). One strided-batched cublasLtMatmul; each batch's pointer is the base plus a
// multiple of its batch stride, so the alignment cuBLASLt may assume is the base's and the strides' common one.
void batched_linear(Tensor& out, const Tensor& x, const Tensor& weight) {
  const int64_t batch = x.size(0), m = x.size(1), k = x.size(2), n = weight.size(1);
  CHECK(x.dtype() == weight.dtype() && x.dtype() == out.dtype())
      << "batched_linear: x " << x.to_string() << ", weight " << weight.to_string() << ", out " << out.to_string()
      << " must share one dtype on cuda";
  if (batch == 0 || m == 0 || n == 0) return;
  const size_t elem = dtype_size(out.dtype());
  if (k == 0) {  // empty sums: zeros (cuBLASLt rejects k = 0)
    for (int64_t b = 0; b < batch; ++b) {
      char* dst = static_cast<char*>(out.raw_data()) + b * out.stride(0) * elem;
      CHECK(cudaMemset2DAsync(dst, out.stride(1) * elem, 0, n * elem, m, current_stream()) == cudaSuccess);
    }
    return;
  }
  // A size-1 dimension's stride is arbitrary (views may carry anything there): give cuBLASLt a consistent one.
  const int64_t ldx = m > 1 ? x.stride(1) : k, ldo = m > 1 ? out.stride(1) : n;
  const int64_t bsx = batch > 1 ? x.stride(0) : m * ldx, bso = batch > 1 ? out.stride(0) : m * ldo;
  const auto aligned = [&](const void* p, int64_t stride) {
    return std::min(alignment_of(p), alignment_of(reinterpret_cast<const void*>(stride * elem)));
  };
  PlanKey key;
  std::memset(&key, 0, sizeof(key));  // padding bytes take part in the hash and the comparison
  key.m = m;
  key.n = n;
  key.k = k;
  key.ldx = ldx;
  key.ldo = ldo;
  key.batch = batch;
  key.batch_stride_x = bsx;
  key.batch_stride_w = n * k;
  key.batch_stride_o = bso;
  key.x_type = x.dtype();
  key.out_type = out.dtype();
  key.bias_type = out.dtype();
  key.align_x = aligned(x.raw_data(), bsx);
  key.align_w = aligned(weight.raw_data(), n * k);
  key.align_out = aligned(out.raw_data(), bso);
  GemmContext& ctx = context();
  std::lock_guard<std::mutex> lock(ctx.mutex());
  Plan* plan = ctx.plan(key);
  CHECK(plan != nullptr) << "batched_linear: cuBLASLt has no algorithm for x " << x.to_string() << " @ weight "
                         << weight.to_string() << "^T -> out " << out.to_string();
  ctx.run(*plan, x, weight, out, nullptr);
}

void register_gemm_kernels() {
  ops::linear.register_kernel(DeviceType::kCUDA, linear);
  ops::batched_linear.register_kernel(DeviceType::kCUDA, batched_linear);
}

}  // namespace llmserve::cuda
