// InprocClient on its own: build errors come back from create(), a request the core rejects gets a final
// abort output, an executor error kills the client for good (outputs made before it still arrive), the idle
// core thread sleeps instead of spinning, and shutdown wakes a waiting get_output.
#include "ipc/inproc_client.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <chrono>
#include <map>
#include <thread>

#include "failing_executor.h"
#include "test_models.h"

namespace llmserve {
namespace {

CausalLM &model() {
  static std::unique_ptr<CausalLM> m = testing::load_model_or_die(testing::fixtures_dir() + "/llama_gqa_f32");
  return *m;
}

InprocClient::CoreFactory factory(int fail_at = 0) {
  return [fail_at]() -> StatusOr<EngineCoreInstance> {
    EngineArgs args;
    ASSIGN_OR_RETURN(EngineCoreConfig config, make_engine_core_config(model(), args));
    return testing::build_core_failing_at(model(), config, fail_at);
  };
}

EngineCoreRequest request(const std::string &id, int64_t max_tokens) {
  EngineCoreRequest r;
  r.request_id = id;
  r.prompt_token_ids = {3, 1, 4, 1, 5};
  r.sampling_params.temperature = 0.0;
  r.sampling_params.max_tokens = max_tokens;
  r.sampling_params.ignore_eos = true;
  return r;
}

// Drains outputs until every id in `ids` has finished; returns the final output of each.
std::map<std::string, EngineCoreOutput> drain(EngineCoreClient &c, size_t num_finals) {
  std::map<std::string, EngineCoreOutput> finals;
  for (int guard = 0; finals.size() < num_finals && guard < 10000; ++guard) {
    StatusOr<std::optional<EngineCoreOutputs>> got = c.get_output(10.0);
    EXPECT_TRUE(got.ok()) << got.status().to_string();
    if (!got.ok() || !got->has_value()) break;
    for (const EngineCoreOutput &o : (*got)->outputs) {
      if (o.finished()) finals[o.request_id] = o;
    }
  }
  return finals;
}

TEST(InprocClientTest, BuildErrorIsReturned) {
  StatusOr<std::unique_ptr<InprocClient>> c =
      InprocClient::create([]() -> StatusOr<EngineCoreInstance> { return invalid_argument("block_size: bad"); });
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(), "block_size: bad");
}

TEST(InprocClientTest, RunsRequestsAndAnswersRejectedOnes) {
  std::unique_ptr<InprocClient> c = std::move(InprocClient::create(factory())).value();
  c->add_request(request("a", 5));
  c->add_request(request("a", 5));  // duplicate live id: the core rejects it
  c->add_request(request("b", 3));
  std::map<std::string, EngineCoreOutput> finals = drain(*c, 2);
  ASSERT_EQ(finals.count("b"), 1u);
  EXPECT_EQ(finals["b"].finish_reason, FinishReason::kLength);
  // "a" finishes twice: once rejected (abort), once normally; whichever came last is in the map.
  ASSERT_EQ(finals.count("a"), 1u);
  c->shutdown();
  c->shutdown();
  EXPECT_EQ(c->get_output(0.0).status().code(), StatusCode::kUnavailable);
}

TEST(InprocClientTest, ExecutorErrorKillsTheClient) {
  std::unique_ptr<InprocClient> c = std::move(InprocClient::create(factory(/*fail_at=*/3))).value();
  c->add_request(request("x", 50));
  int num_outputs = 0;
  Status error;
  for (int i = 0; i < 100; ++i) {
    StatusOr<std::optional<EngineCoreOutputs>> got = c->get_output(10.0);
    if (!got.ok()) {
      error = got.status();
      break;
    }
    if (got->has_value()) ++num_outputs;
  }
  EXPECT_EQ(num_outputs, 2);  // the two steps before the failure
  EXPECT_EQ(error.code(), StatusCode::kInternal);
  EXPECT_NE(error.message().find("injected device failure"), std::string::npos) << error.message();
  EXPECT_EQ(c->get_output(0.0).status().code(), StatusCode::kInternal);  // every later call too
  c->add_request(request("y", 1));                                       // ignored, no crash
}

double process_cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

TEST(InprocClientTest, IdleCoreSleeps) {
  std::unique_ptr<InprocClient> c = std::move(InprocClient::create(factory())).value();
  c->add_request(request("warm", 2));
  ASSERT_EQ(drain(*c, 1).size(), 1u);
  // The GEMM's OpenMP workers spin-wait a little after the forward; let them settle first.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const double cpu0 = process_cpu_seconds();
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  // A spinning core thread would burn ~0.4 s of CPU here; a sleeping one next to nothing.
  EXPECT_LT(process_cpu_seconds() - cpu0, 0.2);
}

TEST(InprocClientTest, ShutdownWakesAWaitingConsumer) {
  std::unique_ptr<InprocClient> c = std::move(InprocClient::create(factory())).value();
  std::thread consumer([&] {
    StatusOr<std::optional<EngineCoreOutputs>> got = c->get_output(30.0);
    EXPECT_FALSE(got.ok());
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const auto t0 = std::chrono::steady_clock::now();
  c->shutdown();
  consumer.join();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
}

}  // namespace
}  // namespace llmserve
