// The generation routes of OpenAIServer: /v1/completions and /v1/chat/completions. A Job is one HTTP request:
// its prompts are submitted to the AsyncLLM, whose callbacks queue RequestOutputs and wake the handler, which
// either streams SSE chunks as outputs arrive or answers once every prompt finished.
#include <algorithm>
#include <chrono>
#include <ctime>
#include <deque>
#include <mutex>

#include "core/logging.h"
#include "server/openai_server.h"
#include "server/responses.h"
#include "server/sse.h"
#include "server/tool_parsers.h"

namespace llmserve::server {

using asio::awaitable;

struct OpenAIServer::Job {
  bool chat = false;
  std::string id;  // cmpl-... / chatcmpl-...
  int64_t created = 0;
  std::string model;
  const GenerationRequest *req = nullptr;
  std::vector<PromptInput> prompts;
  std::string chat_echo;  // chat echo: the final message's content, sent before the reply
  int32_t chat_top_logprobs = 0;
  // Chat tool calling: the parser of the replies (null: plain content) and the tool_choice it serves; per choice,
  // the streaming state (stream only).
  std::unique_ptr<ToolCallParser> tool_parser;
  ToolChoice tool_choice = ToolChoice::kNone;
  std::vector<std::unique_ptr<ToolCallStreamer>> tool_streamers;

  // Filled by the engine's output thread, drained by the handler on its strand.
  struct Queue {
    std::mutex mu;
    std::deque<RequestOutput> items;
    std::shared_ptr<Waker> waker;
  };
  std::shared_ptr<Queue> queue = std::make_shared<Queue>();
  std::vector<std::string> engine_ids;               // one per prompt
  std::vector<std::optional<RequestOutput>> latest;  // per prompt
  size_t num_finished = 0;
  bool aborted = false;

  // Per choice (prompt * n + index), for streaming.
  std::vector<bool> choice_started, choice_finished;
  std::vector<size_t> choice_offset;
  std::vector<size_t> choice_text_sent;  // bytes of the choice's text already streamed
  size_t stop_holdback = 0;              // bytes held back while a stop string could still start in them

  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  std::optional<double> ttft;

  int32_t n() const { return req->params.n; }
  size_t num_choices() const { return prompts.size() * static_cast<size_t>(n()); }
  double elapsed() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); }
};

