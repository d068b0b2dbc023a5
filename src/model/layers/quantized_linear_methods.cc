// The quantized linear methods (see quantized_linear_methods.h): checkpoint parameters loaded shard by shard in
// their own layouts (packed dims, per-shard scales), checked, and turned once into the layouts of ops::scaled_mm /
// ops::w4a16_linear. Every malformed checkpoint (a missing scale, a wrong shape, a packed dim that does not divide,
// an inconsistent g_idx) is an InvalidArgument / NotFound error naming the tensor.
#include "model/layers/quantized_linear_methods.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <utility>

#include "core/env.h"
#include "core/logging.h"
#include "kernels/ops.h"
#include "model/layers/linear.h"

namespace llmserve {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
// Block fp8 quantizes activations per token and group of this many columns (ops::scaled_mm's a_scales [m, k / 128]).
constexpr int64_t kActivationGroupSize = 128;
Tensor on_cpu(const Tensor& t) { return t.device().is_cpu() ? t : t.to(Device::cpu()); }
Tensor on_device(const Tensor& t, Device device) { return device.is_cpu() ? t : t.to(device); }

// Offset and rows of shard `shard_id` in units of the output dim divided by `pack`. Shard rows that `pack` does not
// divide are an error naming the checkpoint tensor (`pack` 8: int32-packed nibbles; 128: block-scale rows). A lone
// shard may round up (one partial block).
Status shard_range(const LinearBase& layer, const std::string& shard_id, int64_t pack, const std::string& name,
                   int64_t* offset, int64_t* rows) {
  *offset = 0;
  const auto& shards = layer.output_shards();
  for (const auto& [id, n] : shards) {
    if (id == shard_id) {
      if (n % pack != 0 && !(shards.size() == 1 && pack == 128)) {
        return invalid_argument(name + ": output size " + std::to_string(n) + " is not a multiple of " +
                                std::to_string(pack) + " (its packed / blocked dimension does not divide)");
      }
      *rows = ceil_div(n, pack);
      return ok_status();
    }
    *offset += ceil_div(n, pack);
  }
  return internal_error(name + ": no shard '" + shard_id + "'");
}

// Declares `name` on `layer`, loaded shard by shard: along output_dim a shard fills rows / output_pack entries.
// `shape_error` (non-empty) is a shape this layer cannot have in the format, reported naming the tensor at load.
Parameter& add_quantized_parameter(LinearBase& layer, const std::string& name, Shape shape, DType dtype, int output_dim,
                                   int64_t output_pack, const std::string& shape_error = "") {
  Parameter& p = layer.add_parameter(name, std::move(shape), dtype, output_dim, /*input_dim=*/-1);
  p.weight_loader = [&layer, output_pack, shape_error](Parameter& self, WeightSource& weights,
                                                       const std::string& checkpoint_name,
                                                       const std::string& shard_id) -> Status {
    if (!shape_error.empty()) return invalid_argument(checkpoint_name + ": " + shape_error);
    if (layer.world_size() != 1) return unimplemented(checkpoint_name + ": quantized weights over several ranks");
    if (!weights.contains(checkpoint_name)) return not_found(checkpoint_name + ": missing from the checkpoint");
    int64_t offset = 0, rows = 0;
    Shape shape = self.shape;
    if (self.output_dim >= 0) {
      RETURN_IF_ERROR(shard_range(layer, shard_id, output_pack, checkpoint_name, &offset, &rows));
      shape[self.output_dim] = rows;
    }
    ASSIGN_OR_RETURN(Tensor loaded, weights.get(checkpoint_name, shape, self.dtype));
    if (self.output_dim < 0 || rows == self.shape[self.output_dim]) {
      self.data = loaded.is_contiguous() ? loaded : loaded.contiguous();
      return ok_status();
    }
    if (!self.data.defined()) self.data = Tensor::empty(self.shape, self.dtype, loaded.device());
    Tensor dst = self.data.slice(self.output_dim, offset, offset + rows);
    dst.copy_from(loaded);
    return ok_status();
  };
  return p;
}

// A per-tensor scale for each shard ([num_shards] f32): the checkpoint stores each as [] or [1].
Parameter& add_per_shard_scalar(LinearBase& layer, const std::string& name) {
  const int64_t num_shards = static_cast<int64_t>(layer.output_shards().size());
  Parameter& p = layer.add_parameter(name, {num_shards}, DType::kF32, /*output_dim=*/-1, /*input_dim=*/-1);
  p.shard_ids.clear();
  for (const auto& [id, rows] : layer.output_shards()) p.shard_ids.push_back(id);
  p.weight_loader = [&layer](Parameter& self, WeightSource& weights, const std::string& checkpoint_name,
                             const std::string& shard_id) -> Status {
    if (!weights.contains(checkpoint_name)) return not_found(checkpoint_name + ": missing from the checkpoint");
    StatusOr<Tensor> scalar = weights.get(checkpoint_name, {}, DType::kF32);
    if (!scalar.ok()) scalar = weights.get(checkpoint_name, {1}, DType::kF32);
    if (!scalar.ok()) {
      return invalid_argument(checkpoint_name + ": a per-tensor scale must have shape [] or [1] (" +
                              scalar.status().message() + ")");
    }
    const float value = on_cpu(*scalar).data<float>()[0];
    if (!(value > 0) || !std::isfinite(value)) {
      return invalid_argument(checkpoint_name + ": scale " + std::to_string(value) + " is not a positive number");
    }
    if (!self.data.defined()) self.data = Tensor::zeros(self.shape, DType::kF32);  // CPU: folded at load
    const auto& shards = layer.output_shards();
    for (size_t i = 0; i < shards.size(); ++i) {
      if (shards[i].first == shard_id) self.data.data<float>()[i] = value;
    }
    return ok_status();
  };
  return p;
}

// GPTQ act-order's g_idx [in] i32: stacked shards (q, k, v) share the input, so each shard's g_idx must be the same
// (vLLM keeps the last one loaded; here a difference is an error naming the tensor).
void add_shared_g_idx(LinearBase& layer, int64_t k) {
  Parameter& p = layer.add_parameter("g_idx", {k}, DType::kI32, /*output_dim=*/-1, /*input_dim=*/-1);
  p.shard_ids.clear();
  for (const auto& [id, rows] : layer.output_shards()) p.shard_ids.push_back(id);
  p.weight_loader = [](Parameter& self, WeightSource& weights, const std::string& checkpoint_name,
                       const std::string& shard_id) -> Status {
    (void)shard_id;
    if (!weights.contains(checkpoint_name)) {
      return not_found(checkpoint_name + ": missing from the checkpoint (quantization_config.desc_act is true)");
    }
    ASSIGN_OR_RETURN(Tensor loaded, weights.get(checkpoint_name, self.shape, DType::kI32));
    loaded = on_cpu(loaded).contiguous();
    if (!self.data.defined()) {
      self.data = loaded;
      return ok_status();
    }
    if (std::memcmp(self.data.raw_data(), loaded.raw_data(), loaded.numel() * 4) != 0) {
      return invalid_argument(checkpoint_name + ": differs from the g_idx of the other shards of its stacked layer");
    }
    return ok_status();
  };
}

// Replaces a parameter's tensor (and declared shape) after loading.
void set_param(LinearBase& layer, const std::string& name, Tensor data) {
  Parameter& p = layer.param(name);
  p.shape = data.shape();
  p.dtype = data.dtype();
  p.data = std::move(data);
}

// LLMSERVE_FUSED_ACT_QUANT: unset (the device's default), "0" or "1"; anything else is an error naming it.
enum class FusedActQuantSwitch { kDeviceDefault, kOff, kOn };
StatusOr<FusedActQuantSwitch> fused_act_quant_switch() {
  const char* v = std::getenv("LLMSERVE_FUSED_ACT_QUANT");
  if (v == nullptr) return FusedActQuantSwitch::kDeviceDefault;
  const std::string value = v;
  if (value != "0" && value != "1") {
    return invalid_argument("LLMSERVE_FUSED_ACT_QUANT='" + value + "' must be 0 or 1");
  }
  return value == "1" ? FusedActQuantSwitch::kOn : FusedActQuantSwitch::kOff;
}

}  // namespace

