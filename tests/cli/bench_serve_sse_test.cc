// SseParser: random event streams, serialised with every line-ending style, fed in random pieces (down to one
// byte, so every split of "\r\n", of "data:" and of a UTF-8 sequence happens) must give back exactly the events.
#include "cli/bench_serve_sse.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace llmserve::cli {
namespace {

std::vector<std::string> feed_all(SseParser& p, const std::string& text, std::mt19937& rng, size_t max_piece) {
  std::vector<std::string> got;
  std::uniform_int_distribution<size_t> piece(1, max_piece);
  for (size_t i = 0; i < text.size();) {
    const size_t n = std::min(piece(rng), text.size() - i);
    for (std::string& e : p.feed(std::string_view(text).substr(i, n))) got.push_back(std::move(e));
    i += n;
  }
  for (std::string& e : p.finish()) got.push_back(std::move(e));
  return got;
}

TEST(SseParser, WholeEvents) {
  SseParser p;
  auto got = p.feed("data: {\"a\": 1}\n\ndata: [DONE]\n\n");
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0], "{\"a\": 1}");
  EXPECT_EQ(got[1], "[DONE]");
  EXPECT_TRUE(p.finish().empty());
}

TEST(SseParser, EventWaitsForItsBlankLine) {
  SseParser p;
  EXPECT_TRUE(p.feed("data: {\"text\": \"he").empty());
  EXPECT_TRUE(p.feed("llo\"}\n").empty());  // line complete, event not yet
  EXPECT_EQ(p.num_pending_bytes(), 0u);
  auto got = p.feed("\n");
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0], "{\"text\": \"hello\"}");
}

TEST(SseParser, CrLfSplitAcrossFeedsIsOneLineEnding) {
  SseParser p;
  EXPECT_TRUE(p.feed("data: x\r").empty());
  EXPECT_TRUE(p.feed("\n").empty());  // the \n completes "\r\n", it is not a blank line
  auto got = p.feed("\r\n");
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0], "x");
}

TEST(SseParser, CommentsFieldsAndMultiLineData) {
  SseParser p;
  auto got =
      p.feed(": ping\n\nevent: message\nid: 7\ndata:no-space\ndata:  two spaces\nretry: 10\n\n: only a comment\n\n");
  ASSERT_EQ(got.size(), 1u);  // comment-only and field-only events carry no data and are not dispatched
  EXPECT_EQ(got[0], "no-space\n two spaces");
}

TEST(SseParser, FinishDispatchesAnUnterminatedLastEvent) {
  SseParser p;
  EXPECT_TRUE(p.feed("data: [DONE]").empty());
  auto got = p.finish();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0], "[DONE]");
}

TEST(SseParser, EmptyDataLineIsAnEmptyEvent) {
  SseParser p;
  auto got = p.feed("data:\n\n");
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0], "");
}

TEST(SseParser, RandomStreamsInRandomPieces) {
  std::mt19937 rng(1234);
  const std::vector<std::string> eols = {"\n", "\r\n", "\r"};
  const std::string alphabet = "ab {}\":,[]0123456789\xc3\xa9\xe4\xb8\xad";  // JSON-ish bytes and UTF-8
  for (int trial = 0; trial < 300; ++trial) {
    std::string text;
    std::vector<std::string> expected;
    const int num_events = std::uniform_int_distribution<int>(1, 12)(rng);
    for (int e = 0; e < num_events; ++e) {
      const std::string& eol = eols[rng() % eols.size()];
      if (rng() % 4 == 0) text += ": keep-alive" + eol;
      if (rng() % 4 == 0) text += "event: chunk" + eol;
      std::string data;
      const int num_lines = std::uniform_int_distribution<int>(1, 3)(rng);
      for (int l = 0; l < num_lines; ++l) {
        std::string value;
        const int len = std::uniform_int_distribution<int>(0, 40)(rng);
        for (int c = 0; c < len; ++c) value += alphabet[rng() % alphabet.size()];
        // "data:x" and "data: x" both mean "x"; a value starting with a space needs the separating space.
        text += (rng() % 2 || (!value.empty() && value[0] == ' ') ? "data: " : "data:") + value + eol;
        data += (l ? "\n" : "") + value;
      }
      text += eol;
      expected.push_back(data);
    }
    SseParser p;
    const size_t max_piece = trial % 3 == 0 ? 1 : std::uniform_int_distribution<size_t>(2, 64)(rng);
    EXPECT_EQ(feed_all(p, text, rng, max_piece), expected) << "trial " << trial;
  }
}

}  // namespace
}  // namespace llmserve::cli
