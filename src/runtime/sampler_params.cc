// SamplerParamBuffer (see sampler_params.h): the Sampler's per-row values, computed exactly as the Sampler always
// has (greedy rows get neutral filters, rows without penalties neutral penalties), written into a pinned mirror at
// fixed offsets and uploaded in one copy.
#include "runtime/sampler_params.h"

#include <algorithm>

#include "core/logging.h"
#include "runtime/sampler.h"

namespace llmserve {
namespace {

// The id pool starts with room for this many 4-byte elements per row: EOS and stop ids, and a small logit_bias map
// in every row. The penalty lists (a request's prompt and outputs, up to max_model_len each) have no small bound,
// so a batch that needs more doubles the pool (at most log2(rows x 2 x max_model_len / 64) times in a runner's
// life; it never shrinks).
constexpr int64_t kInitialPoolIdsPerRow = 64;

bool penalties_on(const SamplingSettings& s) {
  return s.repetition_penalty != 1.f || s.frequency_penalty != 0.f || s.presence_penalty != 0.f;
}

bool is_greedy(const SamplingSettings& s) { return s.temperature < ops::kSamplingEps; }

size_t align16(size_t bytes) { return (bytes + 15) / 16 * 16; }

// Elements of the id pool one list of `count` 4-byte values takes (16-byte aligned, like every section).
int64_t pool_elems(int64_t count) { return (count + 3) / 4 * 4; }

}  // namespace

SamplerParamBuffer::Layout SamplerParamBuffer::Layout::plan(int64_t rows, int64_t pool_ids) {
  Layout l;
  l.rows = rows;
  l.pool_ids = pool_ids;
  size_t off = 0;
  auto take = [&off](size_t bytes) {
    const size_t at = off;
    off += align16(bytes);
    return at;
  };
  const size_t n = static_cast<size_t>(rows);
  l.temperature = take(n * 4);
  l.seed = take(n * 8);
  l.offset = take(n * 8);
  l.top_k = take(n * 4);
  l.top_p = take(n * 4);
  l.min_p = take(n * 4);
  l.repetition = take(n * 4);
  l.frequency = take(n * 4);
  l.presence = take(n * 4);
  l.stop_offsets = take((n + 1) * 4);
  l.bias_offsets = take((n + 1) * 4);
  l.prompt_offsets = take((n + 1) * 4);
  l.output_offsets = take((n + 1) * 4);
  l.pool = take(static_cast<size_t>(pool_ids) * 4);
  l.total = off;
  return l;
}

SamplerParamBuffer::SamplerParamBuffer(int64_t max_num_reqs, Device device) {
  CHECK_GE(max_num_reqs, 0);
  if (max_num_reqs > 0) allocate(max_num_reqs, max_num_reqs * kInitialPoolIdsPerRow, device);
}

void SamplerParamBuffer::allocate(int64_t rows, int64_t pool_ids, Device device) {
  uploaded_.synchronize();  // the last upload has read the old mirror
  layout_ = Layout::plan(rows, pool_ids);
  device_of_buffer_ = device;
  const int64_t bytes = static_cast<int64_t>(layout_.total);
  if (device.is_cpu()) {
    mirror_ = Tensor::empty({bytes}, DType::kU8);
    device_ = mirror_;
  } else {
    mirror_ = Tensor::empty_pinned({bytes}, DType::kU8);
    device_ = Tensor::empty({bytes}, DType::kU8, device);
  }
  uploaded_ = Event(device);
  row_keys_.assign(static_cast<size_t>(rows), 0);
}

Tensor SamplerParamBuffer::view(size_t offset, int64_t numel, DType dtype) const {
  return Tensor::from_blob(device_.data<uint8_t>() + offset, {numel}, dtype, nullptr, device_of_buffer_);
}

SamplerBatchParams SamplerParamBuffer::prepare(std::span<const SamplerRequest> requests, Device device, int64_t vocab,
                                               bool need_sampling, uint64_t unseeded_key) {
  const int64_t n = static_cast<int64_t>(requests.size());
  SamplerBatchParams p;
  // Sizes first: the pool must hold every list before anything is written.
  int64_t num_stop = 0, num_bias = 0, num_prompt = 0, num_output = 0;
  for (const SamplerRequest& req : requests) {
    const SamplingSettings& s = *req.sampling;
    if (req.step < s.min_tokens) num_stop += static_cast<int64_t>(s.all_stop_token_ids.size());
    num_bias += static_cast<int64_t>(s.logit_bias.size());
    if (penalties_on(s)) {
      p.any_penalty = true;
      if (s.repetition_penalty != 1.f) num_prompt += static_cast<int64_t>(req.prompt_token_ids.size());
      num_output += static_cast<int64_t>(req.output_token_ids.size());
    }
  }
  p.any_stop_ids = num_stop > 0;
  p.any_bias = num_bias > 0;
  const int64_t pool_needed =
      pool_elems(num_stop) + 2 * pool_elems(num_bias) + pool_elems(num_prompt) + pool_elems(num_output);
  if (!device_.defined() || n > layout_.rows || pool_needed > layout_.pool_ids || !(device_of_buffer_ == device)) {
    const int64_t rows = std::max(n, layout_.rows);
    allocate(rows, std::max({pool_needed, 2 * layout_.pool_ids, rows * kInitialPoolIdsPerRow}), device);
  }
  uploaded_.synchronize();  // the previous batch's copy has read the mirror we are about to rewrite
  const Layout& L = layout_;

  // The rows' constants, rewritten only when another request sits in the row (row_key 0: always).
  for (int64_t r = 0; r < n; ++r) {
    const SamplerRequest& req = requests[r];
    const SamplingSettings& s = *req.sampling;
    if (req.row_key != 0 && row_keys_[r] == req.row_key) continue;
    row_keys_[r] = req.row_key;
    const bool greedy = is_greedy(s), penalties = penalties_on(s);
    host<float>(L.temperature)[r] = s.temperature;
    host<int32_t>(L.top_k)[r] = greedy ? 0 : std::max(s.top_k, 0);
    host<float>(L.top_p)[r] = greedy ? 1.f : s.top_p;
    host<float>(L.min_p)[r] = greedy ? 0.f : s.min_p;
    host<float>(L.repetition)[r] = penalties ? s.repetition_penalty : 1.f;
    host<float>(L.frequency)[r] = penalties ? s.frequency_penalty : 0.f;
    host<float>(L.presence)[r] = penalties ? s.presence_penalty : 0.f;
  }
  size_t lo = L.total, hi = 0;  // the byte range this batch uploads
  auto need = [&lo, &hi](size_t begin, size_t end) {
    lo = std::min(lo, begin);
    hi = std::max(hi, end);
  };
  const size_t rows4 = static_cast<size_t>(n) * 4, rows8 = static_cast<size_t>(n) * 8;

  if (need_sampling) {
    // Per step: the Philox key and counter (seeded: the request's step; unseeded: this call's key and the row).
    auto* seeds = host<int64_t>(L.seed);
    auto* offsets = host<int64_t>(L.offset);
    for (int64_t r = 0; r < n; ++r) {
      const SamplerRequest& req = requests[r];
      const SamplingSettings& s = *req.sampling;
      seeds[r] = s.seed ? *s.seed : static_cast<int64_t>(unseeded_key);
      offsets[r] = s.seed ? req.step : r;
      if (is_greedy(s)) continue;
      p.any_temperature |= s.temperature != 1.f;
      const int32_t top_k = std::max(s.top_k, 0);
      p.any_filter |= (top_k > 0 && top_k < vocab) || s.top_p < 1.f || s.min_p > 0.f;
    }
    p.sample = {view(L.temperature, n, DType::kF32), view(L.seed, n, DType::kI64), view(L.offset, n, DType::kI64)};
    need(L.temperature, L.offset + rows8);
    if (p.any_filter) {
      p.filter = {view(L.top_k, n, DType::kI32), view(L.top_p, n, DType::kF32), view(L.min_p, n, DType::kF32)};
      need(L.top_k, L.min_p + rows4);
    }
  }

  // The CSR lists, packed back to back in the pool (their lengths change every step).
  size_t pool_at = L.pool;
  // Writes one list per row (`fill(r, out)` appends row r's ids) and returns it as TokenLists.
  auto build = [&](size_t offsets_at, int64_t total, auto&& fill) {
    auto* offs = host<int32_t>(offsets_at);
    auto* ids = host<int32_t>(pool_at);
    int32_t at = 0;
    offs[0] = 0;
    for (int64_t r = 0; r < n; ++r) {
      at = fill(r, ids, at);
      offs[r + 1] = at;
    }
    CHECK_EQ(static_cast<int64_t>(at), total);
    ops::TokenLists lists{view(offsets_at, n + 1, DType::kI32), view(pool_at, total, DType::kI32)};
    need(offsets_at, offsets_at + rows4 + 4);
    pool_at += static_cast<size_t>(pool_elems(total)) * 4;
    need(L.pool, pool_at);
    return lists;
  };
  auto append = [](std::span<const int32_t> from, int32_t* ids, int32_t at) {
    std::copy(from.begin(), from.end(), ids + at);
    return at + static_cast<int32_t>(from.size());
  };
  if (p.any_stop_ids) {
    p.stop_ids = build(L.stop_offsets, num_stop, [&](int64_t r, int32_t* ids, int32_t at) {
      const SamplerRequest& req = requests[r];
      return req.step < req.sampling->min_tokens ? append(req.sampling->all_stop_token_ids, ids, at) : at;
    });
  }
  if (p.any_bias) {
    auto* values = host<float>(pool_at);  // the values first, then the ids
    const Tensor values_view = view(pool_at, num_bias, DType::kF32);
    pool_at += static_cast<size_t>(pool_elems(num_bias)) * 4;
    int32_t v = 0;
    p.logit_bias.tokens = build(L.bias_offsets, num_bias, [&](int64_t r, int32_t* ids, int32_t at) {
      for (const auto& [id, value] : requests[r].sampling->logit_bias) {
        ids[at++] = id;
        values[v++] = value;
      }
      return at;
    });
    p.logit_bias.values = values_view;
  }
  if (p.any_penalty) {
    p.penalties.prompt_tokens = build(L.prompt_offsets, num_prompt, [&](int64_t r, int32_t* ids, int32_t at) {
      const SamplingSettings& s = *requests[r].sampling;
      return penalties_on(s) && s.repetition_penalty != 1.f ? append(requests[r].prompt_token_ids, ids, at) : at;
    });
    p.penalties.output_tokens = build(L.output_offsets, num_output, [&](int64_t r, int32_t* ids, int32_t at) {
      return penalties_on(*requests[r].sampling) ? append(requests[r].output_token_ids, ids, at) : at;
    });
    p.penalties.repetition_penalties = view(L.repetition, n, DType::kF32);
    p.penalties.frequency_penalties = view(L.frequency, n, DType::kF32);
    p.penalties.presence_penalties = view(L.presence, n, DType::kF32);
    need(L.repetition, L.presence + rows4);
  }

  // One copy of [lo, hi) (a [1, bytes] view: one contiguous row); nothing for a batch that needs no parameters.
  if (hi > lo && !device.is_cpu()) {
    const int64_t bytes = static_cast<int64_t>(hi - lo);
    Tensor dst = device_.slice(0, static_cast<int64_t>(lo), static_cast<int64_t>(hi)).view({1, bytes});
    dst.copy_from(mirror_.slice(0, static_cast<int64_t>(lo), static_cast<int64_t>(hi)).view({1, bytes}));
    uploaded_.record();
  }
  return p;
}

}  // namespace llmserve
