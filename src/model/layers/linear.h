// Linear layers over a LinearMethod and a Communicator (vLLM's linear.py): ColumnParallelLinear (output rows split
// over ranks), MergedColumnParallelLinear (gate_up: several outputs stacked), QKVParallelLinear (q, k, v stacked),
// RowParallelLinear (input columns split, all-reduced when world_size > 1). Weights are [out, in] as HF stores them;
// each parameter's loader knows its shard (q/k/v, 0/1) and this rank's slice.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "model/layers/communicator.h"
#include "model/layers/linear_method.h"
#include "model/layers/parameter.h"

namespace llmserve {

// What every linear layer is built from: the collectives, the method and the weight dtype.
struct LinearContext {
  Communicator* comm = nullptr;          // never null
  const LinearMethod* method = nullptr;  // never null
  DType params_dtype = DType::kF32;      // weight dtype (biases are f32)
};

class LinearBase {
 public:
  virtual ~LinearBase() = default;
  // Not movable: parameter loaders refer to the layer.
  LinearBase(const LinearBase&) = delete;
  LinearBase& operator=(const LinearBase&) = delete;

  // out [m, output_size_per_partition] = x [m, input_size_per_partition] W^T (+ b); row-parallel all-reduces.
  virtual void forward(Tensor& out, const Tensor& x) const;
  // forward on an input quantized as quantized_input() says: the caller checked that it is set.
  virtual void forward_quantized(Tensor& out, const QuantizedActivation& x) const;
  // The method's LinearMethod::quantized_input(): the quantized input forward_quantized takes, if any.
  std::optional<QuantizedInputSpec> quantized_input() const { return method_->quantized_input(); }

  // For LinearMethod::create_weights: declares parameter `name` with this rank's shape; its loader places
  // the layer's shards along output_dim and this rank's slice along the split dim.
  Parameter& add_parameter(const std::string& name, Shape shape, DType dtype, int output_dim, int input_dim);
  const Parameter& param(const std::string& name) const;
  Parameter& param(const std::string& name);
  bool has_param(const std::string& name) const { return params_.count(name) != 0; }
  // Appends (prefix + "." + name, parameter) for every parameter.
  void named_parameters(const std::string& prefix, NamedParameters& out);
  Status process_weights_after_loading() { return method_->process_weights_after_loading(*this); }

  int64_t input_size_per_partition() const { return input_size_per_partition_; }
  int64_t output_size_per_partition() const { return output_size_per_partition_; }
  const LinearMethod& method() const { return *method_; }
  // (shard id, rows on this rank) stacked in order (one ("", rows) for an unstacked layer): for methods whose
  // parameters load shard by shard in their own layout (packed or per-shard scales).
  const std::vector<std::pair<std::string, int64_t>>& output_shards() const { return output_shards_; }
  int world_size() const { return comm_->world_size(); }

 protected:
  // output_shards: (shard id, rows on this rank) stacked in order; one ("", rows) for an unstacked layer.
  LinearBase(const LinearContext& ctx, int64_t input_size_per_partition,
             std::vector<std::pair<std::string, int64_t>> output_shards, bool has_bias, bool split_input,
             bool split_output);
  const Tensor* bias() const { return bias_.data.defined() ? &bias_.data : nullptr; }
  Status load_shard(Parameter& p, WeightSource& weights, const std::string& checkpoint_name,
                    const std::string& shard_id) const;
  // Which of the equal slices of a checkpoint shard's output rows this rank holds: {index, count}. Default
  // {rank, world_size}; replicated kv heads give several ranks the same slice.
  struct OutputSlice {
    int index = 0, count = 1;
  };
  virtual OutputSlice output_slice(const std::string& shard_id) const;

  Communicator* comm_;
  const LinearMethod* method_;
  int64_t input_size_per_partition_;
  int64_t output_size_per_partition_ = 0;
  std::vector<std::pair<std::string, int64_t>> output_shards_;
  bool split_input_, split_output_;
  std::map<std::string, Parameter> params_;  // the method's parameters by name
  Parameter bias_;                           // [output_size_per_partition] f32; data undefined without a bias
  bool has_bias_;
};

// Y = X A^T with A's output rows split over ranks (each rank keeps its Y columns: no gather).
class ColumnParallelLinear : public LinearBase {
 public:
  ColumnParallelLinear(const LinearContext& ctx, int64_t input_size, int64_t output_size, bool has_bias);

 protected:
  ColumnParallelLinear(const LinearContext& ctx, int64_t input_size,
                       std::vector<std::pair<std::string, int64_t>> output_shards, bool has_bias);
};

// Several column-parallel outputs stacked in one weight (gate_proj + up_proj as shards "0" and "1").
class MergedColumnParallelLinear final : public ColumnParallelLinear {
 public:
  MergedColumnParallelLinear(const LinearContext& ctx, int64_t input_size, const std::vector<int64_t>& output_sizes,
                             bool has_bias);
};

// q, k and v stacked (shards "q", "k", "v"), heads split over ranks (kv heads replicated when fewer than ranks).
class QKVParallelLinear final : public ColumnParallelLinear {
 public:
  QKVParallelLinear(const LinearContext& ctx, int64_t hidden_size, int64_t head_dim, int64_t num_heads,
                    int64_t num_kv_heads, bool has_bias);
  // q, k, v as three GEMMs over row slices of the stacked weight (the same shapes as three separate layers).
  void forward_split(Tensor& q, Tensor& k, Tensor& v, const Tensor& x) const;
  // forward_split on an input quantized per token.
  void forward_split_quantized(Tensor& q, Tensor& k, Tensor& v, const QuantizedActivation& x) const;
  int64_t num_heads() const { return num_heads_; }        // on this rank
  int64_t num_kv_heads() const { return num_kv_heads_; }  // on this rank

 protected:
  // k and v with fewer kv heads than ranks: rank r holds kv head r / (world / total kv heads) (vLLM's replicas).
  OutputSlice output_slice(const std::string& shard_id) const override;

 private:
  int64_t head_dim_, num_heads_, num_kv_heads_, total_num_kv_heads_;
};

// Y = X A^T with A's input columns split over ranks; partial sums are all-reduced; the bias is added once (rank 0).
class RowParallelLinear final : public LinearBase {
 public:
  RowParallelLinear(const LinearContext& ctx, int64_t input_size, int64_t output_size, bool has_bias);
  void forward(Tensor& out, const Tensor& x) const override;
  void forward_quantized(Tensor& out, const QuantizedActivation& x) const override;
};

}  // namespace llmserve
