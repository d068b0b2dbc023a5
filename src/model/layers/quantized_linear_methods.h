// The quantized LinearMethods, one per checkpoint format of QuantizationConfig: Fp8 (per-tensor / per-channel /
// 128x128-block weight scales; static, dynamic per-token or per-token-group activations; online from bf16), Int8
// W8A8 (per-channel weights, dynamic per-token activations), GPTQ and AWQ 4-bit (W4A16). Weights stay quantized in
// memory; process_weights_after_loading turns each checkpoint layout into the layout its op takes (ops.h:
// scaled_mm, w4a16_linear), once.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "model/layers/linear_method.h"
#include "model/quantization_config.h"

namespace llmserve {

// The method for a model: unquantized_linear_method() without a config, else a new method of the config's scheme.
std::shared_ptr<const LinearMethod> make_linear_method(const std::optional<QuantizationConfig>& config);

// Per-call activation scratch of a quantized method (quantized activations and their scales): one device buffer,
// grown on demand and then reused by every layer of the model (a forward runs its layers in order on one stream).
// The warm-up forward before each graph capture sizes it, so capture never allocates; a buffer outgrown later is
// kept, never freed, because a captured graph may still use its address.
class QuantScratch {
 public:
  // A [rows, cols] tensor of `dtype` at byte `offset` of the buffer (offsets 256-byte aligned by the caller).
  Tensor view(size_t offset, Shape shape, DType dtype, Device device, size_t total_bytes) const;

 private:
  mutable std::mutex mu_;
  mutable Tensor buffer_;
  mutable std::vector<Tensor> outgrown_;  // kept alive for graphs captured with them
};

// Scaled-mm methods: fp8 (also compressed-tensors float) and int8 W8A8 (compressed-tensors int). Parameters: weight
// [out, in] fp8 / i8; weight_scale (or weight_scale_inv for block fp8); input_scale for static activations. After
// loading: weight_scale is [out] f32 (per-tensor shards expanded to their rows) or [out / 128, in / 128] f32.
class ScaledMMLinearMethod final : public LinearMethod {
 public:
  explicit ScaledMMLinearMethod(QuantizationConfig config);
  void create_weights(LinearBase& layer, int64_t input_size_per_partition,
                      const std::vector<int64_t>& output_partition_sizes, DType params_dtype) const override;
  Status process_weights_after_loading(LinearBase& layer) const override;
  void apply(const LinearBase& layer, Tensor& out, const Tensor& x, const Tensor* bias) const override;
  void apply_rows(const LinearBase& layer, Tensor& out, const Tensor& x, const Tensor* bias, int64_t begin,
                  int64_t end) const override;
  // Dynamic activations (fp8 / int8 with one scale per token, or per token and group of 128 columns: block fp8):
  // the weight's dtype and that grouping, so that the norm or SiLU before the GEMM quantizes its output in the same
  // kernel. On by default on CUDA, off on the CPU (the unfused pair stays the reference there);
  // LLMSERVE_FUSED_ACT_QUANT=1 / 0 forces it (anything else fails the load naming the variable). Static activation
  // scales stay unfused: nullopt.
  std::optional<QuantizedInputSpec> quantized_input() const override;
  void apply_quantized(const LinearBase& layer, Tensor& out, const QuantizedActivation& x, const Tensor* bias,
                       int64_t begin, int64_t end) const override;

 private:
  void run(const LinearBase& layer, Tensor& out, const Tensor& x, const Tensor* bias, int64_t begin, int64_t end) const;
  // The weight [end - begin, in] and its scales for output rows [begin, end).
  void weight_rows(const LinearBase& layer, int64_t begin, int64_t end, Tensor* w, Tensor* ws) const;
  QuantizationConfig config_;
  DType weight_dtype_;  // fp8_e4m3 or i8
  QuantScratch scratch_;
  mutable bool fused_input_ = false;  // quantized_input() is set (process_weights_after_loading decides)
};

// W4A16 methods: GPTQ (qweight [in / 8, out] i32 packed along the input, qzeros [groups, out / 8] with v1's -1
// offset, scales [groups, out], g_idx [in] when desc_act) and AWQ (qweight [in, out / 8] i32 packed along the output
// in the order 0 2 4 6 1 3 5 7, qzeros likewise, scales [groups, out]). After loading both are w4a16_linear's layout:
// qweight [out, in / 2] u8, scales [out, groups] f32, qzeros [out, groups] u8, g_idx the act-order permutation; on
// CUDA with bf16 activations also ops::w4a16_gemm_pack's layout (gemm_qweight, gemm_scales, gemm_zeros unless every
// zero is 8), which w4a16_gemm runs for kGemmMinRows to kGemmMaxRows rows (w4a16_linear otherwise).
class W4A16LinearMethod final : public LinearMethod {
 public:
  // The batches the GEMM layout serves, [kGemmMinRows, kGemmMaxRows]; w4a16_linear the rest (the GEMV up to m = 32,
  // dequantize + cuBLASLt above). Measured (bench/RESULTS.md, H200, Mistral-7B shape GPTQ, batch-32 decode): the GEMM
  // from 17 rows 6,543 tok/s, the GEMV at 32 rows 3,709. The environment variables LLMSERVE_W4A16_GEMM_MIN_ROWS /
  // _MAX_ROWS (positive integers; anything else fails the load naming the variable) override them, for that
  // measurement at the model level.
  static constexpr int64_t kGemmMinRows = 17;
  static constexpr int64_t kGemmMaxRows = int64_t{1} << 62;

  explicit W4A16LinearMethod(QuantizationConfig config);
  void create_weights(LinearBase& layer, int64_t input_size_per_partition,
                      const std::vector<int64_t>& output_partition_sizes, DType params_dtype) const override;
  Status process_weights_after_loading(LinearBase& layer) const override;
  void apply(const LinearBase& layer, Tensor& out, const Tensor& x, const Tensor* bias) const override;
  void apply_rows(const LinearBase& layer, Tensor& out, const Tensor& x, const Tensor* bias, int64_t begin,
                  int64_t end) const override;

 private:
  int64_t num_groups(int64_t input_size) const;
  QuantizationConfig config_;
  mutable DType activation_dtype_ = DType::kBF16;  // the model's (create_weights' params_dtype; one per model)
  // kGemmMinRows / kGemmMaxRows or the environment's (read by process_weights_after_loading).
  mutable int64_t gemm_min_rows_ = kGemmMinRows, gemm_max_rows_ = kGemmMaxRows;
};

}  // namespace llmserve
