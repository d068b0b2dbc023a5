// Sampler: validates each request's settings, has SamplerParamBuffer place them in the persistent per-row arrays of
// the kernels' sampling ops (one upload) and runs those ops in vLLM V1's order (listed in sampler.h). Rows whose
// settings make a step a no-op (penalties off, temperature 1, no filters) hold neutral values, and a step nobody
// needs is skipped.
#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "kernels/ops.h"
#include "kernels/philox.h"

namespace llmserve {
namespace {

Status bad(const std::string& field, const std::string& detail) { return invalid_argument(field + " " + detail); }

Status check_ids(std::span<const int32_t> ids, int64_t vocab, const char* field) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab) {
      return bad(std::string(field) + "[" + std::to_string(i) + "]",
                 "= " + std::to_string(ids[i]) + " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
    }
  }
  return ok_status();
}

bool penalties_on(const SamplingSettings& s) {
  return s.repetition_penalty != 1.f || s.frequency_penalty != 0.f || s.presence_penalty != 0.f;
}

bool is_greedy(const SamplingSettings& s) { return s.temperature < ops::kSamplingEps; }

}  // namespace

Status Sampler::validate(const SamplingSettings& s, int64_t vocab) {
  if (!(std::isfinite(s.temperature) && s.temperature >= 0.f))
    return bad("temperature", std::to_string(s.temperature) + " must be >= 0");
  if (!(s.top_p > 0.f && s.top_p <= 1.f)) return bad("top_p", std::to_string(s.top_p) + " must be in (0, 1]");
  if (s.top_k < -1) return bad("top_k", std::to_string(s.top_k) + " must be 0 or -1 (off), or >= 1");
  if (!(s.min_p >= 0.f && s.min_p <= 1.f)) return bad("min_p", std::to_string(s.min_p) + " must be in [0, 1]");
  if (!(s.presence_penalty >= -2.f && s.presence_penalty <= 2.f)) {
    return bad("presence_penalty", std::to_string(s.presence_penalty) + " must be in [-2, 2]");
  }
  if (!(s.frequency_penalty >= -2.f && s.frequency_penalty <= 2.f)) {
    return bad("frequency_penalty", std::to_string(s.frequency_penalty) + " must be in [-2, 2]");
  }
  if (!(std::isfinite(s.repetition_penalty) && s.repetition_penalty > 0.f)) {
    return bad("repetition_penalty", std::to_string(s.repetition_penalty) + " must be > 0");
  }
  for (const auto& [id, bias] : s.logit_bias) {
    if (id < 0 || id >= vocab) {
      return bad("logit_bias",
                 "token id " + std::to_string(id) + " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
    }
    if (!std::isfinite(bias)) return bad("logit_bias", "value for token " + std::to_string(id) + " is not finite");
  }
  if (s.min_tokens < 0) return bad("min_tokens", std::to_string(s.min_tokens) + " must be >= 0");
  RETURN_IF_ERROR(check_ids(s.all_stop_token_ids, vocab, "all_stop_token_ids"));
  if (s.logprobs && (*s.logprobs < -1 || *s.logprobs > vocab)) {
    return bad("logprobs",
               std::to_string(*s.logprobs) + " must be -1 (whole vocabulary) or in [0, " + std::to_string(vocab) + "]");
  }
  return ok_status();
}

namespace {

// Validates every row; returns the largest number of top logprobs asked for (-1: nobody asked for logprobs).
StatusOr<int64_t> validate_batch(std::span<const SamplerRequest> requests, int64_t vocab) {
  int64_t max_num_logprobs = -1;
  for (size_t r = 0; r < requests.size(); ++r) {
    const SamplerRequest& req = requests[r];
    CHECK(req.sampling != nullptr) << "Sampler: row " << r << " has no settings";
    const SamplingSettings& s = *req.sampling;
    const std::string row = "request row " + std::to_string(r);
    RETURN_IF_ERROR(Sampler::validate(s, vocab).with_context(row));
    if (req.step < 0) return invalid_argument(row + ": step " + std::to_string(req.step) + " must be >= 0");
    if (s.repetition_penalty != 1.f) {
      RETURN_IF_ERROR(check_ids(req.prompt_token_ids, vocab, "prompt_token_ids").with_context(row));
    }
    if (penalties_on(s)) RETURN_IF_ERROR(check_ids(req.output_token_ids, vocab, "output_token_ids").with_context(row));
    if (s.logprobs) max_num_logprobs = std::max<int64_t>(max_num_logprobs, *s.logprobs == -1 ? vocab : *s.logprobs);
  }
  return max_num_logprobs;
}

// Steps 2-4: min_tokens, logit_bias, penalties (vLLM's non-argmax-invariant processors, then penalties).
void apply_logits_processors(Tensor& logits, const SamplerBatchParams& params) {
  if (params.any_stop_ids) ops::mask_tokens(logits, params.stop_ids);
  if (params.any_bias) ops::apply_logit_bias(logits, params.logit_bias);
  if (params.any_penalty) ops::apply_penalties(logits, params.penalties);
}

// Steps 5-10: temperature, min-p / top-k / top-p on the rows that sample (greedy rows hold neutral values), then
// the draw. Seeded rows use Philox(seed, step); unseeded rows Philox(unseeded_key, row).
void filter_and_draw(Tensor& logits, const SamplerBatchParams& params, Tensor& out_ids) {
  if (params.any_temperature) ops::apply_temperature(logits, params.sample.temperatures);
  if (params.any_filter) ops::apply_top_k_top_p_min_p(logits, params.filter);
  ops::sample(out_ids, logits, params.sample);
}

// Step 11: the sampled token's logprob and rank in column 0, the k most likely tokens in columns 1..k. `ids` and
// `raw_logprobs` are on the logits' device; the results are assembled on the host.
void gather_logprobs(SamplerOutput& out, const Tensor& ids, const Tensor& raw_logprobs, int64_t k) {
  const int64_t n = raw_logprobs.size(0);
  const Device dev = raw_logprobs.device();
  Tensor token_logprobs = Tensor::empty({n}, DType::kF32, dev), ranks = Tensor::empty({n}, DType::kI32, dev);
  ops::gather_token_logprobs(token_logprobs, ranks, raw_logprobs, ids);
  Tensor top_ids = Tensor::empty({n, k}, DType::kI32, dev), top_values = Tensor::empty({n, k}, DType::kF32, dev);
  if (k > 0) ops::top_k(top_values, top_ids, raw_logprobs, k);
  if (!dev.is_cpu()) {
    token_logprobs = token_logprobs.to(Device::cpu());
    out.sampled_token_ranks = ranks.to(Device::cpu());
    if (k > 0) {
      top_ids = top_ids.to(Device::cpu());
      top_values = top_values.to(Device::cpu());
    }
  } else {
    out.sampled_token_ranks = ranks;
  }
  out.logprob_token_ids = Tensor::empty({n, 1 + k}, DType::kI32);
  out.logprobs = Tensor::empty({n, 1 + k}, DType::kF32);
  for (int64_t r = 0; r < n; ++r) {
    int32_t* id_row = out.logprob_token_ids.data<int32_t>() + r * (1 + k);
    float* lp_row = out.logprobs.data<float>() + r * (1 + k);
    id_row[0] = out.sampled_token_ids.data<int32_t>()[r];
    lp_row[0] = token_logprobs.data<float>()[r];
    if (k > 0) {
      std::copy_n(top_ids.data<int32_t>() + r * k, k, id_row + 1);
      std::copy_n(top_values.data<float>() + r * k, k, lp_row + 1);
    }
  }
}

}  // namespace

void Sampler::apply_bitmasks(Tensor& logits, std::span<const SamplerRequest> requests) {
  const bool any = std::any_of(requests.begin(), requests.end(),
                               [](const SamplerRequest& r) { return r.allowed_token_bitmask != nullptr; });
  if (!any) return;
  const int64_t n = static_cast<int64_t>(requests.size()), vocab = logits.size(1), words = (vocab + 31) / 32;
  const Device dev = logits.device();
  if (!bitmask_host_.defined() || bitmask_host_.size(0) < n || bitmask_host_.size(1) != words ||
      !(bitmask_device_.device() == dev)) {
    bitmask_uploaded_.synchronize();
    const int64_t rows = std::max<int64_t>(n, bitmask_host_.defined() ? bitmask_host_.size(0) : 0);
    if (dev.is_cpu()) {
      bitmask_host_ = Tensor::empty({rows, words}, DType::kI32);
      bitmask_device_ = bitmask_host_;
    } else {
      bitmask_host_ = Tensor::empty_pinned({rows, words}, DType::kI32);
      bitmask_device_ = Tensor::empty({rows, words}, DType::kI32, dev);
    }
    bitmask_uploaded_ = Event(dev);
  }
  bitmask_uploaded_.synchronize();  // the previous batch's copy has read the mirror
  uint32_t* host = reinterpret_cast<uint32_t*>(bitmask_host_.data<int32_t>());
  for (int64_t r = 0; r < n; ++r) {
    uint32_t* row = host + r * words;
    const SamplerRequest& req = requests[static_cast<size_t>(r)];
    if (req.allowed_token_bitmask == nullptr) {
      std::fill_n(row, words, 0xFFFFFFFFu);
      continue;
    }
    const int64_t given = std::min<int64_t>(words, req.bitmask_words);
    std::copy_n(req.allowed_token_bitmask, given, row);
    std::fill(row + given, row + words, 0u);
  }
  Tensor mask = bitmask_device_.slice(0, 0, n);
  if (!dev.is_cpu()) {
    mask.copy_from(bitmask_host_.slice(0, 0, n));
    bitmask_uploaded_.record();
  }
  ops::apply_token_bitmask(logits, mask);
}

StatusOr<SamplerOutput> Sampler::sample(Tensor& logits, std::span<const SamplerRequest> requests,
                                        const Tensor* device_ids) {
  const int64_t n = static_cast<int64_t>(requests.size());
  CHECK(logits.defined() && logits.dim() == 2 && logits.size(0) == n && logits.dtype() == DType::kF32)
      << "Sampler: logits " << (logits.defined() ? logits.to_string() : "undefined") << " for " << n << " requests";
  const int64_t vocab = logits.size(1);
  CHECK_GT(vocab, 0) << "Sampler: empty vocabulary";
  ASSIGN_OR_RETURN(const int64_t max_num_logprobs, validate_batch(requests, vocab));

  const Device dev = logits.device();
  SamplerOutput out;
  out.sampled_token_ids = Tensor::empty({n}, DType::kI32);
  if (n == 0) return out;
  // 0. The grammars' bitmasks.
  apply_bitmasks(logits, requests);
  // 1. Raw logprobs, before the logits are touched.
  Tensor raw_logprobs;
  if (max_num_logprobs >= 0) {
    if (!raw_logprobs_.defined() || raw_logprobs_.size(0) < n || raw_logprobs_.size(1) != vocab ||
        !(raw_logprobs_.device() == dev)) {
      raw_logprobs_ = Tensor::empty({n, vocab}, DType::kF32, dev);
    }
    raw_logprobs = raw_logprobs_.slice(0, 0, n);
    ops::log_softmax(raw_logprobs, logits);
  }
  // On a device, an all-greedy batch (processors applied) is one argmax kernel: no sampling parameters uploaded.
  const bool all_greedy =
      std::all_of(requests.begin(), requests.end(), [](const SamplerRequest& r) { return is_greedy(*r.sampling); });
  const bool need_sampling = !(all_greedy && !dev.is_cpu());
  const SamplerBatchParams params =
      params_.prepare(requests, dev, vocab, need_sampling, philox::mix64(seed_ ^ philox::mix64(num_calls_)));
  apply_logits_processors(logits, params);
  const bool ids_stay_on_device = device_ids != nullptr && !dev.is_cpu() && max_num_logprobs < 0;
  Tensor ids = dev.is_cpu()            ? out.sampled_token_ids
               : device_ids != nullptr ? device_ids->slice(0, 0, n)
                                       : Tensor::empty({n}, DType::kI32, dev);
  if (need_sampling) {
    filter_and_draw(logits, params, ids);
  } else {
    ops::argmax(ids, logits);
  }
  ++num_calls_;
  // The one wait of a step: the sampled ids back to the host (under async scheduling the caller copies them).
  if (ids_stay_on_device) {
    out.sampled_token_ids = Tensor();
    return out;
  }
  if (!dev.is_cpu()) out.sampled_token_ids = ids.to(Device::cpu());
  if (max_num_logprobs >= 0) gather_logprobs(out, ids, raw_logprobs, max_num_logprobs);
  return out;
}

}  // namespace llmserve
