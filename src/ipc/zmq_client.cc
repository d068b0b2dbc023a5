// ZmqClient: spawning the engine-core child (fork + exec, death signal), the handshake, the message pumps and
// the reaping. ZMQ exceptions stop at this file's public functions.
#include "ipc/zmq_client.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>
#include <zmq.hpp>

#include "core/logging.h"

namespace llmserve {
namespace {

Status unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }

std::string describe_exit(int wstatus) {
  if (WIFEXITED(wstatus)) return "exited with status " + std::to_string(WEXITSTATUS(wstatus));
  if (WIFSIGNALED(wstatus)) return std::string("was killed by signal ") + strsignal(WTERMSIG(wstatus));
  return "stopped";
}

std::chrono::milliseconds to_ms(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(std::max(0.0, seconds) * 1000.0));
}

// fork + exec of `argv` with the death signal set; only async-signal-safe calls between fork and exec.
StatusOr<pid_t> spawn_child(const std::vector<std::string> &args) {
  std::vector<char *> argv;
  for (const std::string &a : args) argv.push_back(const_cast<char *>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) return unavailable(std::string("fork failed: ") + std::strerror(errno));
  if (pid == 0) {
    // The signal fires when the forking *thread* ends: callers spawn from a long-lived thread (the server's
    // main thread). The child also watches getppid() in its loop.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(0);  // the parent died before prctl
#ifdef SYS_close_range
    syscall(SYS_close_range, 3U, ~0U, 0U);  // no inherited client sockets or files (best effort)
#endif
    execv(argv[0], argv.data());
    _exit(127);
  }
  return pid;
}

}  // namespace

ZmqClient::ZmqClient() = default;

