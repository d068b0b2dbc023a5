// Whole models on the GPU through the engine (LLMEngine -> ModelRunner on CUDA -> Sampler on the device):
//  - the committed HF fixtures match transformers by the CPU tests' rule (equal greedy ids, or at the first
//    divergence each side's token in the other's top-5, then stop) in f32 and in bf16 (every fixture, f32 ones
//    rounded to bf16 too). Logprobs: f32 within the CPU tests' 1e-3 (bf16 checkpoints in f32: kGpuBf16*). bf16
//    within 0.2, not the CPU's 0.1: the CPU's bf16 path rounds only the GEMM inputs, the GPU keeps every
//    activation and the residual stream in bf16 (as vLLM does); on the H100 (2026-11-22) that put
//    low-probability tokens (logprob ~ -3 to -7) up to 0.15 away from transformers' f32 while every id rule held;
//  - CPU and CUDA greedy outputs agree on every fixture (both f32, same rule, logprobs within 1e-3);
//  - the engine equivalences (batched vs one by one, chunked vs unchunked, preempted vs not, prefix-cache hit vs
//    miss) hold on the GPU;
//  - stories260K (a trained model) reproduces llama2.c's greedy ids on the GPU;
//  - --gpu-memory-utilization: the plan fits the budget, bad values are errors; steady-state steps never call
//    cudaMalloc.
// Skips when no CUDA device is present.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "../runtime/test_models.h"
#include "core/cuda_allocator.h"
#include "frontend/llm_engine.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/prefill_schedule.h"
#include "model/llama2c_import.h"
#include "runtime/gpu_memory.h"

namespace llmserve {
namespace {

using testing::random_prompts;

bool have_cuda_device() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

class ModelGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_cuda_device()) GTEST_SKIP() << "no CUDA device";
  }
};

std::unique_ptr<CausalLM> load(const std::string& dir, Device device, std::optional<DType> dtype) {
  ModelLoadOptions options;
  options.device = device;
  options.weight_dtype = dtype;
  StatusOr<std::unique_ptr<CausalLM>> m = load_model(dir, options);
  CHECK(m.ok()) << dir << ": " << m.status().to_string();
  return std::move(*m);
}

EngineArgs small_args() {
  EngineArgs a;
  a.max_model_len = 256;
  a.num_kv_cache_tokens = 4096;  // explicit: no memory profiling in the equivalence tests
  return a;
}

struct Generation {
  std::vector<int32_t> ids;
  std::vector<TokenLogprobs> logprobs;  // per id: [0] the sampled token, [1..] the top-k
};

// Runs every prompt to completion in one engine; results in prompt order.
std::vector<Generation> generate(CausalLM& model, const std::vector<std::vector<int32_t>>& prompts,
                                 const SamplingParams& params, const EngineArgs& args) {
  StatusOr<std::unique_ptr<LLMEngine>> engine = LLMEngine::create(model, nullptr, args);
  CHECK(engine.ok()) << engine.status().to_string();
  for (size_t i = 0; i < prompts.size(); ++i) {
    PromptInput p;
    p.token_ids = prompts[i];
    Status s = (*engine)->add_request("r" + std::to_string(i), p, params);
    CHECK(s.ok()) << s.to_string();
  }
  std::map<std::string, Generation> done;
  for (int guard = 0; (*engine)->has_unfinished() && guard < 100000; ++guard) {
    StatusOr<std::vector<RequestOutput>> outs = (*engine)->step();
    CHECK(outs.ok()) << outs.status().to_string();
    for (RequestOutput& o : *outs) {
      if (o.finished) done[o.request_id] = {o.outputs[0].token_ids, o.outputs[0].logprobs};
    }
  }
  EXPECT_EQ((*engine)->core().scheduler().kv_cache_manager().usage(), 0.0) << "blocks leaked";
  std::vector<Generation> out;
  for (size_t i = 0; i < prompts.size(); ++i) out.push_back(done["r" + std::to_string(i)]);
  return out;
}

SamplingParams greedy(int64_t max_tokens, std::optional<int32_t> logprobs = std::nullopt) {
  SamplingParams p;
  p.temperature = 0.0;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  p.logprobs = logprobs;
  return p;
}

bool contains(const std::vector<int32_t>& v, int32_t x) { return std::find(v.begin(), v.end(), x) != v.end(); }

