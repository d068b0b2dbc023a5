// Proves the fixture oracle has teeth: a model with a deliberate small error must fail the comparison with
// transformers at the tolerances the passing tests use: positions off by one from the second KV block on (every
// fixture and path), a rotary base 1% off (every path with a tight tolerance).
// Invariant: the mutant runs the real model; only the one input or config value named is changed.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

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

// A copy of fixture `name` whose config.json has rope_theta scaled by `factor` (the weights are the same files).
std::string copy_with_rope_theta_scaled(const std::string& name, double factor) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("llmserve_mutant_" + name + "_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::copy(fixtures_dir() + "/" + name, dir, fs::copy_options::recursive);
  std::ifstream in(dir / "config.json");
  nlohmann::json config = nlohmann::json::parse(in);
  in.close();
  bool changed = false;
  for (nlohmann::json* holder : {&config, config.contains("rope_parameters") ? &config["rope_parameters"] : nullptr}) {
    if (holder != nullptr && holder->contains("rope_theta")) {
      (*holder)["rope_theta"] = (*holder)["rope_theta"].get<double>() * factor;
      changed = true;
    }
  }
  CHECK(changed) << name << ": no rope_theta in config.json";
  std::ofstream(dir / "config.json") << config.dump(1);
  return dir.string();
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

}  // namespace
}  // namespace llmserve::testing
