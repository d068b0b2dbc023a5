// The layer seams: a LinearMethod plugged into a linear layer decides what it computes; stacked parameters loaded
// by shard equal separately loaded ones; the world-size-1 Communicator is the identity; the architecture table is
// the one list; forward reads planned activations and dies naming the limit past them.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <nlohmann/json.hpp>

#include "kernels/ops.h"
#include "model/architectures.h"
#include "model/layers/communicator.h"
#include "model/layers/fused_moe.h"
#include "model/layers/linear.h"
#include "model/model_registry.h"

namespace llmserve {
namespace {

bool same_bytes(const Tensor& a, const Tensor& b) {
  const Tensor ca = a.contiguous(), cb = b.contiguous();
  return ca.shape() == cb.shape() && ca.dtype() == cb.dtype() &&
         std::memcmp(ca.raw_data(), cb.raw_data(), ca.nbytes()) == 0;
}

Tensor random_input(int64_t rows, int64_t cols, uint64_t seed) {
  std::unique_ptr<WeightSource> source = make_dummy_weight_source(seed);
  StatusOr<Tensor> t = source->get("input", {rows, cols}, DType::kF32);
  EXPECT_TRUE(t.ok());
  return t->contiguous();
}

LinearContext dense_context() { return {&single_process_communicator(), &unquantized_linear_method(), DType::kF32}; }

Status load(LinearBase& layer, const std::string& prefix, WeightSource& weights,
            const std::vector<StackedParamMapping>& mapping = {}) {
  NamedParameters params;
  layer.named_parameters(prefix, params);
  RETURN_IF_ERROR(load_parameters(params, weights, mapping));
  return layer.process_weights_after_loading();
}

// A test-only method: a dense weight plus a per-output-row f32 "scale" (the shape a per-channel quantized method
// has) that process_weights_after_loading squares and apply multiplies into the output.
class ScaledTestMethod final : public LinearMethod {
 public:
  void create_weights(LinearBase& layer, int64_t in, const std::vector<int64_t>& out_sizes,
                      DType dtype) const override {
    int64_t rows = 0;
    for (int64_t n : out_sizes) rows += n;
    layer.add_parameter("weight", {rows, in}, dtype, 0, 1);
    layer.add_parameter("scale", {rows}, DType::kF32, 0, -1);
  }
  Status process_weights_after_loading(LinearBase& layer) const override {
    Tensor& scale = layer.param("scale").data;
    scale = scale.contiguous().clone();  // the loaded tensor may be a read-only mapping
    for (int64_t i = 0; i < scale.numel(); ++i) scale.data<float>()[i] *= scale.data<float>()[i];
    return ok_status();
  }
  void apply(const LinearBase& layer, Tensor& out, const Tensor& x, const Tensor* bias) const override {
    ops::linear(out, x, layer.param("weight").data, bias);
    const Tensor& scale = layer.param("scale").data;
    for (int64_t r = 0; r < out.size(0); ++r) {
      for (int64_t c = 0; c < out.size(1); ++c) out.data<float>()[r * out.size(1) + c] *= scale.data<float>()[c];
    }
  }
};

TEST(LinearMethod, APluggedMethodDecidesWhatTheLayerComputes) {
  std::unique_ptr<WeightSource> weights = make_dummy_weight_source(3);
  const ScaledTestMethod method;
  const LinearContext scaled_ctx{&single_process_communicator(), &method, DType::kF32};
  MergedColumnParallelLinear scaled(scaled_ctx, 16, {8, 8}, /*has_bias=*/false);
  MergedColumnParallelLinear dense(dense_context(), 16, {8, 8}, false);
  const std::vector<StackedParamMapping> map = {{".gate_up", ".gate", "0"}, {".gate_up", ".up", "1"}};
  ASSERT_TRUE(load(scaled, "mlp.gate_up", *weights, map).ok());
  ASSERT_TRUE(load(dense, "mlp.gate_up", *weights, map).ok());
  // y = (x W^T) * scale^2 column-wise: the method declared "scale", the layer loaded it by shard ("mlp.gate.scale",
  // "mlp.up.scale"), process_weights_after_loading squared it and apply used it.
  const Tensor x = random_input(3, 16, 9);
  Tensor y_scaled = Tensor::empty({3, 16}, DType::kF32), y_dense = Tensor::empty({3, 16}, DType::kF32);
  scaled.forward(y_scaled, x);
  dense.forward(y_dense, x);
  for (int64_t c = 0; c < 16; ++c) {
    const std::string name = c < 8 ? "mlp.gate.scale" : "mlp.up.scale";
    const float s = weights->get(name, {8}, DType::kF32)->data<float>()[c % 8];
    for (int64_t r = 0; r < 3; ++r) {
      EXPECT_FLOAT_EQ(y_scaled.data<float>()[r * 16 + c], y_dense.data<float>()[r * 16 + c] * s * s) << r << "," << c;
    }
  }
}

TEST(LinearMethod, DenseMethodCannotBeSwappedSilently) {
  // The default apply_rows of a method without row slicing refuses instead of computing something else.
  const ScaledTestMethod method;
  const LinearContext ctx{&single_process_communicator(), &method, DType::kF32};
  QKVParallelLinear qkv(ctx, 8, 4, 2, 1, false);
  std::unique_ptr<WeightSource> weights = make_dummy_weight_source(1);
  ASSERT_TRUE(load(qkv, "attn.qkv_proj", *weights,
                   {{".qkv_proj", ".q_proj", "q"}, {".qkv_proj", ".k_proj", "k"}, {".qkv_proj", ".v_proj", "v"}})
                  .ok());
  Tensor q = Tensor::empty({1, 8}, DType::kF32), k = Tensor::empty({1, 4}, DType::kF32),
         v = Tensor::empty({1, 4}, DType::kF32);
  EXPECT_DEATH(qkv.forward_split(q, k, v, random_input(1, 8, 2)), "cannot apply a row range");
}

TEST(StackedWeights, QkvLoadedByShardEqualsSeparateLayers) {
  for (bool bias : {false, true}) {
    SCOPED_TRACE(bias ? "bias" : "no bias");
    std::unique_ptr<WeightSource> weights = make_dummy_weight_source(11);
    const int64_t hidden = 32, head_dim = 8, heads = 4, kv_heads = 2;
    QKVParallelLinear qkv(dense_context(), hidden, head_dim, heads, kv_heads, bias);
    ASSERT_TRUE(load(qkv, "l.qkv_proj", *weights,
                     {{".qkv_proj", ".q_proj", "q"}, {".qkv_proj", ".k_proj", "k"}, {".qkv_proj", ".v_proj", "v"}})
                    .ok());
    ColumnParallelLinear q_proj(dense_context(), hidden, heads * head_dim, bias);
    ColumnParallelLinear k_proj(dense_context(), hidden, kv_heads * head_dim, bias);
    ColumnParallelLinear v_proj(dense_context(), hidden, kv_heads * head_dim, bias);
    ASSERT_TRUE(load(q_proj, "l.q_proj", *weights).ok());
    ASSERT_TRUE(load(k_proj, "l.k_proj", *weights).ok());
    ASSERT_TRUE(load(v_proj, "l.v_proj", *weights).ok());
    const Tensor& w = qkv.param("weight").data;
    EXPECT_TRUE(same_bytes(w.slice(0, 0, 32), q_proj.param("weight").data));
    EXPECT_TRUE(same_bytes(w.slice(0, 32, 48), k_proj.param("weight").data));
    EXPECT_TRUE(same_bytes(w.slice(0, 48, 64), v_proj.param("weight").data));
    // Three GEMMs over row slices == three separate layers, bit for bit; the fused GEMM gives the same columns.
    const Tensor x = random_input(5, hidden, 4);
    Tensor q = Tensor::empty({5, 32}, DType::kF32), k = Tensor::empty({5, 16}, DType::kF32),
           v = Tensor::empty({5, 16}, DType::kF32);
    qkv.forward_split(q, k, v, x);
    Tensor q_ref = Tensor::empty({5, 32}, DType::kF32), k_ref = Tensor::empty({5, 16}, DType::kF32),
           v_ref = Tensor::empty({5, 16}, DType::kF32);
    q_proj.forward(q_ref, x);
    k_proj.forward(k_ref, x);
    v_proj.forward(v_ref, x);
    EXPECT_TRUE(same_bytes(q, q_ref));
    EXPECT_TRUE(same_bytes(k, k_ref));
    EXPECT_TRUE(same_bytes(v, v_ref));
    Tensor fused = Tensor::empty({5, 64}, DType::kF32);
    qkv.forward(fused, x);
    for (int64_t i = 0; i < 5 * 16; ++i) {
      EXPECT_NEAR(fused.data<float>()[(i / 16) * 64 + 48 + i % 16], v.data<float>()[i], 1e-5f);
    }
  }
}

TEST(StackedWeights, GateUpLoadedByShardEqualsSeparateWeights) {
  std::unique_ptr<WeightSource> weights = make_dummy_weight_source(5);
  MergedColumnParallelLinear gate_up(dense_context(), 12, {20, 20}, /*has_bias=*/true);
  ASSERT_TRUE(load(gate_up, "mlp.gate_up_proj", *weights,
                   {{".gate_up_proj", ".gate_proj", "0"}, {".gate_up_proj", ".up_proj", "1"}})
                  .ok());
  EXPECT_TRUE(same_bytes(gate_up.param("weight").data.slice(0, 0, 20),
                         *weights->get("mlp.gate_proj.weight", {20, 12}, DType::kF32)));
  EXPECT_TRUE(same_bytes(gate_up.param("weight").data.slice(0, 20, 40),
                         *weights->get("mlp.up_proj.weight", {20, 12}, DType::kF32)));
  NamedParameters params;
  gate_up.named_parameters("mlp.gate_up_proj", params);
  ASSERT_EQ(params.size(), 2u);
  EXPECT_TRUE(
      same_bytes(params[1].second->data.slice(0, 20, 40), *weights->get("mlp.up_proj.bias", {20}, DType::kF32)));
}

TEST(StackedWeights, AShardWithoutAMappingIsNamed) {
  std::unique_ptr<WeightSource> weights = make_dummy_weight_source(5);
  QKVParallelLinear qkv(dense_context(), 8, 4, 2, 2, false);
  EXPECT_DEATH((void)load(qkv, "l.qkv_proj", *weights), "no stacked-parameter mapping for shard 'q' of l.qkv_proj");
}

TEST(Communicator, WorldSizeOneIsTheIdentity) {
  Communicator& comm = single_process_communicator();
  EXPECT_EQ(comm.rank(), 0);
  EXPECT_EQ(comm.world_size(), 1);
  Tensor t = random_input(3, 5, 1);
  const Tensor before = t.clone();
  comm.all_reduce(t);
  EXPECT_TRUE(same_bytes(t, before));
  Tensor gathered = Tensor::zeros({3, 5}, DType::kF32);
  comm.all_gather(gathered, t);
  EXPECT_TRUE(same_bytes(gathered, t));
  // A row-parallel layer at world size 1: exactly ops::linear with the whole weight and the bias.
  std::unique_ptr<WeightSource> weights = make_dummy_weight_source(8);
  RowParallelLinear down(dense_context(), 5, 7, /*has_bias=*/true);
  ASSERT_TRUE(load(down, "down", *weights).ok());
  Tensor y = Tensor::empty({3, 7}, DType::kF32), want = Tensor::empty({3, 7}, DType::kF32);
  down.forward(y, t);
  const Tensor w = *weights->get("down.weight", {7, 5}, DType::kF32), b = *weights->get("down.bias", {7}, DType::kF32);
  ops::linear(want, t, w, &b);
  EXPECT_TRUE(same_bytes(y, want));
}

TEST(Architectures, OneTableFeedsConfigParsingAndTheFactory) {
  std::vector<std::string> names;
  for (const Architecture& a : architectures()) names.emplace_back(a.name);
  EXPECT_EQ(supported_architectures(), names);
  // model_type without `architectures` resolves through the same table, with its defaults.
  for (const Architecture& a : architectures()) {
    nlohmann::json j = {{"model_type", a.model_type}, {"vocab_size", 64},       {"hidden_size", 16},
                        {"intermediate_size", 32},    {"num_hidden_layers", 1}, {"num_attention_heads", 2}};
    StatusOr<ModelConfig> cfg = parse_model_config(j);
    ASSERT_TRUE(cfg.ok()) << a.name << ": " << cfg.status().to_string();
    EXPECT_EQ(cfg->architecture, a.name);
    EXPECT_EQ(cfg->max_position_embeddings, a.config.max_position_embeddings);
    EXPECT_EQ(cfg->qk_norm, a.config.qk_norm);
  }
}

TEST(Architectures, UnknownArchitectureListsTheSupportedOnes) {
  ModelConfig cfg;
  cfg.architecture = "NoSuchForCausalLM";
  std::unique_ptr<WeightSource> weights = make_dummy_weight_source(0);
  StatusOr<std::unique_ptr<CausalLM>> model = create_model(cfg, *weights, ModelLoadOptions{});
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), StatusCode::kInvalidArgument);
  for (const Architecture& a : architectures()) {
    EXPECT_NE(model.status().message().find(a.name), std::string::npos) << a.name;
  }
  EXPECT_EQ(find_architecture("NoSuchForCausalLM"), nullptr);
  ASSERT_NE(find_architecture("Qwen3ForCausalLM"), nullptr);
}

