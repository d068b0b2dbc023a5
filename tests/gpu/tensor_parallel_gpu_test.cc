// Tensor parallelism on CUDA devices over NCCL.
//  - One GPU (runs on any GPU machine): NCCL with one rank — all-reduce, all-gather and broadcast leave the right
//    values and can be captured in a CUDA graph and replayed (no host synchronisation inside); the tensor-parallel
//    wrapper at one rank (NCCL world of one, inputs through the wrapper) gives the plain model's greedy ids.
//  - Two or more GPUs (skipped, saying so, with fewer): NCCL collectives between rank threads against host
//    references, captured in per-rank graphs too; TP = 2 == TP = 1 on every fixture (vLLM's rule; f32 logprobs within
//    1e-3, bf16 within 0.2 as model_gpu_test); engine equivalences under TP = 2 (batched vs one by one, chunked
//    prefill, prefix cache); the memory plan with TP = 2 through LLMEngine.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <random>
#include <thread>

#include "../runtime/test_models.h"
#include "core/cuda_stream.h"
#include "frontend/llm_engine.h"
#include "model/tensor_parallel.h"
#include "runtime/nccl_communicator.h"
#include "runtime/tensor_parallel_model.h"

namespace llmserve {
namespace {

using testing::fixtures_dir;

int device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) return 0;
  return count;
}

class NcclOneGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (device_count() < 1) GTEST_SKIP() << "no CUDA device";
    if (!nccl_available()) GTEST_SKIP() << "this build has no NCCL";
  }
};

class NcclTwoGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (device_count() < 2) {
      GTEST_SKIP() << "tensor parallelism over NCCL needs 2 CUDA devices; " << device_count()
                   << " present (run on nvidia-h200-x2 or larger)";
    }
    if (!nccl_available()) GTEST_SKIP() << "this build has no NCCL";
  }
};

std::vector<float> random_values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

std::vector<float> to_host(const Tensor& t) {
  Tensor h = t.to(Device::cpu()).to(DType::kF32);
  return std::vector<float>(h.data<float>(), h.data<float>() + h.numel());
}

// Runs fn(rank) on `world` threads, each with its device current.
void on_ranks(int world, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&fn, r] {
      CHECK(cudaSetDevice(r) == cudaSuccess);
      fn(r);
    });
  }
  for (std::thread& t : threads) t.join();
}

