// OpenAIServer over a scripted AsyncLLM: every request gets the sequences "t0 t1 ... t{k-1}" (one token per
// output, from another thread, like the engine's output thread). Checks the non-streamed JSON, the SSE stream
// (parsed back event by event and concatenated), n > 1 choice numbering, and that a client that disconnects
// mid-stream gets its request aborted.
#include "server/openai_server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <thread>

#include "server/sse.h"

namespace llmserve::server {
namespace {

class ScriptedLLM : public AsyncLLM {
 public:
  ~ScriptedLLM() override { shutdown(); }
  Status add_request(const std::string &id, const PromptInput &prompt, const SamplingParams &params, int32_t,
                     RequestOutputCallback cb) override {
    if (prompt.token_ids.empty() && prompt.text.empty()) return invalid_argument("prompt: empty");
    const int64_t steps = params.max_tokens.value_or(4);
    const int32_t n = params.n;
    std::vector<int32_t> prompt_ids = prompt.token_ids.empty() ? std::vector<int32_t>{1, 2} : prompt.token_ids;
    threads_.emplace_back([this, id, steps, n, prompt_ids, cb] {
      RequestOutput out;
      out.request_id = id;
      out.prompt_token_ids = prompt_ids;
      out.outputs.resize(static_cast<size_t>(n));
      for (int32_t i = 0; i < n; ++i) out.outputs[static_cast<size_t>(i)].index = i;
      for (int64_t s = 0; s < steps; ++s) {
        const bool aborted = is_aborted(id);
        for (CompletionOutput &o : out.outputs) {
          o.delta_text = aborted ? "" : "t" + std::to_string(s) + " ";
          o.delta_token_ids = aborted ? std::vector<int32_t>{} : std::vector<int32_t>{static_cast<int32_t>(s)};
          o.text += o.delta_text;
          o.token_ids.insert(o.token_ids.end(), o.delta_token_ids.begin(), o.delta_token_ids.end());
          if (aborted)
            o.finish_reason = FinishReason::kAbort;
          else if (s + 1 == steps)
            o.finish_reason = FinishReason::kLength;
        }
        out.finished = out.outputs[0].finish_reason.has_value();
        cb(out);
        if (out.finished) return;
        std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
      }
    });
    return ok_status();
  }
  void abort_request(const std::string &id) override {
    std::lock_guard<std::mutex> lock(mu_);
    aborted_.insert(id);
  }
  bool is_aborted(const std::string &id) {
    std::lock_guard<std::mutex> lock(mu_);
    return aborted_.count(id) != 0;
  }
  void set_stats_callback(StatsCallback) override {}
  const Tokenizer *tokenizer() const override { return nullptr; }
  int64_t max_model_len() const override { return 100; }
  int64_t vocab_size() const override { return 50; }
  bool healthy() const override { return true; }
  void shutdown() override {
    for (std::thread &t : threads_) {
      if (t.joinable()) t.join();
    }
  }
  int delay_ms = 1;

 private:
  std::mutex mu_;
  std::set<std::string> aborted_;
  std::vector<std::thread> threads_;
};

// A blocking HTTP/1.1 exchange: returns (status, body), de-chunking chunked bodies.
std::pair<int, std::string> post(int port, const std::string &path, const std::string &body, int close_after = -1) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  if (connect(fd, reinterpret_cast<sockaddr *>(&addr), sizeof(addr)) != 0) return {0, ""};
  const std::string req =
      "POST " + path + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: " + std::to_string(body.size()) +
      "\r\n\r\n" + body;
  (void)send(fd, req.data(), req.size(), MSG_NOSIGNAL);
  std::string raw;
  char buf[4096];
  ssize_t n;
  while ((n = recv(fd, buf, sizeof(buf), 0)) > 0) {
    raw.append(buf, static_cast<size_t>(n));
    if (close_after >= 0 && raw.size() >= static_cast<size_t>(close_after)) break;
  }
  close(fd);
  if (close_after >= 0 || raw.size() < 12) return {0, raw};
  const int status = std::stoi(raw.substr(9, 3));
  const size_t head_end = raw.find("\r\n\r\n");
  std::string rest = raw.substr(head_end + 4);
  if (raw.substr(0, head_end).find("chunked") == std::string::npos) return {status, rest};
  std::string out;
  size_t pos = 0;
  for (;;) {
    const size_t eol = rest.find("\r\n", pos);
    if (eol == std::string::npos) break;
    const size_t len = std::stoul(rest.substr(pos, eol - pos), nullptr, 16);
    if (len == 0) break;
    out += rest.substr(eol + 2, len);
    pos = eol + 2 + len + 2;
  }
  return {status, out};
}

class OpenAIServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServingOptions opts;
    opts.served_model_names = {"fake"};
    opts.log_requests = false;
    api_ = std::make_unique<OpenAIServer>(opts);
    HttpServerConfig cfg;
    cfg.port = 0;
    http_ = std::make_unique<HttpServer>(cfg);
    api_->register_routes(*http_);
    ASSERT_TRUE(api_->set_engine(&llm_, &metrics_, std::nullopt).ok());
    ASSERT_TRUE(http_->start().ok());
  }
  void TearDown() override {
    http_->stop();
    llm_.shutdown();
  }
  ScriptedLLM llm_;
  ServerMetrics metrics_{"fake", 100};
  std::unique_ptr<OpenAIServer> api_;
  std::unique_ptr<HttpServer> http_;
};