// One prefill of `n` tokens of one request into a fresh one-block cache.
struct OneStep {
  KVCacheTensors cache;
  ForwardBatch batch;
  Tensor logits;
  OneStep(const ModelConfig& c, int64_t n) {
    cache.num_blocks = 1;
    cache.block_size = n;
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
      cache.key.push_back(Tensor::zeros({1, n, c.num_key_value_heads, c.head_dim}, DType::kF32));
      cache.value.push_back(Tensor::zeros({1, n, c.num_key_value_heads, c.head_dim}, DType::kF32));
    }
    std::vector<int32_t> ids(n, 1);
    std::vector<int64_t> pos(n);
    for (int64_t i = 0; i < n; ++i) pos[i] = i;
    batch.input_ids = Tensor::from_i32(ids, {n});
    batch.positions = Tensor::from_i64(pos, {n});
    batch.attention.slot_mapping = Tensor::from_i64(pos, {n});
    batch.logits_indices = Tensor::from_i32({static_cast<int32_t>(n - 1)}, {1});
    batch.attention.query_start_loc = Tensor::from_i32({0, static_cast<int32_t>(n)}, {2});
    batch.attention.seq_lens = Tensor::from_i32({static_cast<int32_t>(n)}, {1});
    batch.attention.block_table = Tensor::from_i32({0}, {1, 1});
    batch.attention.num_reqs = 1;
    batch.attention.max_query_len = n;
    batch.attention.max_seq_len = n;
    logits = Tensor::empty({1, c.vocab_size}, DType::kF32);
  }
};