Tensor QuantScratch::view(size_t offset, Shape shape, DType dtype, Device device, size_t total_bytes) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!buffer_.defined() || buffer_.device() != device || static_cast<size_t>(buffer_.numel()) < total_bytes) {
    if (buffer_.defined()) outgrown_.push_back(buffer_);
    buffer_ = Tensor::empty({static_cast<int64_t>(std::max<size_t>(total_bytes, 1 << 16))}, DType::kU8, device);
  }
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  Tensor bytes =
      buffer_.slice(0, static_cast<int64_t>(offset), static_cast<int64_t>(offset + numel * dtype_size(dtype)));
  return Tensor::from_blob(bytes.raw_data(), std::move(shape), dtype, nullptr, device);
}

// ---------------------------------------------------------------------------------------------------------------
// Scaled-mm (fp8, int8)

ScaledMMLinearMethod::ScaledMMLinearMethod(QuantizationConfig config)
    : config_(std::move(config)), weight_dtype_(config_.scheme == QuantScheme::kInt8 ? DType::kI8 : DType::kFP8E4M3) {}

void ScaledMMLinearMethod::create_weights(LinearBase& layer, int64_t input_size_per_partition,
                                          const std::vector<int64_t>& output_partition_sizes,
                                          DType params_dtype) const {
  const int64_t n = std::accumulate(output_partition_sizes.begin(), output_partition_sizes.end(), int64_t{0});
  const int64_t k = input_size_per_partition;
  if (config_.online) {  // the checkpoint's dense weight; quantized in process_weights_after_loading
    layer.add_parameter("weight", {n, k}, params_dtype, /*output_dim=*/0, /*input_dim=*/1);
    return;
  }
  std::string block_error;
  if (config_.weight_scale == WeightScaleKind::kBlock && k % config_.block_k != 0) {
    block_error = "input size " + std::to_string(k) +
                  " is not a multiple of 128 (block fp8 quantizes activations "
                  "in groups of 128 columns)";
  }
  add_quantized_parameter(layer, "weight", {n, k}, weight_dtype_, 0, 1, block_error);
  switch (config_.weight_scale) {
    case WeightScaleKind::kTensor:
      add_per_shard_scalar(layer, config_.weight_scale_name);
      break;
    case WeightScaleKind::kChannel:
      add_quantized_parameter(layer, config_.weight_scale_name, {n, 1}, DType::kF32, 0, 1);
      break;
    case WeightScaleKind::kBlock: {
      int64_t rows = 0;
      for (int64_t s : output_partition_sizes) rows += ceil_div(s, config_.block_n);
      add_quantized_parameter(layer, config_.weight_scale_name, {rows, ceil_div(k, config_.block_k)}, DType::kF32, 0,
                              config_.block_n);
      break;
    }
  }
  if (config_.activation == ActivationScaleKind::kStaticTensor) add_per_shard_scalar(layer, "input_scale");
}

