// HTTP/1.1 client of `llmserve bench serve` on Boost.Beast with C++20 coroutines: plain GETs and streamed
// (SSE) POSTs to an OpenAI-compatible server, keep-alive connections reused through an idle pool. All its
// coroutines run on one single-threaded io_context; none of them throws: failures become values.
#pragma once

// clang-format off
#include <utility>  // before any boost/asio header: 1.74's awaitable.hpp uses std::exchange without including it
// clang-format on

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "cli/bench_serve_metrics.h"
#include "core/status.h"

namespace llmserve::cli {

// http://host[:port][/prefix]; the prefix (no trailing '/') is put before every request target.
struct BaseUrl {
  std::string host;
  std::string port = "80";
  std::string path_prefix;
  std::string to_string() const;
};
// InvalidArgument naming --base-url for anything but an http:// URL with a host and a numeric port.
StatusOr<BaseUrl> parse_base_url(std::string_view url);

struct HttpResponse {
  int status = 0;
  std::string reason;
  std::string body;
};

class HttpClient {
 public:
  using Clock = std::chrono::steady_clock;

  // `timeout`: the longest wait for any single network operation (connect, write, each read).
  HttpClient(boost::asio::any_io_executor executor, BaseUrl url, std::string api_key, std::chrono::seconds timeout);

  // GET `path` (appended to the URL's prefix); an error Status names the URL on connection failure.
  boost::asio::awaitable<StatusOr<HttpResponse>> get(std::string path);

  // POSTs `body` (JSON) to `path` and consumes the SSE stream, filling `out` with vLLM's measurements, times
  // relative to `origin`; `chat` selects choices[0].delta.content over choices[0].text. A connection error,
  // a non-200 status, an "error" object or unparsable JSON in the stream, or no chunk with choices leaves
  // out->success false and out->error set.
  boost::asio::awaitable<void> stream(std::string path, std::string body, bool chat, Clock::time_point origin,
                                      RequestOutput* out);

 private:
  boost::asio::awaitable<StatusOr<std::unique_ptr<boost::beast::tcp_stream>>> connect();
  std::string target_of(const std::string& path) const { return url_.path_prefix + path; }

  boost::asio::any_io_executor executor_;
  BaseUrl url_;
  std::string api_key_;
  std::chrono::seconds timeout_;
  boost::asio::ip::tcp::resolver::results_type endpoints_;       // resolved once, on the first connect
  std::vector<std::unique_ptr<boost::beast::tcp_stream>> idle_;  // keep-alive connections free for reuse
};

// Applies one SSE data payload of a completions / chat-completions stream to `out`, timestamped `now_s` (s since
// the request's origin, the same clock as out->start_time). Returns false (and sets out->error) for a payload
// that is not JSON or carries an "error" object. Exposed for the unit tests.
bool apply_stream_payload(std::string_view payload, bool chat, double now_s, double* last_token_s, RequestOutput* out);

}  // namespace llmserve::cli
