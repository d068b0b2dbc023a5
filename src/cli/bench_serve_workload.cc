// The workload of `llmserve bench serve` (see bench_serve_workload.h).
#include "cli/bench_serve_workload.h"

#include <cmath>
#include <limits>

#include "tokenizer/tokenizer.h"

namespace llmserve::cli {
namespace {

int64_t draw_len(int64_t len, double ratio, std::mt19937_64& rng) {
  const int64_t lo = std::max<int64_t>(1, static_cast<int64_t>(std::floor(static_cast<double>(len) * (1 - ratio))));
  const int64_t hi = std::max(lo, static_cast<int64_t>(std::floor(static_cast<double>(len) * (1 + ratio))));
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}

// Text that `tok` encodes to `len` tokens, when a few rounds of decode / re-encode / trim-or-extend find one.
SampleRequest text_prompt(const Tokenizer& tok, const std::vector<int32_t>& candidates, int64_t len,
                          std::mt19937_64& rng) {
  std::uniform_int_distribution<size_t> pick(0, candidates.size() - 1);
  std::vector<int32_t> ids(static_cast<size_t>(len));
  for (int32_t& id : ids) id = candidates[pick(rng)];
  SampleRequest r;
  for (int round = 0; round < 16; ++round) {
    r.prompt_text = tok.decode(ids, /*skip_special_tokens=*/true);
    ids = tok.encode(r.prompt_text, /*add_special_tokens=*/false);
    if (static_cast<int64_t>(ids.size()) == len) break;
    // Too long: keep the first `len` tokens; too short: append fresh random ones. Merges across the cut can
    // change the count again, hence the rounds.
    if (static_cast<int64_t>(ids.size()) > len) {
      ids.resize(static_cast<size_t>(len));
    } else {
      while (static_cast<int64_t>(ids.size()) < len) ids.push_back(candidates[pick(rng)]);
    }
  }
  r.prompt_len = static_cast<int64_t>(tok.encode(r.prompt_text, false).size());
  return r;
}

}  // namespace

StatusOr<std::vector<SampleRequest>> make_random_dataset(const RandomDatasetOptions& o, const Tokenizer* tokenizer,
                                                         std::mt19937_64& rng) {
  if (o.num_prompts < 1) return invalid_argument("--num-prompts must be at least 1");
  if (o.input_len < 1) return invalid_argument("--random-input-len must be at least 1");
  if (o.output_len < 1) return invalid_argument("--random-output-len must be at least 1");
  if (!(o.range_ratio >= 0.0 && o.range_ratio < 1.0)) {
    return invalid_argument("--random-range-ratio must be in [0, 1), got " + std::to_string(o.range_ratio));
  }
  std::vector<int32_t> candidates;
  if (tokenizer != nullptr) {
    for (int32_t id = 0; id < tokenizer->vocab_size(); ++id) {
      if (!tokenizer->is_special(id) && tokenizer->contributes(id, /*skip_special_tokens=*/true)) {
        candidates.push_back(id);
      }
    }
    if (candidates.empty()) return invalid_argument("--tokenizer: the vocabulary has no non-special tokens");
  } else if (o.vocab_size < 1) {
    return invalid_argument("--random-vocab-size must be at least 1");
  }
  std::vector<SampleRequest> requests;
  requests.reserve(static_cast<size_t>(o.num_prompts));
  for (int64_t i = 0; i < o.num_prompts; ++i) {
    const int64_t input_len = draw_len(o.input_len, o.range_ratio, rng);
    const int64_t output_len = draw_len(o.output_len, o.range_ratio, rng);
    SampleRequest r;
    if (tokenizer != nullptr) {
      r = text_prompt(*tokenizer, candidates, input_len, rng);
    } else {
      std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(o.vocab_size - 1));
      r.prompt_ids.resize(static_cast<size_t>(input_len));
      for (int32_t& t : r.prompt_ids) t = id(rng);
      r.prompt_len = input_len;
    }
    r.expected_output_len = output_len;
    requests.push_back(std::move(r));
  }
  return requests;
}

std::vector<double> arrival_times(int64_t num_requests, double request_rate, double burstiness, std::mt19937_64& rng) {
  std::vector<double> times(static_cast<size_t>(std::max<int64_t>(0, num_requests)), 0.0);
  if (times.empty() || std::isinf(request_rate)) return times;
  std::gamma_distribution<double> gap(burstiness, 1.0 / (request_rate * burstiness));
  double t = 0;
  for (double& v : times) v = (t += gap(rng));
  const double target = static_cast<double>(num_requests) / request_rate;
  if (t > 0) {
    for (double& v : times) v *= target / t;
  }
  return times;
}

}  // namespace llmserve::cli
