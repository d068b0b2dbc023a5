// Host -> device weight upload through double-buffered pinned staging (see device_weights.h).
#include "model/device_weights.h"

#include <algorithm>
#include <cstring>

#include "core/thread_pool.h"

#ifdef LLMSERVE_WITH_CUDA
#include <cuda_runtime_api.h>

#include "core/cuda_allocator.h"
#include "core/cuda_stream.h"
#endif

namespace llmserve {
namespace {

#ifdef LLMSERVE_WITH_CUDA
constexpr size_t kStagingBytes = size_t{64} << 20;  // per buffer; large enough to keep the DMA engine busy

// Two pinned buffers and the events that say when the DMA engine is done reading each.
class Stager {
 public:
  Stager() {
    for (int i = 0; i < 2; ++i) {
      buffers_[i] = cuda::allocate_pinned(kStagingBytes);
      cuda::check_cuda(cudaEventCreateWithFlags(&done_[i], cudaEventDisableTiming), "cudaEventCreate");
    }
  }
  ~Stager() {
    for (cudaEvent_t e : done_) cudaEventDestroy(e);
  }
  Stager(const Stager&) = delete;
  Stager& operator=(const Stager&) = delete;

  void upload(void* dst, const void* src, size_t bytes) {
    cudaStream_t stream = cuda::current_stream();
    const auto* s = static_cast<const uint8_t*>(src);
    auto* d = static_cast<uint8_t*>(dst);
    for (size_t off = 0; off < bytes; off += kStagingBytes) {
      const size_t n = std::min(kStagingBytes, bytes - off);
      const int i = next_;
      next_ ^= 1;
      cuda::check_cuda(cudaEventSynchronize(done_[i]), "cudaEventSynchronize");  // buffer i drained
      auto* staging = static_cast<uint8_t*>(buffers_[i].get());
      // Reading the mapping page-faults the file in: several threads read it at once.
      parallel_for(static_cast<int64_t>(n), int64_t{4} << 20,
                   [&](int64_t b, int64_t e) { std::memcpy(staging + b, s + off + b, static_cast<size_t>(e - b)); });
      cuda::check_cuda(cudaMemcpyAsync(d + off, staging, n, cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync");
      cuda::check_cuda(cudaEventRecord(done_[i], stream), "cudaEventRecord");
    }
  }

 private:
  std::shared_ptr<void> buffers_[2];
  cudaEvent_t done_[2] = {};
  int next_ = 0;
};

Stager& stager() {
  thread_local Stager s;
  return s;
}
#endif

class DeviceWeightSource : public WeightSource {
 public:
  DeviceWeightSource(WeightSource& inner, Device device) : inner_(inner), device_(device) {}

  StatusOr<Tensor> get(const std::string& name, const Shape& shape, DType dtype) override {
    ASSIGN_OR_RETURN(Tensor host, inner_.get(name, shape, dtype));
    if (device_.is_cpu()) return host;
    return upload_to_device(host, device_);
  }
  // Only the rank's slice crosses the bus.
  StatusOr<Tensor> get_slice(const std::string& name, const Shape& shape, DType dtype, int dim, int64_t begin,
                             int64_t end) override {
    ASSIGN_OR_RETURN(Tensor host, inner_.get_slice(name, shape, dtype, dim, begin, end));
    if (device_.is_cpu()) return host;
    return upload_to_device(host, device_);
  }
  bool contains(const std::string& name) const override { return inner_.contains(name); }
  std::vector<std::string> names() const override { return inner_.names(); }

 private:
  WeightSource& inner_;
  Device device_;
};

}  // namespace

Tensor upload_to_device(const Tensor& host, Device device) {
  CHECK(host.device().is_cpu()) << "upload_to_device of " << host.to_string();
  if (device.is_cpu()) return host;
#ifdef LLMSERVE_WITH_CUDA
  const Tensor src = host.contiguous();
  Tensor out = Tensor::empty(src.shape(), src.dtype(), device);
  if (src.nbytes() > 0) stager().upload(out.raw_data(), src.raw_data(), src.nbytes());
  return out;
#else
  LOG(FATAL) << "this build has no CUDA support; cannot load weights to " << device.to_string();
  return host;
#endif
}

std::unique_ptr<WeightSource> make_device_weight_source(WeightSource& inner, Device device) {
  return std::make_unique<DeviceWeightSource>(inner, device);
}

}  // namespace llmserve