TEST_F(NcclOneGpuTest, CollectivesOfOneRankAndGraphCapture) {
  const std::string id = new_nccl_unique_id().value();
  StatusOr<std::unique_ptr<NcclCommunicator>> comm = NcclCommunicator::create(id, 1, 0, 0);
  ASSERT_TRUE(comm.ok()) << comm.status().to_string();
  const std::vector<float> values = random_values(1000, 1);
  Tensor t = Tensor::from_f32(values, {1000}).to(Device::cuda(0));
  (*comm)->all_reduce(t);
  EXPECT_EQ(to_host(t), values);
  Tensor out = Tensor::zeros({1000}, DType::kF32, Device::cuda(0));
  (*comm)->all_gather(out, t);
  EXPECT_EQ(to_host(out), values);
  (*comm)->broadcast(out, 0);
  EXPECT_EQ(to_host(out), values);
  // Captured: the collectives queue on the stream with no host wait (a wait would fail the capture).
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  Tensor in = Tensor::zeros({1000}, DType::kBF16, Device::cuda(0));
  Tensor gathered = Tensor::zeros({1000}, DType::kBF16, Device::cuda(0));
  cudaGraph_t graph;
  {
    cuda::StreamGuard guard(stream);
    ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    (*comm)->all_reduce(in);
    (*comm)->all_gather(gathered, in);
    (*comm)->broadcast(gathered, 0);
    ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  }
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  in.copy_from(Tensor::from_f32(values, {1000}, DType::kBF16));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  EXPECT_EQ(to_host(gathered), to_host(Tensor::from_f32(values, {1000}, DType::kBF16)));
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

std::unique_ptr<CausalLM> load(const std::string& name, int64_t tp, std::optional<DType> dtype, bool wrap) {
  ModelLoadOptions options;
  options.device = Device::cuda(0);
  options.weight_dtype = dtype;
  ParallelConfig parallel;
  parallel.tensor_parallel_size = tp;
  const std::string dir = fixtures_dir() + "/" + name;
  StatusOr<std::unique_ptr<CausalLM>> m =
      wrap ? load_tensor_parallel_model(dir, options, parallel) : load_parallel_model(dir, options, parallel);
  CHECK(m.ok()) << name << " tp " << tp << ": " << m.status().to_string();
  return std::move(m).value();
}

std::vector<EngineCoreRequest> requests(const std::vector<std::vector<int32_t>>& prompts, int64_t max_tokens,
                                        std::optional<int32_t> logprobs) {
  std::vector<EngineCoreRequest> reqs;
  for (size_t i = 0; i < prompts.size(); ++i) {
    EngineCoreRequest r = testing::greedy_request("r" + std::to_string(i), prompts[i], max_tokens);
    r.sampling_params.logprobs = logprobs;
    reqs.push_back(std::move(r));
  }
  return reqs;
}


TEST_F(NcclOneGpuTest, OneRankWrapperEqualsThePlainModel) {
  const auto prompts = testing::random_prompts(3, 2, 30, 256, 3);
  for (const std::string name : {"llama_gqa_f32", "qwen3_qknorm_bf16"}) {
    std::unique_ptr<CausalLM> plain = load(name, 1, DType::kF32, false);
    std::unique_ptr<CausalLM> wrapped = load(name, 1, DType::kF32, true);
    const testing::CoreRun a = testing::run_engine_core(*plain, requests(prompts, 10, 5));
    const testing::CoreRun b = testing::run_engine_core(*wrapped, requests(prompts, 10, 5));
    for (const auto& [id, r] : a.results) EXPECT_EQ(b.results.at(id).token_ids, r.token_ids) << name << " " << id;
    testing::expect_same_by_rule(a, b, 1e-5f, name);
  }
}

TEST_F(NcclTwoGpuTest, CollectivesBetweenRankThreadsMatchHostReferences) {
  const int world = std::min(device_count(), 4);
  const std::string id = new_nccl_unique_id().value();
  const int64_t n = 4099;
  std::vector<std::vector<float>> reduced(world), gathered(world), broadcast(world), replayed(world);
  on_ranks(world, [&](int r) {
    std::unique_ptr<NcclCommunicator> comm = NcclCommunicator::create(id, world, r, r).value();
    const Device dev = Device::cuda(r);
    Tensor t = Tensor::from_f32(random_values(n, 10 + r), {n}).to(dev);
    comm->all_reduce(t);
    reduced[r] = to_host(t);
    Tensor mine = Tensor::from_f32(random_values(7, 20 + r), {7}).to(dev);
    Tensor all = Tensor::zeros({7 * world}, DType::kF32, dev);
    comm->all_gather(all, mine);
    gathered[r] = to_host(all);
    Tensor b = Tensor::from_f32(random_values(5, 30 + r), {5}).to(dev);
    comm->broadcast(b, world - 1);
    broadcast[r] = to_host(b);
    // Each rank captures its own graph of an all-reduce and replays it on new values.
    cudaStream_t stream;
    CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);
    Tensor g = Tensor::zeros({n}, DType::kF32, dev);
    cudaGraph_t graph;
    {
      cuda::StreamGuard guard(stream);
      CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
      comm->all_reduce(g);
      CHECK(cudaStreamEndCapture(stream, &graph) == cudaSuccess);
    }
    cudaGraphExec_t exec;
    CHECK(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
    g.copy_from(Tensor::from_f32(random_values(n, 40 + r), {n}));
    CHECK(cudaDeviceSynchronize() == cudaSuccess);
    CHECK(cudaGraphLaunch(exec, stream) == cudaSuccess);
    CHECK(cudaStreamSynchronize(stream) == cudaSuccess);
    replayed[r] = to_host(g);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(stream);
  });
  for (int r = 0; r < world; ++r) {
    for (int64_t i = 0; i < n; ++i) {
      float sum = 0, replay_sum = 0;
      for (int k = 0; k < world; ++k) sum += random_values(n, 10 + k)[i], replay_sum += random_values(n, 40 + k)[i];
      ASSERT_NEAR(reduced[r][i], sum, 1e-5f) << "rank " << r << " element " << i;
      ASSERT_NEAR(replayed[r][i], replay_sum, 1e-5f) << "rank " << r << " element " << i;
      if (i > 64) i += 97;  // the rest sampled: the reference recomputes its inputs
    }
    for (int k = 0; k < world; ++k) {
      const std::vector<float> want = random_values(7, 20 + k);
      for (int i = 0; i < 7; ++i) EXPECT_EQ(gathered[r][k * 7 + i], want[i]) << "rank " << r;
    }
    EXPECT_EQ(broadcast[r], random_values(5, 30 + world - 1)) << "rank " << r;
  }
}

TEST_F(NcclTwoGpuTest, TwoRanksEqualOneOnEveryFixture) {
  for (const std::string& name : testing::fixture_model_names()) {
    StatusOr<ModelConfig> config = load_model_config(testing::fixtures_dir() + "/" + name);
    ASSERT_TRUE(config.ok()) << name;
    if (config->moe) continue;  // mixture-of-experts models run on one rank (check_tensor_parallel_size)
    const bool bf16 = name.find("bf16") != std::string::npos;
    for (std::optional<DType> dtype : {std::optional<DType>(DType::kF32), std::optional<DType>(DType::kBF16)}) {
      if (dtype == DType::kF32 && bf16) continue;  // bf16 checkpoints: in bf16 only here
      std::unique_ptr<CausalLM> one = load(name, 1, dtype, false);
      const std::vector<std::vector<int32_t>> prompts = testing::random_prompts(4, 2, 40, 256, 17);
      const testing::CoreRun want = testing::run_engine_core(*one, requests(prompts, 16, 5));
      one.reset();
      std::unique_ptr<CausalLM> two = load(name, 2, dtype, false);
      testing::expect_same_by_rule(want, testing::run_engine_core(*two, requests(prompts, 16, 5)),
                          dtype == DType::kF32 ? 1e-3f : 0.2f, name + (dtype == DType::kF32 ? " f32" : " bf16"));
    }
  }
}

TEST_F(NcclTwoGpuTest, EngineEquivalencesUnderTwoRanks) {
  std::unique_ptr<CausalLM> model = load("llama_gqa_f32", 2, DType::kF32, false);
  const auto prompts = testing::random_prompts(4, 2, 40, 256, 5);
  const testing::CoreRun batched = testing::run_engine_core(*model, requests(prompts, 10, std::nullopt));
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::vector<int32_t>& ids = batched.results.at("r" + std::to_string(i)).token_ids;
    const testing::CoreRun single = testing::run_engine_core(*model, requests({prompts[i]}, 10, std::nullopt));
    EXPECT_EQ(single.results.at("r0").token_ids, ids) << "prompt " << i;
  }
  const testing::CoreRun chunked =
      testing::run_engine_core(*model, requests(prompts, 10, std::nullopt), {.max_num_batched_tokens = 7});
  for (const auto& [id, r] : batched.results) EXPECT_EQ(chunked.results.at(id).token_ids, r.token_ids) << id;
  std::vector<int32_t> prefix = testing::random_prompts(1, 40, 40, 256, 9)[0];
  std::vector<std::vector<int32_t>> shared;
  for (int32_t tail : {1, 2, 3}) {
    shared.push_back(prefix);
    shared.back().push_back(tail);
  }
  const testing::CoreRun cold = testing::run_engine_core(
      *model, requests(shared, 6, std::nullopt), {.max_num_batched_tokens = 41, .enable_prefix_caching = false});
  const testing::CoreRun warm =
      testing::run_engine_core(*model, requests(shared, 6, std::nullopt), {.max_num_batched_tokens = 41});
  EXPECT_GT(warm.prefix_cache_hits, 0);
  for (const auto& [id, r] : cold.results) EXPECT_EQ(warm.results.at(id).token_ids, r.token_ids) << id;
}

