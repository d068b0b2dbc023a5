// Embedding lookup and rotate-half rotary embedding on CUDA (the rotary kernel optionally also applies Qwen3's per-head
// q/k RMSNorm first and writes the rotated key and the value into the paged KV cache: one launch where a decode step
// would pay three), on the current stream. One block per token; f32 math (rotary: x1' = x1 cos - x2 sin,
// x2' = x2 cos + x1 sin, the CPU formula), rounded once on store. Out-of-range ids / positions trap (device_check).
#include <algorithm>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace llmserve::cuda {
namespace {

constexpr int kThreads = 256;

// V consecutive elements through float: V = 8 is the 16-byte-aligned vector path, V = 1 the scalar one.
template <int V, typename P>
__device__ __forceinline__ void load_v(const P* p, float (&f)[V]) {
  if constexpr (V == 8) {
    load8(p, f);
  } else {
    f[0] = load_f(p);
  }
}
template <int V, typename P>
__device__ __forceinline__ void store_v(P* p, const float (&f)[V]) {
  if constexpr (V == 8) {
    store8(p, f);
  } else {
    store_f(p, f[0]);
  }
}

// kMasked (masked_embedding): ids outside [vocab_start, vocab_start + vocab) write zeros instead of trapping.
template <typename O, typename T, int V, bool kMasked = false>
__global__ void embedding_kernel(O* out, int64_t out_stride, const int32_t* ids, const T* table, int64_t vocab,
                                 int64_t hidden, int64_t vocab_start = 0) {
  const int32_t id = ids[blockIdx.x];
  O* dst = out + blockIdx.x * out_stride;
  if constexpr (kMasked) {
    device_check(id >= 0);
    const int64_t local = id - vocab_start;
    if (local < 0 || local >= vocab) {
      for (int64_t j = threadIdx.x; j < hidden; j += blockDim.x) store_f(dst + j, 0.0f);
      return;
    }
  } else {
    device_check(id >= 0 && id < vocab);
  }
  const T* src = table + (static_cast<int64_t>(id) - vocab_start) * hidden;
  for (int64_t j = threadIdx.x * V; j < hidden; j += blockDim.x * V) {
    float f[V];
    load_v<V>(src + j, f);
    store_v<V>(dst + j, f);
  }
}

template <typename T>
struct RotaryArgs {
  const int64_t* positions;
  T* query;  // [n, num_heads * head_dim], row stride q_stride
  int64_t q_stride;
  T* key;  // [n, num_kv_heads * head_dim], row stride k_stride
  int64_t k_stride;
  const T* value;  // like key; read only when caching
  int64_t v_stride;
  int num_heads, num_kv_heads, head_dim;
  const float* cos_sin;  // [max_position, head_dim]
  int64_t max_position;
  T* key_cache;  // null: rotate only; else [num_slots, num_kv_heads * head_dim] (the paged layout, flattened)
  T* value_cache;
  const int64_t* slot_mapping;
  int64_t num_slots;
};

// Qwen3's per-head RMSNorm before the rotation (kNorm): weights [head_dim] for the query and the key heads.
template <typename W>
struct HeadNorm {
  const W* q_weight;
  const W* k_weight;
  float eps;
};

// The constants one (head, piece) pair of a token needs: its cos / sin halves and, with kNorm, its norm weights.
template <typename W, int V, bool kNorm>
struct PieceConsts {
  float c[V], s[V];
  float wp[kNorm ? V : 1], wq[kNorm ? V : 1];
};

// Threads walk (head, V-wide piece of the first half) pairs over the query heads then the key heads; a cached
// key piece is stored twice (in place and into its slot), then the value row is copied into its slot.
// kNorm (V = 8, head_dim / 8 a power of two from 2 to 32): each head is first normalised exactly as rms_norm's
// short-row kernel does it (rms_norm_rows_kernel, norm.cu), whose 2 * pieces lanes hold one 8-element chunk each:
// this thread holds that kernel's lanes l and l + pieces, whose sums meet in its first shuffle step, and the same
// shuffle tree follows over the head's `pieces` threads (adjacent lanes, a whole group in every round); the normed
// values are rounded to T, as rms_norm stores them, before the rotation reads them. Same bits as the unfused ops.
// kEarly (pdl_early_reads; the launch then gives every pair its own thread where it can): the position, the slot
// and the first pair's constants are read before pdl_wait, and the value row before the stores that would
// otherwise hold its load back -- after the wait only q, k and v are on the critical path.
template <typename T, typename W, int V, bool kNorm, bool kEarly>
__global__ void rotary_kernel(const RotaryArgs<T> a, const HeadNorm<W> norm) {
  static_assert(!kNorm || V == 8, "the fused norm takes the vector path");
  if constexpr (!kEarly) {
    pdl_wait();  // q, k and v come from the previous kernel
    pdl_trigger();
  }
  const int t = blockIdx.x;
  const int64_t pos = a.positions[t];
  device_check(pos >= 0 && pos < a.max_position);
  const int half = a.head_dim / 2;
  const float* cos = a.cos_sin + pos * a.head_dim;
  const float* sin = cos + half;
  int64_t slot = -1;
  if (a.key_cache != nullptr) {
    slot = a.slot_mapping[t];
    if (slot >= a.num_slots) slot = -1;  // padding (negative) or past the cache: skipped, as reshape_and_cache
  }
  const int64_t row = static_cast<int64_t>(a.num_kv_heads) * a.head_dim;
  const int pieces = half / V;
  const int total = (a.num_heads + a.num_kv_heads) * pieces;
  auto piece_consts = [&](int u, PieceConsts<W, V, kNorm>& k) {
    const int h = u / pieces, j = (u % pieces) * V;
    load_v<V>(cos + j, k.c);
    load_v<V>(sin + j, k.s);
    if constexpr (kNorm) {
      const W* w = (h >= a.num_heads ? norm.k_weight : norm.q_weight) + j;
      load_v<V>(w, k.wp);
      load_v<V>(w + half, k.wq);
    }
  };
  const int first = static_cast<int>(threadIdx.x);
  PieceConsts<W, V, kNorm> first_consts;
  float v0[V];
  const bool first_value = kEarly && slot >= 0 && first * V < row;
  if constexpr (kEarly) {
    if (first < total) piece_consts(first, first_consts);
    pdl_wait();  // q, k and v come from the previous kernel
    pdl_trigger();
    if (first_value) load_v<V>(a.value + t * a.v_stride + first * V, v0);
  }
  for (int u = first; u < total; u += blockDim.x) {
    const int h = u / pieces, j = (u % pieces) * V;
    const bool is_key = h >= a.num_heads;
    const int kh = h - a.num_heads;
    T* x1 = is_key ? a.key + t * a.k_stride + kh * a.head_dim + j : a.query + t * a.q_stride + h * a.head_dim + j;
    float p[V], q[V], r1[V], r2[V];
    load_v<V>(x1, p);
    load_v<V>(x1 + half, q);
    PieceConsts<W, V, kNorm> k;
    if (kEarly && u == first) {
      k = first_consts;
    } else {
      piece_consts(u, k);
    }
    if constexpr (kNorm) {
      float ss_p = 0.f, ss_q = 0.f;
#pragma unroll
      for (int e = 0; e < V; ++e) {
        ss_p = fmaf(p[e], p[e], ss_p);
        ss_q = fmaf(q[e], q[e], ss_q);
      }
      float ss = ss_p + ss_q;
      const int lane = threadIdx.x % 32;
      const unsigned group = ((2u << (pieces - 1)) - 1) << (lane & ~(pieces - 1));
      for (int o = pieces / 2; o > 0; o >>= 1) ss += __shfl_xor_sync(group, ss, o, pieces);
      const float scale = rsqrtf(ss / static_cast<float>(a.head_dim) + norm.eps);
#pragma unroll
      for (int e = 0; e < V; ++e) {
        p[e] = round_to<T>(p[e] * scale * k.wp[e]);
        q[e] = round_to<T>(q[e] * scale * k.wq[e]);
      }
    }
#pragma unroll
    for (int e = 0; e < V; ++e) {
      r1[e] = p[e] * k.c[e] - q[e] * k.s[e];
      r2[e] = q[e] * k.c[e] + p[e] * k.s[e];
    }
    store_v<V>(x1, r1);
    store_v<V>(x1 + half, r2);
    if (is_key && slot >= 0) {
      T* kc = a.key_cache + slot * row + kh * a.head_dim + j;
      store_v<V>(kc, r1);
      store_v<V>(kc + half, r2);
    }
  }
  if (slot < 0) return;
  int64_t e = int64_t{first} * V;
  if (first_value) {  // loaded before the loop above
    store_v<V>(a.value_cache + slot * row + e, v0);
    e += int64_t{blockDim.x} * V;
  }
  for (; e < row; e += blockDim.x * V) {
    float f[V];
    load_v<V>(a.value + t * a.v_stride + e, f);
    store_v<V>(a.value_cache + slot * row + e, f);
  }
}

// The vector path needs every 8-element piece 16-byte aligned: row starts, head starts and the cos/sin halves.
template <typename T>
bool rotary_vec(const RotaryArgs<T>& a) {
  bool vec = (a.head_dim / 2) % 8 == 0 && a.q_stride % 8 == 0 && a.k_stride % 8 == 0 && aligned16(a.query) &&
             aligned16(a.key) && aligned16(a.cos_sin);
  if (a.key_cache != nullptr) {
    vec = vec && a.v_stride % 8 == 0 && aligned16(a.value) && aligned16(a.key_cache) && aligned16(a.value_cache);
  }
  return vec;
}

// Launches rotary_kernel<T, W, V, kNorm, kEarly> over n tokens, one block each: kThreads threads, or with early reads
// (pdl_early_reads) one per (head, piece) pair where a block holds them -- a decode step's token is a single block,
// and a thread's second pair would wait behind its first pair's stores -- within what the kernel's registers allow.
template <typename T, typename W, int V, bool kNorm>
void launch_rotary_kernel(const RotaryArgs<T>& a, const HeadNorm<W>& norm, int64_t n) {
  const unsigned grid = static_cast<unsigned>(n);
  if (!pdl_early_reads())
    return launch_pdl("rotary_kernel", rotary_kernel<T, W, V, kNorm, false>, grid, kThreads, a, norm);
  static const int max_threads = [] {
    cudaFuncAttributes attr{};
    CHECK(cudaFuncGetAttributes(&attr, rotary_kernel<T, W, V, kNorm, true>) == cudaSuccess) << "rotary_kernel";
    return attr.maxThreadsPerBlock / 32 * 32;
  }();
  const int pairs = (a.num_heads + a.num_kv_heads) * (a.head_dim / 2 / V);
  const int threads = std::min(std::max((pairs + 31) / 32 * 32, kThreads), max_threads);
  launch_pdl("rotary_kernel", rotary_kernel<T, W, V, kNorm, true>, grid, static_cast<unsigned>(threads), a, norm);
}

template <typename T>
void launch_rotary(const RotaryArgs<T>& a, int64_t n) {
  if (rotary_vec(a)) return launch_rotary_kernel<T, T, 8, false>(a, HeadNorm<T>{}, n);
  launch_rotary_kernel<T, T, 1, false>(a, HeadNorm<T>{}, n);
}

template <typename T>
RotaryArgs<T> rotary_args(const Tensor& positions, Tensor& query, Tensor& key, int64_t head_dim,
                          const Tensor& cos_sin_cache) {
  const int64_t n = positions.size(0);
  RotaryArgs<T> a{};
  a.positions = positions.data<int64_t>();
  a.query = query.data<T>();
  a.q_stride = query.stride(0);
  a.num_heads = static_cast<int>(query.numel() / n / head_dim);
  a.key = key.data<T>();
  a.k_stride = key.stride(0);
  a.num_kv_heads = static_cast<int>(key.numel() / n / head_dim);
  a.head_dim = static_cast<int>(head_dim);
  a.cos_sin = cos_sin_cache.data<float>();
  a.max_position = cos_sin_cache.size(0);
  return a;
}

template <typename T>
RotaryArgs<T> rotary_and_cache_args(const Tensor& positions, Tensor& query, Tensor& key, const Tensor& value,
                                    int64_t head_dim, const Tensor& cos_sin_cache, Tensor& key_cache,
                                    Tensor& value_cache, const Tensor& slot_mapping) {
  RotaryArgs<T> a = rotary_args<T>(positions, query, key, head_dim, cos_sin_cache);
  a.value = value.data<T>();
  a.v_stride = value.stride(0);
  a.key_cache = key_cache.data<T>();
  a.value_cache = value_cache.data<T>();
  a.slot_mapping = slot_mapping.data<int64_t>();
  a.num_slots = key_cache.size(0) * key_cache.size(1);
  return a;
}

}  // namespace

