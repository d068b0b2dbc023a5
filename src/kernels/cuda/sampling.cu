// The sampler's ops on CUDA, one block per row of logits [num_reqs, vocab] f32 (row-strided; the filters and the
// draw take a cluster of blocks per row when rows are few), the same rules as kernels/cpu/sampling.cc: penalties, logit
// bias, token masks, temperature, the min-p / top-k / top-p masks (radix selection over order-preserving float keys,
// kernels/cuda/radix.cuh; top-p's mass in 64-bit fixed point) and the inverse-CDF draw from the same Philox stream
// as the CPU (kernels/philox.h). No scratch beyond shared memory, no host synchronisation.
#include <cmath>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/radix.cuh"
#include "kernels/philox.h"

namespace llmserve::cuda {
namespace {

constexpr int kRowThreads = 1024;
constexpr int kListThreads = 256;

// Row r's span [begin, end) of a TokenLists; malformed offsets trap.
__device__ __forceinline__ void row_span(const int32_t* offsets, int64_t size, int r, int32_t* begin, int32_t* end) {
  *begin = offsets[r];
  *end = offsets[r + 1];
  device_check(*begin >= 0 && *begin <= *end && *end <= size && (r != 0 || *begin == 0));
}

__device__ __forceinline__ int32_t checked_id(int32_t id, int64_t vocab) {
  device_check(id >= 0 && id < vocab);
  return id;
}

// Penalties: a vocab-bit "seen" set in shared memory picks exactly one thread per distinct id, so the repetition
// factor is applied once per id; for frequency/presence that thread counts the id's occurrences in the output
// (O(output^2 / threads) per row: fine for outputs of a few thousand tokens).
__global__ void penalties_kernel(float* logits, int64_t stride, int64_t vocab, const int32_t* p_offsets,
                                 const int32_t* p_ids, int64_t p_size, const int32_t* o_offsets, const int32_t* o_ids,
                                 int64_t o_size, const float* repetition, const float* frequency,
                                 const float* presence) {
  extern __shared__ uint32_t seen[];
  const int r = blockIdx.x;
  float* x = logits + r * stride;
  const float penalty = repetition[r], freq = frequency[r], pres = presence[r];
  const bool use_rep = penalty != 1.f, use_counts = freq != 0.f || pres != 0.f;
  if (!use_rep && !use_counts) return;
  int32_t pb, pe, ob, oe;
  row_span(p_offsets, p_size, r, &pb, &pe);
  row_span(o_offsets, o_size, r, &ob, &oe);
  const int num_words = static_cast<int>((vocab + 31) / 32);
  if (use_rep) {
    for (int i = threadIdx.x; i < num_words; i += blockDim.x) seen[i] = 0;
    __syncthreads();
    const float inverse = 1.f / penalty;
    const int np = pe - pb, total = np + (oe - ob);
    for (int i = threadIdx.x; i < total; i += blockDim.x) {
      const int32_t t = checked_id(i < np ? p_ids[pb + i] : o_ids[ob + i - np], vocab);
      const uint32_t bit = 1u << (t & 31);
      if (atomicOr(&seen[t >> 5], bit) & bit) continue;
      x[t] = __fmul_rn(x[t], x[t] > 0.f ? inverse : penalty);
    }
    __syncthreads();
  }
  if (use_counts) {
    for (int i = threadIdx.x; i < num_words; i += blockDim.x) seen[i] = 0;
    __syncthreads();
    for (int i = ob + threadIdx.x; i < oe; i += blockDim.x) {
      const int32_t t = checked_id(o_ids[i], vocab);
      const uint32_t bit = 1u << (t & 31);
      if (atomicOr(&seen[t >> 5], bit) & bit) continue;
      int count = 0;
      for (int j = ob; j < oe; ++j) count += o_ids[j] == t;
      // Unfused, in the CPU's order: x - freq * count, then - presence.
      x[t] = __fsub_rn(__fsub_rn(x[t], __fmul_rn(freq, static_cast<float>(count))), pres);
    }
  }
}

__global__ void logit_bias_kernel(float* logits, int64_t stride, int64_t vocab, const int32_t* offsets,
                                  const int32_t* ids, int64_t size, const float* values) {
  int32_t b, e;
  row_span(offsets, size, blockIdx.x, &b, &e);
  float* x = logits + blockIdx.x * stride;
  // A repeated id adds twice (atomically; the order of the two additions may differ from the CPU's).
  for (int i = b + threadIdx.x; i < e; i += blockDim.x) atomicAdd(&x[checked_id(ids[i], vocab)], values[i]);
}

__global__ void mask_kernel(float* logits, int64_t stride, int64_t vocab, const int32_t* offsets, const int32_t* ids,
                            int64_t size) {
  int32_t b, e;
  row_span(offsets, size, blockIdx.x, &b, &e);
  float* x = logits + blockIdx.x * stride;
  for (int i = b + threadIdx.x; i < e; i += blockDim.x) x[checked_id(ids[i], vocab)] = -INFINITY;
}

// One thread per logit: a grid of (rows, vocab / threads); a thread reads its word (cached: the 32 threads of a warp
// read the same one) and clears its logit when the bit is off.
__global__ void token_bitmask_kernel(float* logits, int64_t stride, int64_t vocab, const uint32_t* bitmask,
                                     int64_t words) {
  const int64_t j = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  if (j >= vocab) return;
  const int64_t w = j >> 5;
  const bool allowed = w < words && ((bitmask[blockIdx.x * words + w] >> (j & 31)) & 1u);
  if (!allowed) logits[blockIdx.x * stride + j] = -INFINITY;
}

__global__ void temperature_kernel(float* logits, int64_t stride, int64_t vocab, const float* temperatures) {
  const float t = temperatures[blockIdx.x];
  if (!(t >= ops::kSamplingEps) || t == 1.f) return;  // greedy (NaN too) or a no-op, as on the CPU
  const int64_t j = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  if (j < vocab) {
    float* x = logits + blockIdx.x * stride;
    x[j] = __fdiv_rn(x[j], t);  // a true division, as vLLM's div_ and the CPU op
  }
}

// Shared state of the filter kernel's radix passes (written by warp 0 or thread 0, read by all after a barrier).
struct RadixState {
  uint32_t count[256];           // this block's histogram
  unsigned long long mass[256];  // fixed point (radix.cuh: kMassScale)
  uint32_t merged_count[256];    // the row group's (merge_bins)
  unsigned long long merged_mass[256];
  uint32_t prefix;
  uint32_t remaining;
  uint32_t ties;
  uint64_t mass_above;
  uint64_t target;  // top-p: p x the candidates' total mass
  int32_t cut_id;
  float value_slot;  // group_reduce scratch
  uint32_t count_slot;
  int32_t id_slot;
};

// The k-th largest finite logit (repeats counted), or -inf if fewer than k are finite.
template <typename G>
__device__ float radix_kth(const G& g, const float* x, int64_t lo, int64_t hi, uint32_t k, RadixSelectState& s) {
  const uint32_t neg_inf_key = float_key(-INFINITY);
  auto key_of = [&](int64_t j, uint32_t* key) {
    *key = float_key(x[j]);
    return *key > neg_inf_key;
  };
  uint32_t kth = 0, needed = 0;
  return radix_select(g, lo, hi, k, key_of, s, &kth, &needed) ? key_float(kth) : -INFINITY;
}

// Candidates of the filters: finite, at or above the top-k threshold, passing min-p (exp(v - max) >= min_p, the
// max always passes). A prefix of the ranking; weights exp(v - max).
struct Candidates {
  float max_logit, kth, min_p;
  bool use_min_p;
  __device__ bool contains(float v) const {
    return v > -INFINITY && v >= kth && (v == max_logit || !use_min_p || expf(v - max_logit) >= min_p);
  }
};

// Warp 0: one radix pass's bin for top-p, scanning the bins from the top as the sequential rule does -- skip empty
// bins; the first bin whose mass, added to the mass above it, reaches target is chosen; if rounding leaves every
// bin short, the lowest non-empty one. Lane L scans bins 255 - 8L .. 248 - 8L from the mass of the lanes above it.
__device__ __forceinline__ void top_p_pick_bin(RadixState& s, uint32_t prefix, uint64_t mass_above, uint64_t target,
                                               int shift) {
  const int lane = threadIdx.x;
  const uint32_t* count = s.merged_count;
  const unsigned long long* mass = s.merged_mass;
  unsigned long long local = 0;
  const unsigned long long inclusive = lane_bins_inclusive(mass, &local);
  uint64_t above = mass_above + (inclusive - local);
  int chosen = -1, lowest = -1;
  uint64_t chosen_above = 0, lowest_above = 0;
  for (int b = 255 - 8 * lane; b > 247 - 8 * lane; --b) {
    if (count[b] == 0) continue;
    lowest = b;
    lowest_above = above;
    if (above + mass[b] >= target) {
      chosen = b;
      chosen_above = above;
      break;
    }
    above += mass[b];
  }
  const unsigned with_choice = __ballot_sync(0xffffffffu, chosen >= 0);
  const unsigned with_bins = __ballot_sync(0xffffffffu, lowest >= 0);
  // The topmost lane with a choice; else the bottom-most lane with a non-empty bin (its lowest bin).
  const int winner = with_choice != 0 ? __ffs(with_choice) - 1 : 31 - __clz(with_bins);
  if (lane == winner) {
    const int b = with_choice != 0 ? chosen : lowest;
    s.prefix = prefix | (static_cast<uint32_t>(b) << shift);
    s.mass_above = with_choice != 0 ? chosen_above : lowest_above;
    s.ties = count[b];
  }
}

// Top-p's cut value: the largest candidate value v whose candidates at or above it hold >= target = p x (their
// total mass) (else the smallest candidate value); leaves s.mass_above = mass strictly above it, s.ties =
// candidates equal to it and s.target. The total is the sum of the first pass's bins (every candidate is in one).
template <typename G>
__device__ float radix_top_p(const G& g, const float* x, int64_t lo, int64_t hi, const Candidates& c, float p,
                             RadixState& s) {
  uint32_t prefix = 0, mask = 0;
  uint64_t mass_above = 0, target = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int i = threadIdx.x; i < 256; i += blockDim.x) {
      s.count[i] = 0;
      s.mass[i] = 0;
    }
    __syncthreads();
    // Uniform trip count: warps stay converged; the loads of kRadixUnroll elements go out together.
    for (int64_t base = lo; base < hi; base += static_cast<int64_t>(blockDim.x) * kRadixUnroll) {
      float v[kRadixUnroll];
#pragma unroll
      for (int u = 0; u < kRadixUnroll; ++u) {
        const int64_t j = base + u * blockDim.x + threadIdx.x;
        v[u] = j < hi ? x[j] : -INFINITY;
      }
#pragma unroll
      for (int u = 0; u < kRadixUnroll; ++u) {
        const uint32_t key = float_key(v[u]);
        const bool valid = (key & mask) == prefix && c.contains(v[u]);
        // After the first pass few elements match the prefix: a warp with none skips the weights and the update.
        if (!__any_sync(0xffffffffu, valid)) continue;
        const uint64_t w = valid ? mass_fixed(expf(v[u] - c.max_logit)) : 0;
        warp_hist_add(s.count, s.mass, valid, (key >> shift) & 255u, w);
      }
    }
    merge_bins(g, s.count, s.merged_count, 256);
    merge_bins(g, s.mass, s.merged_mass, 256);
    if (shift == 24) {
      if (threadIdx.x < 32) {
        unsigned long long local = 0;
        const uint64_t total = __shfl_sync(0xffffffffu, lane_bins_inclusive(s.merged_mass, &local), 31);
        if (threadIdx.x == 0) s.target = static_cast<uint64_t>(static_cast<double>(p) * static_cast<double>(total));
      }
      __syncthreads();
      target = s.target;
    }
    if (threadIdx.x < 32) top_p_pick_bin(s, prefix, mass_above, target, shift);
    __syncthreads();
    prefix = s.prefix;
    mass_above = s.mass_above;
    mask |= 255u << shift;
  }
  return key_float(prefix);
}

