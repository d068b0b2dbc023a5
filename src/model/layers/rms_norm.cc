// RMSNorm through ops::rms_norm / ops::fused_add_rms_norm.
#include "model/layers/rms_norm.h"

#include "kernels/ops.h"

namespace llmserve {

RMSNorm::RMSNorm(int64_t dim, float eps) : eps_(eps) {
  weight_.shape = {dim};
  weight_.dtype = DType::kF32;
  weight_.weight_loader = load_whole_parameter;
}

void RMSNorm::forward(Tensor& out, const Tensor& x) const { ops::rms_norm(out, x, weight_.data, eps_); }

void RMSNorm::forward_with_residual(Tensor& x, Tensor& residual) const {
  ops::fused_add_rms_norm(x, residual, weight_.data, eps_);
}

void RMSNorm::forward_quantized(QuantizedActivation& out, const Tensor& x) const {
  ops::rms_norm_quant(out.q, out.scales, x, weight_.data, eps_);
}

void RMSNorm::forward_with_residual_quantized(QuantizedActivation& out, const Tensor& x, Tensor& residual) const {
  ops::fused_add_rms_norm_quant(out.q, out.scales, x, residual, weight_.data, eps_);
}

}  // namespace llmserve
