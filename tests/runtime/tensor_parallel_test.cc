// Tensor parallelism on the in-process CPU communicator: TP = 2 and 4 against transformers by the fixture rule (the
// same tolerance TP = 1 meets) on every fixture whose heads allow it (4 heads, 2 or 1 kv heads: TP = 4 and the MQA
// fixture replicate kv heads), and against TP = 1 through the engine (ids by vLLM's rule, logprobs within the
// tolerance); engine equivalences under TP = 2 (batched vs one by one, chunked prefill, prefix cache, the plain
// reference); vLLM's divisibility errors; each rank loading only its slices.
#include "model/tensor_parallel.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <map>
#include <thread>

#include "fixture_compare.h"
#include "runtime/cpu_communicator.h"
#include "runtime/tensor_parallel_model.h"
#include "test_models.h"

namespace llmserve {
namespace {

using testing::fixtures_dir;

std::unique_ptr<CausalLM> load_tp(const std::string& name, int64_t tp, std::optional<DType> dtype = std::nullopt) {
  ModelLoadOptions options;
  options.weight_dtype = dtype;
  ParallelConfig parallel;
  parallel.tensor_parallel_size = tp;
  StatusOr<std::unique_ptr<CausalLM>> m = load_tensor_parallel_model(fixtures_dir() + "/" + name, options, parallel);
  CHECK(m.ok()) << name << " tp " << tp << ": " << m.status().to_string();
  return std::move(m).value();
}

bool heads_allow(const std::string& name, int64_t tp) {
  StatusOr<ModelConfig> c = load_model_config(fixtures_dir() + "/" + name);
  CHECK(c.ok());
  return check_tensor_parallel_size(*c, tp).ok();
}

TEST(TensorParallel, EveryFixtureAllowsTwoAndFourRanks) {
  // The fixtures were generated with 4 heads and 2 (or 1) kv heads so that both sizes apply to each of them; the
  // mixture-of-experts ones are refused by name (their experts are not sharded), multi-head latent attention too.
  for (const std::string& name : testing::fixture_model_names()) {
    StatusOr<ModelConfig> c = load_model_config(fixtures_dir() + "/" + name);
    ASSERT_TRUE(c.ok()) << name;
    for (int64_t tp : {2, 4}) {
      const Status s = check_tensor_parallel_size(*c, tp);
      if (c->mla) {
        EXPECT_NE(s.message().find("multi-head latent attention is not sharded"), std::string::npos)
            << name << ": " << s.message();
      } else if (c->moe) {
        EXPECT_NE(s.message().find("mixture-of-experts model"), std::string::npos) << name << ": " << s.message();
      } else {
        EXPECT_TRUE(s.ok()) << name << ": " << s.message();
      }
    }
  }
}

TEST(TensorParallel, GreedyIdsAndLogprobsMatchTransformers) {
  for (const std::string& name : testing::fixture_model_names()) {
    const testing::Fixture f = testing::load_fixture(name, std::nullopt);
    for (int64_t tp : {2, 4}) {
      if (!heads_allow(name, tp)) continue;
      std::unique_ptr<CausalLM> model = load_tp(name, tp);
      const std::string label = name + " tp " + std::to_string(tp);
      for (int64_t chunk : {0, 7}) {
        const testing::FixtureComparison c = testing::compare_greedy(f, chunk, model.get());
        testing::print_distance("greedy " + label + " chunk " + std::to_string(chunk), c, f.tolerance);
        EXPECT_TRUE(c.ok()) << label << " chunk " << chunk << ": " << c.summary();
      }
    }
  }
}

TEST(TensorParallel, Bf16WidenedAndPromptLogprobsMatchTransformers) {
  for (const char* name : {"llama_gqa_bf16", "qwen3_qknorm_bf16", "llama_tied_mqa_f32", "qwen2_bias_f32"}) {
    const std::optional<DType> dtype =
        std::string(name).find("bf16") != std::string::npos ? std::optional<DType>(DType::kF32) : std::nullopt;
    const testing::Fixture f = testing::load_fixture(name, dtype);
    for (int64_t tp : {2, 4}) {
      std::unique_ptr<CausalLM> model = load_tp(name, tp, dtype);
      const testing::FixtureComparison g = testing::compare_greedy(f, 0, model.get());
      EXPECT_TRUE(g.ok()) << name << " tp " << tp << ": " << g.summary();
      const testing::FixtureComparison p = testing::compare_prompt_logprobs(f, 5, model.get());
      testing::print_distance(std::string("prompt ") + name + " tp " + std::to_string(tp), p, f.tolerance);
      EXPECT_TRUE(p.ok()) << name << " tp " << tp << ": " << p.summary();
    }
  }
}


std::vector<EngineCoreRequest> logprob_requests(const std::vector<std::vector<int32_t>>& prompts, int64_t max_tokens) {
  std::vector<EngineCoreRequest> reqs;
  for (size_t i = 0; i < prompts.size(); ++i) {
    EngineCoreRequest r = testing::greedy_request("r" + std::to_string(i), prompts[i], max_tokens);
    r.sampling_params.logprobs = 5;
    reqs.push_back(std::move(r));
  }
  return reqs;
}

TEST(TensorParallel, EngineOutputsEqualOneRank) {
  for (const std::string& name : testing::fixture_model_names()) {
    const testing::Fixture f = testing::load_fixture(name, std::nullopt);
    const testing::CoreRun one = testing::run_engine_core(*f.model, logprob_requests(f.prompts, 12));
    for (int64_t tp : {2, 4}) {
      if (!heads_allow(name, tp)) continue;  // the mixture-of-experts fixtures run on one rank only
      std::unique_ptr<CausalLM> model = load_tp(name, tp);
      testing::expect_same_by_rule(one, testing::run_engine_core(*model, logprob_requests(f.prompts, 12)), f.tolerance,
                          name + " tp " + std::to_string(tp));
    }
  }
}

TEST(TensorParallel, RepeatedRunsAreBitIdentical) {
  std::unique_ptr<CausalLM> model = load_tp("llama_gqa_f32", 4);
  const auto prompts = testing::random_prompts(3, 3, 20, 256, 11);
  const testing::CoreRun a = testing::run_engine_core(*model, logprob_requests(prompts, 8));
  const testing::CoreRun b = testing::run_engine_core(*model, logprob_requests(prompts, 8));
  for (const auto& [id, r] : a.results) {
    EXPECT_EQ(r.token_ids, b.results.at(id).token_ids) << id;
    for (size_t j = 0; j < r.logprobs.size(); ++j) {
      EXPECT_EQ(r.logprobs[j].logprobs, b.results.at(id).logprobs[j].logprobs) << id << " step " << j;
    }
  }
}

// The engine's equivalences, under TP = 2: batched == one by one == the recompute-everything reference, and neither
// chunked prefill nor prefix caching changes the ids.
TEST(TensorParallel, EngineEquivalencesUnderTwoRanks) {
  std::unique_ptr<CausalLM> model = load_tp("llama_gqa_f32", 2);
  const auto prompts = testing::random_prompts(4, 2, 40, 256, 5);
  auto greedy = [&](const std::vector<std::vector<int32_t>>& ps, int64_t max_tokens) {
    std::vector<EngineCoreRequest> reqs;
    for (size_t i = 0; i < ps.size(); ++i) {
      reqs.push_back(testing::greedy_request("r" + std::to_string(i), ps[i], max_tokens));
    }
    return reqs;
  };
  const testing::CoreRun batched = testing::run_engine_core(*model, greedy(prompts, 10));
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::vector<int32_t>& ids = batched.results.at("r" + std::to_string(i)).token_ids;
    EXPECT_EQ(ids, testing::reference_greedy(*model, prompts[i], 10)) << "prompt " << i;
    const testing::CoreRun single = testing::run_engine_core(*model, greedy({prompts[i]}, 10));
    EXPECT_EQ(single.results.at("r0").token_ids, ids) << "prompt " << i;
  }
  for (int64_t budget : {3, 16}) {
    const testing::CoreRun chunked =
        testing::run_engine_core(*model, greedy(prompts, 10), {.max_num_batched_tokens = budget});
    for (const auto& [id, r] : batched.results) EXPECT_EQ(chunked.results.at(id).token_ids, r.token_ids) << budget;
  }
  // Prompts sharing a 40-token prefix (two full blocks of 16): the second and third hit the cache.
  std::vector<int32_t> prefix = testing::random_prompts(1, 40, 40, 256, 9)[0];
  std::vector<std::vector<int32_t>> shared;
  for (int32_t tail : {1, 2, 3}) {
    shared.push_back(prefix);
    shared.back().push_back(tail);
  }
  const testing::CoreRun cold = testing::run_engine_core(
      *model, greedy(shared, 6), {.max_num_batched_tokens = 41, .enable_prefix_caching = false});
  // A budget of one prompt per step: the first prompt's blocks are computed (and cached) before the others start.
  const testing::CoreRun warm = testing::run_engine_core(*model, greedy(shared, 6), {.max_num_batched_tokens = 41});
  EXPECT_GT(warm.prefix_cache_hits, 0);
  for (const auto& [id, r] : cold.results) EXPECT_EQ(warm.results.at(id).token_ids, r.token_ids) << id;
  EXPECT_EQ(warm.runner_requests_left, 0);
  EXPECT_EQ(warm.kv_usage_left, 0.0);
}

// Records every read: whole tensors by name, slices with their element counts.
class RecordingWeightSource final : public WeightSource {
 public:
  explicit RecordingWeightSource(WeightSource& inner) : inner_(inner) {}
  StatusOr<Tensor> get(const std::string& name, const Shape& shape, DType dtype) override {
    whole.push_back(name);
    return inner_.get(name, shape, dtype);
  }
  StatusOr<Tensor> get_slice(const std::string& name, const Shape& shape, DType dtype, int dim, int64_t begin,
                             int64_t end) override {
    int64_t full = 1;
    for (int64_t d : shape) full *= d;
    sliced[name] = {dim, begin, end, full};
    return inner_.get_slice(name, shape, dtype, dim, begin, end);
  }
  bool contains(const std::string& name) const override { return inner_.contains(name); }
  std::vector<std::string> names() const override { return inner_.names(); }

