// Tool-call parsers on the formats the models' own chat templates write: an assistant turn with tool calls is rendered
// by the real templates in ../shared/testdata/chat-templates (our ChatTemplate, checked against jinja2 elsewhere), the
// rendered reply is parsed back, and the calls must equal the ones rendered (name, arguments as JSON). Streaming: the
// same reply fed in chunks of every size 1..9 adds up to exactly the non-streamed parse (content and each call's
// name and arguments text). Plus plain replies, partial markers, malformed calls and the required / named forms.
#include "server/tool_parsers.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "tokenizer/chat_template/chat_template.h"

namespace llmserve::server {
namespace {

using OJson = nlohmann::ordered_json;

std::string template_path(const std::string &name) {
  const char *env = std::getenv("LLMSERVE_TESTDATA");
  return std::string(env ? env : "../shared/testdata") + "/chat-templates/llama.cpp/" + name;
}

std::string read_file(const std::string &path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The calls rendered into the assistant turn, in OpenAI's message form (arguments as objects, as the server hands
// them to templates).
OJson tool_calls(bool two) {
  OJson calls = OJson::array();
  calls.push_back({{"id", "call00001"},
                   {"type", "function"},
                   {"function",
                    {{"name", "get_weather"},
                     {"arguments", {{"city", "Paris \"the \\ city\""}, {"days", 3}, {"units", {"c", "f"}}}}}}});
  if (two) {
    calls.push_back({{"id", "call00002"},
                     {"type", "function"},
                     {"function", {{"name", "send_email"}, {"arguments", {{"to", "a@b.c"}, {"body", "héllo {x}"}}}}}});
  }
  return calls;
}

OJson tools_json() {
  return OJson::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "description": "Weather",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
                     "units": {"type": "array", "items": {"type": "string"}}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "send_email", "description": "Mail",
      "parameters": {"type": "object", "properties": {"to": {"type": "string"}, "body": {"type": "string"}}}}}])");
}

// The assistant reply the template renders for `calls`: the rendering with the turn minus the rendering that ends at
// the generation prompt, without the end-of-turn marker the model would stop on.
std::string rendered_reply(const std::string &template_name, const OJson &calls) {
  StatusOr<ChatTemplate> t = ChatTemplate::parse(read_file(template_path(template_name)));
  EXPECT_TRUE(t.ok()) << t.status().message();
  OJson messages = OJson::array({{{"role", "user"}, {"content", "What is the weather?"}}});
  OJson ctx = {{"messages", messages},
               {"tools", tools_json()},
               {"add_generation_prompt", true},
               {"bos_token", "<s>"},
               {"eos_token", "</s>"}};
  StatusOr<std::string> prefix = t->render(ctx);
  EXPECT_TRUE(prefix.ok()) << prefix.status().message();
  messages.push_back({{"role", "assistant"}, {"content", ""}, {"tool_calls", calls}});
  ctx["messages"] = messages;
  ctx["add_generation_prompt"] = false;
  StatusOr<std::string> full = t->render(ctx);
  EXPECT_TRUE(full.ok()) << full.status().message();
  EXPECT_EQ(full->substr(0, prefix->size()), *prefix) << template_name;
  std::string reply = full->substr(prefix->size());
  for (const char *eot : {"<|im_end|>", "<|eot_id|>", "<|eom_id|>", "</s>"}) {
    while (!reply.empty() && std::isspace(static_cast<unsigned char>(reply.back()))) reply.pop_back();
    if (reply.size() >= std::strlen(eot) &&
        reply.compare(reply.size() - std::strlen(eot), std::string::npos, eot) == 0) {
      reply.resize(reply.size() - std::strlen(eot));
    }
  }
  return reply;
}

// Streams `text` in chunks of `step` bytes; returns the content and the calls the deltas add up to.
ToolCallResult stream(const ToolCallParser &parser, const std::string &text, size_t step) {
  ToolCallStreamer streamer(parser);
  ToolCallResult out;
  auto apply = [&](const ToolCallStreamer::Delta &d) {
    out.content += d.content;
    for (const auto &c : d.calls) {
      if (c.first) {
        EXPECT_EQ(c.index, out.calls.size());
        EXPECT_EQ(c.id.rfind("call_", 0), 0u);
        out.calls.push_back({c.name, true, "", false});
      }
      EXPECT_LT(c.index, out.calls.size());
      out.calls[c.index].arguments += c.arguments;
    }
  };
  for (size_t end = step; end < text.size(); end += step)
    apply(streamer.update(std::string_view(text).substr(0, end), false));
  apply(streamer.update(text, true));
  return out;
}

