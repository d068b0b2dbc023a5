// NcclCommunicator over ncclAllReduce / ncclAllGather / ncclBroadcast on the current stream. Without NCCL in the
// build, create() and new_nccl_unique_id() return an error naming what is missing.
#include "runtime/nccl_communicator.h"

#include <cstring>

#include "core/logging.h"

#if defined(LLMSERVE_WITH_CUDA) && defined(LLMSERVE_WITH_NCCL)
#include <cuda_runtime_api.h>
#include <nccl.h>

#include "core/cuda_stream.h"
#endif

namespace llmserve {

#if defined(LLMSERVE_WITH_CUDA) && defined(LLMSERVE_WITH_NCCL)

static_assert(sizeof(ncclUniqueId) == kNcclUniqueIdBytes, "ncclUniqueId size");

struct NcclCommunicator::Impl {
  ncclComm_t comm = nullptr;
  int device = 0;
};

namespace {

Status nccl_error(const char* what, ncclResult_t r) {
  return internal_error(std::string(what) + ": " + ncclGetErrorString(r));
}

void check_nccl(ncclResult_t r, const char* what) { CHECK(r == ncclSuccess) << what << ": " << ncclGetErrorString(r); }

ncclDataType_t nccl_dtype(DType d, const char* op) {
  switch (d) {
    case DType::kF32:
      return ncclFloat32;
    case DType::kBF16:
      return ncclBfloat16;
    case DType::kF16:
      return ncclFloat16;
    case DType::kI32:
      return ncclInt32;
    case DType::kI64:
      return ncclInt64;
    case DType::kU8:
      return ncclUint8;
    default:
      LOG(FATAL) << op << ": dtype " << dtype_name(d) << " has no NCCL type";
      return ncclUint8;
  }
}

void check_tensor(const Tensor& t, int device, const char* op) {
  CHECK(t.defined() && !t.device().is_cpu() && t.device().index == device && t.is_contiguous())
      << op << ": a contiguous tensor on cuda:" << device << " expected, got " << t.to_string();
}

}  // namespace

bool nccl_available() { return true; }

StatusOr<std::string> new_nccl_unique_id() {
  ncclUniqueId id;
  if (ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess) return nccl_error("ncclGetUniqueId", r);
  return std::string(reinterpret_cast<const char*>(&id), sizeof(id));
}

StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::create(const std::string& unique_id, int world_size,
                                                                     int rank, int device) {
  if (unique_id.size() != sizeof(ncclUniqueId)) {
    return invalid_argument("NCCL unique id of " + std::to_string(unique_id.size()) + " bytes, expected " +
                            std::to_string(sizeof(ncclUniqueId)));
  }
  if (rank < 0 || rank >= world_size) {
    return invalid_argument("NCCL rank " + std::to_string(rank) + " outside [0, " + std::to_string(world_size) + ")");
  }
  if (cudaError_t e = cudaSetDevice(device); e != cudaSuccess) {
    return invalid_argument("cuda:" + std::to_string(device) + ": " + cudaGetErrorString(e));
  }
  ncclUniqueId id;
  std::memcpy(&id, unique_id.data(), sizeof(id));
  auto impl = std::make_unique<Impl>();
  impl->device = device;
  if (ncclResult_t r = ncclCommInitRank(&impl->comm, world_size, id, rank); r != ncclSuccess) {
    return nccl_error(
        ("ncclCommInitRank (rank " + std::to_string(rank) + " of " + std::to_string(world_size) + ")").c_str(), r);
  }
  return std::unique_ptr<NcclCommunicator>(new NcclCommunicator(std::move(impl), world_size, rank));
}

NcclCommunicator::NcclCommunicator(std::unique_ptr<Impl> impl, int world_size, int rank)
    : impl_(std::move(impl)), world_size_(world_size), rank_(rank) {}

NcclCommunicator::~NcclCommunicator() {
  if (impl_ && impl_->comm != nullptr) ncclCommDestroy(impl_->comm);
}

void NcclCommunicator::all_reduce(Tensor& t) {
  check_tensor(t, impl_->device, "all_reduce");
  CHECK(dtype_is_float(t.dtype())) << "all_reduce: float tensor expected, got " << t.to_string();
  check_nccl(ncclAllReduce(t.raw_data(), t.raw_data(), static_cast<size_t>(t.numel()),
                           nccl_dtype(t.dtype(), "all_reduce"), ncclSum, impl_->comm, cuda::current_stream()),
             "ncclAllReduce");
}

void NcclCommunicator::all_gather(Tensor& out, const Tensor& in) {
  check_tensor(in, impl_->device, "all_gather in");
  check_tensor(out, impl_->device, "all_gather out");
  CHECK(out.dtype() == in.dtype() && out.numel() == in.numel() * world_size_)
      << "all_gather: out " << out.to_string() << " for " << world_size_ << " x " << in.to_string();
  check_nccl(ncclAllGather(in.raw_data(), out.raw_data(), static_cast<size_t>(in.numel()),
                           nccl_dtype(in.dtype(), "all_gather"), impl_->comm, cuda::current_stream()),
             "ncclAllGather");
}

void NcclCommunicator::broadcast(Tensor& t, int root) {
  check_tensor(t, impl_->device, "broadcast");
  CHECK(root >= 0 && root < world_size_) << "broadcast: root " << root << " outside [0, " << world_size_ << ")";
  check_nccl(ncclBroadcast(t.raw_data(), t.raw_data(), static_cast<size_t>(t.numel()),
                           nccl_dtype(t.dtype(), "broadcast"), root, impl_->comm, cuda::current_stream()),
             "ncclBroadcast");
}

#else  // no NCCL in this build

struct NcclCommunicator::Impl {};

bool nccl_available() { return false; }

StatusOr<std::string> new_nccl_unique_id() {
  return failed_precondition("this build has no NCCL (a CUDA build finds it beside the CUDA toolkit)");
}

StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::create(const std::string&, int, int, int) {
  return failed_precondition("this build has no NCCL (a CUDA build finds it beside the CUDA toolkit)");
}

NcclCommunicator::NcclCommunicator(std::unique_ptr<Impl> impl, int world_size, int rank)
    : impl_(std::move(impl)), world_size_(world_size), rank_(rank) {}
NcclCommunicator::~NcclCommunicator() = default;
void NcclCommunicator::all_reduce(Tensor&) { LOG(FATAL) << "no NCCL in this build"; }
void NcclCommunicator::all_gather(Tensor&, const Tensor&) { LOG(FATAL) << "no NCCL in this build"; }
void NcclCommunicator::broadcast(Tensor&, int) { LOG(FATAL) << "no NCCL in this build"; }

#endif

}  // namespace llmserve
