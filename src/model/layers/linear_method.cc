// UnquantizedLinearMethod: one dense weight, ops::linear.
#include "model/layers/linear_method.h"

#include <numeric>

#include "core/logging.h"
#include "kernels/ops.h"
#include "model/layers/linear.h"

namespace llmserve {

Status LinearMethod::process_weights_after_loading(LinearBase& layer) const {
  (void)layer;
  return ok_status();
}

void LinearMethod::apply_rows(const LinearBase& layer, Tensor& out, const Tensor& x, const Tensor* bias, int64_t begin,
                              int64_t end) const {
  (void)layer, (void)out, (void)x, (void)bias, (void)begin, (void)end;
  CHECK(false) << "this linear method cannot apply a row range of its weights";
}

std::optional<QuantizedInputSpec> LinearMethod::quantized_input() const { return std::nullopt; }

void LinearMethod::apply_quantized(const LinearBase& layer, Tensor& out, const QuantizedActivation& x,
                                   const Tensor* bias, int64_t begin, int64_t end) const {
  (void)layer, (void)out, (void)x, (void)bias, (void)begin, (void)end;
  CHECK(false) << "this linear method takes no per-token quantized input";
}

void UnquantizedLinearMethod::create_weights(LinearBase& layer, int64_t input_size_per_partition,
                                             const std::vector<int64_t>& output_partition_sizes,
                                             DType params_dtype) const {
  const int64_t rows = std::accumulate(output_partition_sizes.begin(), output_partition_sizes.end(), int64_t{0});
  layer.add_parameter("weight", {rows, input_size_per_partition}, params_dtype, /*output_dim=*/0, /*input_dim=*/1);
}

void UnquantizedLinearMethod::apply(const LinearBase& layer, Tensor& out, const Tensor& x, const Tensor* bias) const {
  ops::linear(out, x, layer.param("weight").data, bias);
}

void UnquantizedLinearMethod::apply_rows(const LinearBase& layer, Tensor& out, const Tensor& x, const Tensor* bias,
                                         int64_t begin, int64_t end) const {
  const Tensor weight = layer.param("weight").data.slice(0, begin, end);
  if (bias == nullptr) {
    ops::linear(out, x, weight, nullptr);
  } else {
    const Tensor bias_rows = bias->slice(0, begin, end);
    ops::linear(out, x, weight, &bias_rows);
  }
}

const LinearMethod& unquantized_linear_method() {
  static const UnquantizedLinearMethod method;
  return method;
}

}  // namespace llmserve
