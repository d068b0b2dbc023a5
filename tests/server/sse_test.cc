// SSE framing: events round-trip through a stream parser, payloads never carry raw newlines, invalid UTF-8
// cannot make the JSON dump throw.
#include "server/sse.h"

#include <gtest/gtest.h>

#include <random>

namespace llmserve::server {
namespace {

TEST(SseTest, EventsRoundTrip) {
  std::mt19937 rng(3);
  std::vector<nlohmann::ordered_json> sent;
  std::string stream;
  for (int i = 0; i < 200; ++i) {
    std::string text;
    const int len = static_cast<int>(rng() % 20);
    for (int k = 0; k < len; ++k) text += static_cast<char>(rng() % 128);  // includes \n, \r, quotes, NUL
    nlohmann::ordered_json j = {{"index", i}, {"text", text}, {"nested", {{"a", {1, 2, 3}}}}};
    sent.push_back(j);
    const std::string event = sse_event(j);
    ASSERT_EQ(event.rfind("data: ", 0), 0u);
    ASSERT_EQ(event.substr(event.size() - 2), "\n\n");
    ASSERT_EQ(event.find('\n'), event.size() - 2) << "raw newline inside the payload";
    stream += event;
  }
  stream += kSseDone;
  std::vector<std::string> payloads;
  ASSERT_TRUE(parse_sse_stream(stream, &payloads));
  ASSERT_EQ(payloads.size(), sent.size() + 1);
  for (size_t i = 0; i < sent.size(); ++i) EXPECT_EQ(nlohmann::ordered_json::parse(payloads[i]), sent[i]);
  EXPECT_EQ(payloads.back(), "[DONE]");
}

TEST(SseTest, InvalidUtf8IsReplacedNotThrown) {
  nlohmann::ordered_json j = {{"text", std::string("ok\xff\xfe", 4)}};
  std::string event;
  ASSERT_NO_THROW(event = sse_event(j));
  std::vector<std::string> payloads;
  ASSERT_TRUE(parse_sse_stream(event, &payloads));
  EXPECT_EQ(nlohmann::json::parse(payloads[0])["text"], "ok\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST(SseTest, MalformedStreamsAreRejected) {
  std::vector<std::string> payloads;
  EXPECT_FALSE(parse_sse_stream("data: {}\n", &payloads));
  EXPECT_FALSE(parse_sse_stream("event: x\n\n", &payloads));
  EXPECT_FALSE(parse_sse_stream("data: a\nb\n\n", &payloads));
  EXPECT_TRUE(parse_sse_stream("", &payloads));
  EXPECT_TRUE(payloads.empty());
}

}  // namespace
}  // namespace llmserve::server