// The id of the rank-th (1-based) element of the row equal to `value` in id order (the row's last id if there are
// fewer). Threads own contiguous id ranges of the block's slice; the slices go in rank order.
template <typename G>
__device__ int32_t nth_equal_id(const G& g, const float* x, int64_t lo, int64_t hi, int64_t vocab, float value,
                                uint32_t rank, RadixState& s) {
  const int64_t chunk = (hi - lo + blockDim.x - 1) / blockDim.x;
  const int64_t begin = lo + threadIdx.x * chunk, end = min(hi, begin + chunk);
  uint32_t mine = 0;
  for (int64_t j = begin; j < end; ++j) mine += x[j] == value;
  uint32_t block_total;
  uint32_t before = block_exclusive_scan<uint32_t>(mine, &block_total);
  // Equal elements in the slices of the lower ranks.
  if (threadIdx.x == 0) s.count_slot = block_total;
  g.sync();
  for (int r = 0; r < g.rank(); ++r) before += *g.at(&s.count_slot, r);
  if (threadIdx.x == 0) s.cut_id = INT32_MAX;
  g.sync();  // every rank has read the counts; cut_id is reset everywhere
  if (rank > before && rank <= before + mine) {
    uint32_t seen = before;
    for (int64_t j = begin; j < end; ++j) {
      if (x[j] == value && ++seen == rank) {
        s.cut_id = static_cast<int32_t>(j);
        break;
      }
    }
  }
  __syncthreads();
  const int32_t id = group_reduce(g, s.cut_id, &s.id_slot, [](int32_t a, int32_t b) { return min(a, b); });
  return id == INT32_MAX ? static_cast<int32_t>(vocab - 1) : id;
}