namespace {

std::string engine_stopped_event() {
  return sse_event(OJson{
      {"error",
       {{"message", "the engine stopped"}, {"type", "ServiceUnavailableError"}, {"param", nullptr}, {"code", 503}}}});
}

int64_t unix_now() { return static_cast<int64_t>(std::time(nullptr)); }

// OpenAI's finish_reason once tool calls were parsed: "tool_calls" for tool_choice auto, and for required when the
// reply ended normally (vLLM's rule); a named tool_choice keeps the engine's reason (OpenAI answers "stop").
OJson tool_finish_reason(ToolChoice choice, const std::optional<FinishReason> &reason, size_t num_calls) {
  if (!reason) return nullptr;
  const bool tool = num_calls > 0 && (choice == ToolChoice::kAuto ||
                                      (choice == ToolChoice::kRequired && *reason == FinishReason::kStop));
  return tool ? OJson("tool_calls") : OJson(finish_reason_json(*reason));
}

OJson tool_calls_json(const std::vector<ParsedToolCall> &calls) {
  OJson out = OJson::array();
  for (const ParsedToolCall &c : calls) {
    out.push_back({{"id", random_tool_call_id()},
                   {"type", "function"},
                   {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
  }
  return out;
}

OJson tool_call_deltas_json(const std::vector<ToolCallStreamer::CallDelta> &deltas) {
  OJson out = OJson::array();
  for (const ToolCallStreamer::CallDelta &d : deltas) {
    if (d.first) {
      out.push_back({{"index", d.index},
                     {"id", d.id},
                     {"type", "function"},
                     {"function", {{"name", d.name}, {"arguments", d.arguments}}}});
    } else {
      out.push_back({{"index", d.index}, {"function", {{"arguments", d.arguments}}}});
    }
  }
  return out;
}

// A frontend error about the output constraint names the request field the constraint came from (response_format,
// a guided_* field, tools) rather than the engine's generic "structured_outputs".
Status name_constraint_field(const Status &s, const std::string &field) {
  static const std::string kPrefix = "structured_outputs";
  if (s.ok() || field.empty() || field == kPrefix || s.message().rfind(kPrefix + ":", 0) != 0) return s;
  return Status(s.code(), field + s.message().substr(kPrefix.size()));
}

// The logprobs of the last `count` of `all_ids` (entries align with ids when logprobs were requested).
std::vector<TokenLogprobs> tail_logprobs(const CompletionOutput &o, size_t count) {
  if (o.logprobs.size() < count) return {};
  return std::vector<TokenLogprobs>(o.logprobs.end() - static_cast<std::ptrdiff_t>(count), o.logprobs.end());
}

// Echo with logprobs (completions, as vLLM): the prompt's tokens lead the choice's token list, each with its prompt
// logprobs (position 0, which nothing scores, and any position not scored yet, stay null), then `ids`.
void prepend_prompt(const RequestOutput &r, std::vector<int32_t> *ids, std::vector<TokenLogprobs> *logprobs) {
  std::vector<int32_t> all = r.prompt_token_ids;
  std::vector<TokenLogprobs> lps(all.size());  // an empty entry reads as null
  for (size_t q = 0; q < r.prompt_logprobs.size() && q < lps.size(); ++q) {
    if (r.prompt_logprobs[q]) lps[q] = *r.prompt_logprobs[q];
  }
  all.insert(all.end(), ids->begin(), ids->end());
  if (logprobs->size() == ids->size()) lps.insert(lps.end(), logprobs->begin(), logprobs->end());
  lps.resize(all.size());  // generated tokens without logprobs: nulls
  *ids = std::move(all);
  *logprobs = std::move(lps);
}

// The next piece of a choice's text to stream. The text is cut at a stop string only once the whole string
// arrived, so the last (longest stop - 1) bytes are held back until the choice finishes (as vLLM does);
// otherwise a stream could show the start of a stop string that the final text omits. Never splits a UTF-8
// sequence.
std::string stream_text(const CompletionOutput &o, size_t holdback, size_t *sent) {
  size_t upto = o.text.size();
  if (!o.finish_reason && holdback > 0) {
    upto = o.text.size() > holdback ? o.text.size() - holdback : 0;
    while (upto > *sent && upto < o.text.size() && (static_cast<unsigned char>(o.text[upto]) & 0xC0) == 0x80) --upto;
  }
  if (upto <= *sent) return "";
  std::string out = o.text.substr(*sent, upto - *sent);
  *sent = upto;
  return out;
}

int64_t count_completion_tokens(const std::vector<std::optional<RequestOutput>> &latest) {
  int64_t total = 0;
  for (const auto &r : latest) {
    if (!r) continue;
    for (const CompletionOutput &o : r->outputs) total += static_cast<int64_t>(o.token_ids.size());
  }
  return total;
}

int64_t count_prompt_tokens(const std::vector<std::optional<RequestOutput>> &latest) {
  int64_t total = 0;
  for (const auto &r : latest) {
    if (r) total += static_cast<int64_t>(r->prompt_token_ids.size());
  }
  return total;
}

}  // namespace

Status OpenAIServer::submit(Job &job) {
  AsyncLLM *llm = llm_.load();
  job.latest.assign(job.prompts.size(), std::nullopt);
  job.choice_started.assign(job.num_choices(), false);
  job.choice_finished.assign(job.num_choices(), false);
  job.choice_offset.assign(job.num_choices(), 0);
  job.choice_text_sent.assign(job.num_choices(), 0);
  if (job.tool_parser) {
    for (size_t c = 0; c < job.num_choices(); ++c) {
      job.tool_streamers.push_back(std::make_unique<ToolCallStreamer>(*job.tool_parser));
    }
  }
  for (const std::string &stop : job.req->params.stop) job.stop_holdback = std::max(job.stop_holdback, stop.size() - 1);
  for (size_t i = 0; i < job.prompts.size(); ++i) {
    std::string engine_id = job.prompts.size() == 1 ? job.id : job.id + "-" + std::to_string(i);
    {
      std::lock_guard<std::mutex> lock(mu_);
      live_ids_.insert(engine_id);
    }
    auto queue = job.queue;
    Status s =
        llm->add_request(engine_id, job.prompts[i], job.req->params, job.req->priority, [queue](RequestOutput out) {
          {
            std::lock_guard<std::mutex> lock(queue->mu);
            queue->items.push_back(std::move(out));
          }
          queue->waker->notify();
        });
    if (!s.ok()) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        live_ids_.erase(engine_id);
      }
      abort_job(job);
      // Already-submitted prompts still finish (aborted); count them as done for the caller.
      return s;
    }
    job.engine_ids.push_back(std::move(engine_id));
  }
  return ok_status();
}

void OpenAIServer::abort_job(Job &job) {
  job.aborted = true;
  AsyncLLM *llm = llm_.load();
  for (size_t i = 0; i < job.engine_ids.size(); ++i) {
    if (!job.latest.empty() && job.latest[i] && job.latest[i]->finished) continue;
    llm->abort_request(job.engine_ids[i]);
  }
}

void OpenAIServer::finish_job(Job &job) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const std::string &id : job.engine_ids) live_ids_.erase(id);
}

