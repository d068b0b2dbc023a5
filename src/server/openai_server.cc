// OpenAIServer: routes, auth, readiness, chat template rendering and the small endpoints (models, tokenize,
// detokenize, health, version, metrics). The generation routes are in generation.cc.
#include "server/openai_server.h"

#include <ctime>

#include "server/responses.h"
#include "server/sse.h"

namespace llmserve::server {

using asio::awaitable;

int http_status_of(const Status &status) {
  switch (status.code()) {
    case StatusCode::kOk:
      return 200;
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange:
    case StatusCode::kAlreadyExists:
    case StatusCode::kFailedPrecondition:
    case StatusCode::kUnimplemented:
      return 400;
    case StatusCode::kUnauthenticated:
      return 401;
    case StatusCode::kNotFound:
      return 404;
    case StatusCode::kResourceExhausted:
      return 429;
    case StatusCode::kUnavailable:
      return 503;
    default:
      return 500;
  }
}

OpenAIServer::OpenAIServer(ServingOptions options) : options_(std::move(options)) {}

OpenAIServer::~OpenAIServer() = default;

Status OpenAIServer::set_engine(AsyncLLM *llm, ServerMetrics *metrics, std::optional<std::string> chat_template) {
  if (chat_template) {
    StatusOr<ChatTemplate> t = ChatTemplate::parse(*chat_template);
    if (!t.ok()) return t.status().with_context("--chat-template");
    chat_template_.emplace(std::move(*t));
  }
  llm->set_stats_callback([metrics](const IterationStats &s) { metrics->record(s); });
  metrics_.store(metrics);
  llm_.store(llm);
  return ok_status();
}

void OpenAIServer::register_routes(HttpServer &server) {
  auto bind = [this](awaitable<void> (OpenAIServer::*fn)(HttpExchange &)) {
    return [this, fn](HttpExchange &ex) { return (this->*fn)(ex); };
  };
  server.add_route("POST", "/v1/completions", bind(&OpenAIServer::handle_completions));
  server.add_route("POST", "/v1/chat/completions", bind(&OpenAIServer::handle_chat));
  server.add_route("GET", "/v1/models", bind(&OpenAIServer::handle_models));
  server.add_route("POST", "/tokenize", bind(&OpenAIServer::handle_tokenize));
  server.add_route("POST", "/detokenize", bind(&OpenAIServer::handle_detokenize));
  // /v1/models/{id}: one served name (an unknown id is the router's 404).
  for (const std::string &name : options_.served_model_names) {
    server.add_route("GET", "/v1/models/" + name, [this, name](HttpExchange &ex) { return handle_model(ex, name); });
  }
  server.add_route("GET", "/health", bind(&OpenAIServer::handle_health));
  // vLLM's /ping (SageMaker's health check), GET and POST: the same answer as /health.
  server.add_route("GET", "/ping", bind(&OpenAIServer::handle_health));
  server.add_route("POST", "/ping", bind(&OpenAIServer::handle_health));
  server.add_route("GET", "/version", bind(&OpenAIServer::handle_version));
  server.add_route("GET", "/metrics", bind(&OpenAIServer::handle_metrics));
}

ProtocolLimits OpenAIServer::limits() const {
  ProtocolLimits l;
  l.vocab_size = llm_.load()->vocab_size();
  l.max_n = options_.max_n;
  return l;
}

std::optional<HttpResponse> OpenAIServer::check_request(const HttpRequest &req, bool needs_engine) const {
  if (!options_.api_key.empty()) {
    const std::string expected = "Bearer " + options_.api_key;
    // Constant-time comparison, so the key cannot be guessed byte by byte from response times.
    unsigned diff = req.authorization.size() != expected.size();
    for (size_t i = 0; i < expected.size(); ++i) {
      diff |= static_cast<unsigned>(i < req.authorization.size() ? req.authorization[i] : 0) ^
              static_cast<unsigned>(expected[i]);
    }
    if (diff != 0) return HttpServer::error_response(401, "Unauthorized: a valid API key is required");
  }
  AsyncLLM *llm = llm_.load();
  if (llm == nullptr) return HttpServer::error_response(503, "the model is still loading");
  if (needs_engine) {
    if (draining_.load()) return HttpServer::error_response(503, "the server is shutting down");
    if (!llm->healthy()) return HttpServer::error_response(503, "the engine is not running");
    if (num_in_flight_.load() >= options_.max_in_flight_requests) {
      return HttpServer::error_response(
          429, "too many requests in flight (limit " + std::to_string(options_.max_in_flight_requests) + ")");
    }
  }
  return std::nullopt;
}

std::string OpenAIServer::token_name(int32_t id, bool as_id) const {
  const Tokenizer *tok = llm_.load()->tokenizer();
  if (as_id || tok == nullptr) return "token_id:" + std::to_string(id);
  const int32_t one[1] = {id};
  return tok->decode(one, /*skip_special_tokens=*/false);
}

StatusOr<std::vector<int32_t>> OpenAIServer::render_chat(const ChatRequest &req) const {
  const Tokenizer *tok = llm_.load()->tokenizer();
  if (tok == nullptr) return invalid_argument("messages: this model has no tokenizer, so chat is not available");
  std::optional<ChatTemplate> own;
  const ChatTemplate *tmpl = chat_template_ ? &*chat_template_ : nullptr;
  if (req.chat_template) {
    StatusOr<ChatTemplate> t = ChatTemplate::parse(*req.chat_template);
    if (!t.ok()) return t.status().with_context("chat_template");
    own.emplace(std::move(*t));
    tmpl = &*own;
  }
  if (tmpl == nullptr) {
    return invalid_argument(
        "chat_template: the model has no chat template; start the server with --chat-template or send one");
  }
  OJson context = req.chat_template_kwargs;
  context["messages"] = req.messages;
  // An assistant message's tool calls carry their arguments as a JSON string (OpenAI); templates render them with
  // tojson or iterate them, so they get the object (vLLM does the same).
  for (OJson &m : context["messages"]) {
    auto calls = m.find("tool_calls");
    if (m.value("role", "") != "assistant" || calls == m.end() || !calls->is_array()) continue;
    for (OJson &call : *calls) {
      if (!call.is_object() || !call.contains("function") || !call["function"].is_object()) continue;
      OJson &args = call["function"]["arguments"];
      if (!args.is_string()) continue;
      OJson parsed = OJson::parse(args.get<std::string>(), nullptr, false);
      if (parsed.is_object()) args = std::move(parsed);
    }
  }
  context["tools"] = req.tools;
  context["documents"] = req.documents;
  context["add_generation_prompt"] = req.add_generation_prompt;
  context["bos_token"] = tok->bos_token();
  context["eos_token"] = tok->eos_token();
  StatusOr<std::string> text = tmpl->render(context);
  if (!text.ok()) return invalid_argument("messages: the chat template failed: " + text.status().message());
  std::string prompt = std::move(*text);
  if (req.continue_final_message) {
    // Cut the rendering right after the final message's content, so generation continues it (vLLM's rule).
    const OJson &last = req.messages.back();
    std::string content =
        last.contains("content") && last["content"].is_string() ? last["content"].get<std::string>() : std::string();
    size_t pos = content.empty() ? std::string::npos : prompt.rfind(content);
    if (pos == std::string::npos) {
      while (!content.empty() && std::isspace(static_cast<unsigned char>(content.back()))) content.pop_back();
      pos = content.empty() ? std::string::npos : prompt.rfind(content);
    }
    if (pos != std::string::npos) prompt.resize(pos + content.size());
  }
  std::vector<int32_t> ids = tok->encode(prompt, req.add_special_tokens.value_or(false));
  if (ids.empty()) return invalid_argument("messages: the rendered prompt is empty");
  return ids;
}

OJson OpenAIServer::model_card(const std::string &name) const {
  return {{"id", name},
          {"object", "model"},
          {"created", static_cast<int64_t>(std::time(nullptr))},
          {"owned_by", "llmserve"},
          {"root", options_.model_root.empty() ? options_.served_model_names.front() : options_.model_root},
          {"parent", nullptr},
          {"max_model_len", llm_.load()->max_model_len()}};
}

awaitable<void> OpenAIServer::handle_models(HttpExchange &ex) {
  if (auto err = check_request(ex.request(), false)) {
    co_await ex.respond(std::move(*err));
    co_return;
  }
  OJson cards = OJson::array();
  for (const std::string &name : options_.served_model_names) cards.push_back(model_card(name));
  HttpResponse res;
  res.body = dump_json(OJson{{"object", "list"}, {"data", std::move(cards)}});
  co_await ex.respond(std::move(res));
}

awaitable<void> OpenAIServer::handle_model(HttpExchange &ex, const std::string &name) {
  if (auto err = check_request(ex.request(), false)) {
    co_await ex.respond(std::move(*err));
    co_return;
  }
  HttpResponse res;
  res.body = dump_json(model_card(name));
  co_await ex.respond(std::move(res));
}

awaitable<void> OpenAIServer::handle_tokenize(HttpExchange &ex) {
  if (auto err = check_request(ex.request(), false)) {
    co_await ex.respond(std::move(*err));
    co_return;
  }
  HttpResponse res;
  StatusOr<OJson> body = parse_json_object(ex.request().body);
  const Tokenizer *tok = llm_.load()->tokenizer();
  std::vector<int32_t> ids;
  Status status = body.status();
  if (status.ok() && tok == nullptr) status = invalid_argument("prompt: this model has no tokenizer");
  if (status.ok() && body->contains("messages")) {
    StatusOr<ChatRequest> chat = parse_chat_request(*body, options_.default_params, limits());
    if (chat.ok()) {
      StatusOr<std::vector<int32_t>> r = render_chat(*chat);
      if (r.ok()) ids = std::move(*r);
      status = r.status();
    } else {
      status = chat.status();
    }
  } else if (status.ok()) {
    auto prompt = body->find("prompt");
    bool add_special = true;
    auto add = body->find("add_special_tokens");
    if (add != body->end() && !add->is_null() && !add->is_boolean()) {
      status = invalid_argument("add_special_tokens: expected a boolean");
    } else if (add != body->end() && add->is_boolean()) {
      add_special = add->get<bool>();
    }
    if (status.ok() && (prompt == body->end() || !prompt->is_string())) {
      status = invalid_argument("prompt: expected a string");
    }
    if (status.ok()) ids = tok->encode(prompt->get<std::string>(), add_special);
  }
  if (!status.ok()) {
    co_await ex.respond(
        HttpServer::error_response(http_status_of(status), status.message(), param_of(status.message())));
    co_return;
  }
  OJson out = {{"count", ids.size()}, {"max_model_len", llm_.load()->max_model_len()}, {"tokens", ids}};
  auto strs = body->find("return_token_strs");
  if (strs != body->end() && strs->is_boolean() && strs->get<bool>()) {
    OJson list = OJson::array();
    for (int32_t id : ids) list.push_back(tok->id_to_token(id).value_or(""));
    out["token_strs"] = std::move(list);
  } else {
    out["token_strs"] = nullptr;
  }
  res.body = dump_json(out);
  co_await ex.respond(std::move(res));
}

awaitable<void> OpenAIServer::handle_detokenize(HttpExchange &ex) {
  if (auto err = check_request(ex.request(), false)) {
    co_await ex.respond(std::move(*err));
    co_return;
  }
  StatusOr<OJson> body = parse_json_object(ex.request().body);
  const Tokenizer *tok = llm_.load()->tokenizer();
  Status status = body.status();
  std::vector<int32_t> ids;
  if (status.ok() && tok == nullptr) status = invalid_argument("tokens: this model has no tokenizer");
  if (status.ok()) {
    auto tokens = body->find("tokens");
    if (tokens == body->end() || !tokens->is_array()) {
      status = invalid_argument("tokens: expected a list of token ids");
    } else {
      const int64_t vocab = llm_.load()->vocab_size();
      for (const OJson &t : *tokens) {
        if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= vocab) {
          status = invalid_argument("tokens: every entry must be a token id in [0, " + std::to_string(vocab) + ")");
          break;
        }
        ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
      }
    }
  }
  if (!status.ok()) {
    co_await ex.respond(HttpServer::error_response(400, status.message(), param_of(status.message())));
    co_return;
  }
  HttpResponse res;
  res.body = dump_json(OJson{{"prompt", tok->decode(ids)}});
  co_await ex.respond(std::move(res));
}

awaitable<void> OpenAIServer::handle_health(HttpExchange &ex) {
  AsyncLLM *llm = llm_.load();
  HttpResponse res;
  res.content_type = "text/plain";
  if (llm == nullptr) {
    res.status = 503;
    res.body = "loading";
  } else if (!llm->healthy()) {
    res.status = 503;
    res.body = "engine dead";
  }
  co_await ex.respond(std::move(res));
}

awaitable<void> OpenAIServer::handle_version(HttpExchange &ex) {
  HttpResponse res;
  res.body = dump_json(OJson{{"version", options_.version}});
  co_await ex.respond(std::move(res));
}

awaitable<void> OpenAIServer::handle_metrics(HttpExchange &ex) {
  HttpResponse res;
  res.content_type = "text/plain; version=0.0.4; charset=utf-8";
  if (ServerMetrics *m = metrics_.load()) res.body = m->render();
  co_await ex.respond(std::move(res));
}

}  // namespace llmserve::server