ZmqClient::~ZmqClient() {
  shutdown();
  try {
    input_.reset();
    output_.reset();
    context_.reset();
  } catch (const zmq::error_t &e) {
    LOG(WARNING) << "closing the engine-core sockets: " << e.what();
  }
  if (!dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
}

StatusOr<std::unique_ptr<ZmqClient>> ZmqClient::spawn(const EngineProcessOptions &options, EngineCoreReady *ready) {
  std::unique_ptr<ZmqClient> client(new ZmqClient());
  client->shutdown_grace_s_ = options.shutdown_grace_s;
  Status s;
  try {
    s = client->start(options, ready);
  } catch (const zmq::error_t &e) {
    s = unavailable(std::string("engine core process: ZMQ error: ") + e.what());
  }
  if (!s.ok()) return s;  // the destructor kills and reaps a child that was started
  return client;
}

Status ZmqClient::start(const EngineProcessOptions &options, EngineCoreReady *ready) {
  std::string tmpl = (std::filesystem::temp_directory_path() / "llmserve-XXXXXX").string();
  if (mkdtemp(tmpl.data()) == nullptr) {
    return unavailable("cannot create a temp dir for the engine-core sockets: " + std::string(std::strerror(errno)));
  }
  dir_ = tmpl;
  const std::string input_address = "ipc://" + dir_ + "/input";
  const std::string output_address = "ipc://" + dir_ + "/output";
  context_ = std::make_unique<zmq::context_t>(1);
  input_ = std::make_unique<zmq::socket_t>(*context_, zmq::socket_type::push);
  output_ = std::make_unique<zmq::socket_t>(*context_, zmq::socket_type::pull);
  input_->set(zmq::sockopt::linger, 0);
  input_->set(zmq::sockopt::sndhwm, 0);  // never block a caller: the core drains every step
  output_->set(zmq::sockopt::linger, 0);
  output_->set(zmq::sockopt::rcvhwm, 0);
  input_->bind(input_address);
  output_->bind(output_address);

  std::vector<std::string> argv = {options.executable};
  argv.insert(argv.end(), options.args.begin(), options.args.end());
  argv.insert(argv.end(), {"--input-address", input_address, "--output-address", output_address});
  ASSIGN_OR_RETURN(pid_, spawn_child(argv));

  const auto deadline = std::chrono::steady_clock::now() + to_ms(options.startup_timeout_s);
  while (std::chrono::steady_clock::now() < deadline) {
    ASSIGN_OR_RETURN(std::optional<FromCoreMessage> msg, receive(0.1));
    if (!msg) continue;
    if (auto *r = std::get_if<EngineCoreReady>(&*msg)) {
      *ready = *r;
      return ok_status();
    }
    if (auto *f = std::get_if<EngineCoreFailure>(&*msg)) return Status(f->code, f->message);
    return internal_error("engine core process: outputs before its handshake");
  }
  return unavailable("engine core process: not ready after " + std::to_string(options.startup_timeout_s) + " s");
}

std::optional<std::string> ZmqClient::child_exit() {
  std::lock_guard<std::mutex> lock(child_mu_);
  if (pid_ <= 0) return std::string("was never started");
  if (reaped_) return std::string("has exited");
  int wstatus = 0;
  const pid_t r = waitpid(pid_, &wstatus, WNOHANG);
  if (r == 0) return std::nullopt;
  reaped_ = true;
  return r == pid_ ? describe_exit(wstatus) : std::string("is gone");
}

StatusOr<std::optional<FromCoreMessage>> ZmqClient::receive(double timeout_s) {
  zmq::pollitem_t item{output_->handle(), 0, ZMQ_POLLIN, 0};
  zmq::poll(&item, 1, to_ms(timeout_s));
  zmq::message_t msg;
  if (output_->recv(msg, zmq::recv_flags::dontwait)) {
    ASSIGN_OR_RETURN(FromCoreMessage m, decode_from_core(msg.to_string_view()));
    return std::optional<FromCoreMessage>(std::move(m));
  }
  if (std::optional<std::string> how = child_exit()) return unavailable("engine core process " + *how);
  return std::optional<FromCoreMessage>();
}

StatusOr<std::optional<EngineCoreOutputs>> ZmqClient::get_output(double timeout_s) {
  if (shut_down_.load()) return unavailable("the engine core client was shut down");
  if (!error_.ok()) return error_;
  StatusOr<std::optional<FromCoreMessage>> got = unavailable("engine core process: receive failed");
  try {
    got = receive(timeout_s);
  } catch (const zmq::error_t &e) {
    got = unavailable(std::string("engine core process: ZMQ error: ") + e.what());
  }
  if (!got.ok()) {
    error_ = got.status();
    return error_;
  }
  if (!got->has_value()) return std::optional<EngineCoreOutputs>();
  if (auto *outs = std::get_if<EngineCoreOutputs>(&**got)) return std::optional<EngineCoreOutputs>(std::move(*outs));
  if (auto *f = std::get_if<EngineCoreFailure>(&**got)) {
    error_ = Status(f->code, f->message);
    return error_;
  }
  return std::optional<EngineCoreOutputs>();  // a repeated Ready: nothing to deliver
}

void ZmqClient::send(const ToCoreMessage &message) {
  if (shut_down_.load()) return;
  const std::string bytes = encode_message(message);
  std::lock_guard<std::mutex> lock(send_mu_);
  try {
    // Unlimited HWM: this never blocks; with a dead peer the message is dropped and get_output reports why.
    (void)input_->send(zmq::buffer(bytes), zmq::send_flags::dontwait);
  } catch (const zmq::error_t &e) {
    LOG(WARNING) << "engine core process: send failed: " << e.what();
  }
}

void ZmqClient::add_request(EngineCoreRequest request) { send(ToCoreMessage(std::move(request))); }

void ZmqClient::abort_requests(const std::vector<std::string> &request_ids) {
  if (!request_ids.empty()) send(ToCoreMessage(AbortRequests{request_ids}));
}

void ZmqClient::finish_requests_stopped(const std::vector<std::pair<std::string, std::string>> &stops) {
  if (!stops.empty()) send(ToCoreMessage(FinishRequestsStopped{stops}));
}

void ZmqClient::kill_and_reap(double grace_s) {
  const auto deadline = std::chrono::steady_clock::now() + to_ms(grace_s);
  while (!child_exit() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::lock_guard<std::mutex> lock(child_mu_);
  if (pid_ <= 0 || reaped_) return;
  LOG(WARNING) << "engine core process " << pid_ << " did not exit in " << grace_s << " s; killing it";
  kill(pid_, SIGKILL);
  int wstatus = 0;
  waitpid(pid_, &wstatus, 0);
  reaped_ = true;
}

void ZmqClient::shutdown() {
  std::call_once(shutdown_once_, [this] {
    if (input_ != nullptr) {
      try {
        const std::string bytes = encode_message(ToCoreMessage(ShutdownCore{}));
        std::lock_guard<std::mutex> lock(send_mu_);
        (void)input_->send(zmq::buffer(bytes), zmq::send_flags::dontwait);
      } catch (const zmq::error_t &e) {
        LOG(WARNING) << "engine core process: shutdown message failed: " << e.what();
      }
    }
    shut_down_.store(true);
    kill_and_reap(shutdown_grace_s_);
  });
}

}  // namespace llmserve