Status ScaledMMLinearMethod::process_weights_after_loading(LinearBase& layer) const {
  Parameter& weight = layer.param("weight");
  const Device device = weight.data.device();
  ASSIGN_OR_RETURN(const FusedActQuantSwitch fused, fused_act_quant_switch());
  fused_input_ = (config_.activation == ActivationScaleKind::kDynamicToken ||
                  config_.activation == ActivationScaleKind::kDynamicGroup) &&
                 (fused == FusedActQuantSwitch::kDeviceDefault ? !device.is_cpu() : fused == FusedActQuantSwitch::kOn);
  const int64_t n = weight.shape[0], k = weight.shape[1];
  if (config_.online) {  // vLLM's online fp8: per-channel scales from each row's amax (dynamic quantization of W)
    Tensor w = weight.data;
    if (device.is_cpu() && w.dtype() != DType::kF32) w = w.to(DType::kF32);
    Tensor q = Tensor::empty({n, k}, DType::kFP8E4M3, device);
    Tensor scales = Tensor::empty({n, 1}, DType::kF32, device);
    ops::dynamic_scaled_quantize(q, scales, w);
    set_param(layer, "weight", q);
    layer.add_parameter("weight_scale", {n}, DType::kF32, 0, -1).data = scales.view({n});
    return ok_status();
  }
  const std::string& scale_name = config_.weight_scale_name;
  switch (config_.weight_scale) {
    case WeightScaleKind::kTensor: {
      const Tensor shard_scales = layer.param(scale_name).data;  // [num_shards] on the CPU
      const auto& shards = layer.output_shards();
      if (config_.activation == ActivationScaleKind::kStaticTensor) {
        // vLLM's requantize_with_max_scale: one per-tensor scale (the max) for the stacked weight, so that a
        // per-tensor activation scale pairs with it (one scalar x scalar GEMM).
        const float* s = shard_scales.data<float>();
        const float max_scale = *std::max_element(s, s + shards.size());
        // A writable copy (a CPU weight is a read-only view of the file mapping).
        Tensor w = device.is_cpu() ? weight.data.clone() : weight.data.to(Device::cpu());
        int64_t row = 0;
        for (size_t i = 0; i < shards.size(); ++i) {
          const float ratio = s[i] / max_scale;
          auto* bits = w.data<fp8_e4m3_t>() + row * k;
          for (int64_t j = 0; j < shards[i].second * k; ++j) {
            bits[j] = f32_to_fp8_e4m3(fp8_e4m3_to_f32(bits[j]) * ratio);
          }
          row += shards[i].second;
        }
        set_param(layer, "weight", on_device(w, device));
        set_param(layer, scale_name, on_device(Tensor::from_f32({max_scale}, {1}), device));
      } else {  // dynamic per-token activations: each shard's scale on its rows (a per-channel vector)
        std::vector<float> per_row;
        for (size_t i = 0; i < shards.size(); ++i)
          per_row.insert(per_row.end(), shards[i].second, shard_scales.data<float>()[i]);
        set_param(layer, scale_name, on_device(Tensor::from_f32(per_row, {n}), device));
      }
      break;
    }
    case WeightScaleKind::kChannel:
      set_param(layer, scale_name, layer.param(scale_name).data.view({n}));
      break;
    case WeightScaleKind::kBlock:
      break;
  }
  if (config_.activation == ActivationScaleKind::kStaticTensor) {
    const Tensor s = layer.param("input_scale").data;  // [num_shards] on the CPU
    const float max_scale = *std::max_element(s.data<float>(), s.data<float>() + s.numel());
    set_param(layer, "input_scale", on_device(Tensor::from_f32({max_scale}, {1}), device));
  }
  return ok_status();
}

