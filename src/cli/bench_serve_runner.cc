// Serving-benchmark runner (see bench_serve_runner.h): one thread, one io_context, a coroutine per request.
#include "cli/bench_serve_runner.h"

// clang-format off
#include <utility>  // before any boost/asio header: 1.74's awaitable.hpp uses std::exchange without including it
// clang-format on

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cstdio>
#include <deque>
#include <nlohmann/json.hpp>

#include "cli/bench_serve_client.h"

namespace llmserve::cli {
namespace asio = boost::asio;
using Clock = HttpClient::Clock;

namespace {

// A timer that never expires by itself: waiting on it parks a coroutine until cancel() wakes it.
struct Waiter {
  explicit Waiter(const asio::any_io_executor& ex) : timer(ex, Clock::time_point::max()) {}
  asio::steady_timer timer;
};

asio::awaitable<void> park(Waiter& w) {
  boost::system::error_code ec;
  co_await w.timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));  // ends by cancel()
}

// FIFO counting semaphore for coroutines on one thread: release() hands its slot straight to the oldest waiter,
// so a late arrival can never overtake one already queued.
class AsyncSemaphore {
 public:
  explicit AsyncSemaphore(int64_t slots) : free_(slots) {}
  asio::awaitable<void> acquire() {
    if (free_ > 0 && waiters_.empty()) {
      --free_;
      co_return;
    }
    Waiter w(co_await asio::this_coro::executor);
    waiters_.push_back(&w);
    co_await park(w);  // woken only by release(), which gave us its slot
  }
  void release() {
    if (waiters_.empty()) {
      ++free_;
      return;
    }
    Waiter* w = waiters_.front();
    waiters_.pop_front();
    w->timer.cancel();
  }

 private:
  int64_t free_;
  std::deque<Waiter*> waiters_;
};

struct RunState {
  RunState(asio::any_io_executor ex, BaseUrl url, const BenchRunConfig& c)
      : client(ex, std::move(url), c.api_key, std::chrono::seconds(c.timeout_s)),
        semaphore(c.max_concurrency > 0 ? c.max_concurrency : INT64_MAX),
        all_done(ex) {}
  HttpClient client;
  AsyncSemaphore semaphore;
  Waiter all_done;
  int64_t num_outstanding = 0;
  Status setup_error;
};

asio::awaitable<void> one_request(RunState& s, const BenchRunConfig& c, std::string body, Clock::time_point origin,
                                  RequestOutput* out) {
  const double arrival = std::chrono::duration<double>(Clock::now() - origin).count();
  co_await s.semaphore.acquire();
  co_await s.client.stream(c.endpoint, std::move(body), is_chat_endpoint(c.endpoint), origin, out);
  out->queue_time = out->start_time - arrival;
  s.semaphore.release();
  if (--s.num_outstanding == 0) s.all_done.timer.cancel();
}

asio::awaitable<StatusOr<std::string>> first_model(HttpClient& client, const std::string& base_url) {
  StatusOr<HttpResponse> res = co_await client.get("/v1/models");
  if (!res.ok()) co_return res.status();
  const std::string where = "GET " + base_url + "/v1/models";
  if (res->status != 200) {
    co_return Status(StatusCode::kUnavailable, where + ": HTTP " + std::to_string(res->status) + " " + res->reason +
                                                   ": " + res->body.substr(0, 300));
  }
  nlohmann::json j = nlohmann::json::parse(res->body, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("data") || !j["data"].is_array() || j["data"].empty() ||
      !j["data"][0].is_object() || !j["data"][0].contains("id") || !j["data"][0]["id"].is_string()) {
    co_return Status(StatusCode::kUnavailable, where + ": no model listed (expected {\"data\": [{\"id\": ...}]})");
  }
  co_return j["data"][0]["id"].get<std::string>();
}