void OpenAIServer::abort_all() {
  std::vector<std::string> ids;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ids.assign(live_ids_.begin(), live_ids_.end());
  }
  AsyncLLM *llm = llm_.load();
  if (llm == nullptr) return;
  for (const std::string &id : ids) llm->abort_request(id);
}

// Waits for the next outputs; returns false when the job must end without them (the engine died, or the
// client left and every prompt's final output is in).
awaitable<bool> OpenAIServer::wait_outputs(HttpExchange &ex, Job &job) {
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(job.queue->mu);
      if (!job.queue->items.empty()) co_return true;
    }
    if (ex.client_gone() && !job.aborted) abort_job(job);
    AsyncLLM *llm = llm_.load();
    if (!llm->healthy()) co_return false;
    co_await job.queue->waker->wait();
  }
}

awaitable<void> OpenAIServer::run_job(HttpExchange &ex, Job &job) {
  job.queue->waker = ex.waker();
  Status s = submit(job);
  if (!s.ok()) {
    // Prompts submitted before the failing one were aborted; let their finals arrive before returning.
    while (job.num_finished < job.engine_ids.size()) {
      if (!co_await wait_outputs(ex, job)) break;
      std::deque<RequestOutput> items;
      {
        std::lock_guard<std::mutex> lock(job.queue->mu);
        items.swap(job.queue->items);
      }
      for (RequestOutput &o : items) job.num_finished += o.finished ? 1 : 0;
    }
    finish_job(job);
    s = name_constraint_field(s, job.req->constraint_field);
    co_await ex.respond(HttpServer::error_response(http_status_of(s), s.message(), param_of(s.message())));
    co_return;
  }
  num_in_flight_.fetch_add(1);
  ex.watch_disconnect();
  if (job.req->stream) {
    co_await stream_job(ex, job);
  } else {
    co_await collect_job(ex, job);
  }
  finish_job(job);
  num_in_flight_.fetch_sub(1);
  if (options_.log_requests) {
    const char *finish = "-";
    for (const auto &r : job.latest) {
      if (r && !r->outputs.empty() && r->outputs[0].finish_reason)
        finish = finish_reason_json(*r->outputs[0].finish_reason);
    }
    const std::string ttft = job.ttft ? std::to_string(*job.ttft) + "s" : std::string("-");
    LOG(INFO) << "request " << job.id << " " << (job.chat ? "chat" : "completion") << (job.req->stream ? " stream" : "")
              << " prompt_tokens=" << count_prompt_tokens(job.latest)
              << " gen_tokens=" << count_completion_tokens(job.latest) << " ttft=" << ttft
              << " duration=" << job.elapsed() << "s finish=" << (ex.client_gone() ? "client_gone" : finish);
  }
}

