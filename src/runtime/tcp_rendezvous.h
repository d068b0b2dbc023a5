// The multi-node bootstrap: node 0 hands a small blob (the NCCL unique id) to every other node over TCP, as
// torchrun's --master-addr / --master-port rendezvous does. Node 0 listens; nodes 1..nnodes-1 connect (retrying
// until the timeout, so start order does not matter), say who they are, and receive the blob. Independent of NCCL:
// only sockets. Errors name the address, the node and what went wrong (timeout, refused, mismatched world).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"

namespace llmserve {

struct RendezvousOptions {
  std::string master_addr = "127.0.0.1";  // node 0's address as the other nodes reach it
  int64_t master_port = 29500;            // node 0 listens here (every interface); 0: any free port (tests)
  int64_t nnodes = 1;
  int64_t node_rank = 0;
  double timeout_s = 300;  // for node 0 to see every node, and for a node to reach node 0
};

// InvalidArgument naming the flag (--nnodes, --node-rank, --master-port, --master-addr) for values no rendezvous
// can use.
Status check_rendezvous_options(const RendezvousOptions& options);

// Node 0's side, split so a caller can learn the port before serving (port 0 picks a free one).
class RendezvousServer {
 public:
  // Binds and listens on master_port. Errors name the port (in use, no permission).
  static StatusOr<std::unique_ptr<RendezvousServer>> listen(const RendezvousOptions& options);
  ~RendezvousServer();
  RendezvousServer(const RendezvousServer&) = delete;
  RendezvousServer& operator=(const RendezvousServer&) = delete;
  int port() const { return port_; }
  // Waits for nodes 1..nnodes-1 (each once; a connection that does not speak the protocol is dropped) and sends
  // each `blob`. Error on timeout (naming the nodes still missing), a duplicate node rank or a node that expects
  // another nnodes (that node is told why before the error returns).
  Status serve(const std::string& blob);

 private:
  RendezvousServer(int fd, int port, RendezvousOptions options) : fd_(fd), port_(port), options_(std::move(options)) {}
  int fd_;
  int port_;
  RendezvousOptions options_;
};

// A node other than 0: connects to master_addr:master_port (retrying while refused, until the timeout), sends its
// node rank and nnodes, returns node 0's blob. An error from node 0 (mismatched nnodes, duplicate rank) is returned
// with node 0's message.
StatusOr<std::string> rendezvous_receive(const RendezvousOptions& options);

// Both sides in one call: node 0 listens and serves `blob` (returning it), every other node receives it.
StatusOr<std::string> exchange_blob(const RendezvousOptions& options, const std::string& blob);

}  // namespace llmserve
