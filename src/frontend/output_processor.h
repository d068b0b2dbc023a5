// OutputProcessor: turns EngineCoreOutputs into RequestOutputs — incremental
// detokenization, stop strings (the text is truncated at the first match and
// the request is reported for the core to finish), logprobs, and the fan-in of
// a request's n child sequences. Invariant: a completion's text is the
// detokenization of its ids up to the stop string (included only with
// include_stop_str_in_output) and never changes once it is finished.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/sampling_params.h"
#include "engine/scheduler_output.h"
#include "tokenizer/incremental_detokenizer.h"
#include "tokenizer/tokenizer.h"

namespace llmserve {

// One of the n sequences of a request, shaped like vLLM's CompletionOutput.
struct CompletionOutput {
  int32_t index = 0;                    // which of the n sequences
  std::string text;                     // all text so far (empty without a tokenizer)
  std::vector<int32_t> token_ids;       // all generated ids so far (stop tokens included, as in vLLM)
  std::vector<TokenLogprobs> logprobs;  // per generated id, when SamplingParams::logprobs is set
  std::optional<FinishReason> finish_reason;
  StopReason stop_reason;                // with kStop: EOS (monostate), the stop token id or
                                         // the stop string
  std::string delta_text;                // text added since the previous output of this
                                         // request (streaming)
  std::vector<int32_t> delta_token_ids;  // ids added since the previous output
  bool finished() const { return finish_reason.has_value(); }
};

struct RequestOutput {
  std::string request_id;
  std::string prompt;  // empty when the prompt was given as ids
  std::vector<int32_t> prompt_token_ids;
  // With SamplingParams::prompt_logprobs, once the whole prompt is scored (with the first generated token):
  // one entry per prompt token, nullopt for position 0 (as vLLM's None), else the token's logprob and rank
  // given the tokens before it, then the top-k. Empty before that and when not requested.
  std::vector<std::optional<TokenLogprobs>> prompt_logprobs;
  std::vector<CompletionOutput> outputs;  // n entries, by index
  int64_t num_cached_tokens = 0;          // prompt tokens served from the prefix cache
  bool finished = false;                  // every sequence finished
};

class OutputProcessor {
 public:
  // `tokenizer` may be null (ids only: no text, and stop strings must not be
  // used); it must outlive this object.
  explicit OutputProcessor(const Tokenizer *tokenizer);
  ~OutputProcessor();

  // Registers a request whose sequences run in the core under `child_ids` (n of
  // them, in index order).
  void add_request(const std::string &request_id, std::string prompt, std::vector<int32_t> prompt_token_ids,
                   const SamplingParams &params, const std::vector<std::string> &child_ids);

  struct Result {
    std::vector<RequestOutput> request_outputs;  // one per request that changed, in first-seen order
    // (child id, stop string): sequences that hit a stop string and that the
    // core still runs; finish them.
    std::vector<std::pair<std::string, std::string>> stop_string_finished;
  };
  // Outputs for unknown ids (e.g. the core's late final output of a sequence
  // stopped here) are ignored.
  Result process(const EngineCoreOutputs &outputs);

  bool has_unfinished() const { return !requests_.empty(); }
  int64_t num_unfinished() const { return static_cast<int64_t>(requests_.size()); }
  // The core ids of a live request's unfinished sequences (for abort); empty if
  // unknown.
  std::vector<std::string> child_ids(const std::string &request_id) const;

 private:
  struct Sequence;
  struct Parent;
  // Applies one core output to its sequence; returns the stop string if it was
  // found now.
  std::optional<std::string> update_sequence(Sequence &seq, const EngineCoreOutput &out);
  RequestOutput make_output(Parent &parent);

  const Tokenizer *tokenizer_;
  std::unordered_map<std::string, std::unique_ptr<Parent>> requests_;
  std::unordered_map<std::string, Sequence *> child_to_sequence_;
};

// The text of `text` matched against `stops` after `num_new_chars` bytes were
// appended (vLLM's check_stop_strings: stops are tried in order, a match may
// straddle old and new text). Returns the matched stop string and the length
// the text is truncated to (stop included when include_stop), or nullopt.
std::optional<std::pair<std::string, size_t>> find_stop_string(const std::string &text, size_t num_new_chars,
                                                               const std::vector<std::string> &stops,
                                                               bool include_stop);

}  // namespace llmserve