awaitable<void> OpenAIServer::collect_job(HttpExchange &ex, Job &job) {
  while (job.num_finished < job.engine_ids.size()) {
    if (!co_await wait_outputs(ex, job)) {
      if (!ex.client_gone()) co_await ex.respond(HttpServer::error_response(503, "the engine stopped"));
      co_return;
    }
    std::deque<RequestOutput> items;
    {
      std::lock_guard<std::mutex> lock(job.queue->mu);
      items.swap(job.queue->items);
    }
    for (RequestOutput &o : items) {
      if (!job.ttft) job.ttft = job.elapsed();
      size_t p = 0;
      while (p < job.engine_ids.size() && job.engine_ids[p] != o.request_id) ++p;
      if (p == job.engine_ids.size()) continue;
      if (o.finished && !(job.latest[p] && job.latest[p]->finished)) ++job.num_finished;
      job.latest[p] = std::move(o);
    }
  }
  if (ex.client_gone()) co_return;
  const int32_t n = job.n();
  OJson choices = OJson::array();
  for (size_t p = 0; p < job.latest.size(); ++p) {
    const RequestOutput &r = *job.latest[p];
    const bool as_ids = job.req->return_tokens_as_token_ids;
    TokenNamer namer = [this, as_ids](int32_t id) { return token_name(id, as_ids); };
    for (const CompletionOutput &o : r.outputs) {
      const int64_t index = static_cast<int64_t>(p) * n + o.index;
      const OJson finish = o.finish_reason ? OJson(finish_reason_json(*o.finish_reason)) : OJson(nullptr);
      OJson choice;
      if (job.chat) {
        OJson logprobs = nullptr;
        if (job.req->params.logprobs) logprobs = chat_logprobs(o.token_ids, o.logprobs, namer, job.chat_top_logprobs);
        OJson message = {{"role", "assistant"},
                         {"content", job.chat_echo + o.text},
                         {"refusal", nullptr},
                         {"tool_calls", OJson::array()}};
        OJson chat_finish = finish;
        if (job.tool_parser) {
          ToolCallResult calls = parse_tool_calls(*job.tool_parser, o.text);
          if (!calls.calls.empty()) {
            const std::string content = job.chat_echo + calls.content;
            message["content"] = content.empty() ? OJson(nullptr) : OJson(content);
            message["tool_calls"] = tool_calls_json(calls.calls);
          }
          chat_finish = tool_finish_reason(job.tool_choice, o.finish_reason, calls.calls.size());
        }
        choice = {{"index", index},
                  {"message", std::move(message)},
                  {"logprobs", std::move(logprobs)},
                  {"finish_reason", chat_finish},
                  {"stop_reason", stop_reason_json(o.stop_reason)}};
      } else {
        std::string text = o.text;
        if (job.req->echo) {
          const Tokenizer *tok = llm_.load()->tokenizer();
          text = (r.prompt.empty() && tok ? tok->decode(r.prompt_token_ids) : r.prompt) + text;
        }
        OJson logprobs = nullptr;
        size_t offset = 0;
        if (job.req->params.logprobs) {
          std::vector<int32_t> ids = o.token_ids;
          std::vector<TokenLogprobs> lps = o.logprobs;
          if (job.req->echo) prepend_prompt(r, &ids, &lps);
          logprobs = completion_logprobs(ids, lps, namer, &offset);
        }
        choice = {{"index", index},
                  {"text", std::move(text)},
                  {"logprobs", std::move(logprobs)},
                  {"finish_reason", finish},
                  {"stop_reason", stop_reason_json(o.stop_reason)}};
        if (job.req->prompt_logprobs_field) choice["prompt_logprobs"] = prompt_logprobs_json(r.prompt_logprobs, namer);
      }
      choices.push_back(std::move(choice));
    }
  }
  std::sort(choices.begin(), choices.end(),
            [](const OJson &a, const OJson &b) { return a["index"].get<int64_t>() < b["index"].get<int64_t>(); });
  OJson body = completion_envelope(job.id, job.chat ? "chat.completion" : "text_completion", job.created, job.model,
                                   std::move(choices));
  body["usage"] = usage_json(count_prompt_tokens(job.latest), count_completion_tokens(job.latest));
  if (job.chat && job.req->params.prompt_logprobs && !job.latest.empty() && job.latest[0]) {
    // vLLM puts the chat prompt's logprobs beside the choices (one prompt per chat request).
    const bool as_ids = job.req->return_tokens_as_token_ids;
    body["prompt_logprobs"] = prompt_logprobs_json(job.latest[0]->prompt_logprobs,
                                                   [this, as_ids](int32_t id) { return token_name(id, as_ids); });
  }
  HttpResponse res;
  res.body = dump_json(body);
  co_await ex.respond(std::move(res));
}

