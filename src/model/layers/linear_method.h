// LinearMethod (vLLM's QuantizeMethodBase): how a linear layer's weights look and are applied. A layer owns what
// it computes (its shape, sharding, bias); the method owns its parameters (create_weights), their post-load
// transform (process_weights_after_loading) and the GEMM (apply). Quantized methods plug in here, never as ifs.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"

namespace llmserve {

class LinearBase;

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