void ScaledMMLinearMethod::weight_rows(const LinearBase& layer, int64_t begin, int64_t end, Tensor* w,
                                       Tensor* ws) const {
  const bool whole = begin == 0 && end == layer.output_size_per_partition();
  const Tensor& w_all = layer.param("weight").data;
  const Tensor& s_all = layer.param(config_.online ? std::string("weight_scale") : config_.weight_scale_name).data;
  *w = whole ? w_all : w_all.slice(0, begin, end);
  *ws = s_all;
  if (!whole && s_all.dim() == 1 && s_all.numel() > 1) *ws = s_all.slice(0, begin, end);
  if (!whole && s_all.dim() == 2) {
    CHECK(begin % config_.block_n == 0) << "block-scaled rows [" << begin << ", " << end << ") not block-aligned";
    *ws = s_all.slice(0, begin / config_.block_n, ceil_div(end, config_.block_n));
  }
}

void ScaledMMLinearMethod::run(const LinearBase& layer, Tensor& out, const Tensor& x, const Tensor* bias, int64_t begin,
                               int64_t end) const {
  Tensor w, ws;
  weight_rows(layer, begin, end, &w, &ws);
  const int64_t m = x.size(0), k = x.size(1);
  const Tensor xc = x.is_contiguous() ? x : x.contiguous();
  const int64_t groups = config_.activation == ActivationScaleKind::kDynamicGroup ? k / kActivationGroupSize : 1;
  const size_t q_bytes = (static_cast<size_t>(m * k) + 255) / 256 * 256;
  Tensor xq = scratch_.view(0, {m, k}, weight_dtype_, x.device(), q_bytes + m * groups * 4);
  if (config_.activation == ActivationScaleKind::kStaticTensor) {
    const Tensor& xs = layer.param("input_scale").data;
    ops::static_scaled_quantize(xq, xc, xs);
    ops::scaled_mm(out, xq, xs, w, ws, bias);
  } else {
    Tensor xs = scratch_.view(q_bytes, {m, groups}, DType::kF32, x.device(), q_bytes + m * groups * 4);
    ops::dynamic_scaled_quantize(xq, xs, xc);
    ops::scaled_mm(out, xq, xs, w, ws, bias);
  }
}