void embedding(Tensor& out, const Tensor& ids, const Tensor& table) {
  const int64_t n = ids.size(0), vocab = table.size(0), hidden = table.size(1);
  if (n == 0 || hidden == 0) return;
  const bool vec = hidden % 8 == 0 && out.stride(0) % 8 == 0 && aligned16(out.raw_data()) &&
                   aligned16(table.raw_data());
  dispatch_float(out.dtype(), "embedding", [&](auto o) {
    dispatch_float(table.dtype(), "embedding", [&](auto t) {
      using O = decltype(o);
      using T = decltype(t);
      const unsigned grid = static_cast<unsigned>(n);
      if (vec) {
        embedding_kernel<O, T, 8><<<grid, kThreads, 0, stream()>>>(out.data<O>(), out.stride(0), ids.data<int32_t>(),
                                                                   table.data<T>(), vocab, hidden);
      } else {
        embedding_kernel<O, T, 1><<<grid, kThreads, 0, stream()>>>(out.data<O>(), out.stride(0), ids.data<int32_t>(),
                                                                   table.data<T>(), vocab, hidden);
      }
      check_launch("embedding_kernel");
    });
  });
}

void masked_embedding(Tensor& out, const Tensor& ids, const Tensor& table, int64_t vocab_start) {
  const int64_t n = ids.size(0), vocab = table.size(0), hidden = table.size(1);
  if (n == 0 || hidden == 0) return;
  const bool vec =
      hidden % 8 == 0 && out.stride(0) % 8 == 0 && aligned16(out.raw_data()) && aligned16(table.raw_data());
  dispatch_float(out.dtype(), "masked_embedding", [&](auto o) {
    dispatch_float(table.dtype(), "masked_embedding", [&](auto t) {
      using O = decltype(o);
      using T = decltype(t);
      const unsigned grid = static_cast<unsigned>(n);
      if (vec) {
        embedding_kernel<O, T, 8, true><<<grid, kThreads, 0, stream()>>>(
            out.data<O>(), out.stride(0), ids.data<int32_t>(), table.data<T>(), vocab, hidden, vocab_start);
      } else {
        embedding_kernel<O, T, 1, true><<<grid, kThreads, 0, stream()>>>(
            out.data<O>(), out.stride(0), ids.data<int32_t>(), table.data<T>(), vocab, hidden, vocab_start);
      }
      check_launch("embedding_kernel (masked)");
    });
  });
}

