// `llmserve serve [MODEL_DIR]`: the OpenAI-compatible server (vLLM's `vllm serve` flags). It listens first
// (/health answers 503 while the model loads), then loads the model and opens generation. SIGTERM / SIGINT:
// stop accepting, let in-flight requests finish for --shutdown-timeout seconds, abort the rest, exit 0.
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include "cli/builtin_default.h"
#include "cli/command.h"
#include "cli/engine_flags.h"
#include "cli/serving_engine.h"
#include "core/logging.h"
#include "model/model_config.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/openai_server.h"
#include "server/tool_parsers.h"

namespace llmserve::cli {
namespace {

struct ServeFlags {
  ModelFlags model;
  EngineFlags engine;
  std::vector<std::string> positional;
  std::string host = "127.0.0.1", api_key, chat_template;
  std::vector<std::string> served_model_names;
  std::string generation_config = "auto", log_level = "info";
  int64_t port = 8000, http_threads = 2, max_in_flight_requests = 4096, max_request_body_bytes = 32 << 20;
  double request_timeout = 30.0, keep_alive_timeout = 5.0, shutdown_timeout = 10.0;
  bool disable_log_requests = false, engine_process = false;
  bool enable_auto_tool_choice = false;  // vLLM's: tool_choice "auto" parses tool calls with tool_call_parser
  std::string tool_call_parser;
};

// SIGINT / SIGTERM: the handler (any thread) only writes a byte to a pipe; one waiter thread reads it and
// decides, so nothing but write() runs in signal context. Threads made before serve starts (the CPU pool) may
// take the signal too, which is why the signal is not merely blocked and sigwait()ed.
int g_signal_pipe[2] = {-1, -1};

extern "C" void on_stop_signal(int) {
  const char byte = 1;
  [[maybe_unused]] ssize_t n = write(g_signal_pipe[1], &byte, 1);
}

class SignalWaiter {
 public:
  SignalWaiter() {
    if (pipe(g_signal_pipe) != 0) std::perror("pipe");
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
    thread_ = std::thread([this] {
      char byte = 0;
      while (read(g_signal_pipe[0], &byte, 1) < 0 && errno == EINTR) {
      }
      std::lock_guard<std::mutex> lock(mu_);
      if (!serving_) std::_Exit(0);  // still loading: nothing to drain
      signalled_ = true;
      cv_.notify_all();
    });
    thread_.detach();
  }
  void set_serving() {
    std::lock_guard<std::mutex> lock(mu_);
    serving_ = true;
  }
  void wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return signalled_; });
  }

 private:
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool serving_ = false, signalled_ = false;
};

StatusOr<std::optional<std::string>> chat_template_source(const ServeFlags &f, const LoadedModel &loaded) {
  if (!f.chat_template.empty()) {
    std::ifstream in(f.chat_template);
    if (in) {
      std::stringstream ss;
      ss << in.rdbuf();
      return std::optional<std::string>(ss.str());
    }
    // vLLM accepts the template itself in place of a path.
    if (f.chat_template.find("{") != std::string::npos) return std::optional<std::string>(f.chat_template);
    return not_found("--chat-template " + f.chat_template + ": cannot open");
  }
  if (loaded.tokenizer) {
    if (auto t = loaded.tokenizer->chat_template(); t) return std::optional<std::string>(*t);
  }
  if (loaded.builtin_default) return std::optional<std::string>(builtin_default_chat_template());
  return std::optional<std::string>();
}

