// run_benchmark end to end over real sockets, so the coroutine client runs under ASan/UBSan too: a blocking
// one-thread server (a test fixture) answers /v1/models and streams completions in pieces that split SSE events,
// with "Connection: close" so every request dials anew; every third completion is an HTTP 500.
#include "cli/bench_serve_runner.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>

namespace llmserve::cli {
namespace {

class TinyServer {
 public:
  TinyServer() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    socklen_t len = sizeof(addr);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    EXPECT_EQ(listen(fd_, 64), 0);
    thread_ = std::thread([this] { serve(); });
  }
  ~TinyServer() {
    stop_ = true;
    shutdown(fd_, SHUT_RDWR);
    close(fd_);
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int num_completions() const { return num_completions_; }

 private:
  static void send_all(int c, const std::string& s) {
    for (size_t off = 0; off < s.size();) {
      const ssize_t n = send(c, s.data() + off, s.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return;
      off += static_cast<size_t>(n);
    }
  }
  void serve() {
    while (!stop_) {
      const int c = accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      std::string req;
      char buf[4096];
      size_t body_start = std::string::npos, content_length = 0;
      while (true) {
        const ssize_t n = recv(c, buf, sizeof(buf), 0);
        if (n <= 0) break;
        req.append(buf, static_cast<size_t>(n));
        if (body_start == std::string::npos && (body_start = req.find("\r\n\r\n")) != std::string::npos) {
          body_start += 4;
          const size_t cl = req.find("Content-Length: ");
          if (cl != std::string::npos) content_length = std::stoul(req.substr(cl + 16));
        }
        if (body_start != std::string::npos && req.size() >= body_start + content_length) break;
      }
      if (req.rfind("GET /v1/models", 0) == 0) {
        const std::string body = R"({"object":"list","data":[{"id":"tiny"}]})";
        send_all(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: " +
                        std::to_string(body.size()) + "\r\n\r\n" + body);
      } else if (++num_completions_ % 3 == 0) {
        send_all(c, "HTTP/1.1 500 Internal Server Error\r\nConnection: close\r\nContent-Length: 4\r\n\r\noops");
      } else {
        send_all(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n");
        for (int i = 0; i < 4; ++i) {
          const std::string ev = "data: {\"choices\":[{\"index\":0,\"text\":\"t" + std::to_string(i) + "\"}]}\n\n";
          send_all(c, ev.substr(0, 7));  // split inside the event
          std::this_thread::sleep_for(std::chrono::milliseconds(2));
          send_all(c, ev.substr(7));
        }
        send_all(c,
                 "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":4}}\n\ndata: [DONE]\n\n");
      }
      shutdown(c, SHUT_WR);
      close(c);
    }
  }
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> num_completions_{0};
  std::thread thread_;
};

std::vector<SampleRequest> requests(int n) {
  std::vector<SampleRequest> r(n);
  for (SampleRequest& s : r) {
    s.prompt_ids = {1, 2, 3};
    s.prompt_len = 3;
    s.expected_output_len = 4;
  }
  return r;
}

TEST(RunBenchmark, StreamsOverRealSocketsAndRecordsFailures) {
  TinyServer server;
  BenchRunConfig c;
  c.base_url = server.url();
  c.max_concurrency = 2;
  c.arrival_times.assign(8, 0.0);
  StatusOr<BenchRun> run = run_benchmark(c, requests(8));
  ASSERT_TRUE(run.ok()) << run.status().message();
  EXPECT_EQ(run->model, "tiny");
  EXPECT_EQ(server.num_completions(), 9);  // the initial test + 8
  int ok = 0, failed = 0;
  for (const RequestOutput& o : run->outputs) {
    if (o.success) {
      ++ok;
      EXPECT_EQ(o.generated_text, "t0t1t2t3");
      EXPECT_EQ(o.itl.size(), 3u);
      EXPECT_EQ(o.output_tokens, 4);
      EXPECT_EQ(o.prompt_len, 5);
      EXPECT_GE(o.latency, o.ttft);
    } else {
      ++failed;
      EXPECT_EQ(o.error, "HTTP 500 Internal Server Error: oops");
    }
  }
  EXPECT_EQ(failed, 3);  // server completions 3, 6, 9
  EXPECT_EQ(ok, 5);
  EXPECT_GT(run->duration_s, 0.0);
}

TEST(RunBenchmark, UnreachableServerIsAnError) {
  int port = 0;
  {
    TinyServer s;  // a port that was just free; nothing listens after the server is gone
    port = std::stoi(s.url().substr(s.url().rfind(':') + 1));
  }
  BenchRunConfig c;
  c.base_url = "http://127.0.0.1:" + std::to_string(port);
  c.arrival_times.assign(1, 0.0);
  StatusOr<BenchRun> run = run_benchmark(c, requests(1));
  ASSERT_FALSE(run.ok());
  EXPECT_NE(run.status().message().find("cannot connect to " + c.base_url), std::string::npos)
      << run.status().message();
  c.model = "m";  // skips /v1/models: the initial test request reports it
  run = run_benchmark(c, requests(1));
  ASSERT_FALSE(run.ok());
  EXPECT_NE(run.status().message().find("initial test run failed"), std::string::npos);
}

}  // namespace
}  // namespace llmserve::cli
