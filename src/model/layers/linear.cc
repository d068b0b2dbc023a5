// Linear layers: parameter declaration, sharded weight loading, forward (see linear.h).
#include "model/layers/linear.h"

#include "core/logging.h"
#include "model/tensor_parallel.h"

namespace llmserve {

LinearBase::LinearBase(const LinearContext& ctx, int64_t input_size_per_partition,
                       std::vector<std::pair<std::string, int64_t>> output_shards, bool has_bias, bool split_input,
                       bool split_output)
    : comm_(ctx.comm),
      method_(ctx.method),
      input_size_per_partition_(input_size_per_partition),
      output_shards_(std::move(output_shards)),
      split_input_(split_input),
      split_output_(split_output),
      has_bias_(has_bias) {
  CHECK(comm_ != nullptr && method_ != nullptr);
  std::vector<int64_t> sizes;
  for (const auto& [id, rows] : output_shards_) {
    output_size_per_partition_ += rows;
    sizes.push_back(rows);
  }
  method_->create_weights(*this, input_size_per_partition_, sizes, ctx.params_dtype);
  if (has_bias_) {
    bias_.shape = {output_size_per_partition_};
    bias_.dtype = DType::kF32;
    bias_.output_dim = 0;
    bias_.shard_ids.clear();
    for (const auto& [id, rows] : output_shards_) bias_.shard_ids.push_back(id);
    bias_.weight_loader = [this](Parameter& p, WeightSource& w, const std::string& name, const std::string& shard) {
      return load_shard(p, w, name, shard);
    };
  }
}

Parameter& LinearBase::add_parameter(const std::string& name, Shape shape, DType dtype, int output_dim, int input_dim) {
  CHECK(!params_.count(name)) << "parameter '" << name << "' declared twice";
  Parameter& p = params_[name];
  p.shape = std::move(shape);
  p.dtype = dtype;
  p.output_dim = output_dim;
  p.input_dim = input_dim;
  p.shard_ids.clear();
  if (output_dim >= 0) {
    for (const auto& [id, rows] : output_shards_) p.shard_ids.push_back(id);
  } else {
    p.shard_ids.push_back("");
  }
  p.weight_loader = [this](Parameter& self, WeightSource& w, const std::string& name, const std::string& shard) {
    return load_shard(self, w, name, shard);
  };
  return p;
}

const Parameter& LinearBase::param(const std::string& name) const {
  auto it = params_.find(name);
  CHECK(it != params_.end()) << "linear layer has no parameter '" << name << "'";
  return it->second;
}

Parameter& LinearBase::param(const std::string& name) {
  auto it = params_.find(name);
  CHECK(it != params_.end()) << "linear layer has no parameter '" << name << "'";
  return it->second;
}

void LinearBase::named_parameters(const std::string& prefix, NamedParameters& out) {
  for (auto& [name, p] : params_) out.emplace_back(prefix + "." + name, &p);
  if (has_bias_) out.emplace_back(prefix + ".bias", &bias_);
}

LinearBase::OutputSlice LinearBase::output_slice(const std::string& shard_id) const {
  (void)shard_id;
  return {comm_->rank(), comm_->world_size()};
}

// Reads only this rank's slice of one shard's checkpoint tensor (the full, all-rank shape is checked) and places it
// at the shard's rows. A parameter filled by one whole shard adopts the tensor (zero-copy when the dtype matches).
Status LinearBase::load_shard(Parameter& p, WeightSource& weights, const std::string& checkpoint_name,
                              const std::string& shard_id) const {
  const int world = comm_->world_size(), rank = comm_->rank();
  int64_t offset = 0, rows = p.output_dim >= 0 ? p.shape[p.output_dim] : 0;
  if (p.output_dim >= 0) {
    bool found = false;
    for (const auto& [id, n] : output_shards_) {
      if (id == shard_id) {
        rows = n;
        found = true;
        break;
      }
      offset += n;
    }
    CHECK(found) << checkpoint_name << ": no shard '" << shard_id << "'";
  }
  Shape shape = p.shape;
  const bool split_out = split_output_ && p.output_dim >= 0 && world > 1;
  const bool split_in = split_input_ && p.input_dim >= 0 && world > 1;
  CHECK(!(split_out && split_in)) << checkpoint_name << ": split along both dims";
  if (p.output_dim >= 0) shape[p.output_dim] = rows;
  Tensor loaded;
  if (split_out) {
    const OutputSlice s = output_slice(shard_id);
    shape[p.output_dim] = rows * s.count;
    ASSIGN_OR_RETURN(
        loaded, weights.get_slice(checkpoint_name, shape, p.dtype, p.output_dim, s.index * rows, (s.index + 1) * rows));
  } else if (split_in) {
    const int64_t cols = p.shape[p.input_dim];
    shape[p.input_dim] = cols * world;
    ASSIGN_OR_RETURN(loaded,
                     weights.get_slice(checkpoint_name, shape, p.dtype, p.input_dim, rank * cols, (rank + 1) * cols));
  } else {
    ASSIGN_OR_RETURN(loaded, weights.get(checkpoint_name, shape, p.dtype));
  }
  if (p.output_dim < 0 || rows == p.shape[p.output_dim]) {
    p.data = loaded.is_contiguous() ? loaded : loaded.contiguous();
    return ok_status();
  }
  if (!p.data.defined()) p.data = Tensor::empty(p.shape, p.dtype, loaded.device());
  Tensor dst = p.data.slice(p.output_dim, offset, offset + rows);
  dst.copy_from(loaded);
  return ok_status();
}

void LinearBase::forward(Tensor& out, const Tensor& x) const { method_->apply(*this, out, x, bias()); }

void LinearBase::forward_quantized(Tensor& out, const QuantizedActivation& x) const {
  method_->apply_quantized(*this, out, x, bias(), 0, output_size_per_partition_);
}

ColumnParallelLinear::ColumnParallelLinear(const LinearContext& ctx, int64_t input_size, int64_t output_size,
                                           bool has_bias)
    : ColumnParallelLinear(ctx, input_size, {{"", output_size / ctx.comm->world_size()}}, has_bias) {
  CHECK_EQ(output_size % ctx.comm->world_size(), 0) << "output size " << output_size << " not divisible by ranks";
}

ColumnParallelLinear::ColumnParallelLinear(const LinearContext& ctx, int64_t input_size,
                                           std::vector<std::pair<std::string, int64_t>> output_shards, bool has_bias)
    : LinearBase(ctx, input_size, std::move(output_shards), has_bias, /*split_input=*/false, /*split_output=*/true) {}

namespace {

std::vector<std::pair<std::string, int64_t>> merged_shards(const std::vector<int64_t>& sizes, int world) {
  std::vector<std::pair<std::string, int64_t>> shards;
  for (size_t i = 0; i < sizes.size(); ++i) {
    CHECK_EQ(sizes[i] % world, 0) << "output size " << sizes[i] << " not divisible by ranks";
    shards.emplace_back(std::to_string(i), sizes[i] / world);
  }
  return shards;
}

// The config was checked by check_tensor_parallel_size; these are invariants.
int64_t checked_heads_per_rank(int64_t heads, int world) {
  if (heads >= world) {
    CHECK_EQ(heads % world, 0) << heads << " heads not divisible by " << world << " ranks";
  } else {
    CHECK_EQ(world % heads, 0) << world << " ranks not divisible by " << heads << " kv heads";
  }
  return heads_per_rank(heads, world);
}

}  // namespace

MergedColumnParallelLinear::MergedColumnParallelLinear(const LinearContext& ctx, int64_t input_size,
                                                       const std::vector<int64_t>& output_sizes, bool has_bias)
    : ColumnParallelLinear(ctx, input_size, merged_shards(output_sizes, ctx.comm->world_size()), has_bias) {}

QKVParallelLinear::QKVParallelLinear(const LinearContext& ctx, int64_t hidden_size, int64_t head_dim, int64_t num_heads,
                                     int64_t num_kv_heads, bool has_bias)
    : ColumnParallelLinear(ctx, hidden_size,
                           {{"q", checked_heads_per_rank(num_heads, ctx.comm->world_size()) * head_dim},
                            {"k", checked_heads_per_rank(num_kv_heads, ctx.comm->world_size()) * head_dim},
                            {"v", checked_heads_per_rank(num_kv_heads, ctx.comm->world_size()) * head_dim}},
                           has_bias),
      head_dim_(head_dim),
      num_heads_(checked_heads_per_rank(num_heads, ctx.comm->world_size())),
      num_kv_heads_(checked_heads_per_rank(num_kv_heads, ctx.comm->world_size())),
      total_num_kv_heads_(num_kv_heads) {}

LinearBase::OutputSlice QKVParallelLinear::output_slice(const std::string& shard_id) const {
  const int world = comm_->world_size(), rank = comm_->rank();
  if (shard_id == "q" || total_num_kv_heads_ >= world) return {rank, world};
  const int replicas = world / static_cast<int>(total_num_kv_heads_);
  return {rank / replicas, static_cast<int>(total_num_kv_heads_)};
}

void QKVParallelLinear::forward_split(Tensor& q, Tensor& k, Tensor& v, const Tensor& x) const {
  const int64_t q_rows = num_heads_ * head_dim_, kv_rows = num_kv_heads_ * head_dim_;
  method_->apply_rows(*this, q, x, bias(), 0, q_rows);
  method_->apply_rows(*this, k, x, bias(), q_rows, q_rows + kv_rows);
  method_->apply_rows(*this, v, x, bias(), q_rows + kv_rows, q_rows + 2 * kv_rows);
}

void QKVParallelLinear::forward_split_quantized(Tensor& q, Tensor& k, Tensor& v, const QuantizedActivation& x) const {
  const int64_t q_rows = num_heads_ * head_dim_, kv_rows = num_kv_heads_ * head_dim_;
  method_->apply_quantized(*this, q, x, bias(), 0, q_rows);
  method_->apply_quantized(*this, k, x, bias(), q_rows, q_rows + kv_rows);
  method_->apply_quantized(*this, v, x, bias(), q_rows + kv_rows, q_rows + 2 * kv_rows);
}

RowParallelLinear::RowParallelLinear(const LinearContext& ctx, int64_t input_size, int64_t output_size, bool has_bias)
    : LinearBase(ctx, input_size / ctx.comm->world_size(), {{"", output_size}}, has_bias, /*split_input=*/true,
                 /*split_output=*/false) {
  CHECK_EQ(input_size % ctx.comm->world_size(), 0) << "input size " << input_size << " not divisible by ranks";
}

void RowParallelLinear::forward(Tensor& out, const Tensor& x) const {
  // vLLM: the bias joins once, on rank 0, so the all-reduce adds it exactly once.
  method_->apply(*this, out, x, comm_->rank() == 0 ? bias() : nullptr);
  if (comm_->world_size() > 1) comm_->all_reduce(out);
}

void RowParallelLinear::forward_quantized(Tensor& out, const QuantizedActivation& x) const {
  method_->apply_quantized(*this, out, x, comm_->rank() == 0 ? bias() : nullptr, 0, output_size_per_partition_);
  if (comm_->world_size() > 1) comm_->all_reduce(out);
}

}  // namespace llmserve
