// ZmqClient and the engine-core child process (the real llmserve binary): the child's load error comes back
// through the handshake, a child that cannot start or is killed is noticed (every live request gets its final
// abort, the frontend turns unhealthy), shutdown reaps the child, and a child whose parent dies exits too.
#include "ipc/zmq_client.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <fstream>
#include <thread>

#include "async_llm_harness.h"
#include "frontend/async_llm_factory.h"
#include "test_models.h"

namespace llmserve {
namespace {

using testing::OutputCollector;

EngineProcessOptions options(std::vector<std::string> extra = {}) {
  EngineProcessOptions o;
  o.executable = LLMSERVE_BIN;
  o.args = {"engine-core", "--model=" + testing::fixtures_dir() + "/llama_gqa_f32", "--max-num-batched-tokens=64"};
  o.args.insert(o.args.end(), extra.begin(), extra.end());
  o.startup_timeout_s = 60.0;
  return o;
}

// True once `pid` no longer exists or is a zombie (dead, waiting for a reaper other than us).
bool process_gone(pid_t pid) {
  if (kill(pid, 0) != 0) return errno == ESRCH;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  const size_t paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] == 'Z';
}

bool wait_gone(pid_t pid, double timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < deadline) {
    if (process_gone(pid)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

TEST(ZmqClientTest, ChildLoadErrorComesBack) {
  EngineProcessOptions o = options();
  o.args[1] = "--model=/nonexistent/model-dir";
  EngineCoreReady ready;
  StatusOr<std::unique_ptr<ZmqClient>> c = ZmqClient::spawn(o, &ready);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("/nonexistent/model-dir"), std::string::npos) << c.status().to_string();
  // A bad engine flag is reported by the child the same way.
  StatusOr<std::unique_ptr<ZmqClient>> bad = ZmqClient::spawn(options({"--block-size=0"}), &ready);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--block-size must be in [1, 256]"), std::string::npos)
      << bad.status().to_string();
}

TEST(ZmqClientTest, ChildThatCannotStartIsNoticed) {
  EngineProcessOptions o = options();
  o.executable = "/nonexistent/llmserve";
  EngineCoreReady ready;
  StatusOr<std::unique_ptr<ZmqClient>> c = ZmqClient::spawn(o, &ready);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(c.status().message().find("exited with status 127"), std::string::npos) << c.status().to_string();
}

TEST(ZmqClientTest, HandshakeReportsTheCoreLimits) {
  EngineCoreReady ready;
  std::unique_ptr<ZmqClient> c = std::move(ZmqClient::spawn(options({"--max-model-len=100"}), &ready)).value();
  EXPECT_EQ(ready.max_model_len, 100);
  EXPECT_EQ(ready.vocab_size, 256);
  EXPECT_EQ(ready.model_eos_token_ids, std::vector<int32_t>{2});  // the fixture's config.json
  EXPECT_EQ(ready.scheduling_policy, SchedulingPolicy::kFcfs);
  const pid_t pid = c->pid();
  c.reset();  // shutdown + reap
  EXPECT_TRUE(process_gone(pid));
  EXPECT_EQ(waitpid(pid, nullptr, WNOHANG), -1);  // already reaped: not our child any more
}

TEST(ZmqClientTest, KilledChildFailsEveryLiveRequest) {
  EngineCoreReady ready;
  std::unique_ptr<ZmqClient> client = std::move(ZmqClient::spawn(options(), &ready)).value();
  const pid_t pid = client->pid();
  OutputCollector collector;
  std::unique_ptr<AsyncLLM> llm = make_async_llm(std::move(client), nullptr, ready);
  SamplingParams params;
  params.temperature = 0.0;
  params.ignore_eos = true;
  params.max_tokens = 200;
  for (int i = 0; i < 3; ++i) {
    PromptInput p;
    p.token_ids = {static_cast<int32_t>(i + 1), 2, 3};
    const std::string id = "k" + std::to_string(i);
    ASSERT_TRUE(llm->add_request(id, p, params, 0, collector.callback(id)).ok());
  }
  ASSERT_TRUE(collector.wait_any_output("k0"));
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  ASSERT_TRUE(collector.wait_finished(3, 30.0));
  for (const auto &[id, stream] : collector.streams()) {
    EXPECT_EQ(testing::check_stream(id, stream).outputs[0].finish_reason, FinishReason::kAbort) << id;
  }
  EXPECT_FALSE(llm->healthy());
  PromptInput p;
  p.token_ids = {1};
  EXPECT_EQ(llm->add_request("late", p, params, 0, collector.callback("late")).code(), StatusCode::kUnavailable);
  llm.reset();
  EXPECT_TRUE(process_gone(pid));
}

TEST(ZmqClientTest, CoreDiesWithItsParent) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t parent = fork();
  ASSERT_GE(parent, 0);
  if (parent == 0) {
    // The would-be server: start a core, report its pid, then die without shutting it down.
    close(fds[0]);
    EngineCoreReady ready;
    StatusOr<std::unique_ptr<ZmqClient>> c = ZmqClient::spawn(options(), &ready);
    const pid_t core = c.ok() ? (*c)->pid() : -1;
    (void)!write(fds[1], &core, sizeof(core));
    _exit(0);
  }
  close(fds[1]);
  pid_t core = -1;
  ASSERT_EQ(read(fds[0], &core, sizeof(core)), static_cast<ssize_t>(sizeof(core)));
  close(fds[0]);
  int wstatus = 0;
  waitpid(parent, &wstatus, 0);
  ASSERT_GT(core, 0);
  EXPECT_TRUE(wait_gone(core, 10.0)) << "engine core " << core << " outlived its parent";
}

}  // namespace
}  // namespace llmserve
