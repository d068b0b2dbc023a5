// Linear and RMSNorm: weight loading (stacking, dtype) and forward through kernels/ops.h.
#include "model/layers.h"

#include <cstring>

#include "kernels/ops.h"

namespace llmserve {

StatusOr<Linear> Linear::load(WeightSource& weights, const std::vector<std::string>& prefixes,
                              const std::vector<int64_t>& out_features, int64_t in_features, bool has_bias,
                              DType dtype) {
  CHECK_EQ(prefixes.size(), out_features.size());
  CHECK(!prefixes.empty());
  std::vector<Tensor> parts, bias_parts;
  int64_t total_out = 0;
  for (size_t i = 0; i < prefixes.size(); ++i) {
    ASSIGN_OR_RETURN(Tensor w, weights.get(prefixes[i] + ".weight", {out_features[i], in_features}, dtype));
    parts.push_back(std::move(w));
    if (has_bias) {
      ASSIGN_OR_RETURN(Tensor b, weights.get(prefixes[i] + ".bias", {out_features[i]}, DType::kF32));
      bias_parts.push_back(std::move(b));
    }
    total_out += out_features[i];
  }
  // One part: keep the (possibly zero-copy) tensor. Several: stack rows into one weight so one GEMM runs.
  auto stack = [](const std::vector<Tensor>& ts, Shape shape, DType t) {
    if (ts.size() == 1) return ts[0];
    Tensor out = Tensor::empty(std::move(shape), t, ts[0].device());
    int64_t row = 0;
    for (const Tensor& p : ts) {
      Tensor dst = out.slice(0, row, row + p.size(0));
      dst.copy_from(p);
      row += p.size(0);
    }
    return out;
  };
  Linear linear;
  linear.weight_ = stack(parts, {total_out, in_features}, dtype);
  if (has_bias) linear.bias_ = stack(bias_parts, {total_out}, DType::kF32);
  return linear;
}

Linear Linear::from_weight(Tensor weight, std::optional<Tensor> bias) {
  Linear linear;
  linear.weight_ = std::move(weight);
  linear.bias_ = std::move(bias);
  return linear;
}

void Linear::forward(Tensor& out, const Tensor& x) const {
  ops::linear(out, x, weight_, bias_ ? &*bias_ : nullptr);
}

StatusOr<RMSNorm> RMSNorm::load(WeightSource& weights, const std::string& name, int64_t dim, float eps) {
  RMSNorm norm;
  ASSIGN_OR_RETURN(norm.weight_, weights.get(name, {dim}, DType::kF32));
  norm.eps_ = eps;
  return norm;
}

void RMSNorm::forward(Tensor& out, const Tensor& x) const { ops::rms_norm(out, x, weight_, eps_); }

void RMSNorm::forward_with_residual(Tensor& x, Tensor& residual) const {
  ops::fused_add_rms_norm(x, residual, weight_, eps_);
}

}  // namespace llmserve
