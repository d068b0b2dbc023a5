// RMSNorm over the last dim with a learned f32 scale; the fused residual form is the decoder's pre-norm step.
// Rows of x are [.., dim]; eps from the config.
#pragma once

#include "core/tensor.h"
#include "model/layers/linear_method.h"
#include "model/layers/parameter.h"

namespace llmserve {

class RMSNorm {
 public:
  RMSNorm(int64_t dim, float eps);
  RMSNorm(const RMSNorm&) = delete;
  RMSNorm& operator=(const RMSNorm&) = delete;
  // out = norm(x) * w (out may be x).
  void forward(Tensor& out, const Tensor& x) const;
  // residual += x; x = norm(residual) * w.
  void forward_with_residual(Tensor& x, Tensor& residual) const;
  // The same with the normed row quantized per token into out (ops::rms_norm_quant / fused_add_rms_norm_quant) for a
  // linear layer's forward_quantized; x is only read.
  void forward_quantized(QuantizedActivation& out, const Tensor& x) const;
  void forward_with_residual_quantized(QuantizedActivation& out, const Tensor& x, Tensor& residual) const;
  // For ops that fuse the norm into a neighbour (Attention's q/k norms into the rotary).
  const Tensor& weight() const { return weight_.data; }
  float eps() const { return eps_; }
  void named_parameters(const std::string& prefix, NamedParameters& out) {
    out.emplace_back(prefix + ".weight", &weight_);
  }

 private:
  Parameter weight_;  // [dim] f32
  float eps_;
};

}  // namespace llmserve