std::optional<QuantizedInputSpec> ScaledMMLinearMethod::quantized_input() const {
  if (!fused_input_) return std::nullopt;
  return QuantizedInputSpec{weight_dtype_,
                            config_.activation == ActivationScaleKind::kDynamicGroup ? kActivationGroupSize : 0};
}

void ScaledMMLinearMethod::apply_quantized(const LinearBase& layer, Tensor& out, const QuantizedActivation& x,
                                           const Tensor* bias, int64_t begin, int64_t end) const {
  CHECK(fused_input_ && x.q.dtype() == weight_dtype_ &&
        x.scales.size(1) == quantized_input()->num_groups(layer.input_size_per_partition()))
      << "scaled_mm linear method: quantized input " << x.q.to_string() << ", scales " << x.scales.to_string()
      << " it does not take";
  Tensor w, ws;
  weight_rows(layer, begin, end, &w, &ws);
  const bool whole = begin == 0 && end == layer.output_size_per_partition();
  const Tensor bias_rows = bias != nullptr && !whole ? bias->slice(0, begin, end) : Tensor();
  ops::scaled_mm(out, x.q, x.scales, w, ws, bias == nullptr ? nullptr : (whole ? bias : &bias_rows));
}

void ScaledMMLinearMethod::apply(const LinearBase& layer, Tensor& out, const Tensor& x, const Tensor* bias) const {
  run(layer, out, x, bias, 0, layer.output_size_per_partition());
}

void ScaledMMLinearMethod::apply_rows(const LinearBase& layer, Tensor& out, const Tensor& x, const Tensor* bias,
                                      int64_t begin, int64_t end) const {
  if (bias == nullptr) {
    run(layer, out, x, nullptr, begin, end);
  } else {
    const Tensor rows = bias->slice(0, begin, end);
    run(layer, out, x, &rows, begin, end);
  }
}

// ---------------------------------------------------------------------------------------------------------------
// W4A16 (GPTQ, AWQ)

W4A16LinearMethod::W4A16LinearMethod(QuantizationConfig config) : config_(std::move(config)) {}

int64_t W4A16LinearMethod::num_groups(int64_t input_size) const {
  return config_.group_size <= 0 ? 1 : ceil_div(input_size, config_.group_size);
}

void W4A16LinearMethod::create_weights(LinearBase& layer, int64_t input_size_per_partition,
                                       const std::vector<int64_t>& output_partition_sizes, DType params_dtype) const {
  activation_dtype_ = params_dtype;
  const int64_t n = std::accumulate(output_partition_sizes.begin(), output_partition_sizes.end(), int64_t{0});
  const int64_t k = input_size_per_partition, groups = num_groups(k);
  std::string k_error;
  if (k % 8 != 0) k_error = "input size " + std::to_string(k) + " is not a multiple of 8 (8 4-bit values per int32)";
  if (groups > 1 && k % config_.group_size != 0) {
    k_error =
        "input size " + std::to_string(k) + " is not a multiple of group_size " + std::to_string(config_.group_size);
  }
  if (config_.scheme == QuantScheme::kGptq) {
    // [in / 8, out]: 8 consecutive input rows per int32, row 8p + i in bits [4i, 4i + 4).
    add_quantized_parameter(layer, "qweight", {k / 8, n}, DType::kI32, 1, 1, k_error);
    add_quantized_parameter(layer, "qzeros", {groups, n / 8}, DType::kI32, 1, 8);
    add_quantized_parameter(layer, "scales", {groups, n}, DType::kF32, 1, 1);
    if (config_.desc_act) add_shared_g_idx(layer, k);
  } else {
    // [in, out / 8]: output column 8p + kAwqOrder[i] in bits [4i, 4i + 4).
    add_quantized_parameter(layer, "qweight", {k, n / 8}, DType::kI32, 1, 8, k_error);
    add_quantized_parameter(layer, "qzeros", {groups, n / 8}, DType::kI32, 1, 8);
    add_quantized_parameter(layer, "scales", {groups, n}, DType::kF32, 1, 1);
  }
}

namespace {

// AWQ's pack order: nibble i of a packed int32 holds output column 8p + kAwqOrder[i] (AutoAWQ's order_map).
constexpr int kAwqOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};

inline int nibble(int32_t word, int i) { return (static_cast<uint32_t>(word) >> (4 * i)) & 0xf; }

}  // namespace