asio::awaitable<void> run(RunState& s, const BenchRunConfig& c, const std::vector<SampleRequest>& requests,
                          BenchRun* result) {
  auto ex = co_await asio::this_coro::executor;
  asio::steady_timer timer(ex);
  // --ready-check-timeout-sec covers a server still loading its model: the model lookup and the test request
  // are retried once a second until it runs out.
  const Clock::time_point ready_deadline = Clock::now() + std::chrono::seconds(c.ready_check_timeout_s);
  result->model = c.model;
  while (result->model.empty()) {
    StatusOr<std::string> model = co_await first_model(s.client, c.base_url);
    if (model.ok()) {
      result->model = *model;
    } else if (Clock::now() + std::chrono::seconds(1) > ready_deadline) {
      s.setup_error = model.status();
      co_return;
    } else {
      timer.expires_after(std::chrono::seconds(1));
      boost::system::error_code ec;
      co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    }
  }
  const bool chat = is_chat_endpoint(c.endpoint);
  std::printf("Starting initial single prompt test run...\n");
  std::fflush(stdout);
  for (;;) {
    RequestOutput test;
    co_await s.client.stream(c.endpoint, make_payload(requests[0], result->model, chat, c.temperature, c.ignore_eos),
                             chat, Clock::now(), &test);
    if (test.success) break;
    if (Clock::now() + std::chrono::seconds(1) > ready_deadline) {
      s.setup_error = Status(StatusCode::kUnavailable,
                             "initial test run failed (check the server and the benchmark "
                             "arguments): " +
                                 test.error);
      co_return;
    }
    timer.expires_after(std::chrono::seconds(1));
    boost::system::error_code ec;
    co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
  std::printf("Initial test run completed. Starting main benchmark run...\n");
  std::fflush(stdout);
  result->outputs.assign(requests.size(), RequestOutput{});
  const Clock::time_point origin = Clock::now();
  s.num_outstanding = static_cast<int64_t>(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    const auto due = origin + std::chrono::duration_cast<Clock::duration>(
                                  std::chrono::duration<double>(i < c.arrival_times.size() ? c.arrival_times[i] : 0.0));
    if (due > Clock::now()) {
      timer.expires_at(due);
      boost::system::error_code ec;
      co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    }
    std::string body = make_payload(requests[i], result->model, chat, c.temperature, c.ignore_eos);
    RequestOutput* out = &result->outputs[i];
    out->prompt_len = requests[i].prompt_len;
    asio::co_spawn(ex, one_request(s, c, std::move(body), origin, out), [out, &s](std::exception_ptr e) {
      if (!e) return;
      // one_request's callees catch everything; this guards the bookkeeping itself.
      out->success = false;
      out->error = "internal error in the request coroutine";
      if (--s.num_outstanding == 0) s.all_done.timer.cancel();
    });
  }
  if (s.num_outstanding > 0) co_await park(s.all_done);
  result->duration_s = std::chrono::duration<double>(Clock::now() - origin).count();
}

}  // namespace

bool is_chat_endpoint(const std::string& endpoint) {
  const std::string suffix = "chat/completions";
  return endpoint.size() >= suffix.size() &&
         endpoint.compare(endpoint.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string make_payload(const SampleRequest& request, const std::string& model, bool chat, double temperature,
                         bool ignore_eos) {
  nlohmann::json j;
  j["model"] = model;
  if (chat) {
    j["messages"] = nlohmann::json::array({{{"role", "user"}, {"content", request.prompt_text}}});
    j["max_completion_tokens"] = request.expected_output_len;
  } else {
    if (request.prompt_ids.empty()) {
      j["prompt"] = request.prompt_text;
    } else {
      j["prompt"] = request.prompt_ids;
    }
    j["max_tokens"] = request.expected_output_len;
  }
  j["temperature"] = temperature;
  j["stream"] = true;
  j["stream_options"] = {{"include_usage", true}};
  if (ignore_eos) j["ignore_eos"] = true;
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

StatusOr<BenchRun> run_benchmark(const BenchRunConfig& config, const std::vector<SampleRequest>& requests) {
  if (requests.empty()) return invalid_argument("no requests to send");
  ASSIGN_OR_RETURN(BaseUrl url, parse_base_url(config.base_url));
  if (config.endpoint.empty() || config.endpoint[0] != '/') {
    return invalid_argument("--endpoint '" + config.endpoint + "': must start with '/'");
  }
  asio::io_context io(1);
  RunState state(io.get_executor(), url, config);
  BenchRun result;
  std::exception_ptr failure;
  asio::co_spawn(io, run(state, config, requests, &result), [&failure](std::exception_ptr e) { failure = e; });
  try {
    io.run();
    if (failure) std::rethrow_exception(failure);
  } catch (const std::exception& e) {
    return internal_error(std::string("bench serve: ") + e.what());
  }
  if (!state.setup_error.ok()) return state.setup_error;
  return result;
}

}  // namespace llmserve::cli
