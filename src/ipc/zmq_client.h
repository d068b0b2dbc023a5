// ZmqClient: the EngineCore in a child process (`--engine-process`, the vLLM V1 split), reached over two ZMQ
// PUSH/PULL pairs on ipc:// sockets in a private temp dir, messages in the msgpack codec (codec.h). The
// child is this binary re-executed with the engine-core subcommand. Invariants: no orphan — the child dies
// with its parent (PR_SET_PDEATHSIG, and it watches getppid()) and shutdown() reaps it (SIGKILL after a grace
// period); a dead child is noticed by get_output (an error naming how it ended), never waited on forever.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "ipc/codec.h"
#include "ipc/engine_core_client.h"

namespace zmq {
class context_t;
class socket_t;
}  // namespace zmq

namespace llmserve {

struct EngineProcessOptions {
  std::string executable = "/proc/self/exe";  // the binary to run (tests pass the llmserve binary)
  // Arguments after the executable, starting with the subcommand: {"engine-core", "--model", DIR, ...}. The
  // client appends --input-address / --output-address.
  std::vector<std::string> args;
  double startup_timeout_s = 600.0;  // model loading included
  double shutdown_grace_s = 5.0;     // after the shutdown message, before SIGKILL
};

class ZmqClient final : public EngineCoreClient {
 public:
  // Starts the child and waits for its handshake. The child's own error (e.g. the model failed to load) is
  // returned as it reported it; a child that exits or times out first gives Unavailable / DeadlineExceeded-
  // like Unavailable naming that. `ready` receives what the core reported.
  static StatusOr<std::unique_ptr<ZmqClient>> spawn(const EngineProcessOptions &options, EngineCoreReady *ready);
  ~ZmqClient() override;

  void add_request(EngineCoreRequest request) override;
  void abort_requests(const std::vector<std::string> &request_ids) override;
  void finish_requests_stopped(const std::vector<std::pair<std::string, std::string>> &stops) override;
  StatusOr<std::optional<EngineCoreOutputs>> get_output(double timeout_s) override;
  void shutdown() override;

  pid_t pid() const { return pid_; }  // the child's (tests); set before spawn() returns

 private:
  ZmqClient();
  Status start(const EngineProcessOptions &options, EngineCoreReady *ready);
  void send(const ToCoreMessage &message);
  // Waits up to `timeout_s` for one message from the core; nullopt on timeout. Unavailable once the child
  // has exited (noticed by waitpid while nothing is readable).
  StatusOr<std::optional<FromCoreMessage>> receive(double timeout_s);
  // The child's exit, if it has ended (reaps it).
  std::optional<std::string> child_exit();
  void kill_and_reap(double grace_s);

  std::unique_ptr<zmq::context_t> context_;
  std::mutex send_mu_;
  std::unique_ptr<zmq::socket_t> input_;   // PUSH to the core; guarded by send_mu_
  std::unique_ptr<zmq::socket_t> output_;  // PULL from the core; the consumer thread only
  std::string dir_;                        // temp dir holding the ipc sockets
  Status error_;  // the consumer thread only: set once the core is dead; every later get_output returns it
  double shutdown_grace_s_ = 5.0;
  std::once_flag shutdown_once_;
  std::atomic<bool> shut_down_{false};
  std::mutex child_mu_;  // guards pid_ / reaped_ (waitpid from the consumer and from shutdown())
  pid_t pid_ = -1;
  bool reaped_ = false;
};

}  // namespace llmserve
