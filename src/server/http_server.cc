// HttpServer: accept loop, one coroutine per connection (read with a deadline, route, respond), the disconnect
// watcher and chunked streaming.
#include "server/http_server.h"

#include <chrono>
#include <exception>
#include <nlohmann/json.hpp>
#include <optional>

#include "core/logging.h"

namespace llmserve::server {
namespace {

using asio::awaitable;
using asio::use_awaitable;
using boost::system::error_code;

const char *error_type(int status) {
  switch (status) {
    case 400:
      return "BadRequestError";
    case 401:
      return "AuthenticationError";
    case 404:
      return "NotFoundError";
    case 405:
      return "MethodNotAllowed";
    case 408:
      return "RequestTimeout";
    case 413:
      return "RequestEntityTooLarge";
    case 429:
      return "RateLimitError";
    case 431:
      return "RequestHeaderFieldsTooLarge";
    case 503:
      return "ServiceUnavailableError";
    default:
      return status >= 500 ? "InternalServerError" : "BadRequestError";
  }
}

std::chrono::steady_clock::duration seconds(double s) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(s));
}

}  // namespace

HttpResponse HttpServer::error_response(int status, const std::string &message, const std::string &param) {
  nlohmann::json err = {{"message", message},
                        {"type", error_type(status)},
                        {"param", param.empty() ? nlohmann::json(nullptr) : nlohmann::json(param)},
                        {"code", status}};
  HttpResponse r;
  r.status = status;
  r.body = nlohmann::json{{"error", err}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return r;
}

// ---- Waker ----

Waker::Waker(asio::any_io_executor strand) : timer_(strand) {
  timer_.expires_at(asio::steady_timer::time_point::max());
}

void Waker::notify() {
  asio::post(timer_.get_executor(), [self = shared_from_this()] { self->wake_on_strand(); });
}

void Waker::wake_on_strand() {
  pending_ = true;
  timer_.cancel();
}

awaitable<void> Waker::wait() {
  if (!pending_) {
    timer_.expires_at(asio::steady_timer::time_point::max());
    error_code ec;
    co_await timer_.async_wait(asio::redirect_error(use_awaitable, ec));
  }
  pending_ = false;
}

// ---- Connection ----

class HttpServer::Connection : public HttpExchange, public std::enable_shared_from_this<HttpServer::Connection> {
 public:
  Connection(HttpServer &server, tcp::socket socket, asio::any_io_executor strand)
      : server_(server),
        stream_(std::move(socket)),
        deadline_(strand),
        watch_timer_(strand),
        waker_(std::make_shared<Waker>(strand)) {}

  awaitable<void> run();

  const HttpRequest &request() const override { return request_; }
  awaitable<void> respond(HttpResponse response) override;
  awaitable<bool> begin_stream(int status, std::string content_type) override;
  awaitable<bool> write(std::string data) override;
  awaitable<bool> end_stream() override;
  void watch_disconnect() override;
  bool client_gone() const override { return gone_; }
  std::shared_ptr<Waker> waker() override { return waker_; }

 private:
  awaitable<void> watch();
  awaitable<void> stop_watching();
  awaitable<void> send_error_and_close(int status, const std::string &message);
  void arm_read_deadline(double seconds);

  HttpServer &server_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  HttpRequest request_;
  bool keep_alive_ = true;
  bool responded_ = false;
  bool gone_ = false;
  bool watching_ = false;
  asio::steady_timer deadline_;  // read deadline; on expiry it cancels the read
  bool read_timed_out_ = false;
  uint64_t deadline_generation_ = 0;  // expirations of earlier arms are ignored
  asio::steady_timer watch_timer_;    // cancelled when the watcher ends
  std::shared_ptr<Waker> waker_;
  std::optional<http::response<http::empty_body>> stream_header_;
};

awaitable<void> HttpServer::Connection::send_error_and_close(int status, const std::string &message) {
  keep_alive_ = false;
  co_await respond(error_response(status, message));
  error_code ec;
  stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
}

void HttpServer::Connection::arm_read_deadline(double s) {
  const uint64_t generation = ++deadline_generation_;
  deadline_.expires_after(seconds(s));
  // The handler holds the connection alive; it runs on the strand, so it cannot race the read's completion.
  deadline_.async_wait([self = shared_from_this(), generation](error_code ec) {
    if (ec || generation != self->deadline_generation_) return;
    self->read_timed_out_ = true;
    error_code ignored;
    self->stream_.socket().cancel(ignored);
  });
}

awaitable<void> HttpServer::Connection::run() {
  const HttpServerConfig &cfg = server_.config_;
  while (keep_alive_ && !gone_) {
    http::request_parser<http::string_body> parser;
    parser.header_limit(static_cast<uint32_t>(cfg.max_header_bytes));
    parser.body_limit(cfg.max_body_bytes);
    error_code ec;
    // The header must arrive within the keep-alive timeout, the whole request within the read timeout. Our own
    // deadline cancels the read but keeps the socket open (tcp_stream's would close it), so a slow client
    // still gets its 408.
    read_timed_out_ = false;
    arm_read_deadline(buffer_.size() == 0 ? cfg.keep_alive_timeout_s : cfg.request_read_timeout_s);
    co_await http::async_read_header(stream_, buffer_, parser, asio::redirect_error(use_awaitable, ec));
    if (!ec && !parser.is_done()) {
      arm_read_deadline(cfg.request_read_timeout_s);
      co_await http::async_read(stream_, buffer_, parser, asio::redirect_error(use_awaitable, ec));
    }
    ++deadline_generation_;  // an expiry already queued must not cancel what comes next
    deadline_.cancel();
    if (read_timed_out_) {
      if (parser.got_some() || buffer_.size() > 0)
        co_await send_error_and_close(408, "the request was not received in time");
      break;  // an idle keep-alive connection closes quietly
    }
    if (ec) {
      if (ec == http::error::end_of_stream || ec == asio::error::connection_reset || ec == asio::error::eof) break;
      if (ec == http::error::body_limit) {
        co_await send_error_and_close(
            413, "the request body is larger than " + std::to_string(cfg.max_body_bytes) + " bytes");
      } else if (ec == http::error::header_limit) {
        co_await send_error_and_close(431, "the request headers are too large");
      } else if (ec != asio::error::operation_aborted) {
        co_await send_error_and_close(400, "malformed HTTP request: " + ec.message());
      }
      break;
    }
    http::request<http::string_body> req = parser.release();
    request_ = HttpRequest{};
    request_.method = std::string(req.method_string());
    std::string target(req.target());
    const size_t q = target.find('?');
    request_.path = target.substr(0, q);
    if (q != std::string::npos) request_.query = target.substr(q + 1);
    request_.body = std::move(req.body());
    if (auto it = req.find(http::field::authorization); it != req.end())
      request_.authorization = std::string(it->value());
    keep_alive_ = req.keep_alive();
    responded_ = false;
    bool failed = false;
    try {
      co_await server_.dispatch(*this);
    } catch (const std::exception &e) {
      LOG(ERROR) << "handler for " << request_.method << " " << request_.path << " threw: " << e.what();
      failed = true;
    }
    co_await stop_watching();
    if (failed && !responded_) co_await respond(error_response(500, "internal server error"));
    if (!responded_) break;  // a stream that broke off: the connection cannot be reused
  }
  error_code ec;
  stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
  stream_.socket().close(ec);
}

awaitable<void> HttpServer::Connection::respond(HttpResponse response) {
  http::response<http::string_body> res{static_cast<http::status>(response.status), 11};
  res.set(http::field::server, "llmserve");
  res.set(http::field::content_type, response.content_type);
  for (const auto &[k, v] : response.headers) res.set(k, v);
  res.keep_alive(keep_alive_);
  res.body() = std::move(response.body);
  res.prepare_payload();
  responded_ = true;
  error_code ec;
  stream_.expires_after(seconds(server_.config_.write_timeout_s));
  co_await http::async_write(stream_, res, asio::redirect_error(use_awaitable, ec));
  stream_.expires_never();
  if (ec) gone_ = true;
}

awaitable<bool> HttpServer::Connection::begin_stream(int status, std::string content_type) {
  stream_header_.emplace(static_cast<http::status>(status), 11);
  auto &res = *stream_header_;
  res.set(http::field::server, "llmserve");
  res.set(http::field::content_type, content_type);
  res.set(http::field::cache_control, "no-cache");
  res.keep_alive(keep_alive_);
  res.chunked(true);
  http::response_serializer<http::empty_body> sr(res);
  error_code ec;
  stream_.expires_after(seconds(server_.config_.write_timeout_s));
  co_await http::async_write_header(stream_, sr, asio::redirect_error(use_awaitable, ec));
  stream_.expires_never();
  if (ec) gone_ = true;
  co_return !gone_;
}

awaitable<bool> HttpServer::Connection::write(std::string data) {
  if (gone_) co_return false;
  if (data.empty()) co_return true;  // an empty chunk would end the stream
  error_code ec;
  stream_.expires_after(seconds(server_.config_.write_timeout_s));
  co_await asio::async_write(stream_, http::make_chunk(asio::buffer(data)), asio::redirect_error(use_awaitable, ec));
  stream_.expires_never();
  if (ec) gone_ = true;
  co_return !gone_;
}

awaitable<bool> HttpServer::Connection::end_stream() {
  if (gone_) co_return false;
  error_code ec;
  stream_.expires_after(seconds(server_.config_.write_timeout_s));
  co_await asio::async_write(stream_, http::make_chunk_last(), asio::redirect_error(use_awaitable, ec));
  stream_.expires_never();
  if (ec) gone_ = true;
  responded_ = !gone_;
  co_return !gone_;
}

void HttpServer::Connection::watch_disconnect() {
  if (watching_ || gone_) return;
  watching_ = true;
  asio::co_spawn(watch_timer_.get_executor(), watch(), asio::detached);
}

// Reads from the raw socket (not the tcp_stream, whose deadline belongs to the writes) while the handler
// waits: EOF or an error means the client went away. Bytes that arrive (a pipelined request) are kept in the
// connection's buffer for the next read.
awaitable<void> HttpServer::Connection::watch() {
  error_code ec;
  auto space = buffer_.prepare(4096);
  const size_t n = co_await stream_.socket().async_read_some(space, asio::redirect_error(use_awaitable, ec));
  buffer_.commit(n);
  if (ec && ec != asio::error::operation_aborted) {
    gone_ = true;
    waker_->notify();
  }
  watching_ = false;
  watch_timer_.cancel();
}

awaitable<void> HttpServer::Connection::stop_watching() {
  if (!watching_) co_return;
  error_code ec;
  stream_.socket().cancel(ec);
  while (watching_) {
    watch_timer_.expires_at(asio::steady_timer::time_point::max());
    co_await watch_timer_.async_wait(asio::redirect_error(use_awaitable, ec));
  }
}

// ---- HttpServer ----

HttpServer::HttpServer(HttpServerConfig config) : config_(std::move(config)), acceptor_(ioc_) {}

HttpServer::~HttpServer() { stop(); }

void HttpServer::add_route(const std::string &method, const std::string &path, RouteHandler handler) {
  routes_[path][method] = std::move(handler);
}

Status HttpServer::start() {
  error_code ec;
  const std::string where = config_.host + ":" + std::to_string(config_.port);
  tcp::resolver resolver(ioc_);
  auto results = resolver.resolve(config_.host, std::to_string(config_.port), ec);
  if (ec || results.empty()) return {StatusCode::kUnavailable, "--host " + where + ": " + ec.message()};
  tcp::endpoint endpoint = results.begin()->endpoint();
  acceptor_.open(endpoint.protocol(), ec);
  if (!ec) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor_.bind(endpoint, ec);
  if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return {StatusCode::kUnavailable, "cannot listen on " + where + ": " + ec.message()};
  bound_port_ = acceptor_.local_endpoint(ec).port();
  asio::co_spawn(ioc_, accept_loop(), asio::detached);
  for (int i = 0; i < std::max(1, config_.num_threads); ++i) {
    threads_.emplace_back([this] {
      auto guard = asio::make_work_guard(ioc_);
      for (;;) {
        try {
          ioc_.run();
          break;
        } catch (const std::exception &e) {
          LOG(ERROR) << "I/O thread: " << e.what();
        }
      }
    });
  }
  return ok_status();
}

awaitable<void> HttpServer::accept_loop() {
  for (;;) {
    error_code ec;
    tcp::socket socket = co_await acceptor_.async_accept(asio::redirect_error(use_awaitable, ec));
    if (ec) {
      if (!acceptor_.is_open()) co_return;
      if (ec == asio::error::operation_aborted) co_return;
      continue;  // e.g. EMFILE: keep serving the connections we have
    }
    socket.set_option(tcp::no_delay(true), ec);
    auto strand = asio::make_strand(ioc_);
    auto conn = std::make_shared<Connection>(*this, std::move(socket), strand);
    asio::co_spawn(
        strand, [conn]() -> awaitable<void> { co_await conn->run(); },
        [](std::exception_ptr e) {
          if (!e) return;
          try {
            std::rethrow_exception(e);
          } catch (const std::exception &ex) {
            LOG(ERROR) << "connection: " << ex.what();
          }
        });
  }
}

awaitable<void> HttpServer::dispatch(HttpExchange &exchange) {
  const HttpRequest &req = exchange.request();
  auto path_it = routes_.find(req.path);
  if (path_it == routes_.end()) {
    co_await exchange.respond(error_response(404, "unknown endpoint " + req.path));
    co_return;
  }
  auto method_it = path_it->second.find(req.method);
  if (method_it == path_it->second.end()) {
    std::string allow;
    for (const auto &[m, h] : path_it->second) allow += (allow.empty() ? "" : ", ") + m;
    HttpResponse r = error_response(405, "method " + req.method + " is not allowed on " + req.path);
    r.headers.emplace_back("Allow", allow);
    co_await exchange.respond(std::move(r));
    co_return;
  }
  co_await method_it->second(exchange);
}

void HttpServer::stop_accepting() {
  asio::post(ioc_, [this] {
    error_code ec;
    acceptor_.close(ec);
  });
}

void HttpServer::stop() {
  if (stopped_.exchange(true)) return;
  ioc_.stop();
  for (std::thread &t : threads_) t.join();
  threads_.clear();
}

}  // namespace llmserve::server