// A checkpoint held in memory: name -> tensor (what an HF directory would map).
class MapWeightSource final : public WeightSource {
 public:
  std::map<std::string, Tensor> tensors;
  StatusOr<Tensor> get(const std::string& name, const Shape& shape, DType dtype) override {
    auto it = tensors.find(name);
    if (it == tensors.end()) return not_found("no tensor " + name);
    if (it->second.shape() != shape) return invalid_argument(name + ": wrong shape");
    return it->second.to(dtype);
  }
  bool contains(const std::string& name) const override { return tensors.count(name) > 0; }
  std::vector<std::string> names() const override {
    std::vector<std::string> out;
    for (const auto& [name, t] : tensors) out.push_back(name);
    return out;
  }
};

// FusedMoE's two checkpoint layouts load the same experts: HF's per-expert tensors (Mixtral's w1 / w3 / w2 names
// here) stacked at load, and transformers 5's stacked tensors as they are; a missing expert is named.
TEST(FusedMoELayer, PerExpertAndStackedCheckpointsGiveTheSameBlock) {
  const int64_t E = 4, H = 16, I = 8, T = 5;
  FusedMoEOptions o;
  o.hidden_size = H;
  o.num_experts = E;
  o.top_k = 2;
  o.intermediate_size = I;
  o.renormalize = true;
  o.gate_proj_name = "w1";
  o.up_proj_name = "w3";
  o.down_proj_name = "w2";
  MapWeightSource per_expert, stacked;
  Tensor w13 = Tensor::empty({E, 2 * I, H}, DType::kF32), w2 = Tensor::empty({E, H, I}, DType::kF32);
  for (int64_t e = 0; e < E; ++e) {
    const std::string p = "moe.experts." + std::to_string(e) + ".";
    Tensor gate = random_input(I, H, 10 + e), up = random_input(I, H, 20 + e), down = random_input(H, I, 30 + e);
    per_expert.tensors[p + "w1.weight"] = gate;
    per_expert.tensors[p + "w3.weight"] = up;
    per_expert.tensors[p + "w2.weight"] = down;
    w13.select(0, e).slice(0, 0, I).copy_from(gate);
    w13.select(0, e).slice(0, I, 2 * I).copy_from(up);
    w2.select(0, e).copy_from(down);
  }
  Tensor router = random_input(E, H, 1);
  per_expert.tensors["moe.gate.weight"] = stacked.tensors["moe.gate.weight"] = router;
  stacked.tensors["moe.experts.gate_up_proj"] = w13;
  stacked.tensors["moe.experts.down_proj"] = w2;
  const Tensor x = random_input(T, H, 2);
  std::vector<Tensor> outs;
  for (MapWeightSource* source : {&per_expert, &stacked}) {
    FusedMoE moe(dense_context(), o);
    NamedParameters params;
    moe.named_parameters("moe", params);
    ASSERT_TRUE(load_parameters(params, *source, {}).ok());
    ArenaPlanner planner;
    const FusedMoE::Activations act = moe.plan_activations(T, DType::kF32, planner);
    const Arena arena = planner.allocate(Device::cpu());
    Tensor y = x.clone();
    moe.forward(arena, act, y);
    outs.push_back(y);
  }
  EXPECT_TRUE(same_bytes(outs[0], outs[1]));
  EXPECT_FALSE(same_bytes(outs[0], x));
  per_expert.tensors.erase("moe.experts.3.w3.weight");
  FusedMoE moe(dense_context(), o);
  NamedParameters params;
  moe.named_parameters("moe", params);
  const Status s = load_parameters(params, per_expert, {});
  EXPECT_NE(s.message().find("moe.experts.3.w3.weight"), std::string::npos) << s.to_string();
}

TEST(ActivationMemoryDeathTest, ForwardReadsThePlannedArenaOnly) {
  StatusOr<std::unique_ptr<CausalLM>> model = load_model("tests/fixtures/models/llama_gqa_f32", ModelLoadOptions{});
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  CausalLM& m = **model;
  OneStep three(m.config(), 3);
  EXPECT_DEATH(m.forward(three.batch, three.cache, three.logits), "before activation memory was bound");
  {
    const ActivationMemory two(m, {2, 1});
    EXPECT_GT(two.bytes(), 0u);
    EXPECT_DEATH(m.forward(three.batch, three.cache, three.logits), "planned for 2 rows \\(max_num_batched_tokens\\)");
    {
      const ActivationMemory four(m, {4, 1});  // nests: bound while it lives, then the previous one again
      m.forward(three.batch, three.cache, three.logits);
    }
    EXPECT_EQ(m.bound_activations() != nullptr, true);
    EXPECT_DEATH(m.forward(three.batch, three.cache, three.logits), "planned for 2 rows");
  }
  EXPECT_EQ(m.bound_activations(), nullptr);
}

}  // namespace
}  // namespace llmserve