// vLLM's rule between two greedy runs with their top-k (ids, logprobs) per step; logprobs of shared top-k tokens
// within `tolerance`. Returns the number of logprobs compared.
int compare_runs(const std::vector<int32_t>& a_ids, const std::vector<std::vector<int32_t>>& a_top,
                 const std::vector<std::vector<float>>& a_lps, const std::vector<int32_t>& b_ids,
                 const std::vector<std::vector<int32_t>>& b_top, const std::vector<std::vector<float>>& b_lps,
                 float tolerance, const std::string& what, float* max_distance = nullptr) {
  int compared = 0;
  EXPECT_EQ(a_ids.size(), b_ids.size()) << what;
  for (size_t s = 0; s < std::min(a_ids.size(), b_ids.size()); ++s) {
    for (size_t k = 0; k < b_top[s].size(); ++k) {
      for (size_t j = 0; j < a_top[s].size(); ++j) {
        if (a_top[s][j] == b_top[s][k]) {
          EXPECT_NEAR(a_lps[s][j], b_lps[s][k], tolerance) << what << " step " << s << " token " << b_top[s][k];
          if (max_distance) *max_distance = std::max(*max_distance, std::fabs(a_lps[s][j] - b_lps[s][k]));
          ++compared;
        }
      }
    }
    if (a_ids[s] != b_ids[s]) {
      EXPECT_TRUE(contains(b_top[s], a_ids[s]) && contains(a_top[s], b_ids[s]))
          << what << " step " << s << ": " << a_ids[s] << " vs " << b_ids[s];
      break;  // the continuations differ from here on
    }
  }
  return compared;
}

struct TopK {
  std::vector<std::vector<int32_t>> ids;
  std::vector<std::vector<float>> lps;
};

TopK top_of(const Generation& g) {
  TopK t;
  for (const TokenLogprobs& lp : g.logprobs) {
    t.ids.emplace_back(lp.token_ids.begin() + 1, lp.token_ids.end());
    t.lps.emplace_back(lp.logprobs.begin() + 1, lp.logprobs.end());
  }
  return t;
}

// Logprob tolerances against transformers (each test prints "[ distance ]" lines: set a tolerance to ~2x the
// largest distance its row shows). f32: as the CPU. bf16 checkpoints run in f32: 1e-3 once the fixtures carry
// float32 rotary frequencies (make_fixtures.py after issue 21), 3e-2 for older fixtures (their own rotary error
// reaches 2.8e-2). bf16 on the GPU: 0.2, see the header (to re-derive from the regenerated fixtures' distances).
// Mixture-of-experts models in bf16: 0.4 — their router scores bf16 hidden states, and a near-tied expert choice that
// flips moves a logprob further (largest distance 0.23, qwen2_moe_shared_f32 on an H200, 2026-11-26).
constexpr float kGpuF32Tolerance = 1e-3f, kGpuBf16WidenedTolerance = 1e-3f, kGpuBf16LegacyTolerance = 3e-2f,
                kGpuBf16Tolerance = 2e-1f, kGpuBf16MoeTolerance = 4e-1f;