// One row per group of blocks (gridDim.x = rows x group size); each block filters its slice of the row.
template <typename G>
__global__ void __launch_bounds__(kRowThreads)
    filter_kernel(float* logits, int64_t stride, int64_t vocab, const int32_t* top_k, const float* top_p,
                  const float* min_p) {
  __shared__ RadixState s;
  __shared__ RadixSelectState select;
  const G g;
  const int row = static_cast<int>(blockIdx.x) / g.size();
  int64_t lo, hi;
  row_slice(g, vocab, &lo, &hi);
  float* x = logits + row * stride;
  const int32_t k = top_k[row];
  const float p = top_p[row], mp = min_p[row];
  const bool use_k = k > 0 && k < vocab, use_p = p<1.f, use_min_p = mp> 0.f;
  if (!use_k && !use_p && !use_min_p) return;
  auto max_op = [](float a, float b) { return fmaxf(a, b); };
  float mx = -INFINITY;
#pragma unroll 8  // loads in flight together: one row is one SM's latency-bound pass
  for (int64_t j = lo + threadIdx.x; j < hi; j += blockDim.x) {
    float v = x[j];
    if (isnan(v)) x[j] = v = -INFINITY;
    mx = fmaxf(mx, v);
  }
  mx = group_reduce(g, block_max(mx), &s.value_slot, max_op);  // the barriers publish the NaN rewrites
  if (mx == -INFINITY) return;
  if (mx == INFINITY) {  // all the mass sits on the +inf logits
    for (int64_t j = lo + threadIdx.x; j < hi; j += blockDim.x) x[j] = x[j] == INFINITY ? INFINITY : -INFINITY;
    return;
  }
  Candidates c{mx, use_k ? radix_kth(g, x, lo, hi, static_cast<uint32_t>(k), select) : -INFINITY, mp, use_min_p};
  float cut_value;
  int32_t cut_id = INT32_MAX;
  if (use_p) {
    cut_value = radix_top_p(g, x, lo, hi, c, p, s);
    const uint64_t target = s.target;
    // Walk the ties at the cut in id order as the CPU does: the first is kept; each next one while the mass
    // ranked before it is < target.
    if (threadIdx.x == 0) {
      const uint64_t w = mass_fixed(expf(cut_value - mx));
      uint64_t before = s.mass_above + w;
      uint32_t kept = 1;
      while (kept < s.ties && before < target) {
        before += w;
        ++kept;
      }
      s.remaining = kept;
    }
    __syncthreads();
    const uint32_t kept = s.remaining;
    if (kept < s.ties) cut_id = nth_equal_id(g, x, lo, hi, vocab, cut_value, kept, s);
  } else {
    float lowest = INFINITY;
#pragma unroll 8
    for (int64_t j = lo + threadIdx.x; j < hi; j += blockDim.x) {
      const float v = x[j];
      if (c.contains(v)) lowest = fminf(lowest, v);
    }
    cut_value = -group_reduce(g, block_max(-lowest), &s.value_slot, max_op);
  }
#pragma unroll 8
  for (int64_t j = lo + threadIdx.x; j < hi; j += blockDim.x) {
    const float v = x[j];
    const bool keep = v > cut_value || (v == cut_value && j <= cut_id);
    if (!keep) x[j] = -INFINITY;
  }
}