  struct Slice {
    int dim;
    int64_t begin, end, full_numel;
  };
  std::vector<std::string> whole;
  std::map<std::string, Slice> sliced;

 private:
  WeightSource& inner_;
};

// Rank 1 of 2 (and rank 3 of 4) of the GQA fixture reads only its slices of every split tensor; only the norms (which
// every rank holds whole) are read whole. kv heads: 2 over 4 ranks, so rank 3 reads kv head 1.
TEST(TensorParallel, EachRankReadsOnlyItsSlices) {
  const std::string dir = fixtures_dir() + "/llama_gqa_f32";
  const ModelConfig c = load_model_config(dir).value();
  const int64_t D = c.head_dim, I = c.intermediate_size;
  for (auto [world, rank] : {std::pair<int, int>{2, 1}, {4, 3}}) {
    std::unique_ptr<WeightSource> checkpoint = open_safetensors_checkpoint(dir).value();
    RecordingWeightSource recording(*checkpoint);
    CpuCommunicatorGroup group(world);
    ModelLoadOptions options;
    options.communicator = &group.rank(rank);
    StatusOr<std::unique_ptr<CausalLM>> model = create_model(c, recording, options);
    ASSERT_TRUE(model.ok()) << model.status().to_string();
    for (const std::string& name : recording.whole) EXPECT_NE(name.find("norm"), std::string::npos) << name;
    const std::string l = "model.layers.0.";
    auto expect = [&](const std::string& name, int dim, int64_t begin, int64_t end) {
      ASSERT_TRUE(recording.sliced.count(name)) << name;
      const RecordingWeightSource::Slice& s = recording.sliced.at(name);
      EXPECT_EQ(s.dim, dim) << name;
      EXPECT_EQ(s.begin, begin) << name;
      EXPECT_EQ(s.end, end) << name;
    };
    const int64_t q = c.num_attention_heads / world * D;
    const int64_t kv_head = world <= c.num_key_value_heads ? rank : rank / (world / c.num_key_value_heads);
    const int64_t kv = (world <= c.num_key_value_heads ? c.num_key_value_heads / world : 1) * D;
    expect(l + "self_attn.q_proj.weight", 0, rank * q, (rank + 1) * q);
    expect(l + "self_attn.k_proj.weight", 0, kv_head * kv, (kv_head + 1) * kv);
    expect(l + "self_attn.v_proj.weight", 0, kv_head * kv, (kv_head + 1) * kv);
    expect(l + "self_attn.o_proj.weight", 1, rank * q, (rank + 1) * q);
    expect(l + "mlp.gate_proj.weight", 0, rank * I / world, (rank + 1) * I / world);
    expect(l + "mlp.up_proj.weight", 0, rank * I / world, (rank + 1) * I / world);
    expect(l + "mlp.down_proj.weight", 1, rank * I / world, (rank + 1) * I / world);
    const int64_t per = c.vocab_size / world;
    expect("model.embed_tokens.weight", 0, rank * per, (rank + 1) * per);
    if (!c.tie_word_embeddings) expect("lm_head.weight", 0, rank * per, (rank + 1) * per);
  }
}

TEST(TensorParallel, DivisibilityErrorsAreVllms) {
  StatusOr<ModelConfig> c = load_model_config(fixtures_dir() + "/llama_gqa_f32");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(check_tensor_parallel_size(*c, 3).message(),
            "Total number of attention heads (4) must be divisible by tensor parallel size (3).");
  ModelConfig kv = *c;
  kv.num_attention_heads = 12;
  kv.num_key_value_heads = 6;
  EXPECT_EQ(check_tensor_parallel_size(kv, 4).message(),
            "Total number of key/value heads (6) must be divisible by tensor parallel size (4).");
  kv.num_key_value_heads = 3;
  kv.num_attention_heads = 24;
  kv.intermediate_size = 96;
  EXPECT_EQ(check_tensor_parallel_size(kv, 8).message(),
            "Tensor parallel size (8) must be divisible by the total number of key/value heads (3) to replicate them "
            "over ranks.");
  ModelConfig mlp = *c;
  mlp.intermediate_size = 130;
  EXPECT_EQ(check_tensor_parallel_size(mlp, 4).message(),
            "intermediate_size (130) must be divisible by tensor parallel size (4).");
  EXPECT_TRUE(check_tensor_parallel_size(*c, 4).ok());
  // Through the loader: the error, not a crash.
  ModelLoadOptions options;
  ParallelConfig parallel;
  parallel.tensor_parallel_size = 3;
  StatusOr<std::unique_ptr<CausalLM>> m = load_parallel_model(fixtures_dir() + "/llama_gqa_f32", options, parallel);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(m.status().message().find("must be divisible by tensor parallel size (3)"), std::string::npos);
}

// Two "nodes" in one process over one CPU group: ranks 0-1 drive the engine, ranks 2-3 follow rank 0's control
// messages (the path the ranks of another node take; across hosts the same messages travel over NCCL). Every engine
// path — fixture comparison, chunked prefill, the plain reference, prefix caching, several runners one after the
// other — must give TP = 4's answers, and node 0's end must stop the followers.
TEST(TensorParallel, RanksOfAnotherNodeFollowTheControlMessages) {
  const std::string name = "llama_gqa_f32";
  const std::string dir = fixtures_dir() + "/" + name;
  const ModelConfig c = load_model_config(dir).value();
  CpuCommunicatorGroup group(4);
  std::unique_ptr<CausalLM> node1 =
      load_tensor_parallel_ranks(dir, ModelLoadOptions{}, c, {&group.rank(2), &group.rank(3)}, 2, 4, true).value();
  Status followed = internal_error("not run");
  std::thread follower([&] { followed = serve_tensor_parallel_ranks(*node1); });
  {
    std::unique_ptr<CausalLM> node0 =
        load_tensor_parallel_ranks(dir, ModelLoadOptions{}, c, {&group.rank(0), &group.rank(1)}, 0, 4, true).value();
    EXPECT_EQ(serve_tensor_parallel_ranks(*node0).code(), StatusCode::kFailedPrecondition);
    const testing::Fixture f = testing::load_fixture(name, std::nullopt);
    for (int64_t chunk : {0, 7}) {
      const testing::FixtureComparison cmp = testing::compare_greedy(f, chunk, node0.get());
      EXPECT_TRUE(cmp.ok()) << "chunk " << chunk << ": " << cmp.summary();
    }
    std::unique_ptr<CausalLM> one_node = load_tp(name, 4);
    const auto prompts = testing::random_prompts(3, 2, 40, 256, 21);
    const testing::CoreRun want = testing::run_engine_core(*one_node, logprob_requests(prompts, 8));
    const testing::CoreRun got = testing::run_engine_core(*node0, logprob_requests(prompts, 8));
    for (const auto& [id, r] : want.results) {
      EXPECT_EQ(got.results.at(id).token_ids, r.token_ids) << id;
      for (size_t j = 0; j < r.logprobs.size(); ++j) {
        EXPECT_EQ(got.results.at(id).logprobs[j].logprobs, r.logprobs[j].logprobs) << id << " step " << j;
      }
    }
    EXPECT_EQ(testing::reference_greedy(*node0, prompts[0], 6), testing::reference_greedy(*one_node, prompts[0], 6));
  }  // node 0's model gone: the followers are told to stop
  follower.join();
  EXPECT_TRUE(followed.ok()) << followed.to_string();
}

TEST(TensorParallel, MultiNodeIsRefusedOnTheCpu) {
  ParallelConfig parallel;
  parallel.tensor_parallel_size = 2;
  parallel.rendezvous.nnodes = 2;
  const Status s = check_parallel_config(parallel, Device::cpu());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("--nnodes 2"), std::string::npos) << s.message();
  EXPECT_TRUE(check_parallel_config(parallel, Device::cuda(0)).ok());  // CUDA: NCCL spans the nodes
  parallel.tensor_parallel_size = 3;
  EXPECT_NE(check_parallel_config(parallel, Device::cuda(0)).message().find("must be divisible by --nnodes 2"),
            std::string::npos);
  parallel.rendezvous.nnodes = 1;
  parallel.rendezvous.node_rank = 1;
  EXPECT_NE(check_parallel_config(parallel, Device::cpu()).message().find("--node-rank 1"), std::string::npos);
}

}  // namespace
}  // namespace llmserve