std::unique_ptr<ToolCallParser> parser_named(const std::string &name) {
  StatusOr<std::unique_ptr<ToolCallParser>> p = make_tool_call_parser(name);
  EXPECT_TRUE(p.ok()) << name;
  return p.ok() ? std::move(*p) : nullptr;
}

void expect_calls(const ToolCallResult &got, const OJson &want, const std::string &what) {
  ASSERT_EQ(got.calls.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got.calls[i].name, want[i]["function"]["name"]) << what;
    EXPECT_EQ(nlohmann::json::parse(got.calls[i].arguments), nlohmann::json(want[i]["function"]["arguments"])) << what;
  }
}

void expect_streamed_equal(const ToolCallParser &parser, const std::string &text) {
  const ToolCallResult whole = parse_tool_calls(parser, text);
  for (size_t step = 1; step <= 9; ++step) {
    const ToolCallResult s = stream(parser, text, step);
    EXPECT_EQ(s.content, whole.content) << "step " << step << " text " << text;
    ASSERT_EQ(s.calls.size(), whole.calls.size()) << "step " << step << " text " << text;
    for (size_t i = 0; i < s.calls.size(); ++i) {
      EXPECT_EQ(s.calls[i].name, whole.calls[i].name);
      EXPECT_EQ(s.calls[i].arguments, whole.calls[i].arguments) << "step " << step;
    }
  }
}

struct TemplateCase {
  const char *file;
  const char *parser;
  bool two_calls;  // the template renders more than one call per turn
};

class TemplateFormats : public ::testing::TestWithParam<TemplateCase> {};

TEST_P(TemplateFormats, RenderedCallsParseBackAndStreamTheSame) {
  const TemplateCase &c = GetParam();
  if (!std::ifstream(template_path(c.file))) GTEST_SKIP() << "no test data: " << template_path(c.file);
  const OJson calls = tool_calls(c.two_calls);
  const std::string reply = rendered_reply(c.file, calls);
  StatusOr<std::unique_ptr<ToolCallParser>> parser = make_tool_call_parser(c.parser);
  ASSERT_TRUE(parser.ok());
  const ToolCallResult got = parse_tool_calls(**parser, reply);
  expect_calls(got, calls, std::string(c.file) + ": " + reply);
  // Content: nothing but whitespace (and Qwen3's empty reasoning block, which its template writes before the calls).
  std::string content = got.content;
  for (const std::string tag : {"<think>", "</think>"}) {
    if (const size_t at = content.find(tag); at != std::string::npos) content.erase(at, tag.size());
  }
  EXPECT_EQ(content.find_first_not_of(" \n"), std::string::npos) << "content '" << got.content << "'";
  expect_streamed_equal(**parser, reply);
  // Text the model wrote before the calls stays content (formats with a marker).
  if (std::string(c.parser) != "llama3_json") {
    const ToolCallResult with_text = parse_tool_calls(**parser, "Let me check. " + reply);
    EXPECT_EQ(with_text.content.substr(0, 14), "Let me check. ");
    expect_calls(with_text, calls, c.file);
    expect_streamed_equal(**parser, "Let me check. " + reply);
  }
}

INSTANTIATE_TEST_SUITE_P(
    ChatTemplates, TemplateFormats,
    ::testing::Values(TemplateCase{"Qwen-Qwen2.5-7B-Instruct.jinja", "hermes", true},
                      TemplateCase{"NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja", "hermes", true},
                      TemplateCase{"NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", "hermes", true},
                      TemplateCase{"Qwen-Qwen3-0.6B.jinja", "hermes", true},
                      TemplateCase{"meta-llama-Llama-3.1-8B-Instruct.jinja", "llama3_json", false},
                      TemplateCase{"meta-llama-Llama-3.2-3B-Instruct.jinja", "llama3_json", false},
                      TemplateCase{"mistralai-Mistral-Nemo-Instruct-2407.jinja", "mistral", true},
                      TemplateCase{"Mistral-Small-3.2-24B-Instruct-2506.jinja", "mistral", true}));