TEST_F(OpenAIServerTest, NonStreamedCompletion) {
  auto [status, body] =
      post(http_->port(), "/v1/completions", R"({"prompt": [[1, 2, 3], [4]], "n": 2, "max_tokens": 3})");
  ASSERT_EQ(status, 200) << body;
  auto j = nlohmann::json::parse(body);
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["model"], "fake");
  ASSERT_EQ(j["choices"].size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(j["choices"][i]["index"], i);
    EXPECT_EQ(j["choices"][i]["text"], "t0 t1 t2 ");
    EXPECT_EQ(j["choices"][i]["finish_reason"], "length");
    EXPECT_TRUE(j["choices"][i]["stop_reason"].is_null());
  }
  EXPECT_EQ(j["usage"]["prompt_tokens"], 4);
  EXPECT_EQ(j["usage"]["completion_tokens"], 12);
  EXPECT_EQ(j["usage"]["total_tokens"], 16);
}

TEST_F(OpenAIServerTest, StreamedCompletionFraming) {
  auto [status, body] = post(http_->port(), "/v1/completions",
                             R"({"prompt": [7, 8], "n": 2, "max_tokens": 5, "stream": true,
                                 "stream_options": {"include_usage": true}})");
  ASSERT_EQ(status, 200);
  std::vector<std::string> events;
  ASSERT_TRUE(parse_sse_stream(body, &events)) << body;
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.back(), "[DONE]");
  std::map<int, std::string> text;
  std::map<int, int> finishes;
  for (size_t i = 0; i + 2 < events.size(); ++i) {
    auto j = nlohmann::json::parse(events[i]);
    ASSERT_EQ(j["choices"].size(), 1u);
    const int index = j["choices"][0]["index"];
    text[index] += j["choices"][0]["text"].get<std::string>();
    if (!j["choices"][0]["finish_reason"].is_null()) ++finishes[index];
  }
  EXPECT_EQ(text, (std::map<int, std::string>{{0, "t0 t1 t2 t3 t4 "}, {1, "t0 t1 t2 t3 t4 "}}));
  EXPECT_EQ(finishes, (std::map<int, int>{{0, 1}, {1, 1}}));
  auto usage = nlohmann::json::parse(events[events.size() - 2]);
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 10);
}

TEST_F(OpenAIServerTest, DisconnectAbortsTheRequest) {
  llm_.delay_ms = 20;
  post(http_->port(), "/v1/completions", R"({"prompt": [1], "max_tokens": 500, "stream": true})",
       /*close_after=*/200);
  for (int i = 0; i < 300 && api_->num_in_flight() > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(api_->num_in_flight(), 0);
}

TEST_F(OpenAIServerTest, ErrorsBeforeTheEngine) {
  EXPECT_EQ(post(http_->port(), "/v1/completions", R"({"prompt": [1], "model": "other"})").first, 404);
  auto [status, body] = post(http_->port(), "/v1/completions", R"({"prompt": [77]})");  // vocab is 50
  EXPECT_EQ(status, 400);
  EXPECT_EQ(nlohmann::json::parse(body)["error"]["param"], "prompt");
  // No tokenizer: chat is refused with a clear error rather than crashing.
  EXPECT_EQ(post(http_->port(), "/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}]})").first,
            400);
}

}  // namespace
}  // namespace llmserve::server
