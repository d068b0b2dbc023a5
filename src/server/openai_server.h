// OpenAIServer: the OpenAI-compatible routes over an AsyncLLM — /v1/completions and /v1/chat/completions
// (streamed as SSE or not), /v1/models, /tokenize, /detokenize, /health, /version, /metrics — with API-key
// auth, a limit on requests in flight and one log line per request. Invariant: every engine request it
// submits is either finished by the engine or aborted (client gone, shutdown), and is counted in
// num_in_flight() until its final output arrived.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <variant>

#include "engine/sampling_params.h"
#include "frontend/async_llm.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/protocol.h"
#include "tokenizer/chat_template/chat_template.h"

namespace llmserve::server {

struct ServingOptions {
  // The model ids clients may name (vLLM's --served-model-name a b); the first names it in metrics and logs.
  std::vector<std::string> served_model_names = {"llmserve"};
  std::string model_root;  // shown as "root" in /v1/models (empty: the served name)
  std::string version;                         // /version
  std::string api_key;                         // empty: no auth
  bool log_requests = true;
  int64_t max_in_flight_requests = 4096;  // HTTP generation requests at once; more get 429
  SamplingParams default_params;          // request defaults (generation_config.json unless --generation-config vllm)
  int32_t max_n = 128;
  // Tool calling (vLLM's --enable-auto-tool-choice / --tool-call-parser): tool_choice "auto" parses the reply with
  // this parser (server/tool_parsers.h); without them "auto" with tools is refused.
  bool enable_auto_tool_choice = false;
  std::string tool_call_parser;
};

class OpenAIServer {
 public:
  explicit OpenAIServer(ServingOptions options);
  ~OpenAIServer();

  void register_routes(HttpServer &server);
  // The engine is ready: /health turns 200 and generation opens. `llm` and `metrics` must outlive every
  // request; `chat_template` is the template source (nullopt: chat requests must bring their own).
  Status set_engine(AsyncLLM *llm, ServerMetrics *metrics, std::optional<std::string> chat_template);
  // Shutdown: new generation requests get 503; abort_all() aborts the ones in flight.
  void set_draining() { draining_ = true; }
  void abort_all();
  int64_t num_in_flight() const { return num_in_flight_.load(); }

 private:
  struct Job;
  asio::awaitable<void> handle_completions(HttpExchange &ex);
  asio::awaitable<void> handle_chat(HttpExchange &ex);
  asio::awaitable<void> handle_models(HttpExchange &ex);
  asio::awaitable<void> handle_model(HttpExchange &ex, const std::string &name);  // GET /v1/models/{name}
  OJson model_card(const std::string &name) const;                                // one entry of /v1/models
  asio::awaitable<void> handle_tokenize(HttpExchange &ex);
  asio::awaitable<void> handle_detokenize(HttpExchange &ex);
  asio::awaitable<void> handle_health(HttpExchange &ex);
  asio::awaitable<void> handle_version(HttpExchange &ex);
  asio::awaitable<void> handle_metrics(HttpExchange &ex);

  // Runs one generation job (submit, stream or collect, respond); the body of both generation routes.
  asio::awaitable<void> run_job(HttpExchange &ex, Job &job);
  asio::awaitable<void> stream_job(HttpExchange &ex, Job &job);
  asio::awaitable<void> collect_job(HttpExchange &ex, Job &job);
  asio::awaitable<bool> wait_outputs(HttpExchange &ex, Job &job);
  Status submit(Job &job);
  void abort_job(Job &job);
  void finish_job(Job &job);

  // Checks auth, readiness and the model name; an error response, or nullopt to go on.
  std::optional<HttpResponse> check_request(const HttpRequest &req, bool needs_engine) const;
  // The front both generation routes share: check_request, the JSON body, the typed request (`parse`) and the
  // model name. The request, or the error response to send.
  template <typename Request>
  std::variant<Request, HttpResponse> parse_generation_request(
      const HttpRequest &req, StatusOr<Request> (*parse)(const OJson &, const SamplingParams &, const ProtocolLimits &))
      const;
  StatusOr<std::vector<int32_t>> render_chat(const ChatRequest &req) const;
  std::string token_name(int32_t id, bool as_id) const;
  ProtocolLimits limits() const;

  ServingOptions options_;
  std::atomic<ServerMetrics *> metrics_{nullptr};
  std::optional<ChatTemplate> chat_template_;
  std::atomic<AsyncLLM *> llm_{nullptr};
  std::atomic<bool> draining_{false};
  std::atomic<int64_t> num_in_flight_{0};
  mutable std::mutex mu_;
  std::set<std::string> live_ids_;  // engine request ids submitted and not yet finished
};

// The HTTP status for a Status from the frontend (InvalidArgument 400, NotFound 404, ResourceExhausted 429, ...).
int http_status_of(const Status &status);

}  // namespace llmserve::server