// Every flag's value, before anything is printed, listened on or loaded (a usage error: exit 2).
Status check_serve_flags(ServeFlags &f) {
  RETURN_IF_ERROR(take_positional_model(f.positional, "serve", &f.model));
  LogLevel level;
  if (!parse_log_level(f.log_level, &level)) {
    return invalid_argument("--log-level '" + f.log_level + "': expected debug, info, warning or error");
  }
  RETURN_IF_ERROR(check_model_flags(f.model));
  RETURN_IF_ERROR(check_engine_flags(f.engine));
  if (f.port < 0 || f.port > 65535) return invalid_argument("--port must be in [0, 65535]");
  if (f.http_threads < 1 || f.http_threads > 64) return invalid_argument("--http-threads must be in [1, 64]");
  if (f.max_in_flight_requests < 1) return invalid_argument("--max-in-flight-requests must be at least 1");
  if (f.max_request_body_bytes < 1) return invalid_argument("--max-request-body-bytes must be at least 1");
  if (!(f.request_timeout > 0)) return invalid_argument("--request-timeout must be a positive number of seconds");
  if (!(f.keep_alive_timeout > 0)) return invalid_argument("--keep-alive-timeout must be a positive number of seconds");
  if (!(f.shutdown_timeout >= 0)) return invalid_argument("--shutdown-timeout must be a number of seconds >= 0");
  if (f.enable_auto_tool_choice && f.tool_call_parser.empty()) {
    return invalid_argument("--enable-auto-tool-choice: requires --tool-call-parser (hermes, llama3_json, mistral)");
  }
  if (!f.tool_call_parser.empty() && !server::is_known_tool_call_parser(f.tool_call_parser)) {
    return invalid_argument("--tool-call-parser '" + f.tool_call_parser + "': expected hermes, llama3_json or mistral");
  }
  return ok_status();
}

