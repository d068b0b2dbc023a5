// DeepseekV3ForCausalLM's loading against edited copies of the deepseek_v3_f32 fixture checkpoint: a missing or
// misshapen MLA tensor is an error naming it; the MTP layer a real checkpoint carries past num_hidden_layers is
// skipped (the model's outputs do not change); its KV cache is one latent row per token and layer.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <functional>

#include "kernels/ops.h"
#include "model/model_registry.h"
#include "model/safetensors.h"
#include "model_test_util.h"

namespace llmserve {
namespace {

using testing::TempDir;

constexpr const char* kFixture = "tests/fixtures/models/deepseek_v3_f32";

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// The fixture's tensors, edited by `edit`, written with its config.json into `dir`.
void write_edited_copy(const TempDir& dir, const std::function<void(NamedTensors&)>& edit) {
  StatusOr<SafetensorsFile> file = SafetensorsFile::open(std::string(kFixture) + "/model.safetensors");
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  NamedTensors tensors;
  for (const std::string& name : file->names()) {
    StatusOr<Tensor> t = file->view(name);
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    tensors.emplace_back(name, *t);
  }
  edit(tensors);
  ASSERT_TRUE(write_safetensors(dir.file("model.safetensors"), tensors).ok());
  std::filesystem::copy_file(std::string(kFixture) + "/config.json", dir.file("config.json"));
}

Status load_status(const std::string& dir) { return load_model(dir, ModelLoadOptions{}).status(); }

TEST(DeepseekV3Checkpoint, MissingKvBProjIsNamed) {
  TempDir dir;
  write_edited_copy(dir, [](NamedTensors& t) {
    std::erase_if(t, [](const auto& p) { return p.first == "model.layers.1.self_attn.kv_b_proj.weight"; });
  });
  const Status s = load_status(dir.path());
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("model.layers.1.self_attn.kv_b_proj.weight"), std::string::npos) << s.to_string();
}

TEST(DeepseekV3Checkpoint, MisshapenKvAProjIsNamed) {
  TempDir dir;
  write_edited_copy(dir, [](NamedTensors& t) {
    for (auto& [name, tensor] : t) {
      // [L + R, hidden] = [80, 64] cut to [79, 64]: a wrong kv_lora_rank or rope dim in the checkpoint.
      if (name == "model.layers.0.self_attn.kv_a_proj_with_mqa.weight") tensor = tensor.slice(0, 0, 79).contiguous();
    }
  });
  const Status s = load_status(dir.path());
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("model.layers.0.self_attn.kv_a_proj_with_mqa.weight"), std::string::npos) << s.to_string();
}

// Greedy ids of one prompt through the model's own forward (one request, one block holding the whole sequence).
std::vector<int32_t> greedy_ids(CausalLM& model, std::vector<int32_t> seq, int steps) {
  const ModelConfig& c = model.config();
  const ActivationMemory activations(model, {static_cast<int64_t>(seq.size()) + steps, 1});
  std::vector<int32_t> out;
  for (int s = 0; s < steps; ++s) {
    const int64_t n = static_cast<int64_t>(seq.size());
    KVCacheTensors cache;
    cache.num_blocks = 1;
    cache.block_size = n;
    const KVCacheSpec spec = model.kv_cache_spec();
    for (int64_t l = 0; l < c.num_hidden_layers; ++l)
      cache.key.push_back(Tensor::zeros(spec.layer_shape(1, n), DType::kF32));
    ForwardBatch b;
    b.input_ids = Tensor::from_i32(seq, {n});
    std::vector<int64_t> pos(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) pos[i] = i;
    b.positions = Tensor::from_i64(pos, {n});
    b.attention.slot_mapping = Tensor::from_i64(pos, {n});
    b.logits_indices = Tensor::from_i32({static_cast<int32_t>(n - 1)}, {1});
    b.attention.query_start_loc = Tensor::from_i32({0, static_cast<int32_t>(n)}, {2});
    b.attention.seq_lens = Tensor::from_i32({static_cast<int32_t>(n)}, {1});
    b.attention.block_table = Tensor::from_i32({0}, {1, 1});
    b.attention.num_reqs = 1;
    Tensor logits = Tensor::empty({1, c.vocab_size}, DType::kF32);
    model.forward(b, cache, logits);
    Tensor next = Tensor::empty({1}, DType::kI32);
    ops::argmax(next, logits);
    out.push_back(next.data<int32_t>()[0]);
    seq.push_back(out.back());
  }
  return out;
}

TEST(DeepseekV3Checkpoint, MtpLayerPastNumHiddenLayersIsSkipped) {
  TempDir dir;
  write_edited_copy(dir, [](NamedTensors& t) {
    // DeepSeek-V3's MTP module: a whole decoder layer numbered num_hidden_layers (here 3, NaN-filled: reading it
    // would show) plus its own projections.
    NamedTensors extra;
    for (const auto& [name, tensor] : t) {
      const std::string prefix = "model.layers.2.";
      if (name.rfind(prefix, 0) != 0) continue;
      Tensor poisoned = Tensor::empty(tensor.shape(), tensor.dtype());
      poisoned.fill(NAN);
      extra.emplace_back("model.layers.3." + name.substr(prefix.size()), poisoned);
    }
    Tensor eh_proj = Tensor::empty({64, 128}, DType::kF32);
    eh_proj.fill(NAN);
    extra.emplace_back("model.layers.3.eh_proj.weight", eh_proj);
    t.insert(t.end(), extra.begin(), extra.end());
  });
  StatusOr<std::unique_ptr<CausalLM>> with_mtp = load_model(dir.path(), ModelLoadOptions{});
  ASSERT_TRUE(with_mtp.ok()) << with_mtp.status().to_string();
  StatusOr<std::unique_ptr<CausalLM>> plain = load_model(kFixture, ModelLoadOptions{});
  ASSERT_TRUE(plain.ok()) << plain.status().to_string();
  const std::vector<int32_t> prompt = {5, 17, 99, 3, 42};
  EXPECT_EQ(greedy_ids(**with_mtp, prompt, 6), greedy_ids(**plain, prompt, 6));
}

TEST(DeepseekV3Checkpoint, KvCacheIsOneLatentRowPerToken) {
  StatusOr<std::unique_ptr<CausalLM>> model = load_model(kFixture, ModelLoadOptions{});
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  const KVCacheSpec spec = (*model)->kv_cache_spec();
  EXPECT_EQ(spec.token_shape, Shape({64 + 16}));  // kv_lora_rank + qk_rope_head_dim
  EXPECT_FALSE(spec.has_value);
  EXPECT_EQ(spec.bytes_per_token(DType::kBF16), 160u);
  EXPECT_EQ(spec.layer_shape(7, 16), Shape({7, 16, 80}));
  // The split-K workspace is sized for H heads of an L-wide latent output.
  EXPECT_EQ((*model)->attention_workspace_elems(16, 2048), ops::paged_attention_workspace_elems(16, 4, 64, 2048));
}

}  // namespace
}  // namespace llmserve