void rotary_embedding(const Tensor& positions, Tensor& query, Tensor& key, int64_t head_dim,
                      const Tensor& cos_sin_cache) {
  const int64_t n = positions.size(0);
  if (n == 0) return;
  dispatch_float(query.dtype(), "rotary_embedding", [&](auto t) {
    using T = decltype(t);
    launch_rotary(rotary_args<T>(positions, query, key, head_dim, cos_sin_cache), n);
  });
}

void rotary_embedding_and_cache(const Tensor& positions, Tensor& query, Tensor& key, const Tensor& value,
                                int64_t head_dim, const Tensor& cos_sin_cache, Tensor& key_cache, Tensor& value_cache,
                                const Tensor& slot_mapping) {
  const int64_t n = positions.size(0);
  if (n == 0) return;
  dispatch_float(query.dtype(), "rotary_embedding_and_cache", [&](auto t) {
    using T = decltype(t);
    launch_rotary(rotary_and_cache_args<T>(positions, query, key, value, head_dim, cos_sin_cache, key_cache,
                                           value_cache, slot_mapping),
                  n);
  });
}

// One launch where the norms' form matches (see rotary_kernel); otherwise the three ops, which give the same bits.
void qk_norm_rotary_embedding_and_cache(const Tensor& positions, Tensor& query, Tensor& key, const Tensor& value,
                                        int64_t head_dim, const Tensor& cos_sin_cache, const Tensor& q_weight,
                                        const Tensor& k_weight, float eps, Tensor& key_cache, Tensor& value_cache,
                                        const Tensor& slot_mapping) {
  const int64_t n = positions.size(0);
  if (n == 0) return;
  const int64_t chunks = head_dim / 8;
  bool fused = head_dim % 8 == 0 && chunks >= 2 && chunks <= 32 && (chunks & (chunks - 1)) == 0 &&
               q_weight.dtype() == k_weight.dtype() && aligned16(q_weight.raw_data()) && aligned16(k_weight.raw_data());
  dispatch_float(query.dtype(), "qk_norm_rotary_embedding_and_cache", [&](auto t) {
    using T = decltype(t);
    const RotaryArgs<T> a = rotary_and_cache_args<T>(positions, query, key, value, head_dim, cos_sin_cache, key_cache,
                                                     value_cache, slot_mapping);
    fused = fused && rotary_vec(a);
    if (!fused) return;
    dispatch_float(q_weight.dtype(), "qk_norm_rotary_embedding_and_cache", [&](auto w) {
      using W = decltype(w);
      launch_rotary_kernel<T, W, 8, true>(a, HeadNorm<W>{q_weight.data<W>(), k_weight.data<W>(), eps}, n);
    });
  });
  if (fused) return;
  ops::rms_norm(query, query, q_weight, eps);
  ops::rms_norm(key, key, k_weight, eps);
  rotary_embedding_and_cache(positions, query, key, value, head_dim, cos_sin_cache, key_cache, value_cache,
                             slot_mapping);
}

void register_embedding_rotary_kernels() {
  ops::embedding.register_kernel(DeviceType::kCUDA, embedding);
  ops::masked_embedding.register_kernel(DeviceType::kCUDA, masked_embedding);
  ops::rotary_embedding.register_kernel(DeviceType::kCUDA, rotary_embedding);
  ops::rotary_embedding_and_cache.register_kernel(DeviceType::kCUDA, rotary_embedding_and_cache);
  ops::qk_norm_rotary_embedding_and_cache.register_kernel(DeviceType::kCUDA, qk_norm_rotary_embedding_and_cache);
}

}  // namespace llmserve::cuda