int run_serve(const std::vector<std::string> &args) {
  ServeFlags f;
  ArgParser parser("serve",
                   "OpenAI-compatible HTTP server (vLLM's flag names). MODEL is a Hugging Face model folder or\n"
                   "id (ORG/NAME: from the Hub cache, downloaded when absent); without one the built-in default\n"
                   "model is served.");
  parser.set_positional("[MODEL]", &f.positional);
  add_model_flags(parser, &f.model);
  add_engine_flags(parser, &f.engine);
  parser.add_string("host", &f.host, "address to listen on (default 127.0.0.1)");
  parser.add_int("port", &f.port, "port to listen on (default 8000; 0 = any free port)");
  parser.add_string("api-key", &f.api_key, "require 'Authorization: Bearer KEY' (/health, /metrics stay open)");
  parser.add_string_list("served-model-name", &f.served_model_names,
                         "model ids in the API, one or more (default: the model as given); the first names it in "
                         "metrics and logs");
  parser.add_string("chat-template", &f.chat_template, "chat template file or template text");
  parser.add_string("generation-config", &f.generation_config,
                    "auto (default: sampling defaults from the model's generation_config.json) | vllm (none) | a folder");
  parser.add_bool("disable-log-requests", &f.disable_log_requests, "no log line per request");
  parser.add_string("log-level", &f.log_level, "debug | info | warning | error");
  parser.add_int("http-threads", &f.http_threads, "HTTP I/O threads (default 2)");
  parser.add_int("max-in-flight-requests", &f.max_in_flight_requests, "generation requests at once; more get 429");
  parser.add_int("max-request-body-bytes", &f.max_request_body_bytes, "larger bodies get 413 (default 32 MiB)");
  parser.add_float("request-timeout", &f.request_timeout, "seconds to receive a whole request (default 30)");
  parser.add_float("keep-alive-timeout", &f.keep_alive_timeout, "idle seconds before a connection is closed");
  parser.add_bool("engine-process", &f.engine_process, "run the engine core in a child process (ZMQ)");
  parser.add_float("shutdown-timeout", &f.shutdown_timeout, "seconds in-flight requests get at shutdown");
  parser.add_bool("enable-auto-tool-choice", &f.enable_auto_tool_choice,
                  "tool_choice \"auto\": parse tool calls out of replies (needs --tool-call-parser)");
  parser.add_string("tool-call-parser", &f.tool_call_parser,
                    "the model family's tool-call format: hermes (Qwen, Hermes) | llama3_json | mistral");
  if (int code = parse_or_exit_code(parser, args); code >= 0) return code;
  if (Status s = check_serve_flags(f); !s.ok()) return usage_error(s);
  LogLevel level;
  parse_log_level(f.log_level, &level);  // checked above
  set_min_log_level(level);
  // A model id is resolved (from the Hub cache, or downloaded) and a model that cannot be found fails here, before
  // "listening"; the weights load after, behind /health's 503.
  const std::string model_name = f.model.model;  // as given: the served name and root (vLLM's), an id stays an id
  if (Status s = resolve_model_flags(&f.model); !s.ok()) return fail(s);
  if (!f.model.model.empty() || !f.model.config_file.empty()) {
    StatusOr<ModelConfig> config = load_model_config(f.model.config_file.empty() ? f.model.model : f.model.config_file);
    if (!config.ok()) return fail(config.status());
  }
  StatusOr<SamplingParams> defaults = generation_defaults(f.generation_config, f.model.model);
  if (!defaults.ok()) return fail(defaults.status().with_context("--generation-config"));
  // --node-rank > 0: this node serves no HTTP; its ranks follow node 0's engine until it ends.
  if (f.model.node_rank > 0) return run_follower_node(f.model);

  SignalWaiter signals;
  server::HttpServerConfig http;
  http.host = f.host;
  http.port = static_cast<int>(f.port);
  http.num_threads = static_cast<int>(f.http_threads);
  http.max_body_bytes = static_cast<size_t>(f.max_request_body_bytes);
  http.request_read_timeout_s = f.request_timeout;
  http.keep_alive_timeout_s = f.keep_alive_timeout;
  server::ServingOptions options;
  options.served_model_names = !f.served_model_names.empty() ? f.served_model_names
                               : std::vector<std::string>{!model_name.empty() ? model_name : "llmserve-default"};
  options.model_root = model_name;
  options.version = LLMSERVE_VERSION;
  options.api_key = f.api_key;
  options.log_requests = !f.disable_log_requests;
  options.max_in_flight_requests = f.max_in_flight_requests;
  options.default_params = *defaults;
  options.enable_auto_tool_choice = f.enable_auto_tool_choice;
  options.tool_call_parser = f.tool_call_parser;
  server::OpenAIServer api(options);
  server::HttpServer http_server(http);
  api.register_routes(http_server);
  if (Status s = http_server.start(); !s.ok()) return fail(s);
  // The port line is how scripts and tests find a --port 0 server.
  std::fprintf(stderr, "llmserve: listening on http://%s:%d (loading the model)\n", f.host.c_str(), http_server.port());

  StatusOr<std::unique_ptr<ServingEngine>> engine =
      start_serving_engine(f.model, f.engine, f.engine_process, /*need_tokenizer=*/false);
  if (!engine.ok()) return fail(engine.status());
  AsyncLLM &llm = *(*engine)->llm;
  StatusOr<std::optional<std::string>> tmpl = chat_template_source(f, (*engine)->loaded);
  if (!tmpl.ok()) return fail(tmpl.status());
  server::ServerMetrics metrics(options.served_model_names.front(), llm.max_model_len());
  if (Status s = api.set_engine(&llm, &metrics, *tmpl); !s.ok()) return fail(s);
  signals.set_serving();
  std::fprintf(stderr, "llmserve: serving %s on http://%s:%d\n", options.served_model_names.front().c_str(),
               f.host.c_str(), http_server.port());

  signals.wait();
  std::fprintf(stderr, "llmserve: shutting down (%lld requests in flight)\n",
               static_cast<long long>(api.num_in_flight()));
  http_server.stop_accepting();
  api.set_draining();
  auto wait_idle = [&](double seconds) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (api.num_in_flight() > 0 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  };
  wait_idle(f.shutdown_timeout);
  if (api.num_in_flight() > 0) {
    api.abort_all();
    wait_idle(2.0);
  }
  http_server.stop();
  llm.shutdown();
  std::fprintf(stderr, "llmserve: stopped\n");
  return 0;
}

}  // namespace

LLMSERVE_REGISTER_COMMAND("serve", "OpenAI-compatible HTTP server (completions, chat, SSE, metrics)", run_serve);

}  // namespace llmserve::cli