// One row per group of blocks, as filter_kernel. The running sum goes in ascending id order as on the CPU: threads
// own contiguous id ranges of their block's slice, and the slices' totals go in rank order.
template <typename G>
__global__ void __launch_bounds__(kRowThreads)
    sample_kernel(int32_t* out, const float* logits, int64_t stride, int64_t vocab, const float* temperatures,
                  const int64_t* seeds, const int64_t* offsets) {
  __shared__ float max_slot;
  __shared__ double total_slot;
  __shared__ uint64_t key_slot;
  const G g;
  const int row = static_cast<int>(blockIdx.x) / g.size();
  const float* x = logits + row * stride;
  auto write_argmax = [&] {
    if (g.rank() != 0) return;
    const int32_t id = block_argmax(x, vocab);
    if (threadIdx.x == 0) out[row] = id;
  };
  if (!(temperatures[row] >= ops::kSamplingEps)) {  // greedy (NaN too)
    write_argmax();
    return;
  }
  int64_t lo, hi;
  row_slice(g, vocab, &lo, &hi);
  float mx = -INFINITY;
#pragma unroll 8
  for (int64_t j = lo + threadIdx.x; j < hi; j += blockDim.x) mx = fmaxf(mx, x[j]);
  mx = group_reduce(g, block_max(mx), &max_slot, [](float a, float b) { return fmaxf(a, b); });
  if (mx == -INFINITY) {
    write_argmax();
    return;
  }
  const bool inf_max = mx == INFINITY;
  auto weight = [&](float v) -> float {
    if (inf_max) return v == INFINITY ? 1.f : 0.f;
    return v > -INFINITY ? expf(v - mx) : 0.f;  // NaN compares false: weight 0
  };
  const int64_t chunk = (hi - lo + blockDim.x - 1) / blockDim.x;
  const int64_t begin = lo + threadIdx.x * chunk, end = min(hi, begin + chunk);
  double mine = 0;
#pragma unroll 8
  for (int64_t j = begin; j < end; ++j) mine += weight(x[j]);
  double block_total;
  double cumulative = block_exclusive_scan<double>(mine, &block_total);
  // The lower slices' mass comes first; the row's total sums the slices in rank order (one block: block_total).
  if (threadIdx.x == 0) total_slot = block_total;
  g.sync();
  double total = 0;
  for (int r = 0; r < g.size(); ++r) {
    const double t = *g.at(&total_slot, r);
    if (r < g.rank()) cumulative += t;
    total += t;
  }
  const double u = philox::uniform(static_cast<uint64_t>(seeds[row]), static_cast<uint64_t>(offsets[row]));
  const double target = u * total;
  uint64_t found = 0, last_positive = 0;  // keys: 0xffffffff - id (smallest id wins), id + 1
  for (int64_t j = begin; j < end; ++j) {
    const float w = weight(x[j]);
    if (w == 0.f) continue;
    cumulative += w;
    last_positive = static_cast<uint64_t>(j) + 1;
    if (cumulative > target) {
      found = 0xffffffffull - static_cast<uint64_t>(j);
      break;
    }
  }
  auto max_u64 = [](uint64_t a, uint64_t b) { return a > b ? a : b; };
  found = group_reduce(g, block_max_u64(found), &key_slot, max_u64);
  last_positive = group_reduce(g, block_max_u64(last_positive), &key_slot, max_u64);
  if (g.rank() == 0 && threadIdx.x == 0) {
    out[row] = found != 0 ? static_cast<int32_t>(0xffffffffull - found)
                          : static_cast<int32_t>(last_positive - 1);  // rounding left u * total at the top
  }
}

}  // namespace

