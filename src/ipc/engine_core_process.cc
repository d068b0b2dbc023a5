// run_engine_core_process: sockets, handshake and the busy loop of the child process. ZMQ exceptions are
// caught here (the edge of the ipc layer) and end the process with a message on stderr.
#include "ipc/engine_core_process.h"

#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <zmq.hpp>

#include "core/logging.h"
#include "ipc/codec.h"
#include "ipc/engine_core_loop.h"

namespace llmserve {
namespace {

// How often an idle core checks that its parent is still there.
constexpr std::chrono::milliseconds kIdlePoll{200};

void send_message(zmq::socket_t &out, const FromCoreMessage &message) {
  const std::string bytes = encode_message(message);
  out.send(zmq::buffer(bytes), zmq::send_flags::none);
}

void send_failure(zmq::socket_t &out, const Status &status) {
  send_message(out, EngineCoreFailure{status.code(), status.message()});
}

// The loop after the handshake. Returns the exit code.
int serve(zmq::socket_t &in, zmq::socket_t &out, EngineCore &core, pid_t parent) {
  std::vector<EngineCoreOutput> rejected;
  while (true) {
    const bool busy = core.has_work() || !rejected.empty();
    zmq::pollitem_t item{in.handle(), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, busy ? std::chrono::milliseconds(0) : kIdlePoll);
    zmq::message_t msg;
    while (in.recv(msg, zmq::recv_flags::dontwait)) {
      StatusOr<ToCoreMessage> decoded = decode_to_core(msg.to_string_view());
      if (!decoded.ok()) {
        // The parent runs this same binary: a malformed message is a bug, not input to skip silently.
        send_failure(out, decoded.status());
        return 1;
      }
      if (std::holds_alternative<ShutdownCore>(*decoded)) return 0;
      EngineCoreInput input;
      if (auto *r = std::get_if<EngineCoreRequest>(&*decoded)) {
        input = std::move(*r);
      } else if (auto *a = std::get_if<AbortRequests>(&*decoded)) {
        input = std::move(*a);
      } else {
        input = std::move(std::get<FinishRequestsStopped>(*decoded));
      }
      apply_engine_core_input(core, input, &rejected);
    }
    if (getppid() != parent) return 0;  // orphaned (the death signal should have come first)
    StatusOr<std::optional<EngineCoreOutputs>> outs = step_engine_core(core, &rejected);
    if (!outs.ok()) {
      LOG(ERROR) << "engine core process: step failed: " << outs.status().to_string();
      send_failure(out, outs.status().with_context("engine core step failed"));
      return 1;
    }
    if (outs->has_value()) send_message(out, std::move(**outs));
  }
}

}  // namespace

int run_engine_core_process(const std::string &input_address, const std::string &output_address,
                            const std::function<StatusOr<EngineCoreProcessCore>()> &make_core) {
  // Ctrl-C in a terminal reaches the whole process group: the parent decides when the core stops.
  std::signal(SIGINT, SIG_IGN);
  const pid_t parent = getppid();
  try {
    zmq::context_t context(1);
    zmq::socket_t in(context, zmq::socket_type::pull);
    zmq::socket_t out(context, zmq::socket_type::push);
    in.set(zmq::sockopt::linger, 0);
    out.set(zmq::sockopt::linger, 1000);  // a final Failure message still gets out
    in.connect(input_address);
    out.connect(output_address);
    StatusOr<EngineCoreProcessCore> made = make_core();
    if (!made.ok()) {
      send_failure(out, made.status());
      return 1;
    }
    EngineCoreProcessCore core = std::move(made).value();
    send_message(out, EngineCoreReady(core.config.info()));
    return serve(in, out, *core.instance.core, parent);
  } catch (const zmq::error_t &e) {
    std::fprintf(stderr, "llmserve engine-core: ZMQ error: %s\n", e.what());
    return 2;
  }
}

}  // namespace llmserve