// Through LLMEngine with its defaults: the KV cache planned from rank 0's device (its heads only), CUDA graphs
// requested but run eagerly (the ranks' streams are other threads'), the output equal to one rank's.
TEST_F(NcclTwoGpuTest, LlmEngineWithMemoryPlan) {
  const auto prompts = testing::random_prompts(3, 5, 30, 256, 8);
  SamplingParams p;
  p.temperature = 0.0;
  p.max_tokens = 12;
  p.ignore_eos = true;
  std::vector<std::vector<int32_t>> ids[2];
  for (int64_t tp : {1, 2}) {
    std::unique_ptr<CausalLM> model = load("llama_gqa_f32", tp, DType::kF32, false);
    EXPECT_EQ(model->num_kv_heads_per_rank(), 2 / tp);
    EngineArgs args;
    args.max_model_len = 256;
    args.gpu_memory_utilization = 0.5;
    StatusOr<std::unique_ptr<LLMEngine>> engine = LLMEngine::create(*model, nullptr, args);
    ASSERT_TRUE(engine.ok()) << engine.status().to_string();
    for (size_t i = 0; i < prompts.size(); ++i) {
      PromptInput in;
      in.token_ids = prompts[i];
      ASSERT_TRUE((*engine)->add_request("r" + std::to_string(i), in, p).ok());
    }
    std::map<std::string, std::vector<int32_t>> done;
    while ((*engine)->has_unfinished()) {
      StatusOr<std::vector<RequestOutput>> outs = (*engine)->step();
      ASSERT_TRUE(outs.ok()) << outs.status().to_string();
      for (const RequestOutput& o : *outs) {
        if (o.finished) done[o.request_id] = o.outputs[0].token_ids;
      }
    }
    for (size_t i = 0; i < prompts.size(); ++i) ids[tp - 1].push_back(done["r" + std::to_string(i)]);
  }
  EXPECT_EQ(ids[0], ids[1]);
}

}  // namespace
}  // namespace llmserve