void apply_penalties(Tensor& logits, const ops::PenaltyParams& params) {
  const int64_t n = logits.size(0), vocab = logits.size(1);
  if (n == 0) return;
  // The seen-set fits the default 48 KiB of dynamic shared memory (no attribute to raise, nothing to synchronise).
  CHECK_LE(vocab, kMaxPenaltyVocab) << "apply_penalties: vocab " << vocab << " above the CUDA limit";
  const size_t smem = static_cast<size_t>((vocab + 31) / 32) * 4;
  penalties_kernel<<<static_cast<unsigned>(n), kListThreads, smem, stream()>>>(
      logits.data<float>(), logits.stride(0), vocab, params.prompt_tokens.offsets.data<int32_t>(),
      params.prompt_tokens.token_ids.data<int32_t>(), params.prompt_tokens.token_ids.size(0),
      params.output_tokens.offsets.data<int32_t>(), params.output_tokens.token_ids.data<int32_t>(),
      params.output_tokens.token_ids.size(0), params.repetition_penalties.data<float>(),
      params.frequency_penalties.data<float>(), params.presence_penalties.data<float>());
  check_launch("penalties_kernel");
}

void apply_logit_bias(Tensor& logits, const ops::LogitBiasParams& params) {
  const int64_t n = logits.size(0);
  if (n == 0) return;
  logit_bias_kernel<<<static_cast<unsigned>(n), kListThreads, 0, stream()>>>(
      logits.data<float>(), logits.stride(0), logits.size(1), params.tokens.offsets.data<int32_t>(),
      params.tokens.token_ids.data<int32_t>(), params.tokens.token_ids.size(0), params.values.data<float>());
  check_launch("logit_bias_kernel");
}