awaitable<void> OpenAIServer::stream_job(HttpExchange &ex, Job &job) {
  if (!co_await ex.begin_stream(200, "text/event-stream")) {
    abort_job(job);
  }
  const char *object = job.chat ? "chat.completion.chunk" : "text_completion";
  const int32_t n = job.n();
  const bool as_ids = job.req->return_tokens_as_token_ids;
  TokenNamer namer = [this, as_ids](int32_t id) { return token_name(id, as_ids); };
  const bool has_tokenizer = llm_.load()->tokenizer() != nullptr;
  auto chunk = [&](OJson choice) {
    OJson c = completion_envelope(job.id, object, job.created, job.model, OJson::array({std::move(choice)}));
    if (job.req->continuous_usage_stats) {
      c["usage"] = usage_json(count_prompt_tokens(job.latest), count_completion_tokens(job.latest));
    }
    return sse_event(c);
  };
  while (job.num_finished < job.engine_ids.size()) {
    if (!co_await wait_outputs(ex, job)) {
      if (!ex.client_gone()) {
        // Built outside the co_await: g++ 12 miscompiles initializer lists inside a co_await expression.
        std::string error = engine_stopped_event();
        co_await ex.write(std::move(error));
      }
      break;
    }
    std::deque<RequestOutput> items;
    {
      std::lock_guard<std::mutex> lock(job.queue->mu);
      items.swap(job.queue->items);
    }
    std::string out;
    for (RequestOutput &r : items) {
      size_t p = 0;
      while (p < job.engine_ids.size() && job.engine_ids[p] != r.request_id) ++p;
      if (p == job.engine_ids.size()) continue;
      if (r.finished && !(job.latest[p] && job.latest[p]->finished)) ++job.num_finished;
      for (const CompletionOutput &o : r.outputs) {
        const size_t choice = p * static_cast<size_t>(n) + static_cast<size_t>(o.index);
        if (choice >= job.num_choices() || job.choice_finished[choice]) continue;
        const bool finishing = o.finish_reason.has_value();
        if (!o.delta_token_ids.empty() && !job.ttft) job.ttft = job.elapsed();
        std::string text = stream_text(o, job.stop_holdback, &job.choice_text_sent[choice]);
        // Tool calling: what the released text adds, as content and tool-call deltas (server/tool_parsers.h).
        OJson tool_deltas = OJson::array();
        ToolCallStreamer *streamer = job.tool_parser ? job.tool_streamers[choice].get() : nullptr;
        if (streamer != nullptr) {
          ToolCallStreamer::Delta d =
              streamer->update(std::string_view(o.text).substr(0, job.choice_text_sent[choice]), finishing);
          text = std::move(d.content);
          tool_deltas = tool_call_deltas_json(d.calls);
        }
        if (job.chat && !job.choice_started[choice]) {
          // The role comes first, alone (as OpenAI and vLLM send it).
          OJson delta = {{"role", "assistant"}, {"content", job.chat_echo}};
          out += chunk(OJson{{"index", choice}, {"delta", delta}, {"logprobs", nullptr}, {"finish_reason", nullptr}});
        }
        const bool echo_now = !job.chat && !job.choice_started[choice] && job.req->echo;
        if (echo_now) {
          const Tokenizer *tok = llm_.load()->tokenizer();
          text = (r.prompt.empty() && tok ? tok->decode(r.prompt_token_ids) : r.prompt) + text;
        }
        job.choice_started[choice] = true;
        // No empty chunk mid-stream (OpenAI's shape): tokens whose text is held back (a partial UTF-8 sequence, a
        // possible stop string) reach the client with the next text, unless their logprobs must go out now. Without
        // a tokenizer no token ever has text: each token's chunk is then its only sign of progress (ITL, TPOT).
        const bool text_follows = has_tokenizer && !job.req->params.logprobs;
        if (text.empty() && tool_deltas.empty() && !finishing && (o.delta_token_ids.empty() || text_follows)) continue;
        OJson logprobs = nullptr;
        if (job.req->params.logprobs) {
          std::vector<int32_t> ids = o.delta_token_ids;
          std::vector<TokenLogprobs> lps = tail_logprobs(o, o.delta_token_ids.size());
          if (echo_now) prepend_prompt(r, &ids, &lps);  // the first chunk carries the echoed prompt's logprobs
          logprobs = job.chat ? chat_logprobs(ids, lps, namer, job.chat_top_logprobs)
                              : completion_logprobs(ids, lps, namer, &job.choice_offset[choice]);
        }
        OJson finish = finishing ? OJson(finish_reason_json(*o.finish_reason)) : OJson(nullptr);
        if (streamer != nullptr && finishing)
          finish = tool_finish_reason(job.tool_choice, o.finish_reason, streamer->num_calls());
        OJson c;
        if (job.chat) {
          OJson delta = OJson::object();
          if (!text.empty() || (!finishing && tool_deltas.empty())) delta["content"] = text;
          if (!tool_deltas.empty()) delta["tool_calls"] = std::move(tool_deltas);
          c = {{"index", choice},
               {"delta", std::move(delta)},
               {"logprobs", std::move(logprobs)},
               {"finish_reason", finish}};
        } else {
          c = {{"index", choice}, {"text", text}, {"logprobs", std::move(logprobs)}, {"finish_reason", finish}};
        }
        if (finishing) {
          c["stop_reason"] = stop_reason_json(o.stop_reason);
          job.choice_finished[choice] = true;
        }
        out += chunk(std::move(c));
      }
      job.latest[p] = std::move(r);
    }
    if (!out.empty() && !co_await ex.write(std::move(out))) abort_job(job);
  }
  if (ex.client_gone()) co_return;
  std::string tail;
  if (job.req->include_usage) {
    OJson c = completion_envelope(job.id, object, job.created, job.model, OJson::array());
    c["usage"] = usage_json(count_prompt_tokens(job.latest), count_completion_tokens(job.latest));
    tail += sse_event(c);
  }
  tail += kSseDone;
  if (co_await ex.write(std::move(tail))) co_await ex.end_stream();
}

