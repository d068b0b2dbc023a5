// Sampler: turns a batch of logits into sampled token ids and logprobs, running the kernels' sampling ops in vLLM
// V1's order. Invariant: a request's token depends only on its logits, its settings, its token ids and its step
// (plus, for unseeded requests, the engine seed, its row and how many batches this Sampler sampled before).
// Not thread-safe: one Sampler per model runner. The per-row parameters live in persistent device arrays
// (SamplerParamBuffer) uploaded in at most one copy per batch.
//
// Order (vLLM V1 Sampler.forward with the default logprobs_mode "raw_logprobs"):
//   0. structured output: tokens the request's grammar does not allow next -> -inf (vLLM applies the grammar
//      bitmask to the logits before its Sampler, so the logprobs below see it too);
//   1. logprobs = log_softmax(raw logits), before any processing, when some request asks for logprobs;
//   2. min_tokens: the request's all_stop_token_ids -> -inf while step < min_tokens;
//   3. logit_bias added;
//   4. penalties: repetition (prompt and output ids), then frequency and presence (output ids);
//   5. greedy requests (temperature < 1e-5) take the argmax of these logits; for the others:
//   6. logits /= temperature;  7. min-p;  8. top-k;  9. top-p (on the renormalised survivors);
//  10. draw from softmax(logits) with Philox(key = seed, counter = step), or for unseeded requests Philox(key
//      derived from the engine seed and this call's index, counter = row);
//  11. gather the sampled token's logprob and rank and the top `logprobs` logprobs from step 1.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "runtime/sampler_params.h"

namespace llmserve {

// One request's sampling settings; field names and meanings follow vLLM's SamplingParams.
struct SamplingSettings {
  float temperature = 1.0f;                 // >= 0; below 1e-5: greedy
  float top_p = 1.0f;                       // (0, 1]; 1: off
  int32_t top_k = 0;                        // 0 or -1: off; else >= 1
  float min_p = 0.0f;                       // [0, 1]; 0: off
  std::optional<int64_t> seed;              // set: reproducible stream keyed by (seed, step)
  float presence_penalty = 0.0f;            // [-2, 2]
  float frequency_penalty = 0.0f;           // [-2, 2]
  float repetition_penalty = 1.0f;          // > 0; 1: off
  std::map<int32_t, float> logit_bias;      // token id -> bias added to its logit (ids in [0, vocab))
  int32_t min_tokens = 0;                   // >= 0: all_stop_token_ids are suppressed while step < min_tokens
  std::vector<int32_t> all_stop_token_ids;  // eos + stop_token_ids (vLLM's all_stop_token_ids), in [0, vocab)
  std::optional<int32_t> logprobs;          // number of top logprobs to return (0: only the sampled token's);
                                            // -1: the whole vocabulary
};

// One row of the batch: the request's settings and token history. Spans must outlive the sample() call.
struct SamplerRequest {
  const SamplingSettings* sampling = nullptr;
  std::span<const int32_t> prompt_token_ids;  // read for repetition_penalty only
  std::span<const int32_t> output_token_ids;  // read for the penalties only
  int64_t step = 0;  // index of the token being sampled in the request's output (= number generated so far)
  // Identifies the request across calls (unique over the Sampler's life): a row whose key is the one it held last
  // call keeps its constant parameters. 0: unknown, rewritten every call.
  uint64_t row_key = 0;
  // Structured output: the grammar's allowed-token bitmask for this token, `bitmask_words` uint32 words (bit t of
  // word t / 32 set = token t allowed; ids past 32 * words disallowed). Null: unconstrained. Must outlive sample().
  const uint32_t* allowed_token_bitmask = nullptr;
  int32_t bitmask_words = 0;
};

// What sample() returns, shaped like vLLM's SamplerOutput + LogprobsTensors.
// Every tensor is on the host.
struct SamplerOutput {
  Tensor sampled_token_ids;  // [num_reqs] i32
  // Defined only when some request asked for logprobs; k = the largest `logprobs` in the batch (vocab for -1).
  // Column 0 holds the sampled token, columns 1..k the k most likely tokens by raw logprob, descending (ties:
  // lower id first). A row that asked for fewer (or none) has its first 1 + logprobs columns meaningful.
  Tensor logprob_token_ids;    // [num_reqs, 1 + k] i32
  Tensor logprobs;             // [num_reqs, 1 + k] f32: log_softmax of the raw logits
  Tensor sampled_token_ranks;  // [num_reqs] i32: tokens whose raw logprob >= the sampled one's (1 = most likely)
};

class Sampler {
 public:
  // `seed` keys the streams of requests without a seed (vLLM's engine-wide seed). The parameter arrays are
  // allocated for `max_num_reqs` rows on `device` (0: on first use, growing with the batches).
  explicit Sampler(uint64_t seed = 0, int64_t max_num_reqs = 0, Device device = Device::cpu())
      : seed_(seed), params_(max_num_reqs, device) {}

  // Samples one token per row of logits [requests.size(), vocab] f32, on the CPU or a CUDA device (the ops run
  // where the logits are; the results come back to the host). `logits` is used as scratch and holds the
  // processed logits afterwards. InvalidArgument (naming the row and the field) when a request's
  // settings are out of range or name a token id outside the vocabulary; nothing is sampled then.
  // `device_ids` (logits on a CUDA device; async scheduling): a persistent [>= requests.size()] i32 buffer on that
  // device receiving the ids; the host does not wait for them and sampled_token_ids is left undefined, unless some
  // request asked for logprobs (then they come back as without it).
  StatusOr<SamplerOutput> sample(Tensor& logits, std::span<const SamplerRequest> requests,
                                 const Tensor* device_ids = nullptr);

  // Validates one request's settings against the vocabulary (what sample() checks for each row).
  static Status validate(const SamplingSettings& sampling, int64_t vocab);

  // The parameter arrays' device base (stable while batches fit the capacity); null before first use.
  const void* params_base() const { return params_.device_base(); }

 private:
  // Step 0: the constrained rows' bitmasks into one [n, ceil(vocab / 32)] i32 buffer (unconstrained rows all ones),
  // uploaded in one copy, applied by ops::apply_token_bitmask. No-op when no row is constrained.
  void apply_bitmasks(Tensor& logits, std::span<const SamplerRequest> requests);

  uint64_t seed_;
  uint64_t num_calls_ = 0;
  // The bitmask buffers: a page-locked host mirror (CUDA) and its device copy, grown to the batch and kept (a fixed
  // address while batches fit); on the CPU one buffer.
  Tensor bitmask_host_, bitmask_device_;
  Event bitmask_uploaded_;  // batches sampled so far: advances the unseeded streams
  Tensor raw_logprobs_;     // [capacity, vocab] scratch, reused across calls
  SamplerParamBuffer params_;
};

}  // namespace llmserve