void compare_fixture_on_gpu(const std::string& name, DType dtype) {
  const std::string dir = testing::fixtures_dir() + "/" + name;
  std::ifstream in(dir + "/expected.json");
  const nlohmann::json expected = nlohmann::json::parse(in);
  const bool bf16_fixture = expected["weights_dtype"] == "bfloat16";
  const bool exact_rotary = expected.value("rotary_inv_freq", "") == "float32";
  StatusOr<ModelConfig> config = load_model_config(dir);
  ASSERT_TRUE(config.ok()) << name;
  const float base_tolerance = dtype == DType::kBF16 ? (config->moe ? kGpuBf16MoeTolerance : kGpuBf16Tolerance)
                               : bf16_fixture ? (exact_rotary ? kGpuBf16WidenedTolerance : kGpuBf16LegacyTolerance)
                                              : kGpuF32Tolerance;
  // make_fixtures.py records how far transformers' own bf16 run strays from its f32 reference (bf16_reference): our
  // bf16 run is held to twice that where it exceeds the tolerance above (the oracle cannot be matched more closely in
  // bf16 than it matches itself: deepseek_v3_f32, 0.28, whose latent projections and group-limited routing amplify
  // the rounding of bf16 hidden states), and a fixture whose own bf16 run breaks vLLM's rule is not compared.
  float tolerance = base_tolerance;
  if (dtype == DType::kBF16 && expected.contains("bf16_reference")) {
    const nlohmann::json& self = expected["bf16_reference"];
    if (!self["rule_ok"].get<bool>()) {
      std::cout << "[ distance ] gpu " << name << " as bf16: not compared: transformers' own bf16 run breaks vLLM's "
                << "rule against its f32 reference" << std::endl;
      return;
    }
    tolerance = std::max(tolerance, 2 * self["max_distance"].get<float>());
  }
  SCOPED_TRACE(name + " on cuda as " + std::string(dtype_name(dtype)));
  const int num_steps = expected["num_steps"], top_k = expected["top_k"];
  std::vector<std::vector<int32_t>> prompts;
  for (const auto& c : expected["cases"]) prompts.push_back(c["prompt"].get<std::vector<int32_t>>());
  std::unique_ptr<CausalLM> model = load(dir, Device::cuda(), dtype);
  const auto gens = generate(*model, prompts, greedy(num_steps, top_k), small_args());
  int compared = 0;
  float max_distance = 0;
  for (size_t p = 0; p < prompts.size(); ++p) {
    TopK theirs;
    std::vector<int32_t> their_ids;
    for (const auto& st : expected["cases"][p]["steps"]) {
      their_ids.push_back(st["id"]);
      theirs.ids.push_back(st["top_ids"].get<std::vector<int32_t>>());
      theirs.lps.push_back(st["top_logprobs"].get<std::vector<float>>());
    }
    const TopK ours = top_of(gens[p]);
    compared += compare_runs(gens[p].ids, ours.ids, ours.lps, their_ids, theirs.ids, theirs.lps, tolerance,
                             "prompt " + std::to_string(p), &max_distance);
  }
  EXPECT_GT(compared, 0);
  std::cout << "[ distance ] gpu " << name << " as " << dtype_name(dtype) << ": max |dlogprob| " << max_distance
            << " over " << compared << " logprobs (tolerance " << tolerance << ")" << std::endl;
}

TEST_F(ModelGpuTest, HfFixturesMatchTransformersInF32) {
  for (const std::string& name : testing::fixture_model_names()) compare_fixture_on_gpu(name, DType::kF32);
}

TEST_F(ModelGpuTest, HfFixturesMatchTransformersInBf16) {
  for (const std::string& name : testing::fixture_model_names()) compare_fixture_on_gpu(name, DType::kBF16);
}

TEST_F(ModelGpuTest, CpuAndCudaGreedyOutputsAgree) {
  for (const std::string& name : testing::fixture_model_names()) {
    SCOPED_TRACE(name);
    const std::string dir = testing::fixtures_dir() + "/" + name;
    std::ifstream in(dir + "/expected.json");
    const nlohmann::json expected = nlohmann::json::parse(in);
    std::vector<std::vector<int32_t>> prompts;
    for (const auto& c : expected["cases"]) prompts.push_back(c["prompt"].get<std::vector<int32_t>>());
    std::unique_ptr<CausalLM> cpu = load(dir, Device::cpu(), DType::kF32);
    std::unique_ptr<CausalLM> gpu = load(dir, Device::cuda(), DType::kF32);
    const SamplingParams params = greedy(16, 5);
    const auto a = generate(*cpu, prompts, params, small_args());
    const auto b = generate(*gpu, prompts, params, small_args());
    for (size_t p = 0; p < prompts.size(); ++p) {
      const TopK ta = top_of(a[p]), tb = top_of(b[p]);
      compare_runs(b[p].ids, tb.ids, tb.lps, a[p].ids, ta.ids, ta.lps, 1e-3f, "prompt " + std::to_string(p));
    }
  }
}

std::vector<std::vector<int32_t>> ids_of(const std::vector<Generation>& gens) {
  std::vector<std::vector<int32_t>> out;
  for (const Generation& g : gens) out.push_back(g.ids);
  return out;
}

// The engine equivalences run in f32 on the GPU on llama_gqa_f32 and on deepseek_v3_f32 (multi-head latent attention
// over the latent cache: its kernels under CUDA graphs, split-K and async scheduling); the reference is each prompt
// run alone.
class GpuEngineEquivalence : public ModelGpuTest, public ::testing::WithParamInterface<std::string> {
 protected:
  void SetUp() override {
    ModelGpuTest::SetUp();
    if (IsSkipped()) return;
    model_ = load(testing::fixtures_dir() + "/" + GetParam(), Device::cuda(), DType::kF32);
  }
  std::vector<std::vector<int32_t>> one_by_one(const std::vector<std::vector<int32_t>>& prompts, int64_t n) {
    std::vector<std::vector<int32_t>> out;
    for (const auto& p : prompts) out.push_back(generate(*model_, {p}, greedy(n), small_args())[0].ids);
    return out;
  }
  std::unique_ptr<CausalLM> model_;
};

