// reshape_and_cache on CUDA: one CTA per token copies its key and value rows ([num_kv_heads * head_dim]
// elements) into the paged caches at slot_mapping[t]. The copy is dtype-agnostic (bytes), 16 bytes per thread
// when rows and pointers allow it. Negative slots (padding) and slots past the cache are skipped: the device
// cannot abort, and the runner's KV-cache manager never hands out such slots.
#include <string>

#include "core/cuda_stream.h"
#include "kernels/ops.h"
#include "kernels/cuda/attention_params.h"
#include "kernels/cuda/cuda_common.cuh"

namespace llmserve::cuda {
namespace {

// U: the copy unit (uint4 = 16 bytes, or the element itself). Strides in elements of the tensors' dtype.
template <typename U>
__global__ void reshape_and_cache_kernel(const ReshapeAndCacheParams p) {
  const int t = blockIdx.x;
  const int64_t slot = p.slot_mapping[t];
  if (slot < 0 || slot >= p.num_slots) return;
  const int units = p.row_elems * p.elem_size / static_cast<int>(sizeof(U));
  const U* k = reinterpret_cast<const U*>(static_cast<const char*>(p.key) + t * p.key_row_stride * p.elem_size);
  const U* v = reinterpret_cast<const U*>(static_cast<const char*>(p.value) + t * p.value_row_stride * p.elem_size);
  U* kc = reinterpret_cast<U*>(static_cast<char*>(p.key_cache) + slot * p.row_elems * p.elem_size);
  U* vc = reinterpret_cast<U*>(static_cast<char*>(p.value_cache) + slot * p.row_elems * p.elem_size);
  for (int i = threadIdx.x; i < units; i += blockDim.x) {
    kc[i] = k[i];
    vc[i] = v[i];
  }
}

bool aligned(const void* ptr, int64_t n) { return reinterpret_cast<uintptr_t>(ptr) % n == 0; }

}  // namespace

Status ReshapeAndCacheParams::check() const {
  if (key == nullptr || value == nullptr || key_cache == nullptr || value_cache == nullptr || slot_mapping == nullptr)
    return invalid_argument("reshape_and_cache: null pointer");
  if (elem_size != 2 && elem_size != 4)
    return invalid_argument("reshape_and_cache: elem_size = " + std::to_string(elem_size));
  if (row_elems <= 0 || num_tokens < 0 || num_slots < 0)
    return invalid_argument("reshape_and_cache: row_elems = " + std::to_string(row_elems));
  return ok_status();
}

void reshape_and_cache(const Tensor& key, const Tensor& value, Tensor& key_cache, Tensor& value_cache,
                       const Tensor& slot_mapping) {
  ReshapeAndCacheParams p;
  p.key = key.raw_data();
  p.value = value.raw_data();
  p.key_cache = key_cache.raw_data();
  p.value_cache = value_cache.raw_data();
  p.slot_mapping = slot_mapping.data<int64_t>();
  p.key_row_stride = key.stride(0);
  p.value_row_stride = value.stride(0);
  p.num_slots = key_cache.size(0) * key_cache.size(1);
  p.num_tokens = static_cast<int>(key.size(0));
  p.row_elems = static_cast<int>(key_cache.size(2) * key_cache.size(3));
  p.elem_size = static_cast<int>(dtype_size(key.dtype()));
  const Status st = p.check();
  CHECK(st.ok()) << st.message();
  if (p.num_tokens == 0) return;
  const int64_t row_bytes = static_cast<int64_t>(p.row_elems) * p.elem_size;
  const bool vec = row_bytes % 16 == 0 && (p.key_row_stride * p.elem_size) % 16 == 0 &&
                   (p.value_row_stride * p.elem_size) % 16 == 0 && aligned(p.key, 16) && aligned(p.value, 16) &&
                   aligned(p.key_cache, 16) && aligned(p.value_cache, 16);
  const int units = static_cast<int>(vec ? row_bytes / 16 : p.row_elems);
  const int threads = units >= 128 ? 128 : ((units + 31) / 32) * 32;
  cudaStream_t stream = current_stream();
  const unsigned grid = static_cast<unsigned>(p.num_tokens);
  if (vec) {
    reshape_and_cache_kernel<uint4><<<grid, threads, 0, stream>>>(p);
  } else if (p.elem_size == 2) {
    reshape_and_cache_kernel<uint16_t><<<grid, threads, 0, stream>>>(p);
  } else {
    reshape_and_cache_kernel<uint32_t><<<grid, threads, 0, stream>>>(p);
  }
  check_launch("reshape_and_cache_kernel");
}

void register_cache_kernels() { ops::reshape_and_cache.register_kernel(DeviceType::kCUDA, reshape_and_cache); }

}  // namespace llmserve::cuda
