// TCP rendezvous over POSIX sockets. Wire format (little-endian): a node sends "LLMSRDV1", u32 node_rank,
// u32 nnodes; node 0 answers u32 status (0 ok, 1 error), u32 length, then the blob (ok) or an error message.
#include "runtime/tcp_rendezvous.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <set>
#include <thread>
#include <utility>
#include <vector>

namespace llmserve {
namespace {

constexpr char kMagic[8] = {'L', 'L', 'M', 'S', 'R', 'D', 'V', '1'};
constexpr uint32_t kMaxBlobBytes = 1 << 20;
using Clock = std::chrono::steady_clock;

std::string errno_text() { return std::strerror(errno); }

double seconds_left(Clock::time_point deadline) {
  return std::chrono::duration<double>(deadline - Clock::now()).count();
}

// Whole-buffer send / receive, each bounded by the deadline.
bool wait_fd(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    const double left = seconds_left(deadline);
    if (left <= 0) return false;
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, static_cast<int>(left * 1000) + 1);
    if (r > 0) return true;
    if (r < 0 && errno != EINTR) return false;
  }
}

bool send_all(int fd, const void* data, size_t n, Clock::time_point deadline) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    if (!wait_fd(fd, POLLOUT, deadline)) return false;
    const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool recv_all(int fd, void* data, size_t n, Clock::time_point deadline) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    if (!wait_fd(fd, POLLIN, deadline)) return false;
    const ssize_t r = ::recv(fd, p, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

void put_u32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint32_t get_u32(const unsigned char* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 | static_cast<uint32_t>(p[2]) << 16 |
         static_cast<uint32_t>(p[3]) << 24;
}

bool send_reply(int fd, uint32_t status, const std::string& payload, Clock::time_point deadline) {
  std::string msg;
  put_u32(msg, status);
  put_u32(msg, static_cast<uint32_t>(payload.size()));
  msg += payload;
  return send_all(fd, msg.data(), msg.size(), deadline);
}

std::string address(const RendezvousOptions& o) { return o.master_addr + ":" + std::to_string(o.master_port); }

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

}  // namespace

Status check_rendezvous_options(const RendezvousOptions& o) {
  if (o.nnodes < 1) return invalid_argument("--nnodes must be at least 1");
  if (o.node_rank < 0 || o.node_rank >= o.nnodes) {
    return invalid_argument("--node-rank " + std::to_string(o.node_rank) + " outside [0, --nnodes " +
                            std::to_string(o.nnodes) + ")");
  }
  if (o.master_port < 0 || o.master_port > 65535) return invalid_argument("--master-port must be in [0, 65535]");
  if (o.master_addr.empty()) return invalid_argument("--master-addr must name node 0's host");
  if (!(o.timeout_s > 0)) return invalid_argument("the rendezvous timeout must be positive");
  return ok_status();
}

StatusOr<std::unique_ptr<RendezvousServer>> RendezvousServer::listen(const RendezvousOptions& options) {
  RETURN_IF_ERROR(check_rendezvous_options(options));
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) return internal_error("rendezvous: socket: " + errno_text());
  const int one = 1;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(static_cast<uint16_t>(options.master_port));
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(fd.get(), 64) != 0) {
    return failed_precondition("rendezvous: cannot listen on port " + std::to_string(options.master_port) + ": " +
                               errno_text() + " (--master-port)");
  }
  socklen_t len = sizeof(addr);
  ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len);
  const int port = ntohs(addr.sin_port);
  return std::unique_ptr<RendezvousServer>(new RendezvousServer(fd.release(), port, options));
}

RendezvousServer::~RendezvousServer() { ::close(fd_); }