INSTANTIATE_TEST_SUITE_P(Models, GpuEngineEquivalence, ::testing::Values("llama_gqa_f32", "deepseek_v3_f32"),
                         [](const auto& info) { return info.param; });

TEST_P(GpuEngineEquivalence, BatchedEqualsOneByOne) {
  const auto prompts = random_prompts(6, 1, 40, model_->config().vocab_size, 1);
  EXPECT_EQ(ids_of(generate(*model_, prompts, greedy(12), small_args())), one_by_one(prompts, 12));
}

TEST_P(GpuEngineEquivalence, ChunkedPrefillEqualsUnchunked) {
  const auto prompts = random_prompts(4, 20, 90, model_->config().vocab_size, 2);
  const auto ref = one_by_one(prompts, 8);
  for (int64_t chunk : {1, 7, 64}) {
    EngineArgs args = small_args();
    args.max_num_batched_tokens = chunk;
    EXPECT_EQ(ids_of(generate(*model_, prompts, greedy(8), args)), ref) << "chunk " << chunk;
  }
}

TEST_P(GpuEngineEquivalence, PreemptedAndRecomputedEqualsNeverPreempted) {
  const auto prompts = random_prompts(5, 20, 30, model_->config().vocab_size, 3);
  const auto ref = one_by_one(prompts, 24);
  EngineArgs args;
  args.block_size = 4;
  args.max_model_len = 64;
  args.num_kv_cache_tokens = 80;  // 20 blocks: five requests of up to 54 tokens cannot all stay
  for (bool caching : {false, true}) {
    args.enable_prefix_caching = caching;
    EXPECT_EQ(ids_of(generate(*model_, prompts, greedy(24), args)), ref) << "caching " << caching;
  }
}

// Async scheduling (two steps in flight, sampled ids scattered on the device, copied back on a side stream) gives
// the synchronous engine's ids and logprobs: greedy with logprobs, seeded sampling with penalties (they read the
// ids the placeholders stand for), stop ids (seen one step late) and a preemption storm.
TEST_P(GpuEngineEquivalence, AsyncSchedulingEqualsSync) {
  const int64_t vocab = model_->config().vocab_size;
  const auto prompts = random_prompts(6, 3, 40, vocab, 11);
  auto both = [&](const SamplingParams& params, EngineArgs args, const std::string& what) -> std::vector<Generation> {
    args.async_scheduling = false;
    const auto sync = generate(*model_, prompts, params, args);
    args.async_scheduling = true;
    const auto async = generate(*model_, prompts, params, args);
    for (size_t i = 0; i < prompts.size(); ++i) {
      EXPECT_EQ(async[i].ids, sync[i].ids) << what << " prompt " << i;
      EXPECT_EQ(async[i].logprobs.size(), sync[i].logprobs.size()) << what << " prompt " << i;
      if (async[i].logprobs.size() != sync[i].logprobs.size()) continue;
      for (size_t k = 0; k < sync[i].logprobs.size(); ++k) {
        EXPECT_EQ(async[i].logprobs[k].token_ids, sync[i].logprobs[k].token_ids) << what << " prompt " << i;
      }
    }
    return sync;
  };
  const auto greedy_runs = both(greedy(16, 3), small_args(), "greedy");
  SamplingParams seeded = greedy(16);
  seeded.temperature = 0.8;
  seeded.top_k = 50;
  seeded.seed = 5;
  seeded.repetition_penalty = 1.3;
  seeded.frequency_penalty = 0.4;
  both(seeded, small_args(), "seeded with penalties");
  SamplingParams stop = greedy(16);
  for (const Generation& g : greedy_runs) stop.stop_token_ids.push_back(g.ids[4]);
  both(stop, small_args(), "stop ids");
  EngineArgs tiny;
  tiny.block_size = 4;
  tiny.max_model_len = 64;
  tiny.num_kv_cache_tokens = 80;  // preemptions
  both(greedy(20), tiny, "preemption storm");
}