Status W4A16LinearMethod::process_weights_after_loading(LinearBase& layer) const {
  for (auto [name, rows] : {std::pair<const char*, int64_t*>{"LLMSERVE_W4A16_GEMM_MIN_ROWS", &gemm_min_rows_},
                            {"LLMSERVE_W4A16_GEMM_MAX_ROWS", &gemm_max_rows_}}) {
    ASSIGN_OR_RETURN(std::optional<int64_t> value, int_from_env(name, 1));
    if (value) *rows = *value;
  }
  const Device device = layer.param("qweight").data.device();
  if (!device.is_cpu() && activation_dtype_ == DType::kF32) {
    return invalid_argument("quantization_config.quant_method '" + config_.quant_method +
                            "' on cuda runs 16-bit activations: pass --dtype bfloat16 or float16");
  }
  const Tensor qweight = on_cpu(layer.param("qweight").data).contiguous();
  const Tensor qzeros = on_cpu(layer.param("qzeros").data).contiguous();
  const Tensor scales = on_cpu(layer.param("scales").data).contiguous();
  const bool gptq = config_.scheme == QuantScheme::kGptq;
  const int64_t n = layer.output_size_per_partition(), k = layer.input_size_per_partition();
  const int64_t groups = num_groups(k), g = k / groups;
  // q[r][c]: 4-bit value of output row r, input column c, in the checkpoint's column order.
  Tensor q = Tensor::empty({n, k / 2}, DType::kU8);
  Tensor zeros = Tensor::empty({n, groups}, DType::kU8);
  Tensor scale_t = Tensor::empty({n, groups}, DType::kF32);
  uint8_t* qd = q.data<uint8_t>();
  std::fill(qd, qd + n * (k / 2), 0);
  const int32_t* qw = qweight.data<int32_t>();
  const int32_t* qz = qzeros.data<int32_t>();
  auto value = [&](int64_t r, int64_t c) {
    return gptq ? nibble(qw[(c / 8) * n + r], static_cast<int>(c % 8))
                : nibble(qw[c * (n / 8) + r / 8],
                         static_cast<int>(std::find(kAwqOrder, kAwqOrder + 8, r % 8) - kAwqOrder));
  };
  // Act-order: canonical column c' is checkpoint column perm[c'], columns sorted by group (stable).
  std::vector<int32_t> perm(k);
  std::iota(perm.begin(), perm.end(), 0);
  if (gptq && config_.desc_act) {
    const Tensor g_idx = on_cpu(layer.param("g_idx").data).contiguous();
    const int32_t* gi = g_idx.data<int32_t>();
    for (int64_t c = 0; c < k; ++c) {
      if (gi[c] < 0 || gi[c] >= groups) {
        return invalid_argument("g_idx[" + std::to_string(c) + "] = " + std::to_string(gi[c]) + " is outside [0, " +
                                std::to_string(groups) + ")");
      }
    }
    std::stable_sort(perm.begin(), perm.end(), [&](int32_t a, int32_t b) { return gi[a] < gi[b]; });
    for (int64_t c = 0; c < k; ++c) {
      if (gi[perm[c]] != c / g) {
        return invalid_argument("g_idx: group " + std::to_string(c / g) + " does not hold exactly " +
                                std::to_string(g) + " input columns");
      }
    }
  }
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t c = 0; c < k; ++c) {
      qd[r * (k / 2) + c / 2] |= static_cast<uint8_t>(value(r, perm[c]) << (4 * (c & 1)));
    }
    for (int64_t j = 0; j < groups; ++j) {
      const int32_t word = qz[j * (n / 8) + r / 8];
      // GPTQ v1 stores zero - 1 (AutoGPTQ's pack); AWQ stores the zero itself, in its interleaved order.
      zeros.data<uint8_t>()[r * groups + j] =
          gptq ? static_cast<uint8_t>(nibble(word, static_cast<int>(r % 8)) + 1)
               : static_cast<uint8_t>(
                     nibble(word, static_cast<int>(std::find(kAwqOrder, kAwqOrder + 8, r % 8) - kAwqOrder)));
      scale_t.data<float>()[r * groups + j] = scales.data<float>()[j * n + r];
    }
  }
  set_param(layer, "qweight", on_device(q, device));
  set_param(layer, "qzeros", on_device(zeros, device));
  set_param(layer, "scales", on_device(scale_t, device));
  if (gptq && config_.desc_act) {
    set_param(layer, "g_idx", on_device(Tensor::from_i32(perm, {k}), device));
  }
  // CUDA, bf16: the tensor-core GEMM's layout too (ops::w4a16_gemm_pack, made on the device), for batches above the
  // GEMV's. Both layouts stay: the 4-bit weight's memory doubles (still half of bf16's).
  if (!device.is_cpu() && activation_dtype_ == DType::kBF16 && n % 16 == 0 && k % 16 == 0) {
    Tensor packed = Tensor::empty({k / 16, 8 * n}, DType::kU8, device);
    Tensor gemm_scales = Tensor::empty({groups, n}, DType::kBF16, device);
    Tensor gemm_zeros = Tensor::empty({groups, n}, DType::kBF16, device);
    ops::w4a16_gemm_pack(packed, gemm_scales, gemm_zeros, layer.param("qweight").data, layer.param("scales").data,
                         layer.param("qzeros").data);
    layer.add_parameter("gemm_qweight", packed.shape(), DType::kU8, -1, -1).data = packed;
    layer.add_parameter("gemm_scales", gemm_scales.shape(), DType::kBF16, -1, -1).data = gemm_scales;
    // Every zero 8 (GPTQ symmetric): every zero term is 0, and the GEMM runs without them.
    const uint8_t* z = zeros.data<uint8_t>();
    if (!std::all_of(z, z + n * groups, [](uint8_t v) { return v == 8; })) {
      layer.add_parameter("gemm_zeros", gemm_zeros.shape(), DType::kBF16, -1, -1).data = gemm_zeros;
    }
  }
  return ok_status();
}

