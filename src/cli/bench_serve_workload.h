// The workload of `llmserve bench serve`: vLLM's "random" dataset (prompts of a chosen token length, as text
// through a tokenizer or as token-id lists without one) and the arrival schedule (Poisson, or gamma with
// burstiness). Everything is a function of the seed, so two runs with one seed send the same requests.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/status.h"

namespace llmserve {
class Tokenizer;
}

namespace llmserve::cli {

struct SampleRequest {
  std::string prompt_text;          // the prompt when a tokenizer built it
  std::vector<int32_t> prompt_ids;  // the prompt as token ids when there is no tokenizer
  int64_t prompt_len = 0;           // tokens in the prompt (without special tokens the server may add)
  int64_t expected_output_len = 0;  // max_tokens to ask for
};

struct RandomDatasetOptions {
  int64_t num_prompts = 1000;
  int64_t input_len = 1024;
  int64_t output_len = 128;
  double range_ratio = 0.0;  // lengths uniform in [len * (1 - r), len * (1 + r)], r in [0, 1)
  int64_t vocab_size = 0;    // ids are drawn from [0, vocab_size) when there is no tokenizer
};

// With a tokenizer: random non-special token ids, decoded to text and re-encoded, adjusted until the text encodes
// (add_special_tokens = false) to exactly the drawn length; a text that does not settle after a few rounds keeps
// its re-encoded length as prompt_len. Without one: the ids themselves. Bad options are InvalidArgument.
StatusOr<std::vector<SampleRequest>> make_random_dataset(const RandomDatasetOptions& options,
                                                         const Tokenizer* tokenizer, std::mt19937_64& rng);

// Send times in s after the start for `num_requests` arrivals at `request_rate` per s: all 0 for an infinite
// rate; otherwise gamma(shape = burstiness, scale = 1 / (rate * burstiness)) gaps (exponential, i.e. Poisson, at
// burstiness 1), accumulated and then scaled so the last arrival lands at num_requests / rate exactly, as vLLM
// does. rate > 0 and burstiness > 0 are checked by the caller.
std::vector<double> arrival_times(int64_t num_requests, double request_rate, double burstiness, std::mt19937_64& rng);

}  // namespace llmserve::cli