void mask_tokens(Tensor& logits, const ops::TokenLists& tokens) {
  const int64_t n = logits.size(0);
  if (n == 0) return;
  mask_kernel<<<static_cast<unsigned>(n), kListThreads, 0, stream()>>>(
      logits.data<float>(), logits.stride(0), logits.size(1), tokens.offsets.data<int32_t>(),
      tokens.token_ids.data<int32_t>(), tokens.token_ids.size(0));
  check_launch("mask_kernel");
}

void apply_token_bitmask(Tensor& logits, const Tensor& bitmask) {
  const int64_t n = logits.size(0), vocab = logits.size(1);
  if (n == 0 || vocab == 0) return;
  dim3 grid(static_cast<unsigned>(n), ceil_div(vocab, kListThreads));
  token_bitmask_kernel<<<grid, kListThreads, 0, stream()>>>(logits.data<float>(), logits.stride(0), vocab,
                                                            reinterpret_cast<const uint32_t*>(bitmask.data<int32_t>()),
                                                            bitmask.size(1));
  check_launch("token_bitmask_kernel");
}

void apply_temperature(Tensor& logits, const Tensor& temperatures) {
  const int64_t n = logits.size(0), vocab = logits.size(1);
  if (n == 0 || vocab == 0) return;
  dim3 grid(static_cast<unsigned>(n), ceil_div(vocab, kListThreads));
  temperature_kernel<<<grid, kListThreads, 0, stream()>>>(logits.data<float>(), logits.stride(0), vocab,
                                                          temperatures.data<float>());
  check_launch("temperature_kernel");
}

void apply_top_k_top_p_min_p(Tensor& logits, const ops::SamplingFilterParams& params) {
  const int64_t n = logits.size(0), vocab = logits.size(1);
  if (n == 0 || vocab == 0) return;
  CHECK_LE(vocab, kMaxMassVocab) << "apply_top_k_top_p_min_p: vocab " << vocab << " above the CUDA limit";
  launch_rows(filter_kernel<OneBlock>, filter_kernel<RowCluster>, n, kRowThreads, "filter_kernel", logits.data<float>(),
              logits.stride(0), vocab, params.top_k.data<int32_t>(), params.top_p.data<float>(),
              params.min_p.data<float>());
}

void sample(Tensor& out_ids, const Tensor& logits, const ops::SampleParams& params) {
  const int64_t n = logits.size(0);
  if (n == 0) return;
  launch_rows(sample_kernel<OneBlock>, sample_kernel<RowCluster>, n, kRowThreads, "sample_kernel",
              out_ids.data<int32_t>(), logits.data<float>(), logits.stride(0), logits.size(1),
              params.temperatures.data<float>(), params.seeds.data<int64_t>(), params.offsets.data<int64_t>());
}

__global__ void scatter_sampled_ids_kernel(int32_t* ids, const int32_t* sampled, const int32_t* index, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) ids[index[2 * i]] = sampled[index[2 * i + 1]];
}

void scatter_sampled_ids(Tensor& input_ids, const Tensor& sampled_ids, const Tensor& index) {
  const int64_t n = index.size(0);
  if (n == 0) return;
  constexpr int kThreads = 128;
  scatter_sampled_ids_kernel<<<static_cast<unsigned>((n + kThreads - 1) / kThreads), kThreads, 0, stream()>>>(
      input_ids.data<int32_t>(), sampled_ids.data<int32_t>(), index.data<int32_t>(), n);
  check_launch("scatter_sampled_ids_kernel");
}

void register_sampling_kernels() {
  ops::scatter_sampled_ids.register_kernel(DeviceType::kCUDA, scatter_sampled_ids);
  ops::apply_penalties.register_kernel(DeviceType::kCUDA, apply_penalties);
  ops::apply_logit_bias.register_kernel(DeviceType::kCUDA, apply_logit_bias);
  ops::mask_tokens.register_kernel(DeviceType::kCUDA, mask_tokens);
  ops::apply_token_bitmask.register_kernel(DeviceType::kCUDA, apply_token_bitmask);
  ops::apply_temperature.register_kernel(DeviceType::kCUDA, apply_temperature);
  ops::apply_top_k_top_p_min_p.register_kernel(DeviceType::kCUDA, apply_top_k_top_p_min_p);
  ops::sample.register_kernel(DeviceType::kCUDA, sample);
}

}  // namespace llmserve::cuda