TEST_P(GpuEngineEquivalence, PrefixCacheHitEqualsMiss) {
  const int64_t vocab = model_->config().vocab_size;
  const auto base = random_prompts(1, 50, 50, vocab, 4)[0];
  std::vector<std::vector<int32_t>> prompts;
  for (const auto& tail : random_prompts(3, 1, 9, vocab, 5)) {
    prompts.push_back(base);
    prompts.back().insert(prompts.back().end(), tail.begin(), tail.end());
  }
  const auto ref = one_by_one(prompts, 10);
  EngineArgs args = small_args();
  args.enable_prefix_caching = true;
  StatusOr<std::unique_ptr<LLMEngine>> engine = LLMEngine::create(*model_, nullptr, args);
  ASSERT_TRUE(engine.ok());
  auto run = [&](const std::string& id, const std::vector<int32_t>& prompt) {
    PromptInput p;
    p.token_ids = prompt;
    EXPECT_TRUE((*engine)->add_request(id, p, greedy(10)).ok());
    std::vector<int32_t> ids;
    while ((*engine)->has_unfinished()) {
      StatusOr<std::vector<RequestOutput>> outs = (*engine)->step();  // kept alive: the loop reads into it
      EXPECT_TRUE(outs.ok());
      if (!outs.ok()) break;
      for (const RequestOutput& o : *outs) {
        if (o.finished) ids = o.outputs[0].token_ids;
      }
    }
    return ids;
  };
  run("warm", base);
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(run("p" + std::to_string(i), prompts[i]), ref[i]) << i;
  EXPECT_GE((*engine)->totals().prefix_cache_hits, 3 * 48) << "three prompts share 3 full blocks with the warm-up";
}

TEST_F(ModelGpuTest, Stories260KGreedyIdsMatchLlama2c) {
  const std::string src = testing::testdata_dir() + "/models/stories260K";
  const std::filesystem::path out =
      std::filesystem::temp_directory_path() / ("llmserve_gpu_stories_" + std::to_string(::getpid()));
  ASSERT_TRUE(import_llama2c({src + "/stories260K.bin", src + "/tok512.bin", out.string()}).ok());
  std::ifstream in(src + "/expected_greedy_ids_first60.json");
  const nlohmann::json expected = nlohmann::json::parse(in);
  const auto want = expected["ids"].get<std::vector<int32_t>>();
  std::unique_ptr<CausalLM> model = load(out.string(), Device::cuda(), DType::kF32);
  const auto got = generate(*model, {{expected["start_token"].get<int32_t>()}},
                            greedy(static_cast<int64_t>(want.size())), small_args());
  EXPECT_EQ(got[0].ids, want);
  std::filesystem::remove_all(out);
}

// A dummy-weight bf16 model of the given config.json, written to a fresh directory; for the kernels no fixture reaches
// (the fixtures' head sizes are 16 and 32, their MLA latent 64 wide).
class DummyModel {
 public:
  DummyModel(const std::string& name, const std::string& config_json)
      : dir_(std::filesystem::temp_directory_path() / (name + "_" + std::to_string(::getpid()))) {
    std::filesystem::create_directories(dir_);
    std::ofstream(dir_ / "config.json") << config_json;
  }
  ~DummyModel() { std::filesystem::remove_all(dir_); }

  std::unique_ptr<CausalLM> load(Device device) const {
    ModelLoadOptions options;
    options.device = device;
    options.weight_dtype = DType::kBF16;
    options.load_format = LoadFormat::kDummy;
    StatusOr<std::unique_ptr<CausalLM>> m = load_model(dir_.string(), options);
    CHECK(m.ok()) << m.status().to_string();
    return std::move(*m);
  }

 private:
  std::filesystem::path dir_;
};

// A Llama (2 layers, hidden 512, head_dim 128) with the given heads.
DummyModel dummy_llama(const std::string& name, int num_heads, int num_kv_heads) {
  return DummyModel(name, R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 512,
      "intermediate_size": 1024, "num_attention_heads": )" +
                              std::to_string(num_heads) + R"(, "num_key_value_heads": )" +
                              std::to_string(num_kv_heads) + R"(, "head_dim": 128,
      "num_hidden_layers": 2, "vocab_size": 1024, "max_position_embeddings": 4096, "rms_norm_eps": 1e-5,
      "rope_theta": 10000.0, "torch_dtype": "bfloat16"})");
}

// A DeepSeek-V3 with V3's attention dims (latent 512, rotary 64, q LoRA rank 384 here) and the given heads, 2 dense
// layers (the MLP is not what its tests are about), hidden 1024.
DummyModel dummy_deepseek(const std::string& name, int num_heads) {
  return DummyModel(name, R"({"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
      "hidden_size": 1024, "intermediate_size": 1024, "num_attention_heads": )" +
                              std::to_string(num_heads) + R"(, "num_key_value_heads": )" + std::to_string(num_heads) +
                              R"(, "num_hidden_layers": 2,
      "first_k_dense_replace": 2, "n_routed_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 256,
      "n_shared_experts": 1, "n_group": 1, "topk_group": 1, "norm_topk_prob": true, "routed_scaling_factor": 2.5,
      "scoring_func": "sigmoid", "topk_method": "noaux_tc", "q_lora_rank": 384, "kv_lora_rank": 512,
      "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "vocab_size": 1024,
      "max_position_embeddings": 4096, "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "hidden_act": "silu",
      "tie_word_embeddings": false, "torch_dtype": "bfloat16"})");
}

