// HttpServer: async HTTP/1.1 on Boost.Beast with C++20 coroutines — keep-alive, a few I/O threads, limits on
// header and body size (431 / 413), a deadline per request against slow clients (408), 404 / 405 routing, and
// chunked responses for SSE. Invariant: each connection runs on its own strand, so a handler and everything
// posted to its Waker never run concurrently; no Boost exception leaves this layer (handlers that throw get 500).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"
#include "server/asio.h"

namespace llmserve::server {

struct HttpServerConfig {
  std::string host = "127.0.0.1";
  int port = 8000;                       // 0: any free port (see HttpServer::port())
  int num_threads = 2;                   // I/O threads running the io_context
  size_t max_header_bytes = 64 << 10;    // larger: 431
  size_t max_body_bytes = 32 << 20;      // larger: 413
  double request_read_timeout_s = 30.0;  // first byte of a request to its last; a slower client gets 408
  double keep_alive_timeout_s = 5.0;     // an idle keep-alive connection is closed after this
  double write_timeout_s = 60.0;         // one write to a client that stopped reading
};

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string path;    // the target without its query string
  std::string query;
  std::string body;
  std::string authorization;  // the Authorization header, empty if absent
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
};

// Wakes a handler coroutine from any thread (e.g. the engine's output thread). notify() posts to the
// connection's strand; wait() returns at once if a notification arrived since the last wait().
class Waker : public std::enable_shared_from_this<Waker> {
 public:
  explicit Waker(asio::any_io_executor strand);
  void notify();
  asio::awaitable<void> wait();

 private:
  void wake_on_strand();
  asio::steady_timer timer_;
  bool pending_ = false;  // strand only
};

// One request and its response, handed to a route handler. All calls run on the connection's strand.
class HttpExchange {
 public:
  virtual ~HttpExchange() = default;
  virtual const HttpRequest &request() const = 0;
  // Sends a complete response. Errors writing it only mark the client gone.
  virtual asio::awaitable<void> respond(HttpResponse response) = 0;
  // Starts a chunked response with `status` and `content_type`; then write() chunks and end_stream().
  // Both return false once the client is gone (the rest of the stream is dropped).
  virtual asio::awaitable<bool> begin_stream(int status, std::string content_type) = 0;
  virtual asio::awaitable<bool> write(std::string data) = 0;
  virtual asio::awaitable<bool> end_stream() = 0;
  // Starts watching the socket for the peer closing it while the handler waits; waker() is notified then.
  virtual void watch_disconnect() = 0;
  virtual bool client_gone() const = 0;
  virtual std::shared_ptr<Waker> waker() = 0;
};

using RouteHandler = std::function<asio::awaitable<void>(HttpExchange &)>;

class HttpServer {
 public:
  explicit HttpServer(HttpServerConfig config);
  ~HttpServer();

  // Routes are exact paths; register them all before start(). A known path with another method gets 405.
  void add_route(const std::string &method, const std::string &path, RouteHandler handler);
  // Binds and listens (Unavailable naming host:port on failure), then runs the I/O threads.
  Status start();
  int port() const { return bound_port_; }
  // Stops accepting new connections; open ones are served on.
  void stop_accepting();
  // Stops the I/O threads and closes every connection. Idempotent.
  void stop();
  asio::io_context &io_context() { return ioc_; }

  // A ready OpenAI-style error response {"error": {"message", "type", "param", "code"}}.
  static HttpResponse error_response(int status, const std::string &message, const std::string &param = "");

 private:
  class Connection;
  asio::awaitable<void> accept_loop();
  asio::awaitable<void> dispatch(HttpExchange &exchange);

  HttpServerConfig config_;
  asio::io_context ioc_;
  tcp::acceptor acceptor_;
  std::map<std::string, std::map<std::string, RouteHandler>> routes_;  // path -> method -> handler
  std::vector<std::thread> threads_;
  int bound_port_ = 0;
  std::atomic<bool> stopped_{false};
};

}  // namespace llmserve::server
