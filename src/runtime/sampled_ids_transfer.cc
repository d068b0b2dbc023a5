// SampledIdsTransfer (see the header): one side stream, two slots, an event pair per slot.
#include "runtime/sampled_ids_transfer.h"

#include "core/logging.h"

#ifdef LLMSERVE_WITH_CUDA
#include <cuda_runtime_api.h>

#include "core/cuda_allocator.h"
#include "core/cuda_stream.h"
#endif

namespace llmserve {

#ifdef LLMSERVE_WITH_CUDA
namespace {
cudaEvent_t new_event() {
  cudaEvent_t event = nullptr;
  cuda::check_cuda(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreateWithFlags");
  return event;
}
}  // namespace

SampledIdsTransfer::SampledIdsTransfer(Device device, int64_t max_rows) {
  CHECK(!device.is_cpu()) << "SampledIdsTransfer is for CUDA devices";
  CHECK_GT(max_rows, 0);
  cudaStream_t stream = nullptr;
  cuda::check_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  side_stream_ = stream;
  for (int s = 0; s < kSlots; ++s) {
    device_ids_[s] = Tensor::zeros({max_rows}, DType::kI32, device);
    host_ids_[s] = Tensor::empty_pinned({max_rows}, DType::kI32);
    sampled_[s] = new_event();
    copied_[s] = new_event();
  }
}

SampledIdsTransfer::~SampledIdsTransfer() {
  if (side_stream_ != nullptr) cudaStreamSynchronize(static_cast<cudaStream_t>(side_stream_));
  for (int s = 0; s < kSlots; ++s) {
    if (sampled_[s] != nullptr) cudaEventDestroy(static_cast<cudaEvent_t>(sampled_[s]));
    if (copied_[s] != nullptr) cudaEventDestroy(static_cast<cudaEvent_t>(copied_[s]));
  }
  if (side_stream_ != nullptr) cudaStreamDestroy(static_cast<cudaStream_t>(side_stream_));
}

void SampledIdsTransfer::start_copy(int slot, int64_t n) {
  CHECK(slot >= 0 && slot < kSlots && n >= 0 && n <= device_ids_[slot].size(0)) << "slot " << slot << ", " << n;
  auto side = static_cast<cudaStream_t>(side_stream_);
  auto sampled = static_cast<cudaEvent_t>(sampled_[slot]);
  cuda::check_cuda(cudaEventRecord(sampled, cuda::current_stream()), "cudaEventRecord");
  cuda::check_cuda(cudaStreamWaitEvent(side, sampled, 0), "cudaStreamWaitEvent");
  if (n > 0) {
    cuda::check_cuda(cudaMemcpyAsync(host_ids_[slot].raw_data(), device_ids_[slot].raw_data(),
                                     static_cast<size_t>(n) * sizeof(int32_t), cudaMemcpyDeviceToHost, side),
                     "cudaMemcpyAsync");
  }
  cuda::check_cuda(cudaEventRecord(static_cast<cudaEvent_t>(copied_[slot]), side), "cudaEventRecord");
}

const int32_t* SampledIdsTransfer::wait(int slot) const {
  CHECK(slot >= 0 && slot < kSlots) << "slot " << slot;
  cuda::check_cuda(cudaEventSynchronize(static_cast<cudaEvent_t>(copied_[slot])), "cudaEventSynchronize");
  return host_ids_[slot].data<int32_t>();
}

#else

SampledIdsTransfer::SampledIdsTransfer(Device device, int64_t max_rows) {
  (void)device;
  (void)max_rows;
  LOG(FATAL) << "this build has no CUDA support: SampledIdsTransfer is for CUDA devices";
}
SampledIdsTransfer::~SampledIdsTransfer() = default;
void SampledIdsTransfer::start_copy(int slot, int64_t n) {
  (void)slot;
  (void)n;
  LOG(FATAL) << "this build has no CUDA support";
}
const int32_t* SampledIdsTransfer::wait(int slot) const {
  (void)slot;
  LOG(FATAL) << "this build has no CUDA support";
  return nullptr;
}

#endif

}  // namespace llmserve