// Greedy runs of `prompts` on the CPU and the GPU (the CUDA defaults: graphs, async scheduling) compared by vLLM's
// rule; returns the number of positions compared.
int compare_cpu_gpu(const DummyModel& model, const std::vector<std::vector<int32_t>>& prompts,
                    const SamplingParams& params, const EngineArgs& args) {
  std::unique_ptr<CausalLM> cpu = model.load(Device::cpu()), gpu = model.load(Device::cuda());
  const auto want = generate(*cpu, prompts, params, args);
  const auto got = generate(*gpu, prompts, params, args);
  int compared = 0;
  for (size_t p = 0; p < prompts.size(); ++p) {
    const TopK tw = top_of(want[p]), tg = top_of(got[p]);
    compared += compare_runs(got[p].ids, tg.ids, tg.lps, want[p].ids, tw.ids, tw.lps, kGpuBf16Tolerance,
                             "prompt " + std::to_string(p) + " (" + std::to_string(prompts[p].size()) + " tokens)");
  }
  return compared;
}

// Four random prompts of up to max_len tokens, the first cut to first_len, and a fifth that extends the first to
// hit_len (a prefix-cache hit on the first's full blocks), prefilled in 256-token steps beside other requests' decodes.
struct ChunkedWorkload {
  std::vector<std::vector<int32_t>> prompts;
  EngineArgs args;
};
ChunkedWorkload chunked_with_prefix_hit(int max_len, size_t first_len, size_t hit_len, uint32_t seed) {
  ChunkedWorkload w;
  w.prompts = testing::random_prompts(4, 5, max_len, 1024, seed);
  w.prompts[0].resize(first_len, 7);
  w.prompts.push_back(w.prompts[0]);
  w.prompts.back().resize(hit_len, 9);
  w.args.max_model_len = 1024;
  w.args.num_kv_cache_tokens = 8192;
  w.args.max_num_batched_tokens = 256;
  return w;
}

// FlashInfer's SM90 prefill through the runner's per-step work lists: prompts over several query tiles (the first at
// least five of 128), chunked, and the prefix-cache hit (its first 592 tokens, 37 blocks, cached).
TEST_F(ModelGpuTest, Sm90PrefillThroughTheRunnerMatchesTheCpu) {
  if (ops::sm90_prefill_ctas(Device::cuda()) == 0) GTEST_SKIP() << "not an SM90 device (or LLMSERVE_SM90_PREFILL=0)";
  const DummyModel model = dummy_llama("llmserve_gpu_sm90", 4, 2);
  const ChunkedWorkload w = chunked_with_prefix_hit(700, 600, 650, 77);
  EXPECT_GT(compare_cpu_gpu(model, w.prompts, greedy(8, 5), w.args), 8 * static_cast<int>(w.prompts.size()));
}

