// OutputProcessor: detokenize, match stop strings, gather the n sequences of
// each request.
#include "frontend/output_processor.h"

#include <algorithm>

#include "core/logging.h"

namespace llmserve {

struct OutputProcessor::Sequence {
  Parent *parent = nullptr;
  CompletionOutput completion;
  std::unique_ptr<IncrementalDetokenizer> detokenizer;  // null without a tokenizer
  std::string raw_text;                                 // detokenized text before stop-string truncation
  size_t sent_text = 0;                                 // bytes of completion.text already reported as delta
  size_t sent_tokens = 0;                               // ids already reported as delta
};

struct OutputProcessor::Parent {
  std::string request_id;
  std::string prompt;
  std::vector<int32_t> prompt_token_ids;
  SamplingParams params;
  size_t stop_buffer = 0;  // bytes held back from streamed deltas: a stop string
                           // may still start there
  std::vector<std::unique_ptr<Sequence>> sequences;
  // Gathered from the first sequence's outputs (every sequence scores the same prompt); [0] is nullopt.
  std::vector<std::optional<TokenLogprobs>> prompt_logprobs;
  int64_t num_cached_tokens = 0;
  int64_t num_finished = 0;
};

OutputProcessor::OutputProcessor(const Tokenizer *tokenizer) : tokenizer_(tokenizer) {}
OutputProcessor::~OutputProcessor() = default;

std::optional<std::pair<std::string, size_t>> find_stop_string(const std::string &text, size_t num_new_chars,
                                                               const std::vector<std::string> &stops,
                                                               bool include_stop) {
  for (const std::string &stop : stops) {
    if (stop.empty()) continue;
    // A match must end inside the new text: start searching stop.size() - 1
    // bytes before it.
    const size_t back = num_new_chars + stop.size() - 1;
    const size_t start = back >= text.size() ? 0 : text.size() - back;
    const size_t pos = text.find(stop, start);
    if (pos == std::string::npos) continue;
    return std::make_pair(stop, include_stop ? std::min(text.size(), pos + stop.size()) : pos);
  }
  return std::nullopt;
}

void OutputProcessor::add_request(const std::string &request_id, std::string prompt,
                                  std::vector<int32_t> prompt_token_ids, const SamplingParams &params,
                                  const std::vector<std::string> &child_ids) {
  auto parent = std::make_unique<Parent>();
  parent->request_id = request_id;
  parent->prompt = std::move(prompt);
  parent->prompt_token_ids = std::move(prompt_token_ids);
  parent->params = params;
  for (const std::string &s : params.stop) parent->stop_buffer = std::max(parent->stop_buffer, s.size() - 1);
  if (params.include_stop_str_in_output) parent->stop_buffer = 0;  // vLLM streams everything then
  if (params.prompt_logprobs) {
    parent->prompt_logprobs.reserve(parent->prompt_token_ids.size());
    parent->prompt_logprobs.emplace_back();
  }
  for (size_t i = 0; i < child_ids.size(); ++i) {
    auto seq = std::make_unique<Sequence>();
    seq->parent = parent.get();
    seq->completion.index = static_cast<int32_t>(i);
    if (tokenizer_ != nullptr) {
      seq->detokenizer = std::make_unique<IncrementalDetokenizer>(*tokenizer_, params.skip_special_tokens,
                                                                  params.spaces_between_special_tokens);
    }
    child_to_sequence_[child_ids[i]] = seq.get();
    parent->sequences.push_back(std::move(seq));
  }
  requests_[request_id] = std::move(parent);
}

std::vector<std::string> OutputProcessor::child_ids(const std::string &request_id) const {
  std::vector<std::string> ids;
  if (requests_.find(request_id) == requests_.end()) return ids;
  for (const auto &[child, seq] : child_to_sequence_) {
    if (seq->parent->request_id == request_id && !seq->completion.finished()) ids.push_back(child);
  }
  return ids;
}

std::optional<std::string> OutputProcessor::update_sequence(Sequence &seq, const EngineCoreOutput &out) {
  CompletionOutput &c = seq.completion;
  const SamplingParams &p = seq.parent->params;
  c.token_ids.insert(c.token_ids.end(), out.new_token_ids.begin(), out.new_token_ids.end());
  c.logprobs.insert(c.logprobs.end(), out.new_logprobs.begin(), out.new_logprobs.end());
  std::optional<std::string> stop_found;
  if (seq.detokenizer) {
    // A sequence stopped by EOS or a stop token does not show that token's text
    // (vLLM), unless asked to.
    size_t num_ids = out.new_token_ids.size();
    const bool stop_token =
        out.finish_reason == FinishReason::kStop && !std::holds_alternative<std::string>(out.stop_reason);
    if (stop_token && !p.include_stop_str_in_output && num_ids > 0) --num_ids;
    for (size_t i = 0; i < num_ids; ++i) {
      const size_t len_before = seq.raw_text.size();
      seq.raw_text += seq.detokenizer->push(out.new_token_ids[i]);
      if (out.finished() && i + 1 == num_ids) seq.raw_text += seq.detokenizer->flush();
      // Stop strings count only once min_tokens outputs exist (as vLLM's
      // detokenizer).
      const int64_t num_outputs = static_cast<int64_t>(c.token_ids.size() - out.new_token_ids.size() + i + 1);
      if (!p.stop.empty() && num_outputs > p.min_tokens) {
        auto hit =
            find_stop_string(seq.raw_text, seq.raw_text.size() - len_before, p.stop, p.include_stop_str_in_output);
        if (hit) {
          seq.raw_text.resize(hit->second);
          stop_found = hit->first;
          c.token_ids.resize(c.token_ids.size() - out.new_token_ids.size() + i + 1);
          c.logprobs.resize(std::min(c.logprobs.size(), c.token_ids.size()));
          break;
        }
      }
    }
    if (out.finished() && num_ids == 0 && !stop_found) seq.raw_text += seq.detokenizer->flush();
    c.text = seq.raw_text;
  }
  if (stop_found) {
    c.finish_reason = FinishReason::kStop;
    c.stop_reason = *stop_found;
  } else if (out.finished()) {
    c.finish_reason = out.finish_reason;
    c.stop_reason = out.stop_reason;
  }
  return stop_found;
}

RequestOutput OutputProcessor::make_output(Parent &parent) {
  RequestOutput r;
  r.request_id = parent.request_id;
  r.prompt = parent.prompt;
  r.prompt_token_ids = parent.prompt_token_ids;
  r.num_cached_tokens = parent.num_cached_tokens;
  if (parent.prompt_logprobs.size() == parent.prompt_token_ids.size()) r.prompt_logprobs = parent.prompt_logprobs;
  r.finished = parent.num_finished == static_cast<int64_t>(parent.sequences.size());
  for (auto &seq : parent.sequences) {
    CompletionOutput c = seq->completion;
    const size_t hold = c.finished() ? 0 : parent.stop_buffer;
    const size_t visible = c.text.size() > hold ? c.text.size() - hold : 0;
    if (visible > seq->sent_text) {
      c.delta_text = c.text.substr(seq->sent_text, visible - seq->sent_text);
      seq->sent_text = visible;
    }
    c.delta_token_ids.assign(c.token_ids.begin() + static_cast<std::ptrdiff_t>(seq->sent_tokens), c.token_ids.end());
    seq->sent_tokens = c.token_ids.size();
    r.outputs.push_back(std::move(c));
  }
  return r;
}

OutputProcessor::Result OutputProcessor::process(const EngineCoreOutputs &outputs) {
  Result result;
  std::vector<Parent *> touched;
  for (const EngineCoreOutput &out : outputs.outputs) {
    auto it = child_to_sequence_.find(out.request_id);
    if (it == child_to_sequence_.end()) continue;
    Sequence &seq = *it->second;
    Parent &parent = *seq.parent;
    parent.num_cached_tokens = std::max(parent.num_cached_tokens, out.num_cached_tokens);
    if (!out.new_prompt_logprobs.empty() && seq.completion.index == 0) {
      parent.prompt_logprobs.insert(parent.prompt_logprobs.end(), out.new_prompt_logprobs.begin(),
                                    out.new_prompt_logprobs.end());
      CHECK_LE(parent.prompt_logprobs.size(), parent.prompt_token_ids.size()) << out.request_id;
    }
    // A prefill chunk that only scored prompt tokens changes nothing the caller sees yet.
    if (out.new_token_ids.empty() && !out.finished()) continue;
    std::optional<std::string> stop = update_sequence(seq, out);
    if (stop && !out.finished()) result.stop_string_finished.emplace_back(out.request_id, *stop);
    if (seq.completion.finished()) {
      ++parent.num_finished;
      child_to_sequence_.erase(it);
    }
    if (std::find(touched.begin(), touched.end(), &parent) == touched.end()) touched.push_back(&parent);
  }
  for (Parent *parent : touched) {
    result.request_outputs.push_back(make_output(*parent));
    if (result.request_outputs.back().finished) requests_.erase(parent->request_id);
  }
  return result;
}

}  // namespace llmserve
