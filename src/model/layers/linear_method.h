// LinearMethod (vLLM's QuantizeMethodBase): how a linear layer's weights look and are applied. A layer owns what
// it computes (its shape, sharding, bias); the method owns its parameters (create_weights), their post-load
// transform (process_weights_after_loading) and the GEMM (apply). Quantized methods plug in here, never as ifs.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"

namespace llmserve {

class LinearBase;

// A linear layer's input already quantized per token (by ops::rms_norm_quant, fused_add_rms_norm_quant or
// silu_and_mul_quant in the layer before it): what dynamic_scaled_quantize would have made of the activations.
struct QuantizedActivation {
  Tensor q;       // [m, in] fp8_e4m3 or i8, contiguous
  Tensor scales;  // [m, groups] f32: one per token, or one per token and group of group_size columns
};

// The quantized input a LinearMethod takes (see quantized_input()): its dtype and its scales' grouping.
struct QuantizedInputSpec {
  DType dtype = DType::kFP8E4M3;  // fp8_e4m3 or i8
  int64_t group_size = 0;         // columns per scale; 0: one scale per token (the whole row)
  bool operator==(const QuantizedInputSpec&) const = default;
  // Scales per token for rows of `width` columns.
  int64_t num_groups(int64_t width) const { return group_size == 0 ? 1 : width / group_size; }
};

class LinearMethod {
 public:
  virtual ~LinearMethod() = default;
  // Declares the layer's weight parameters through layer.add_parameter (shapes for this rank: the output rows
  // are the sum of output_partition_sizes, stacked in that order; input_size_per_partition columns).
  virtual void create_weights(LinearBase& layer, int64_t input_size_per_partition,
                              const std::vector<int64_t>& output_partition_sizes, DType params_dtype) const = 0;
  // Runs once after every parameter is loaded (repacking, scale folding). Default: nothing.
  virtual Status process_weights_after_loading(LinearBase& layer) const;
  // out [m, output rows] = x [m, in] W^T (+ bias).
  virtual void apply(const LinearBase& layer, Tensor& out, const Tensor& x, const Tensor* bias) const = 0;
  // Only output rows [begin, end) (the same GEMM as a layer holding just those rows): lets a stacked QKV layer
  // run q, k and v as three GEMMs. Default: CHECK-fails (a method whose weights cannot be split by rows).
  virtual void apply_rows(const LinearBase& layer, Tensor& out, const Tensor& x, const Tensor* bias, int64_t begin,
                          int64_t end) const;
  // The seam for fusing activation quantization into the op before the GEMM: the dynamic per-token (or per-token-
  // group) quantized input that apply_quantized takes, or nullopt when the method wants unquantized activations (or
  // quantizes them otherwise: static scales). Valid once process_weights_after_loading has run. Default nullopt.
  virtual std::optional<QuantizedInputSpec> quantized_input() const;
  // apply_rows (output rows [begin, end); bias the layer's whole bias) on an input quantized as quantized_input()
  // says: the same result as apply_rows on the activations x was quantized from (dynamic_scaled_quantize's rule).
  // Default: CHECK-fails (a method without quantized_input()).
  virtual void apply_quantized(const LinearBase& layer, Tensor& out, const QuantizedActivation& x, const Tensor* bias,
                               int64_t begin, int64_t end) const;
};

// Dense weights in the layer's dtype: one parameter "weight" [out, in]; apply is ops::linear.
class UnquantizedLinearMethod final : public LinearMethod {
 public:
  void create_weights(LinearBase& layer, int64_t input_size_per_partition,
                      const std::vector<int64_t>& output_partition_sizes, DType params_dtype) const override;
  void apply(const LinearBase& layer, Tensor& out, const Tensor& x, const Tensor* bias) const override;
  void apply_rows(const LinearBase& layer, Tensor& out, const Tensor& x, const Tensor* bias, int64_t begin,
                  int64_t end) const override;
};

// The process-wide dense method (stateless).
const LinearMethod& unquantized_linear_method();

}  // namespace llmserve