// FlashInfer's SM90 MLA kernel through the runner's per-step work lists, at 16 heads (one CTA per tile) and 128
// (DeepSeek-V3's: two): prompts chunked next to other requests' decodes, a prefix-cache hit (784 tokens, 49 blocks),
// then decode steps replaying FULL graphs whose plans split the long contexts' keys differently each step. Against
// the CPU by vLLM's rule (graphs + async, the CUDA defaults), then eagerly (the kernel's call counter must grow by at
// least the decode steps' calls) and synchronously: both runs' ids equal the graphs', sync's top-k ids too.
TEST_F(ModelGpuTest, Sm90MlaThroughTheRunnerMatchesTheCpu) {
  if (ops::sm90_mla_ctas(Device::cuda()) == 0) GTEST_SKIP() << "not an SM90 device (or LLMSERVE_SM90_MLA=0)";
  for (const int heads : {16, 128}) {
    SCOPED_TRACE(std::to_string(heads) + " heads");
    const DummyModel model = dummy_deepseek("llmserve_gpu_sm90_mla", heads);
    const auto [prompts, args] = chunked_with_prefix_hit(900, 800, 850, 79);
    const SamplingParams params = greedy(8, 5);
    const int64_t calls = cuda::mla_sm90_calls();
    EXPECT_GT(compare_cpu_gpu(model, prompts, params, args), 8 * static_cast<int>(prompts.size()));
    EXPECT_GT(cuda::mla_sm90_calls(), calls) << "the runner planned no step for the SM90 kernel";

    std::unique_ptr<CausalLM> gpu = model.load(Device::cuda());
    const auto graphs = generate(*gpu, prompts, params, args);
    EngineArgs eager_args = args;
    eager_args.cuda_graph_mode = CudaGraphMode::kNone;
    const int64_t before = cuda::mla_sm90_calls();
    const auto eager = generate(*gpu, prompts, params, eager_args);
    // Eager steps: two layers per step; at least the decode steps and one per prompt chunk.
    EXPECT_GE(cuda::mla_sm90_calls() - before, 2 * 8) << "eager steps ran another MLA kernel";
    // Synchronous scheduling runs the same graphs and plans one step later: the same ids and top-k.
    EngineArgs sync_args = args;
    sync_args.async_scheduling = false;
    const auto sync = generate(*gpu, prompts, params, sync_args);
    for (size_t i = 0; i < prompts.size(); ++i) {
      EXPECT_EQ(eager[i].ids, graphs[i].ids) << "prompt " << i << ": eager vs graphs";
      EXPECT_EQ(sync[i].ids, graphs[i].ids) << "prompt " << i << ": sync vs async";
      ASSERT_EQ(sync[i].logprobs.size(), graphs[i].logprobs.size()) << "prompt " << i;
      for (size_t t = 0; t < graphs[i].logprobs.size(); ++t) {
        EXPECT_EQ(sync[i].logprobs[t].token_ids, graphs[i].logprobs[t].token_ids) << "prompt " << i << " step " << t;
      }
    }
  }
}

// The tensor-core decode through the runner: 300 requests x 4 kv heads of a GQA-4 model decode together (over 2
// CTAs per SM: no split-K), in a FULL graph of capture size 304 (4 padding rows), against the CPU; then the same
// batch eagerly (the kernel on 300 rows) and synchronously: the sampled ids of all three GPU runs are equal; sync vs
// async also the top-k ids, and the logprobs within 1e-3 (same graphs, same kernels); eager vs graphs the logprobs
// within the graph tests' bf16 tolerance (the padded GEMM shapes sum in another order).
TEST_F(ModelGpuTest, TensorCoreDecodeThroughTheRunnerMatchesTheCpu) {
  const DummyModel model = dummy_llama("llmserve_gpu_mma_decode", 16, 4);
  std::vector<std::vector<int32_t>> prompts = testing::random_prompts(300, 3, 90, 1024, 78);
  EngineArgs args;
  args.max_model_len = 256;
  args.num_kv_cache_tokens = 65536;
  args.max_num_seqs = 320;
  args.max_num_batched_tokens = 16384;
  const SamplingParams params = greedy(6, 5);
  EXPECT_GT(compare_cpu_gpu(model, prompts, params, args), 3 * static_cast<int>(prompts.size()));

  std::unique_ptr<CausalLM> gpu = model.load(Device::cuda());
  const auto defaults = generate(*gpu, prompts, params, args);
  EngineArgs eager_args = args, sync_args = args;
  eager_args.cuda_graph_mode = CudaGraphMode::kNone;
  sync_args.async_scheduling = false;
  const auto eager = generate(*gpu, prompts, params, eager_args);
  const auto sync = generate(*gpu, prompts, params, sync_args);
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::string what = "prompt " + std::to_string(i);
    ASSERT_EQ(eager[i].ids, defaults[i].ids) << what << ": eager vs graphs";
    ASSERT_EQ(sync[i].ids, defaults[i].ids) << what << ": sync vs async";
    ASSERT_EQ(eager[i].logprobs.size(), defaults[i].logprobs.size()) << what;
    ASSERT_EQ(sync[i].logprobs.size(), defaults[i].logprobs.size()) << what;
    for (size_t t = 0; t < defaults[i].logprobs.size(); ++t) {
      const TokenLogprobs& want = defaults[i].logprobs[t];
      const std::string at = what + " step " + std::to_string(t);
      ASSERT_EQ(sync[i].logprobs[t].token_ids, want.token_ids) << at << ": sync vs async";
      ASSERT_EQ(eager[i].logprobs[t].logprobs.size(), want.logprobs.size()) << at << ": eager vs graphs";
      for (size_t k = 0; k < want.logprobs.size(); ++k) {
        EXPECT_NEAR(sync[i].logprobs[t].logprobs[k], want.logprobs[k], 1e-3) << at << ": sync vs async";
        EXPECT_NEAR(eager[i].logprobs[t].logprobs[k], want.logprobs[k], 0.05) << at << ": eager vs graphs";
      }
    }
  }
}

