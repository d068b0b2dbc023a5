// The seam that lets a norm hand a quantized linear layer its input already quantized per token
// (LinearMethod::quantized_input / apply_quantized): on a ScaledMMLinearMethod (online fp8, CPU) the layer fed by
// ops::rms_norm_quant gives the bytes it gives fed by rms_norm (it then quantizes itself), for one GEMM, the three
// row slices of a QKV layer and a row-parallel layer with a bias; LLMSERVE_FUSED_ACT_QUANT decides, validated.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>

#include "kernels/ops.h"
#include "model/layers/communicator.h"
#include "model/layers/linear.h"
#include "model/layers/quantized_linear_methods.h"
#include "model/weight_source.h"

namespace llmserve {
namespace {

// LLMSERVE_FUSED_ACT_QUANT for one scope (nullopt: unset).
class ScopedSwitch {
 public:
  explicit ScopedSwitch(std::optional<std::string> value) {
    if (value) {
      setenv(kName, value->c_str(), 1);
    } else {
      unsetenv(kName);
    }
  }
  ~ScopedSwitch() { unsetenv(kName); }

 private:
  static constexpr const char* kName = "LLMSERVE_FUSED_ACT_QUANT";
};

QuantizationConfig online_fp8() {
  QuantizationConfig c;
  c.scheme = QuantScheme::kFp8;
  c.quant_method = "fp8";
  c.online = true;
  c.weight_scale = WeightScaleKind::kChannel;
  c.activation = ActivationScaleKind::kDynamicToken;
  return c;
}

Status load(LinearBase& layer, const std::string& prefix, WeightSource& weights,
            const std::vector<StackedParamMapping>& mapping = {}) {
  NamedParameters params;
  layer.named_parameters(prefix, params);
  RETURN_IF_ERROR(load_parameters(params, weights, mapping));
  return layer.process_weights_after_loading();
}

Tensor random_rows(int64_t rows, int64_t cols, uint64_t seed) {
  std::unique_ptr<WeightSource> source = make_dummy_weight_source(seed);
  return source->get("x", {rows, cols}, DType::kF32)->contiguous();
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

// The normed rows of x, unquantized (what a layer gets unfused) and quantized per token by the fused norm.
struct NormedInput {
  Tensor normed;
  QuantizedActivation quantized;
};
NormedInput normed_input(int64_t rows, int64_t hidden, DType qtype) {
  const Tensor x = random_rows(rows, hidden, 5), w = random_rows(1, hidden, 6).view({hidden});
  NormedInput in{Tensor::empty({rows, hidden}, DType::kF32),
                 {Tensor::empty({rows, hidden}, qtype), Tensor::empty({rows, 1}, DType::kF32)}};
  ops::rms_norm(in.normed, x, w, 1e-5f);
  ops::rms_norm_quant(in.quantized.q, in.quantized.scales, x, w, 1e-5f);
  return in;
}

TEST(FusedActQuant, QuantizedInputGivesTheUnfusedBytes) {
  ScopedSwitch on("1");
  const ScaledMMLinearMethod method(online_fp8());
  const LinearContext ctx{&single_process_communicator(), &method, DType::kF32};
  std::unique_ptr<WeightSource> weights = make_dummy_weight_source(3);
  const int64_t T = 7, hidden = 32;
  const NormedInput in = normed_input(T, hidden, DType::kFP8E4M3);

  MergedColumnParallelLinear gate_up(ctx, hidden, {24, 24}, /*has_bias=*/false);
  ASSERT_TRUE(load(gate_up, "mlp.gate_up", *weights, {{".gate_up", ".gate", "0"}, {".gate_up", ".up", "1"}}).ok());
  ASSERT_EQ(gate_up.quantized_input(), (QuantizedInputSpec{DType::kFP8E4M3, 0}));
  Tensor unfused = Tensor::empty({T, 48}, DType::kF32), fused = Tensor::empty({T, 48}, DType::kF32);
  gate_up.forward(unfused, in.normed);
  gate_up.forward_quantized(fused, in.quantized);
  EXPECT_TRUE(same_bytes(unfused, fused));

  QKVParallelLinear qkv(ctx, hidden, /*head_dim=*/8, /*num_heads=*/4, /*num_kv_heads=*/2, /*has_bias=*/true);
  ASSERT_TRUE(load(qkv, "attn.qkv_proj", *weights,
                   {{".qkv_proj", ".q_proj", "q"}, {".qkv_proj", ".k_proj", "k"}, {".qkv_proj", ".v_proj", "v"}})
                  .ok());
  Tensor q[2], k[2], v[2];
  for (int i = 0; i < 2; ++i) {
    q[i] = Tensor::empty({T, 32}, DType::kF32), k[i] = Tensor::empty({T, 16}, DType::kF32);
    v[i] = Tensor::empty({T, 16}, DType::kF32);
  }
  qkv.forward_split(q[0], k[0], v[0], in.normed);
  qkv.forward_split_quantized(q[1], k[1], v[1], in.quantized);
  EXPECT_TRUE(same_bytes(q[0], q[1]) && same_bytes(k[0], k[1]) && same_bytes(v[0], v[1]));
  Tensor whole[2] = {Tensor::empty({T, 64}, DType::kF32), Tensor::empty({T, 64}, DType::kF32)};
  qkv.forward(whole[0], in.normed);
  qkv.forward_quantized(whole[1], in.quantized);
  EXPECT_TRUE(same_bytes(whole[0], whole[1]));

  RowParallelLinear down(ctx, hidden, 16, /*has_bias=*/true);
  ASSERT_TRUE(load(down, "mlp.down_proj", *weights).ok());
  Tensor d[2] = {Tensor::empty({T, 16}, DType::kF32), Tensor::empty({T, 16}, DType::kF32)};
  down.forward(d[0], in.normed);
  down.forward_quantized(d[1], in.quantized);
  EXPECT_TRUE(same_bytes(d[0], d[1]));
}

// Unset: off on the CPU (the unfused pair is the reference there; CUDA defaults to on); 0 / 1 force it.
TEST(FusedActQuant, SwitchDecidesAndIsValidated) {
  std::unique_ptr<WeightSource> weights = make_dummy_weight_source(4);
  for (const auto& [value, want] :
       {std::pair<std::optional<std::string>, std::optional<QuantizedInputSpec>>{std::nullopt, {}},
        {"0", {}},
        {"1", QuantizedInputSpec{DType::kFP8E4M3, 0}}}) {
    ScopedSwitch s(value);
    const ScaledMMLinearMethod method(online_fp8());
    ColumnParallelLinear layer({&single_process_communicator(), &method, DType::kF32}, 16, 8, false);
    ASSERT_TRUE(load(layer, "proj", *weights).ok());
    EXPECT_EQ(layer.quantized_input(), want) << value.value_or("unset");
  }
  for (const char* bad : {"2", "", "on", "1 "}) {
    ScopedSwitch s{std::string(bad)};
    const ScaledMMLinearMethod method(online_fp8());
    ColumnParallelLinear layer({&single_process_communicator(), &method, DType::kF32}, 16, 8, false);
    const Status st = load(layer, "proj", *weights);
    ASSERT_FALSE(st.ok()) << bad;
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find("LLMSERVE_FUSED_ACT_QUANT='" + std::string(bad) + "' must be 0 or 1"),
              std::string::npos)
        << st.message();
  }
}

}  // namespace
}  // namespace llmserve