template <typename Request>
std::variant<Request, HttpResponse> OpenAIServer::parse_generation_request(
    const HttpRequest &request,
    StatusOr<Request> (*parse)(const OJson &, const SamplingParams &, const ProtocolLimits &)) const {
  if (auto err = check_request(request, true)) return std::move(*err);
  StatusOr<OJson> body = parse_json_object(request.body);
  if (!body.ok()) return HttpServer::error_response(400, body.status().message());
  StatusOr<Request> req = parse(*body, options_.default_params, limits());
  if (!req.ok()) {
    const std::string &m = req.status().message();
    return HttpServer::error_response(400, m, param_of(m));
  }
  const std::vector<std::string> &names = options_.served_model_names;
  if (!req->model.empty() && std::find(names.begin(), names.end(), req->model) == names.end()) {
    return HttpServer::error_response(404, "The model `" + req->model + "` does not exist.", "model");
  }
  if (req->model.empty()) req->model = names.front();  // responses name the model the request named
  return std::move(*req);
}

awaitable<void> OpenAIServer::handle_completions(HttpExchange &ex) {
  auto parsed = parse_generation_request<CompletionRequest>(ex.request(), &parse_completion_request);
  if (HttpResponse *err = std::get_if<HttpResponse>(&parsed)) {
    co_await ex.respond(std::move(*err));
    co_return;
  }
  StatusOr<CompletionRequest> req = std::move(std::get<CompletionRequest>(parsed));
  Job job;
  job.id = random_id("cmpl");
  job.created = unix_now();
  job.model = req->model;
  job.req = &*req;
  const Tokenizer *tok = llm_.load()->tokenizer();
  for (PromptInput &p : req->prompts) {
    // A text prompt with add_special_tokens=false is tokenized here; the engine adds special tokens otherwise.
    if (p.token_ids.empty() && req->add_special_tokens == false && tok != nullptr) {
      p.token_ids = tok->encode(p.text, false);
      if (p.token_ids.empty()) {
        co_await ex.respond(HttpServer::error_response(400, "prompt: the prompt cannot be empty", "prompt"));
        co_return;
      }
    }
  }
  job.prompts = std::move(req->prompts);
  co_await run_job(ex, job);
}