Status RendezvousServer::serve(const std::string& blob) {
  if (blob.size() > kMaxBlobBytes) return invalid_argument("rendezvous: blob too large");
  const auto deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(options_.timeout_s));
  std::set<int64_t> missing;
  for (int64_t r = 1; r < options_.nnodes; ++r) missing.insert(r);
  while (!missing.empty()) {
    if (!wait_fd(fd_, POLLIN, deadline)) {
      std::string list;
      for (int64_t r : missing) list += (list.empty() ? "" : ", ") + std::to_string(r);
      return failed_precondition("rendezvous on port " + std::to_string(port_) + ": timed out after " +
                                 std::to_string(options_.timeout_s) + " s waiting for node(s) " + list + " of " +
                                 std::to_string(options_.nnodes));
    }
    Fd peer(::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC));
    if (peer.get() < 0) continue;
    // A peer gets a few seconds to introduce itself; a silent or foreign connection is dropped, not fatal.
    const auto hello_deadline = std::min(deadline, Clock::now() + std::chrono::seconds(10));
    unsigned char hello[16];
    if (!recv_all(peer.get(), hello, sizeof(hello), hello_deadline) || std::memcmp(hello, kMagic, 8) != 0) continue;
    const int64_t rank = get_u32(hello + 8), nnodes = get_u32(hello + 12);
    if (nnodes != options_.nnodes) {
      const std::string why = "node 0 runs --nnodes " + std::to_string(options_.nnodes) + ", node " +
                              std::to_string(rank) + " --nnodes " + std::to_string(nnodes);
      send_reply(peer.get(), 1, why, hello_deadline);
      return invalid_argument("rendezvous: " + why);
    }
    if (rank < 1 || rank >= options_.nnodes || !missing.count(rank)) {
      const std::string why = "node rank " + std::to_string(rank) +
                              (rank >= 1 && rank < options_.nnodes ? " joined twice" : " is outside [1, --nnodes)");
      send_reply(peer.get(), 1, why, hello_deadline);
      return invalid_argument("rendezvous: " + why);
    }
    if (send_reply(peer.get(), 0, blob, deadline)) missing.erase(rank);
  }
  return ok_status();
}

StatusOr<std::string> rendezvous_receive(const RendezvousOptions& o) {
  RETURN_IF_ERROR(check_rendezvous_options(o));
  if (o.node_rank == 0) return invalid_argument("rendezvous_receive on node 0");
  const auto deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.timeout_s));
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (int rc = ::getaddrinfo(o.master_addr.c_str(), std::to_string(o.master_port).c_str(), &hints, &found); rc != 0) {
    return invalid_argument("rendezvous: --master-addr " + o.master_addr + ": " + gai_strerror(rc));
  }
  std::vector<char> sockaddr_bytes(found->ai_addrlen);
  std::memcpy(sockaddr_bytes.data(), found->ai_addr, found->ai_addrlen);
  ::freeaddrinfo(found);
  std::string last_error = "no attempt";
  while (seconds_left(deadline) > 0) {
    Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (fd.get() < 0) return internal_error("rendezvous: socket: " + errno_text());
    if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(sockaddr_bytes.data()),
                  static_cast<socklen_t>(sockaddr_bytes.size())) != 0) {
      last_error = errno_text();  // node 0 not listening yet: try again shortly
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      continue;
    }
    std::string hello(kMagic, sizeof(kMagic));
    put_u32(hello, static_cast<uint32_t>(o.node_rank));
    put_u32(hello, static_cast<uint32_t>(o.nnodes));
    unsigned char head[8];
    if (!send_all(fd.get(), hello.data(), hello.size(), deadline) ||
        !recv_all(fd.get(), head, sizeof(head), deadline)) {
      last_error = "connected, but node 0 did not answer";
      continue;
    }
    const uint32_t status = get_u32(head), length = get_u32(head + 4);
    if (length > kMaxBlobBytes) return data_loss("rendezvous: node 0 sent " + std::to_string(length) + " bytes");
    std::string payload(length, '\0');
    if (!recv_all(fd.get(), payload.data(), length, deadline)) {
      return data_loss("rendezvous with " + address(o) + ": connection closed mid-message");
    }
    if (status != 0) return invalid_argument("rendezvous with " + address(o) + ": node 0 refused: " + payload);
    return payload;
  }
  return failed_precondition("rendezvous: node " + std::to_string(o.node_rank) + " could not reach node 0 at " +
                             address(o) + " within " + std::to_string(o.timeout_s) + " s (last error: " + last_error +
                             "); is node 0 started with the same --master-addr / --master-port?");
}

StatusOr<std::string> exchange_blob(const RendezvousOptions& options, const std::string& blob) {
  RETURN_IF_ERROR(check_rendezvous_options(options));
  if (options.node_rank != 0) return rendezvous_receive(options);
  if (options.nnodes == 1) return blob;
  ASSIGN_OR_RETURN(std::unique_ptr<RendezvousServer> server, RendezvousServer::listen(options));
  RETURN_IF_ERROR(server->serve(blob));
  return blob;
}

}  // namespace llmserve