void W4A16LinearMethod::apply(const LinearBase& layer, Tensor& out, const Tensor& x, const Tensor* bias) const {
  apply_rows(layer, out, x, bias, 0, layer.output_size_per_partition());
}

void W4A16LinearMethod::apply_rows(const LinearBase& layer, Tensor& out, const Tensor& x, const Tensor* bias,
                                   int64_t begin, int64_t end) const {
  const bool whole = begin == 0 && end == layer.output_size_per_partition();
  const Tensor* perm = config_.desc_act ? &layer.param("g_idx").data : nullptr;
  const Tensor bias_rows = bias != nullptr && !whole ? bias->slice(0, begin, end) : Tensor();
  const Tensor* bias_arg = bias == nullptr ? nullptr : (whole ? bias : &bias_rows);
  // The GEMM layout for batches in [gemm_min_rows_, gemm_max_rows_] where the layer has one (rows [begin, end) are its
  // column slices: ops.h).
  if (x.size(0) >= gemm_min_rows_ && x.size(0) <= gemm_max_rows_ && layer.has_param("gemm_qweight") &&
      begin % 16 == 0 && end % 16 == 0) {
    auto cols = [&](const char* name, int64_t per_row) {
      const Tensor& t = layer.param(name).data;
      return whole ? t : t.slice(1, per_row * begin, per_row * end);
    };
    const Tensor zeros = layer.has_param("gemm_zeros") ? cols("gemm_zeros", 1) : Tensor();
    ops::w4a16_gemm(out, x, cols("gemm_qweight", 8), cols("gemm_scales", 1), zeros.defined() ? &zeros : nullptr, perm,
                    bias_arg);
    return;
  }
  auto rows = [&](const char* name) {
    const Tensor& t = layer.param(name).data;
    return whole ? t : t.slice(0, begin, end);
  };
  ops::w4a16_linear(out, x, rows("qweight"), rows("scales"), rows("qzeros"), perm, bias_arg);
}

std::shared_ptr<const LinearMethod> make_linear_method(const std::optional<QuantizationConfig>& config) {
  if (!config) return std::shared_ptr<const LinearMethod>(&unquantized_linear_method(), [](const LinearMethod*) {});
  switch (config->scheme) {
    case QuantScheme::kFp8:
    case QuantScheme::kInt8:
      return std::make_shared<ScaledMMLinearMethod>(*config);
    case QuantScheme::kGptq:
    case QuantScheme::kAwq:
      return std::make_shared<W4A16LinearMethod>(*config);
  }
  return nullptr;
}

}  // namespace llmserve
