// CpuCommunicatorGroup: each collective is post -> barrier -> work on shared buffers -> barrier.
#include "runtime/cpu_communicator.h"

#include <algorithm>
#include <cstring>

#include "core/logging.h"

namespace llmserve {

class CpuCommunicatorGroup::Rank final : public Communicator {
 public:
  Rank(CpuCommunicatorGroup& group, int rank) : group_(group), rank_(rank) {}
  int rank() const override { return rank_; }
  int world_size() const override { return group_.world_size_; }

  void all_reduce(Tensor& t) override {
    check_local(t, "all_reduce");
    CHECK(dtype_is_float(t.dtype())) << "all_reduce: float tensor expected, got " << t.to_string();
    const std::vector<Slot>& slots = post(t.raw_data(), t.numel(), t.dtype(), "all_reduce");
    // Reduce-scatter and all-gather in one pass: rank r owns elements [begin, end), sums them over the ranks in
    // rank order and writes the sum back into every rank's buffer. No two ranks touch the same element.
    const int world = world_size();
    const int64_t n = t.numel(), begin = n * rank_ / world, end = n * (rank_ + 1) / world;
    const size_t esize = dtype_size(t.dtype());
    constexpr int64_t kBlock = 256;
    float acc[kBlock], part[kBlock];
    for (int64_t i = begin; i < end; i += kBlock) {
      const size_t m = static_cast<size_t>(std::min(kBlock, end - i));
      std::fill(acc, acc + m, 0.0f);
      for (int k = 0; k < world; ++k) {
        convert_elements(static_cast<const char*>(slots[k].data) + i * esize, t.dtype(), part, DType::kF32, m);
        for (size_t j = 0; j < m; ++j) acc[j] += part[j];
      }
      for (int k = 0; k < world; ++k) {
        convert_elements(acc, DType::kF32, static_cast<char*>(slots[k].data) + i * esize, t.dtype(), m);
      }
    }
    group_.barrier_.arrive_and_wait();
  }

  void all_gather(Tensor& out, const Tensor& in) override {
    check_local(in, "all_gather in");
    check_local(out, "all_gather out");
    CHECK(out.dtype() == in.dtype() && out.numel() == in.numel() * world_size())
        << "all_gather: out " << out.to_string() << " for " << world_size() << " x " << in.to_string();
    const std::vector<Slot>& slots = post(in.raw_data(), in.numel(), in.dtype(), "all_gather");
    const size_t bytes = in.nbytes();
    for (int k = 0; k < world_size(); ++k) {
      char* dst = static_cast<char*>(out.raw_data()) + k * bytes;
      if (dst != slots[k].data && bytes > 0) std::memcpy(dst, slots[k].data, bytes);
    }
    group_.barrier_.arrive_and_wait();  // nobody rewrites its `in` while another rank still reads it
  }

  void broadcast(Tensor& t, int root) override {
    check_local(t, "broadcast");
    CHECK(root >= 0 && root < world_size()) << "broadcast: root " << root << " outside [0, " << world_size() << ")";
    const std::vector<Slot>& slots = post(t.raw_data(), t.numel(), t.dtype(), "broadcast");
    if (rank_ != root && t.nbytes() > 0) std::memcpy(t.raw_data(), slots[root].data, t.nbytes());
    group_.barrier_.arrive_and_wait();
  }

 private:
  static void check_local(const Tensor& t, const char* op) {
    CHECK(t.defined() && t.device().is_cpu() && t.is_contiguous())
        << op << ": a contiguous CPU tensor expected, got " << t.to_string();
  }

  // Publishes this rank's buffer and waits for every rank's; checks that all ranks called with the same size.
  const std::vector<Slot>& post(void* data, int64_t numel, DType dtype, const char* op) {
    group_.slots_[rank_] = {data, numel, dtype};
    group_.barrier_.arrive_and_wait();
    for (const Slot& s : group_.slots_) {
      CHECK(s.numel == numel && s.dtype == dtype)
          << op << ": rank " << rank_ << " has " << numel << " x " << dtype_name(dtype) << ", another rank " << s.numel
          << " x " << dtype_name(s.dtype) << " (ranks must call collectives with the same shapes)";
    }
    return group_.slots_;
  }

  CpuCommunicatorGroup& group_;
  int rank_;
};

CpuCommunicatorGroup::CpuCommunicatorGroup(int world_size)
    : world_size_(world_size), barrier_(world_size), slots_(static_cast<size_t>(world_size)) {
  CHECK(world_size >= 1) << "a communicator group needs at least one rank";
  for (int r = 0; r < world_size; ++r) ranks_.push_back(std::make_unique<Rank>(*this, r));
}

CpuCommunicatorGroup::~CpuCommunicatorGroup() = default;

Communicator& CpuCommunicatorGroup::rank(int r) {
  CHECK(r >= 0 && r < world_size_) << "rank " << r << " outside [0, " << world_size_ << ")";
  return *ranks_[static_cast<size_t>(r)];
}

}  // namespace llmserve
