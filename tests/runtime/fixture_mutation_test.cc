// Proves the fixture oracle has teeth: a model with a deliberate small error must fail the comparison with
// transformers at the tolerances the passing tests use: positions off by one from the second KV block on (every
// fixture and path), a rotary base 1% off (every path with a tight tolerance).
// Invariant: the mutant runs the real model; only the one input or config value named is changed.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include "fixture_compare.h"
#include "test_models.h"

namespace llmserve::testing {
namespace {

// The real model with every position from `from` on one too large, as a bug at a KV block boundary would do (the
// K/V slots stay: only rotary sees it). A uniform shift would be no error at all: rotary attention sees only
// relative positions.
class OffByOneFrom : public CausalLM {
 public:
  OffByOneFrom(CausalLM& inner, int64_t from) : inner_(inner), from_(from) {}
  const ModelConfig& config() const override { return inner_.config(); }
  Device device() const override { return inner_.device(); }
  DType activation_dtype() const override { return inner_.activation_dtype(); }
  int64_t num_kv_heads_per_rank() const override { return inner_.num_kv_heads_per_rank(); }
  KVCacheSpec kv_cache_spec() const override { return inner_.kv_cache_spec(); }
  int64_t attention_workspace_elems(int64_t max_num_tokens, int64_t max_model_len) const override {
    return inner_.attention_workspace_elems(max_num_tokens, max_model_len);
  }
  void forward(const ForwardBatch& batch, KVCacheTensors& kv_cache, Tensor& logits) override {
    std::vector<int64_t> shifted(static_cast<size_t>(batch.positions.numel()));
    for (size_t i = 0; i < shifted.size(); ++i) {
      const int64_t p = batch.positions.data<int64_t>()[i];
      shifted[i] = p >= from_ ? p + 1 : p;
    }
    ForwardBatch mutated = batch;
    mutated.positions = Tensor::from_i64(shifted, batch.positions.shape());
    inner_.forward(mutated, kv_cache, logits);
  }
  void plan_activations(const ActivationLimits& limits, ArenaPlanner& planner) override {
    inner_.plan_activations(limits, planner);
  }
  void bind_activations(const Arena* arena) override { inner_.bind_activations(arena); }
  const Arena* bound_activations() const override { return inner_.bound_activations(); }

 private:
  CausalLM& inner_;
  int64_t from_;
};

// A copy of fixture `name` whose config.json `edit` changed (the weights are the same files); `tag` names the copy.
std::string copy_with_config(const std::string& name, const std::string& tag,
                             const std::function<void(nlohmann::json&)>& edit) {
  namespace fs = std::filesystem;
  const fs::path dir =
      fs::temp_directory_path() / ("llmserve_mutant_" + name + "_" + tag + "_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::copy(fixtures_dir() + "/" + name, dir, fs::copy_options::recursive);
  std::ifstream in(dir / "config.json");
  nlohmann::json config = nlohmann::json::parse(in);
  in.close();
  edit(config);
  std::ofstream(dir / "config.json") << config.dump(1);
  return dir.string();
}

// A copy of fixture `name` whose config.json has rope_theta scaled by `factor`.
std::string copy_with_rope_theta_scaled(const std::string& name, double factor) {
  return copy_with_config(name, "rope_theta", [&](nlohmann::json& config) {
    bool changed = false;
    for (nlohmann::json* holder :
         {&config, config.contains("rope_parameters") ? &config["rope_parameters"] : nullptr}) {
      if (holder != nullptr && holder->contains("rope_theta")) {
        (*holder)["rope_theta"] = (*holder)["rope_theta"].get<double>() * factor;
        changed = true;
      }
    }
    CHECK(changed) << name << ": no rope_theta in config.json";
  });
}

// The rotary-base mutant moves logprobs by ~1e-2 .. 4e-2: it must fail every path whose tolerance is tight (f32;
// bf16 widened once the fixtures have float32 rotary). Looser paths only print its distance, for the record.
constexpr float kRotaryMutantEnforcedBelow = 1e-2f;

std::vector<std::optional<DType>> paths_of(const std::string& name) {
  if (name.find("bf16") == std::string::npos) return {std::nullopt};
  return {std::nullopt, DType::kF32};  // bf16 GEMM, and widened to f32
}

TEST(FixtureMutations, OffByOnePositionFailsEveryFixture) {
  for (const std::string& name : fixture_model_names()) {
    for (std::optional<DType> dtype : paths_of(name)) {
      const Fixture f = load_fixture(name, dtype);
      OffByOneFrom mutant(*f.model, 16);
      const FixtureComparison c = compare_greedy(f, 0, &mutant);
      print_distance("mutant position+1 from 16 " + name + (dtype ? " (widened)" : ""), c, f.tolerance);
      EXPECT_FALSE(c.ok()) << name << ": an off-by-one position passed the oracle";
    }
  }
}

TEST(FixtureMutations, RotaryBaseOnePercentOffFailsEveryFixture) {
  for (const std::string& name : fixture_model_names()) {
    const std::string dir = copy_with_rope_theta_scaled(name, 1.01);
    for (std::optional<DType> dtype : paths_of(name)) {
      const Fixture f = load_fixture_dir(dir, name, dtype);
      const FixtureComparison c = compare_prompt_logprobs(f, 2048);
      print_distance("mutant rope_theta*1.01 " + name + (dtype ? " (widened)" : ""), c, f.tolerance);
      if (f.tolerance < kRotaryMutantEnforcedBelow) {
        EXPECT_FALSE(c.ok()) << name << ": a rotary base 1% off passed the oracle";
      }
    }
    std::filesystem::remove_all(dir);
  }
}

// DeepSeek-V3's own config values each change the f32 fixture's outputs past its tolerance: the rope layout
// (rope_interleave), the yarn softmax-scale factor (mscale_all_dim), the routed experts' scale
// (routed_scaling_factor 1% off) and the group limit (topk_group = n_group: no groups dropped).
TEST(FixtureMutations, DeepseekConfigValuesEachMatter) {
  const std::string name = "deepseek_v3_f32";
  const std::vector<std::pair<std::string, std::function<void(nlohmann::json&)>>> mutants = {
      {"rope_interleave", [](nlohmann::json& c) { c["rope_interleave"] = false; }},
      {"mscale_all_dim", [](nlohmann::json& c) { c["rope_parameters"]["mscale_all_dim"] = 0.0; }},
      {"routed_scaling_factor",
       [](nlohmann::json& c) { c["routed_scaling_factor"] = c["routed_scaling_factor"].get<double>() * 1.01; }},
      {"topk_group", [](nlohmann::json& c) { c["topk_group"] = c["n_group"]; }},
  };
  for (const auto& [tag, edit] : mutants) {
    const std::string dir = copy_with_config(name, tag, edit);
    const Fixture f = load_fixture_dir(dir, name, std::nullopt);
    const FixtureComparison c = compare_prompt_logprobs(f, 2048);
    print_distance("mutant " + tag + " " + name, c, f.tolerance);
    EXPECT_FALSE(c.ok()) << name << ": the mutant " << tag << " passed the oracle";
    std::filesystem::remove_all(dir);
  }
}

}  // namespace
}  // namespace llmserve::testing
