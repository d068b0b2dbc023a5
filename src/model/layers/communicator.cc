// SingleProcessCommunicator: the world-size-1 collectives.
#include "model/layers/communicator.h"

#include "core/logging.h"

namespace llmserve {

void SingleProcessCommunicator::all_reduce(Tensor& t) { (void)t; }

void SingleProcessCommunicator::all_gather(Tensor& out, const Tensor& in) {
  CHECK(out.shape() == in.shape()) << "all_gather: " << out.to_string() << " from " << in.to_string();
  if (out.raw_data() != in.raw_data()) out.copy_from(in);
}

void SingleProcessCommunicator::broadcast(Tensor& t, int root) {
  (void)t;
  CHECK_EQ(root, 0) << "broadcast from rank " << root << " in a world of one";
}

Communicator& single_process_communicator() {
  static SingleProcessCommunicator comm;
  return comm;
}

}  // namespace llmserve