awaitable<void> OpenAIServer::handle_chat(HttpExchange &ex) {
  auto parsed = parse_generation_request<ChatRequest>(ex.request(), &parse_chat_request);
  if (HttpResponse *err = std::get_if<HttpResponse>(&parsed)) {
    co_await ex.respond(std::move(*err));
    co_return;
  }
  StatusOr<ChatRequest> req = std::move(std::get<ChatRequest>(parsed));
  // Tool calling: which parser reads the replies (vLLM's rules for "auto").
  std::unique_ptr<ToolCallParser> tool_parser;
  if (req->tool_choice == ToolChoice::kAuto) {
    if (!options_.enable_auto_tool_choice || options_.tool_call_parser.empty()) {
      co_await ex.respond(HttpServer::error_response(
          400, "\"auto\" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set",
          "tool_choice"));
      co_return;
    }
    StatusOr<std::unique_ptr<ToolCallParser>> p = make_tool_call_parser(options_.tool_call_parser);
    if (!p.ok()) {
      co_await ex.respond(HttpServer::error_response(500, p.status().message()));
      co_return;
    }
    tool_parser = std::move(*p);
    // Mistral's [TOOL_CALLS] is a special token: kept in the text so the parser sees it (as vLLM does).
    if (tool_parser->needs_special_tokens()) req->params.skip_special_tokens = false;
  } else if (req->tool_choice == ToolChoice::kRequired) {
    tool_parser = make_required_tool_call_parser();
  } else if (req->tool_choice == ToolChoice::kNamed) {
    tool_parser = make_named_tool_call_parser(req->named_tool);
  }
  StatusOr<std::vector<int32_t>> ids = render_chat(*req);
  if (!ids.ok()) {
    const std::string &m = ids.status().message();
    co_await ex.respond(HttpServer::error_response(http_status_of(ids.status()), m, param_of(m)));
    co_return;
  }
  Job job;
  job.chat = true;
  job.id = random_id("chatcmpl");
  job.created = unix_now();
  job.model = req->model;
  job.req = &*req;
  job.chat_top_logprobs = req->params.logprobs.value_or(0);
  job.tool_parser = std::move(tool_parser);
  job.tool_choice = req->tool_choice;
  if (req->echo) {
    const OJson &last = req->messages.back();
    if (last.value("role", "") == "assistant" && last.contains("content") && last["content"].is_string()) {
      job.chat_echo = last["content"].get<std::string>();
    }
  }
  job.prompts.push_back(PromptInput{"", std::move(*ids)});
  co_await run_job(ex, job);
}

}  // namespace llmserve::server
