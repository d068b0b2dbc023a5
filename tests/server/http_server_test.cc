// HttpServer over loopback sockets: routing (404 / 405), limits (413 / 431), the read deadline (408 for a
// slowloris client), keep-alive, chunked streaming, waking a handler from another thread, and noticing a
// client that disconnects while its handler waits.
#include "server/http_server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

namespace llmserve::server {
namespace {

class Client {
 public:
  explicit Client(int port) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
    connected_ = connect(fd_, reinterpret_cast<sockaddr *>(&addr), sizeof(addr)) == 0;
    timeval tv{5, 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  }
  ~Client() { close(); }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  bool connected() const { return connected_; }
  void send(const std::string &data) { (void)::send(fd_, data.data(), data.size(), MSG_NOSIGNAL); }
  // Reads until `marker` appears or the peer closes; returns what was read.
  std::string read_until(const std::string &marker) {
    while (buffer_.find(marker) == std::string::npos) {
      char buf[4096];
      const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
      if (n <= 0) break;
      buffer_.append(buf, static_cast<size_t>(n));
    }
    std::string out;
    const size_t pos = buffer_.find(marker);
    const size_t end = pos == std::string::npos ? buffer_.size() : pos + marker.size();
    out = buffer_.substr(0, end);
    buffer_.erase(0, end);
    return out;
  }
  // One response with a Content-Length body.
  std::pair<int, std::string> response() {
    std::string head = read_until("\r\n\r\n");
    if (head.size() < 12) return {0, ""};
    const int status = std::stoi(head.substr(9, 3));
    size_t len = 0;
    const size_t cl = head.find("Content-Length: ");
    if (cl != std::string::npos) len = std::stoul(head.substr(cl + 16));
    while (buffer_.size() < len) {
      char buf[4096];
      const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
      if (n <= 0) break;
      buffer_.append(buf, static_cast<size_t>(n));
    }
    std::string body = buffer_.substr(0, len);
    buffer_.erase(0, std::min(len, buffer_.size()));
    return {status, body};
  }
  bool peer_closed() {
    char c;
    return ::recv(fd_, &c, 1, 0) == 0;
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
  std::string buffer_;
};

class HttpServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HttpServerConfig cfg;
    cfg.port = 0;
    cfg.max_body_bytes = 1000;
    cfg.max_header_bytes = 2000;
    cfg.request_read_timeout_s = 0.5;
    cfg.keep_alive_timeout_s = 0.5;
    server_ = std::make_unique<HttpServer>(cfg);
    server_->add_route("GET", "/hello", [](HttpExchange &ex) -> asio::awaitable<void> {
      HttpResponse r;
      r.content_type = "text/plain";
      r.body = "hello " + ex.request().query;
      co_await ex.respond(std::move(r));
    });
    server_->add_route("POST", "/echo", [](HttpExchange &ex) -> asio::awaitable<void> {
      HttpResponse r;
      r.body = ex.request().body;
      co_await ex.respond(std::move(r));
    });
    server_->add_route("GET", "/stream", [](HttpExchange &ex) -> asio::awaitable<void> {
      co_await ex.begin_stream(200, "text/event-stream");
      for (int i = 0; i < 3; ++i) co_await ex.write("data: " + std::to_string(i) + "\n\n");
      co_await ex.end_stream();
    });
    server_->add_route("GET", "/later", [](HttpExchange &ex) -> asio::awaitable<void> {
      auto waker = ex.waker();
      std::atomic<bool> done{false};
      std::thread t([waker, &done] {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        done = true;
        waker->notify();
      });
      while (!done) co_await waker->wait();
      t.join();
      HttpResponse r;
      r.body = "woken";
      co_await ex.respond(std::move(r));
    });
    server_->add_route("GET", "/wait-for-disconnect", [this](HttpExchange &ex) -> asio::awaitable<void> {
      ex.watch_disconnect();
      while (!ex.client_gone()) co_await ex.waker()->wait();
      saw_disconnect_ = true;
    });
    server_->add_route("GET", "/throw", [](HttpExchange &) -> asio::awaitable<void> {
      throw std::runtime_error("boom");
      co_return;
    });
    ASSERT_TRUE(server_->start().ok());
    port_ = server_->port();
  }
  void TearDown() override { server_->stop(); }

