// The multi-node bootstrap over real TCP between real processes on this host: node 0 (this process) serves a random
// 128-byte blob (an NCCL unique id's size) and forked children, as nodes 1.., receive it — whatever the start order;
// timeouts, a world-size mismatch, a duplicate node and bad flags are clear errors.
#include "runtime/tcp_rendezvous.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <random>
#include <thread>

namespace llmserve {
namespace {

std::string random_blob(uint32_t seed) {
  std::mt19937 rng(seed);
  std::string blob(128, '\0');
  for (char& c : blob) c = static_cast<char>(rng() & 0xff);
  return blob;
}

// Forks a node: it receives with `options` and exits 0 when it got `want`, 2 on another blob, 3 on an error whose
// message lacks `error_part` (an empty `want` expects an error).
pid_t fork_node(const RendezvousOptions& options, const std::string& want, const std::string& error_part = "",
                int delay_ms = 0) {
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  if (delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
  StatusOr<std::string> got = rendezvous_receive(options);
  if (want.empty()) ::_exit(!got.ok() && got.status().message().find(error_part) != std::string::npos ? 0 : 3);
  ::_exit(!got.ok() ? 3 : *got == want ? 0 : 2);
}

int wait_exit(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

RendezvousOptions node(int port, int64_t nnodes, int64_t rank, double timeout_s = 20) {
  RendezvousOptions o;
  o.master_port = port;
  o.nnodes = nnodes;
  o.node_rank = rank;
  o.timeout_s = timeout_s;
  return o;
}

TEST(TcpRendezvous, TwoProcessesExchangeTheBlob) {
  StatusOr<std::unique_ptr<RendezvousServer>> server = RendezvousServer::listen(node(0, 2, 0));
  ASSERT_TRUE(server.ok()) << server.status().to_string();
  const std::string blob = random_blob(1);
  const pid_t child = fork_node(node((*server)->port(), 2, 1), blob);
  EXPECT_TRUE((*server)->serve(blob).ok());
  EXPECT_EQ(wait_exit(child), 0);
}

TEST(TcpRendezvous, FourNodesAnyStartOrder) {
  // Port chosen by the kernel, then released: the nodes start before node 0 listens and retry until it does.
  int port = 0;
  {
    StatusOr<std::unique_ptr<RendezvousServer>> probe = RendezvousServer::listen(node(0, 4, 0));
    ASSERT_TRUE(probe.ok());
    port = (*probe)->port();
  }
  const std::string blob = random_blob(2);
  std::vector<pid_t> children;
  for (int64_t rank : {3, 1, 2}) children.push_back(fork_node(node(port, 4, rank), blob));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  StatusOr<std::string> got = exchange_blob(node(port, 4, 0), blob);
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(*got, blob);
  for (pid_t c : children) EXPECT_EQ(wait_exit(c), 0);
}

TEST(TcpRendezvous, MismatchedNnodesIsNamedOnBothSides) {
  StatusOr<std::unique_ptr<RendezvousServer>> server = RendezvousServer::listen(node(0, 2, 0, 10));
  ASSERT_TRUE(server.ok());
  const pid_t child = fork_node(node((*server)->port(), 3, 1), "", "node 0 runs --nnodes 2, node 1 --nnodes 3");
  const Status s = (*server)->serve(random_blob(3));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("node 0 runs --nnodes 2, node 1 --nnodes 3"), std::string::npos) << s.message();
  EXPECT_EQ(wait_exit(child), 0);
}

TEST(TcpRendezvous, DuplicateNodeRankIsAnError) {
  StatusOr<std::unique_ptr<RendezvousServer>> server = RendezvousServer::listen(node(0, 3, 0, 10));
  ASSERT_TRUE(server.ok());
  const std::string blob = random_blob(4);
  const pid_t first = fork_node(node((*server)->port(), 3, 1), blob);
  const pid_t second = fork_node(node((*server)->port(), 3, 1), "", "joined twice", 500);
  const Status s = (*server)->serve(blob);
  EXPECT_NE(s.message().find("node rank 1 joined twice"), std::string::npos) << s.to_string();
  EXPECT_EQ(wait_exit(first), 0);
  EXPECT_EQ(wait_exit(second), 0);
}

TEST(TcpRendezvous, TimeoutsNameWhatIsMissing) {
  StatusOr<std::unique_ptr<RendezvousServer>> server = RendezvousServer::listen(node(0, 3, 0, 0.3));
  ASSERT_TRUE(server.ok());
  const Status s = (*server)->serve(random_blob(5));
  EXPECT_NE(s.message().find("timed out"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("node(s) 1, 2 of 3"), std::string::npos) << s.message();
  // Nobody listens on the port of the server just closed.
  const int port = (*server)->port();
  server->reset();
  StatusOr<std::string> got = rendezvous_receive(node(port, 2, 1, 0.3));
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find("could not reach node 0 at 127.0.0.1:" + std::to_string(port)),
            std::string::npos)
      << got.status().message();
}

TEST(TcpRendezvous, BadOptionsNameTheFlag) {
  EXPECT_NE(check_rendezvous_options(node(1, 0, 0)).message().find("--nnodes"), std::string::npos);
  EXPECT_NE(check_rendezvous_options(node(1, 2, 2)).message().find("--node-rank 2"), std::string::npos);
  EXPECT_NE(check_rendezvous_options(node(70000, 2, 1)).message().find("--master-port"), std::string::npos);
  RendezvousOptions bad_host = node(29500, 2, 1, 1);
  bad_host.master_addr = "no-such-host.invalid";
  StatusOr<std::string> got = rendezvous_receive(bad_host);
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find("--master-addr no-such-host.invalid"), std::string::npos)
      << got.status().message();
}

}  // namespace
}  // namespace llmserve
