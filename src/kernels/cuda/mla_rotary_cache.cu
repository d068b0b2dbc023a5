// ops::mla_rotary_and_cache on CUDA: MLA's rotary of the query's and key's rope parts and the latent-cache write in
// one launch, one CTA per token. f32 math (x1' = x1 cos - x2 sin, x2' = x2 cos + x1 sin, the CPU formula) rounded
// once on store; each rotated pair is read and written by the same thread, so q_out may alias q_pe.
// Invariant: a negative slot (padding) or one past the cache writes nothing into the cache; positions past the
// cos/sin cache trap (the device's CHECK), as rotary_embedding does.
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/ops.h"

namespace llmserve::cuda {
namespace {

constexpr int kThreads = 256;

template <typename T>
struct MlaRotaryArgs {
  const int64_t* positions;  // [n]
  const T* q_pe;             // [n, H, R], strides q_row, q_head
  int64_t q_row, q_head;
  T* q_out;  // [n, H, R], strides out_row, out_head
  int64_t out_row, out_head;
  T* k_pe;  // [n, R], row stride k_row
  int64_t k_row;
  const T* kv_c;  // [n, L], row stride c_row
  int64_t c_row;
  const float* cos_sin;  // [max_position, R]
  int64_t max_position;
  T* cache;                     // [num_slots, L + R]
  const int64_t* slot_mapping;  // [n]
  int64_t num_slots;
  int num_heads, latent_dim, rope_dim;
  bool interleaved;
};

template <typename T>
__global__ void __launch_bounds__(kThreads) mla_rotary_cache_kernel(const MlaRotaryArgs<T> a) {
  pdl_wait();  // q, k and kv_c come from the previous kernels
  pdl_trigger();
  const int t = blockIdx.x, half = a.rope_dim / 2;
  const int64_t pos = a.positions[t];
  device_check(pos >= 0 && pos < a.max_position);
  const float* cos = a.cos_sin + pos * a.rope_dim;
  const float* sin = cos + half;
  int64_t slot = a.slot_mapping[t];
  if (slot >= a.num_slots) slot = -1;  // past the cache: skipped, as reshape_and_cache
  const int row = a.latent_dim + a.rope_dim;
  T* cache_row = slot >= 0 ? a.cache + slot * row : nullptr;
  // Pair i of a rope vector: (x[2i], x[2i + 1]) interleaved (GPT-J, DeepSeek's rope_interleave), else
  // (x[i], x[i + R/2]) (rotate-half); both rotate by frequency i.
  const int stride_pair = a.interleaved ? 2 : 1, second = a.interleaved ? 1 : half;
  const int total = (a.num_heads + 1) * half;  // the query heads' pairs, then the key's
  for (int u = threadIdx.x; u < total; u += kThreads) {
    const int h = u / half, i = u % half;
    const int j1 = i * stride_pair, j2 = j1 + second;
    const bool is_key = h == a.num_heads;
    const T* src = is_key ? a.k_pe + t * a.k_row : a.q_pe + t * a.q_row + h * a.q_head;
    T* dst = is_key ? a.k_pe + t * a.k_row : a.q_out + t * a.out_row + h * a.out_head;
    const float x1 = load_f(src + j1), x2 = load_f(src + j2), c = cos[i], s = sin[i];
    const float r1 = x1 * c - x2 * s, r2 = x2 * c + x1 * s;
    store_f(dst + j1, r1);
    store_f(dst + j2, r2);
    if (is_key && cache_row != nullptr) {
      store_f(cache_row + a.latent_dim + j1, r1);
      store_f(cache_row + a.latent_dim + j2, r2);
    }
  }
  if (cache_row == nullptr) return;
  const T* c_src = a.kv_c + t * a.c_row;
  for (int d = threadIdx.x; d < a.latent_dim; d += kThreads) cache_row[d] = c_src[d];
}

void mla_rotary_and_cache(const Tensor& positions, const Tensor& q_pe, Tensor& q_out, Tensor& k_pe, const Tensor& kv_c,
                          const Tensor& cos_sin_cache, int64_t interleaved, Tensor& latent_cache,
                          const Tensor& slot_mapping) {
  const int64_t n = positions.size(0);
  if (n == 0) return;
  dispatch_float(q_pe.dtype(), "mla_rotary_and_cache", [&](auto tag) {
    using T = decltype(tag);
    MlaRotaryArgs<T> a{};
    a.positions = positions.data<int64_t>();
    a.q_pe = static_cast<const T*>(q_pe.raw_data());
    a.q_row = q_pe.stride(0);
    a.q_head = q_pe.stride(1);
    a.q_out = static_cast<T*>(q_out.raw_data());
    a.out_row = q_out.stride(0);
    a.out_head = q_out.stride(1);
    a.k_pe = static_cast<T*>(k_pe.raw_data());
    a.k_row = k_pe.stride(0);
    a.kv_c = static_cast<const T*>(kv_c.raw_data());
    a.c_row = kv_c.stride(0);
    a.cos_sin = cos_sin_cache.data<float>();
    a.max_position = cos_sin_cache.size(0);
    a.cache = static_cast<T*>(latent_cache.raw_data());
    a.slot_mapping = slot_mapping.data<int64_t>();
    a.num_slots = latent_cache.size(0) * latent_cache.size(1);
    a.num_heads = static_cast<int>(q_pe.size(1));
    a.latent_dim = static_cast<int>(kv_c.size(1));
    a.rope_dim = static_cast<int>(q_pe.size(2));
    a.interleaved = interleaved != 0;
    launch_pdl("mla_rotary_cache_kernel", mla_rotary_cache_kernel<T>, dim3(static_cast<unsigned>(n)), kThreads, a);
  });
}

}  // namespace

void register_mla_rotary_cache_kernels() {
  ops::mla_rotary_and_cache.register_kernel(DeviceType::kCUDA, mla_rotary_and_cache);
}

}  // namespace llmserve::cuda
