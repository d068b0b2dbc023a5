// OutputProcessor against straightforward references: the text equals
// Tokenizer::decode of the ids, stop strings truncate it where
// std::string::find says (with and without include_stop_str_in_output), stop
// tokens hide their text, streamed deltas concatenate to the final text, and n
// sequences are gathered under one request.
#include "frontend/output_processor.h"

#include <gtest/gtest.h>

#include <random>

#include "test_models.h"

namespace llmserve {
namespace {

const Tokenizer &tokenizer() {
  static std::unique_ptr<Tokenizer> tok = [] {
    auto t = Tokenizer::from_dir(testing::testdata_dir() + "/tokenizers/tinyllama-1.1b-chat-v1.0");
    CHECK(t.ok()) << t.status().to_string();
    return std::move(*t);
  }();
  return *tok;
}

const std::string kText =
    "Once upon a time, a curious fox found a shiny key. "
    "The fox asked: \"what does it open?\" Nobody knew. "
    "Über café — naïve 🦊 emojis and\nnew lines.";

// Feeds `ids` one core output per chunk of 1..3 ids; the last one carries
// `finish` if given. Returns the outputs.
std::vector<RequestOutput> feed(OutputProcessor &proc, const std::string &child, const std::vector<int32_t> &ids,
                                std::optional<FinishReason> finish, StopReason reason,
                                std::vector<std::pair<std::string, std::string>> *stops = nullptr, uint32_t seed = 1) {
  std::mt19937 rng(seed);
  std::vector<RequestOutput> all;
  for (size_t i = 0; i < ids.size();) {
    const size_t n = std::min(ids.size() - i, static_cast<size_t>(1 + rng() % 3));
    EngineCoreOutputs outs;
    EngineCoreOutput &o = outs.outputs.emplace_back();
    o.request_id = child;
    o.new_token_ids.assign(ids.begin() + i, ids.begin() + i + n);
    i += n;
    if (i == ids.size()) {
      o.finish_reason = finish;
      o.stop_reason = reason;
    }
    auto r = proc.process(outs);
    if (stops) stops->insert(stops->end(), r.stop_string_finished.begin(), r.stop_string_finished.end());
    for (auto &x : r.request_outputs) all.push_back(std::move(x));
    if (!r.stop_string_finished.empty()) break;  // the core would finish it now
  }
  return all;
}

std::string concat_deltas(const std::vector<RequestOutput> &outs, int k = 0) {
  std::string s;
  for (const auto &o : outs) s += o.outputs[k].delta_text;
  return s;
}

TEST(OutputProcessor, TextEqualsDecodeAndDeltasConcatenate) {
  const auto ids = tokenizer().encode(kText, false);
  OutputProcessor proc(&tokenizer());
  SamplingParams p;
  proc.add_request("a", "", {1}, p, {"a"});
  const auto outs = feed(proc, "a", ids, FinishReason::kLength, {});
  ASSERT_FALSE(outs.empty());
  EXPECT_TRUE(outs.back().finished);
  EXPECT_EQ(outs.back().outputs[0].text, tokenizer().decode(ids, true));
  EXPECT_EQ(concat_deltas(outs), outs.back().outputs[0].text);
  EXPECT_EQ(outs.back().outputs[0].token_ids, ids);
  EXPECT_FALSE(proc.has_unfinished());
}

TEST(OutputProcessor, StopStringsTruncateLikeFind) {
  const auto ids = tokenizer().encode(kText, false);
  const std::string full = tokenizer().decode(ids, true);
  for (bool include : {false, true}) {
    for (const std::string stop : {"fox", "key. The", "naïve", "\n", "not there"}) {
      OutputProcessor proc(&tokenizer());
      SamplingParams p;
      p.stop = {"zzz-never", stop};
      p.include_stop_str_in_output = include;
      proc.add_request("a", "", {1}, p, {"a"});
      std::vector<std::pair<std::string, std::string>> stops;
      const auto outs = feed(proc, "a", ids, FinishReason::kLength, {}, &stops, 7);
      const size_t pos = full.find(stop);
      const CompletionOutput &c = outs.back().outputs[0];
      ASSERT_TRUE(outs.back().finished) << stop;
      if (pos == std::string::npos) {
        EXPECT_EQ(c.text, full);
        EXPECT_TRUE(stops.empty());
        EXPECT_EQ(c.finish_reason, FinishReason::kLength);
        continue;
      }
      EXPECT_EQ(c.text, full.substr(0, include ? pos + stop.size() : pos)) << stop;
      EXPECT_EQ(c.finish_reason, FinishReason::kStop);
      EXPECT_EQ(std::get<std::string>(c.stop_reason), stop);
      ASSERT_EQ(stops.size(), 1u);
      EXPECT_EQ(stops[0].second, stop);
      EXPECT_EQ(concat_deltas(outs), c.text) << stop;
      // Ids stop at the token that completed the stop string.
      EXPECT_LT(c.token_ids.size(), ids.size());
      EXPECT_NE(tokenizer().decode(c.token_ids, true).find(stop), std::string::npos);
    }
  }
}

TEST(OutputProcessor, StopTokenTextHiddenAndNGathered) {
  auto ids = tokenizer().encode("Hello there", false);
  const int32_t eos = *tokenizer().eos_token_id();
  const int32_t stop_id = ids.back();
  OutputProcessor proc(&tokenizer());
  SamplingParams p;
  p.n = 2;
  p.skip_special_tokens = false;
  proc.add_request("r", "Hi", {1, 2}, p, {"0_r", "1_r"});
  auto with_eos = ids;
  with_eos.push_back(eos);
  auto o1 = feed(proc, "0_r", with_eos, FinishReason::kStop, StopReason{});
  EXPECT_FALSE(o1.back().finished) << "the second sequence is still running";
  auto o2 = feed(proc, "1_r", ids, FinishReason::kStop, StopReason{stop_id});
  ASSERT_TRUE(o2.back().finished);
  const RequestOutput &r = o2.back();
  ASSERT_EQ(r.outputs.size(), 2u);
  EXPECT_EQ(r.outputs[0].text, tokenizer().decode(ids, false)) << "EOS text is not shown";
  EXPECT_EQ(r.outputs[0].token_ids, with_eos);
  EXPECT_EQ(r.outputs[1].text, tokenizer().decode(std::vector<int32_t>(ids.begin(), ids.end() - 1), false));
  EXPECT_EQ(std::get<int32_t>(r.outputs[1].stop_reason), stop_id);
  EXPECT_EQ(r.prompt, "Hi");
}

TEST(OutputProcessor, FindStopStringMatchesAcrossTheBoundary) {
  auto hit = find_stop_string("abcdef", 1, {"cdef"}, false);
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit->second, 2u);
  EXPECT_FALSE(find_stop_string("abcdef", 1, {"abc"}, false)) << "an old match was already checked";
  hit = find_stop_string("abcdef", 2, {"zz", "de"}, true);
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit->first, "de");
  EXPECT_EQ(hit->second, 5u);
}

}  // namespace
}  // namespace llmserve
