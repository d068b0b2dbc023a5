// Building blocks shared by architectures: Linear, RMSNorm, rotary embedding, each loading its weights by HF
// tensor name through a WeightSource. Activations are row-major [num_tokens, features].
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "model/model_config.h"
#include "model/weight_source.h"

namespace llmserve {

// y = x W^T (+ b). W [out_features, in_features] as stored by HF.
class Linear {
 public:
  Linear() = default;
  // Loads `prefix.weight` (and `prefix.bias` when has_bias). Several prefixes are stacked along the output
  // dimension (e.g. gate_proj + up_proj into one [2 * intermediate, hidden] GEMM).
  static StatusOr<Linear> load(WeightSource& weights, const std::vector<std::string>& prefixes,
                               const std::vector<int64_t>& out_features, int64_t in_features, bool has_bias,
                               DType dtype);
  static Linear from_weight(Tensor weight, std::optional<Tensor> bias = std::nullopt);

  // out [m, out_features] = x [m, in_features] W^T + b.
  void forward(Tensor& out, const Tensor& x) const;
  int64_t out_features() const { return weight_.size(0); }
  int64_t in_features() const { return weight_.size(1); }
  const Tensor& weight() const { return weight_; }

 private:
  Tensor weight_;
  std::optional<Tensor> bias_;
};

class RMSNorm {
 public:
  RMSNorm() = default;
  static StatusOr<RMSNorm> load(WeightSource& weights, const std::string& name, int64_t dim, float eps);
  // out = norm(x) * w; rows of x are [.., dim].
  void forward(Tensor& out, const Tensor& x) const;
  // residual += x; x = norm(residual) * w.
  void forward_with_residual(Tensor& x, Tensor& residual) const;

 private:
  Tensor weight_;
  float eps_ = 1e-6f;
};

}  // namespace llmserve