TEST_F(ModelGpuTest, MemoryPlanFitsTheBudgetAndStepsDoNotCudaMalloc) {
  std::unique_ptr<CausalLM> model = load(testing::fixtures_dir() + "/llama_gqa_f32", Device::cuda(), DType::kBF16);
  EngineArgs args;
  args.max_model_len = 256;
  args.gpu_memory_utilization = 0.3;
  StatusOr<std::unique_ptr<LLMEngine>> engine = LLMEngine::create(*model, nullptr, args);
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  size_t free_bytes = 0, total_bytes = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_bytes, &total_bytes), cudaSuccess);
  EXPECT_GT((*engine)->num_kv_blocks(), 1000) << (*engine)->kv_cache_summary();
  // The budget is this process's (vLLM's per-instance meaning): what it took since its first allocation. The CUDA
  // context, made before that, is outside it (as in vLLM, whose baseline snapshot follows device initialisation).
  const size_t taken = cuda::free_bytes_before_first_allocation(0) - free_bytes;
  EXPECT_LE(taken, static_cast<size_t>(0.3 * total_bytes) + (64u << 20))
      << "device memory taken after allocating the KV cache: " << (*engine)->kv_cache_summary();
  EXPECT_GE(taken, static_cast<size_t>(0.25 * total_bytes)) << (*engine)->kv_cache_summary();
  EXPECT_NE((*engine)->kv_cache_summary().find("maximal concurrency"), std::string::npos);

  // Steady state: after the first steps, decode steps are served from the caching allocator.
  const auto prompts = random_prompts(8, 5, 30, model->config().vocab_size, 9);
  for (size_t i = 0; i < prompts.size(); ++i) {
    PromptInput p;
    p.token_ids = prompts[i];
    ASSERT_TRUE((*engine)->add_request("m" + std::to_string(i), p, greedy(40)).ok());
  }
  for (int s = 0; s < 5; ++s) ASSERT_TRUE((*engine)->step().ok());
  const size_t mallocs = cuda::allocator_stats().num_mallocs;
  for (int s = 0; s < 20; ++s) ASSERT_TRUE((*engine)->step().ok());
  EXPECT_EQ(cuda::allocator_stats().num_mallocs, mallocs) << "decode steps called cudaMalloc";

  for (double bad : {0.0, -0.5, 1.5, 1e-6}) {
    EngineArgs b = args;
    b.gpu_memory_utilization = bad;
    StatusOr<std::unique_ptr<LLMEngine>> e = LLMEngine::create(*model, nullptr, b);
    ASSERT_FALSE(e.ok()) << bad;
    EXPECT_NE(e.status().message().find("--gpu-memory-utilization"), std::string::npos) << e.status().message();
  }
}

TEST_F(ModelGpuTest, MemoryPlanProfilesRequestsThatFitMaxModelLen) {
  // 2 sequences sharing a 2048-token budget would each be 1024 tokens, past max_model_len 128: the profile spreads
  // the budget over more requests instead (the server with --max-num-seqs 4 crashed here, 2026-11-26).
  std::unique_ptr<CausalLM> model = load(testing::fixtures_dir() + "/llama_gqa_f32", Device::cuda(), DType::kBF16);
  EngineArgs args;
  args.max_model_len = 128;
  args.max_num_seqs = 2;
  args.max_num_batched_tokens = 2048;
  args.gpu_memory_utilization = 0.3;
  StatusOr<std::unique_ptr<LLMEngine>> engine = LLMEngine::create(*model, nullptr, args);
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  const auto prompts = random_prompts(3, 5, 100, model->config().vocab_size, 4);
  for (size_t i = 0; i < prompts.size(); ++i) {
    PromptInput p;
    p.token_ids = prompts[i];
    ASSERT_TRUE((*engine)->add_request("f" + std::to_string(i), p, greedy(20)).ok());
  }
  for (int s = 0; s < 200 && (*engine)->has_unfinished(); ++s) ASSERT_TRUE((*engine)->step().ok());
  EXPECT_FALSE((*engine)->has_unfinished());
}

#include "cuda_graph_gpu_test.inc"  // NOLINT: shares this file's helpers

}  // namespace
}  // namespace llmserve