TEST(ToolParsers, PlainRepliesAreContent) {
  for (const char *name : {"hermes", "llama3_json", "mistral"}) {
    auto parser = parser_named(name);
    for (const std::string text : {"Hello there.", "The answer is 42 < 43 [x]", "", "  spaced  "}) {
      const ToolCallResult r = parse_tool_calls(*parser, text);
      EXPECT_TRUE(r.calls.empty()) << name;
      EXPECT_EQ(r.content, text) << name;
      expect_streamed_equal(*parser, text);
    }
  }
}

TEST(ToolParsers, PartialMarkersAreHeldBackThenReleased) {
  auto hermes = parser_named("hermes");
  EXPECT_EQ(hermes->parse("Hi <tool_", false).content, "Hi ");
  EXPECT_EQ(hermes->parse("Hi <tool_", true).content, "Hi <tool_");
  EXPECT_EQ(hermes->parse("Hi <tool_x", false).content, "Hi <tool_x");
  auto mistral = parser_named("mistral");
  EXPECT_EQ(mistral->parse("ok [TOOL", false).content, "ok ");
}

TEST(ToolParsers, MalformedCallsFallBackToContent) {
  auto hermes = parser_named("hermes");
  for (const std::string text : {"<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": }\n</tool_call>",
                                 "<tool_call>\n{\"arguments\": {}}\n</tool_call>",
                                 "<tool_call>\n{\"name\": \"f\", \"arguments\": [1]}\n</tool_call>",
                                 "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1"}) {
    const ToolCallResult r = parse_tool_calls(*hermes, text);
    EXPECT_TRUE(r.calls.empty()) << text;
    EXPECT_EQ(r.content, text);
    // Streamed: whatever was announced, the content adds up to the whole text at the end.
    EXPECT_EQ(stream(*hermes, text, 3).content, text);
  }
  auto llama = parser_named("llama3_json");
  EXPECT_TRUE(parse_tool_calls(*llama, "{\"name\": \"f\"} trailing").calls.empty());
  const ToolCallResult two = parse_tool_calls(*llama, "{\"name\": \"f\", \"parameters\": {}}; {\"name\": \"g\"}");
  ASSERT_EQ(two.calls.size(), 2u);
  EXPECT_EQ(two.calls[1].arguments, "{}");
  expect_streamed_equal(*llama, "<|python_tag|>{\"name\": \"f\", \"parameters\": {\"x\": [1, {\"y\": \"}\"}]}}");
}

TEST(ToolParsers, RequiredAndNamedForms) {
  auto required = make_required_tool_call_parser();
  const std::string text =
      R"([{"name":"get_weather","parameters":{"city":"Oslo","days":2}},{"name":"send_email","parameters":{}}])";
  const ToolCallResult r = parse_tool_calls(*required, text);
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[0].name, "get_weather");
  EXPECT_EQ(r.calls[0].arguments, R"({"city":"Oslo","days":2})");
  EXPECT_EQ(r.calls[1].arguments, "{}");
  EXPECT_EQ(r.content, "");
  expect_streamed_equal(*required, text);
  auto named = make_named_tool_call_parser("get_weather");
  const ToolCallResult n = parse_tool_calls(*named, R"({"city":"Oslo"})");
  ASSERT_EQ(n.calls.size(), 1u);
  EXPECT_EQ(n.calls[0].name, "get_weather");
  EXPECT_EQ(n.calls[0].arguments, R"({"city":"Oslo"})");
  expect_streamed_equal(*named, R"({"city":"Oslo","nested":{"a":[1,2]}})");
  EXPECT_TRUE(parse_tool_calls(*named, R"({"city":)").calls.empty());  // cut by max_tokens: not a call
}

TEST(ToolParsers, UnknownParserIsNamed) {
  StatusOr<std::unique_ptr<ToolCallParser>> p = make_tool_call_parser("pythonic");
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("hermes, llama3_json, mistral"), std::string::npos);
}

}  // namespace
}  // namespace llmserve::server