  std::unique_ptr<HttpServer> server_;
  int port_ = 0;
  std::atomic<bool> saw_disconnect_{false};
};

TEST_F(HttpServerTest, RoutesKeepAliveAndErrors) {
  Client c(port_);
  ASSERT_TRUE(c.connected());
  c.send("GET /hello?x=1 HTTP/1.1\r\nHost: a\r\n\r\n");
  auto [status, body] = c.response();
  EXPECT_EQ(status, 200);
  EXPECT_EQ(body, "hello x=1");
  // Same connection: 404, 405, then a POST with a body.
  c.send("GET /nope HTTP/1.1\r\nHost: a\r\n\r\n");
  std::tie(status, body) = c.response();
  EXPECT_EQ(status, 404);
  auto err = nlohmann::json::parse(body);
  EXPECT_EQ(err["error"]["code"], 404);
  EXPECT_TRUE(err["error"]["message"].is_string());
  c.send("POST /hello HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n");
  std::tie(status, body) = c.response();
  EXPECT_EQ(status, 405);
  c.send("POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nabcde");
  std::tie(status, body) = c.response();
  EXPECT_EQ(status, 200);
  EXPECT_EQ(body, "abcde");
  // A handler that throws answers 500 and the server goes on.
  c.send("GET /throw HTTP/1.1\r\nHost: a\r\n\r\n");
  std::tie(status, body) = c.response();
  EXPECT_EQ(status, 500);
  c.send("GET /hello HTTP/1.1\r\nHost: a\r\n\r\n");
  EXPECT_EQ(c.response().first, 200);
}

TEST_F(HttpServerTest, Limits) {
  {
    Client c(port_);
    c.send("POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 1000000000\r\n\r\nxx");
    EXPECT_EQ(c.response().first, 413);
  }
  {
    Client c(port_);
    c.send("POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n400\r\n" + std::string(1024, 'a') +
           "\r\n0\r\n\r\n");
    EXPECT_EQ(c.response().first, 413);
  }
  {
    Client c(port_);
    c.send("GET /hello HTTP/1.1\r\nHost: a\r\nX-Big: " + std::string(5000, 'b') + "\r\n\r\n");
    EXPECT_EQ(c.response().first, 431);
  }
  {
    Client c(port_);
    c.send("GARBAGE\r\n\r\n");
    EXPECT_EQ(c.response().first, 400);
  }
  Client ok(port_);
  ok.send("GET /hello HTTP/1.1\r\nHost: a\r\n\r\n");
  EXPECT_EQ(ok.response().first, 200);
}

TEST_F(HttpServerTest, SlowClientGets408AndIdleConnectionsClose) {
  Client slow(port_);
  slow.send("POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\nabc");  // never completes
  EXPECT_EQ(slow.response().first, 408);
  Client slow_header(port_);
  slow_header.send("GET /hello HTTP/1.1\r\nHo");
  EXPECT_EQ(slow_header.response().first, 408);
  Client idle(port_);
  EXPECT_TRUE(idle.peer_closed());  // nothing sent: closed quietly after the keep-alive timeout
}

TEST_F(HttpServerTest, ChunkedStream) {
  Client c(port_);
  c.send("GET /stream HTTP/1.1\r\nHost: a\r\n\r\n");
  std::string head = c.read_until("\r\n\r\n");
  EXPECT_NE(head.find("Transfer-Encoding: chunked"), std::string::npos);
  EXPECT_NE(head.find("text/event-stream"), std::string::npos);
  std::string raw = c.read_until("0\r\n\r\n");
  // De-chunk.
  std::string body;
  size_t pos = 0;
  for (;;) {
    const size_t eol = raw.find("\r\n", pos);
    ASSERT_NE(eol, std::string::npos);
    const size_t len = std::stoul(raw.substr(pos, eol - pos), nullptr, 16);
    if (len == 0) break;
    body += raw.substr(eol + 2, len);
    pos = eol + 2 + len + 2;
  }
  EXPECT_EQ(body, "data: 0\n\ndata: 1\n\ndata: 2\n\n");
  c.send("GET /hello HTTP/1.1\r\nHost: a\r\n\r\n");  // keep-alive after a stream
  EXPECT_EQ(c.response().first, 200);
}

TEST_F(HttpServerTest, WakerFromAnotherThread) {
  Client c(port_);
  c.send("GET /later HTTP/1.1\r\nHost: a\r\n\r\n");
  auto [status, body] = c.response();
  EXPECT_EQ(status, 200);
  EXPECT_EQ(body, "woken");
}

TEST_F(HttpServerTest, NoticesDisconnect) {
  {
    Client c(port_);
    c.send("GET /wait-for-disconnect HTTP/1.1\r\nHost: a\r\n\r\n");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  for (int i = 0; i < 200 && !saw_disconnect_; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_TRUE(saw_disconnect_);
}

TEST_F(HttpServerTest, ErrorResponseShape) {
  HttpResponse r = HttpServer::error_response(400, "n must be at least 1", "n");
  auto j = nlohmann::json::parse(r.body);
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(j["error"]["message"], "n must be at least 1");
  EXPECT_EQ(j["error"]["type"], "BadRequestError");
  EXPECT_EQ(j["error"]["param"], "n");
  EXPECT_EQ(j["error"]["code"], 400);
  EXPECT_TRUE(nlohmann::json::parse(HttpServer::error_response(404, "x").body)["error"]["param"].is_null());
}

}  // namespace
}  // namespace llmserve::server
