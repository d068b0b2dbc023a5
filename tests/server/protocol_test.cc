// Protocol mapping: every request field reaches SamplingParams (or the request) with its value, and every bad
// value is InvalidArgument naming its field as the OpenAI `param`.
#include "server/protocol.h"

#include <gtest/gtest.h>

#include <random>

namespace llmserve::server {
namespace {

ProtocolLimits limits() {
  ProtocolLimits l;
  l.vocab_size = 1000;
  l.max_n = 16;
  return l;
}

StatusOr<CompletionRequest> completion(const std::string &json) {
  StatusOr<OJson> body = parse_json_object(json);
  if (!body.ok()) return body.status();
  return parse_completion_request(*body, SamplingParams{}, limits());
}

StatusOr<ChatRequest> chat(const std::string &json) {
  StatusOr<OJson> body = parse_json_object(json);
  if (!body.ok()) return body.status();
  return parse_chat_request(*body, SamplingParams{}, limits());
}

TEST(ProtocolTest, CompletionFieldsMapToSamplingParams) {
  auto r = completion(R"({"model": "m", "prompt": "hi", "n": 3, "temperature": 0.5, "top_p": 0.9, "top_k": 7,
      "min_p": 0.1, "seed": -5, "max_tokens": 9, "min_tokens": 2, "stop": ["a", "bc"], "stop_token_ids": [3, 4],
      "ignore_eos": true, "include_stop_str_in_output": true, "presence_penalty": 0.25, "frequency_penalty": -0.5,
      "repetition_penalty": 1.2, "logit_bias": {"5": -100, "17": 2.5}, "logprobs": 4, "skip_special_tokens": false,
      "spaces_between_special_tokens": false, "priority": -3, "echo": true, "stream": true,
      "stream_options": {"include_usage": true, "continuous_usage_stats": true}, "return_tokens_as_token_ids": true,
      "add_special_tokens": false, "best_of": 3, "user": null})");
  // echo + logprobs also scores the prompt (vLLM): prompt_logprobs = logprobs, without the prompt_logprobs field.
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->params.logprobs, 4);
  EXPECT_EQ(r->params.prompt_logprobs, 4);
  EXPECT_FALSE(r->prompt_logprobs_field);
  r = completion(R"({"model": "m", "prompt": "hi", "n": 3, "temperature": 0.5, "top_p": 0.9, "top_k": 7,
      "min_p": 0.1, "seed": -5, "max_tokens": 9, "min_tokens": 2, "stop": ["a", "bc"], "stop_token_ids": [3, 4],
      "ignore_eos": true, "include_stop_str_in_output": true, "presence_penalty": 0.25, "frequency_penalty": -0.5,
      "repetition_penalty": 1.2, "logit_bias": {"5": -100, "17": 2.5}, "skip_special_tokens": false,
      "spaces_between_special_tokens": false, "priority": -3, "echo": true, "stream": true,
      "stream_options": {"include_usage": true, "continuous_usage_stats": true}, "return_tokens_as_token_ids": true,
      "add_special_tokens": false, "best_of": 3, "user": null})");
  ASSERT_TRUE(r.ok()) << r.status().message();
  const SamplingParams &p = r->params;
  EXPECT_EQ(r->model, "m");
  ASSERT_EQ(r->prompts.size(), 1u);
  EXPECT_EQ(r->prompts[0].text, "hi");
  EXPECT_EQ(p.n, 3);
  EXPECT_DOUBLE_EQ(p.temperature, 0.5);
  EXPECT_DOUBLE_EQ(p.top_p, 0.9);
  EXPECT_EQ(p.top_k, 7);
  EXPECT_DOUBLE_EQ(p.min_p, 0.1);
  EXPECT_EQ(p.seed, -5);
  EXPECT_EQ(p.max_tokens, 9);
  EXPECT_EQ(p.min_tokens, 2);
  EXPECT_EQ(p.stop, (std::vector<std::string>{"a", "bc"}));
  EXPECT_EQ(p.stop_token_ids, (std::vector<int32_t>{3, 4}));
  EXPECT_TRUE(p.ignore_eos);
  EXPECT_TRUE(p.include_stop_str_in_output);
  EXPECT_DOUBLE_EQ(p.presence_penalty, 0.25);
  EXPECT_DOUBLE_EQ(p.frequency_penalty, -0.5);
  EXPECT_DOUBLE_EQ(p.repetition_penalty, 1.2);
  EXPECT_EQ(p.logit_bias, (std::vector<std::pair<int32_t, double>>{{5, -100.0}, {17, 2.5}}));
  EXPECT_FALSE(p.logprobs.has_value());
  EXPECT_FALSE(p.prompt_logprobs.has_value());
  EXPECT_FALSE(p.skip_special_tokens);
  EXPECT_FALSE(p.spaces_between_special_tokens);
  EXPECT_EQ(r->priority, -3);
  EXPECT_TRUE(r->echo);
  EXPECT_TRUE(r->stream);
  EXPECT_TRUE(r->include_usage);
  EXPECT_TRUE(r->continuous_usage_stats);
  EXPECT_TRUE(r->return_tokens_as_token_ids);
  EXPECT_EQ(r->add_special_tokens, false);
}

TEST(ProtocolTest, EchoWithLogprobsScoresThePrompt) {
  // An explicit prompt_logprobs above logprobs is kept (and shown); below it, logprobs wins.
  auto r = completion(R"({"prompt": "hi", "echo": true, "logprobs": 2, "prompt_logprobs": 6})");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->params.prompt_logprobs, 6);
  EXPECT_TRUE(r->prompt_logprobs_field);
  r = completion(R"({"prompt": "hi", "echo": true, "logprobs": 5, "prompt_logprobs": 1})");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->params.prompt_logprobs, 5);
  r = completion(R"({"prompt": "hi", "echo": false, "logprobs": 5})");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_FALSE(r->params.prompt_logprobs.has_value());
  // Too many alternatives is still refused, naming logprobs.
  r = completion(R"({"prompt": "hi", "echo": true, "logprobs": 21})");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(param_of(r.status().message()), "logprobs");
}

TEST(ProtocolTest, CompletionDefaultsAndNulls) {
  auto r = completion(R"({"prompt": "x", "max_tokens": null, "stop": null, "seed": null, "logprobs": 2})");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_FALSE(r->params.max_tokens.has_value());
  EXPECT_FALSE(r->params.seed.has_value());
  EXPECT_EQ(r->params.logprobs, 2);
  r = completion(R"({"prompt": "x"})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->params.max_tokens, 16);  // OpenAI's completions default
  EXPECT_EQ(r->params.n, 1);
  EXPECT_DOUBLE_EQ(r->params.temperature, 1.0);
  EXPECT_FALSE(r->stream);
  // Integral floats are accepted for integers (pydantic's lax mode).
  r = completion(R"({"prompt": "x", "max_tokens": 5.0})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->params.max_tokens, 5);
}

TEST(ProtocolTest, PromptForms) {
  auto r = completion(R"({"prompt": ["a", "b", "c"]})");
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->prompts.size(), 3u);
  EXPECT_EQ(r->prompts[2].text, "c");
  r = completion(R"({"prompt": [1, 2, 999]})");
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->prompts.size(), 1u);
  EXPECT_EQ(r->prompts[0].token_ids, (std::vector<int32_t>{1, 2, 999}));
  r = completion(R"({"prompt": [[1, 2], [3], [4, 5, 6]]})");
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->prompts.size(), 3u);
  EXPECT_EQ(r->prompts[1].token_ids, (std::vector<int32_t>{3}));
  EXPECT_EQ(r->prompts[2].token_ids, (std::vector<int32_t>{4, 5, 6}));
}

// A field the server does not act on is refused naming it, on both endpoints; null means "not set".
TEST(ProtocolTest, UnknownFieldsAreRefusedNotIgnored) {
  for (const char *json : {R"({"prompt": "hi", "user": "u1"})", R"({"prompt": "hi", "unknown_field": {"x": 1}})",
                           R"({"prompt": "hi", "metadata": {}})", R"({"prompt": "hi", "store": true})"}) {
    auto r = completion(json);
    ASSERT_FALSE(r.ok()) << json;
    EXPECT_NE(r.status().message().find("this server does not support this field"), std::string::npos) << json;
  }
  EXPECT_EQ(param_of(completion(R"({"prompt": "hi", "user": "u1"})").status().message()), "user");
  EXPECT_EQ(param_of(chat(R"({"messages": [{"role": "user", "content": "x"}], "parallel_tool_calls": true})")
                         .status()
                         .message()),
            "parallel_tool_calls");
  EXPECT_TRUE(completion(R"({"prompt": "hi", "user": null, "metadata": null})").ok());
  auto so = completion(R"({"prompt": "hi", "stream": true, "stream_options": {"include_obfuscation": true}})");
  ASSERT_FALSE(so.ok());
  EXPECT_EQ(param_of(so.status().message()), "stream_options");
}

TEST(ProtocolTest, ChatFieldsMapToTheRequest) {
  auto r = chat(R"({"model": "m", "messages": [{"role": "system", "content": "s"},
      {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
      {"role": "assistant", "content": "partial"}],
      "max_completion_tokens": 12, "max_tokens": 99, "logprobs": true, "top_logprobs": 3,
      "add_generation_prompt": false, "continue_final_message": true, "chat_template": "{{ 1 }}",
      "chat_template_kwargs": {"enable_thinking": false}, "tools": [{"type": "function", "function": {"name": "f"}}], "documents": [],
      "tool_choice": "none", "response_format": {"type": "text"}, "modalities": ["text"], "echo": true,
      "stream": false})");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->params.max_tokens, 12);  // max_completion_tokens wins
  EXPECT_TRUE(r->logprobs);
  EXPECT_EQ(r->params.logprobs, 3);
  EXPECT_FALSE(r->add_generation_prompt);
  EXPECT_TRUE(r->continue_final_message);
  EXPECT_EQ(r->chat_template, "{{ 1 }}");
  EXPECT_EQ(r->chat_template_kwargs["enable_thinking"], false);
  EXPECT_EQ(r->messages[1]["content"], "a\nb");  // text parts joined
  EXPECT_EQ(r->tools.size(), 1u);
  EXPECT_TRUE(r->echo);
  // Chat has no default max_tokens (until max_model_len) and logprobs=true alone means 0 alternatives.
  r = chat(R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true})");
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->params.max_tokens.has_value());
  EXPECT_EQ(r->params.logprobs, 0);
  EXPECT_TRUE(r->add_generation_prompt);
}

struct BadCase {
  const char *json;
  const char *param;  // expected param; "" = none
};

TEST(ProtocolTest, EveryBadCompletionValueNamesItsParam) {
  const BadCase cases[] = {
      {R"({})", "prompt"},
      {R"({"prompt": null})", "prompt"},
      {R"({"prompt": 5})", "prompt"},
      {R"({"prompt": []})", "prompt"},
      {R"({"prompt": [1, "a"]})", "prompt"},
      {R"({"prompt": [[1], "a", {}]})", "prompt"},
      {R"({"prompt": [-1]})", "prompt"},
      {R"({"prompt": [1000]})", "prompt"},
      {R"({"prompt": [[]]})", "prompt"},
      {R"({"prompt": [1.5]})", "prompt"},
      {R"({"prompt": "x", "model": 3})", "model"},
      {R"({"prompt": "x", "n": 0})", "n"},
      {R"({"prompt": "x", "n": 17})", "n"},
      {R"({"prompt": "x", "n": 100000000000})", "n"},
      {R"({"prompt": "x", "n": "2"})", "n"},
      {R"({"prompt": "x", "n": 1.5})", "n"},
      {R"({"prompt": "x", "n": true})", "n"},
      {R"({"prompt": "x", "best_of": 2})", "best_of"},
      {R"({"prompt": "x", "temperature": -0.1})", "temperature"},
      {R"({"prompt": "x", "temperature": "hot"})", "temperature"},
      {R"({"prompt": "x", "top_p": 0})", "top_p"},
      {R"({"prompt": "x", "top_p": 1.5})", "top_p"},
      {R"({"prompt": "x", "top_k": -2})", "top_k"},
      {R"({"prompt": "x", "top_k": 0.5})", "top_k"},
      {R"({"prompt": "x", "min_p": 2})", "min_p"},
      {R"({"prompt": "x", "seed": "1"})", "seed"},
      {R"({"prompt": "x", "seed": 18446744073709551615})", "seed"},
      {R"({"prompt": "x", "max_tokens": 0})", "max_tokens"},
      {R"({"prompt": "x", "max_tokens": -5})", "max_tokens"},
      {R"({"prompt": "x", "max_tokens": "5"})", "max_tokens"},
      {R"({"prompt": "x", "min_tokens": -1})", "min_tokens"},
      {R"({"prompt": "x", "max_tokens": 4, "min_tokens": 5})", "min_tokens"},
      {R"({"prompt": "x", "stop": 3})", "stop"},
      {R"({"prompt": "x", "stop": ["a", 3]})", "stop"},
      {R"({"prompt": "x", "stop": [""]})", "stop"},
      {R"({"prompt": "x", "stop_token_ids": 3})", "stop_token_ids"},
      {R"({"prompt": "x", "stop_token_ids": [-1]})", "stop_token_ids"},
      {R"({"prompt": "x", "stop_token_ids": [5000]})", "stop_token_ids"},
      {R"({"prompt": "x", "ignore_eos": "yes"})", "ignore_eos"},
      {R"({"prompt": "x", "include_stop_str_in_output": 1})", "include_stop_str_in_output"},
      {R"({"prompt": "x", "skip_special_tokens": "no"})", "skip_special_tokens"},
      {R"({"prompt": "x", "spaces_between_special_tokens": 0})", "spaces_between_special_tokens"},
      {R"({"prompt": "x", "presence_penalty": 3})", "presence_penalty"},
      {R"({"prompt": "x", "frequency_penalty": -2.5})", "frequency_penalty"},
      {R"({"prompt": "x", "repetition_penalty": 0})", "repetition_penalty"},
      {R"({"prompt": "x", "logit_bias": [1]})", "logit_bias"},
      {R"({"prompt": "x", "logit_bias": {"abc": 1}})", "logit_bias"},
      {R"({"prompt": "x", "logit_bias": {"1": "a"}})", "logit_bias"},
      {R"({"prompt": "x", "logit_bias": {"1": 101}})", "logit_bias"},
      {R"({"prompt": "x", "logit_bias": {"5000": 1}})", "logit_bias"},
      {R"({"prompt": "x", "logprobs": -1})", "logprobs"},
      {R"({"prompt": "x", "logprobs": 21})", "logprobs"},
      {R"({"prompt": "x", "logprobs": true})", "logprobs"},
      {R"({"prompt": "x", "prompt_logprobs": 50})", "prompt_logprobs"},
      {R"({"prompt": "x", "priority": 1e20})", "priority"},
      {R"({"prompt": "x", "stream": "true"})", "stream"},
      {R"({"prompt": "x", "echo": null, "stream_options": {"include_usage": true}})", "stream_options"},
      {R"({"prompt": "x", "stream": true, "stream_options": 1})", "stream_options"},
      {R"({"prompt": "x", "stream": true, "stream_options": {"include_usage": 1}})", "stream_options"},
      {R"({"prompt": "x", "return_tokens_as_token_ids": "y"})", "return_tokens_as_token_ids"},
      {R"({"prompt": "x", "add_special_tokens": 1})", "add_special_tokens"},
      {R"({"prompt": "x", "suffix": "s"})", "suffix"},
      {R"({"prompt": "x", "use_beam_search": true})", "use_beam_search"},
      {R"({"prompt": "x", "guided_json": 3})", "guided_json"},
      {R"({"prompt": "x", "response_format": {"type": "xml"}})", "response_format"},  // refused, not ignored
      {R"({"prompt": "x", "guided_regex": "a", "guided_choice": ["a"]})", "guided_choice"},
      {R"({"prompt": "x", "structured_outputs": {"regex": "a", "json": {}}})", "structured_outputs"},
      {R"({"prompt": "x", "structured_outputs": {"backend": "xgrammar"}})", "structured_outputs"},
      {R"({"prompt": "x", "response_format": {"type": "json_schema", "json_schema": {"schema": {}}}})",
       "response_format"},
  };
  for (const BadCase &c : cases) {
    auto r = completion(c.json);
    ASSERT_FALSE(r.ok()) << c.json;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << c.json;
    EXPECT_EQ(param_of(r.status().message()), c.param) << c.json << " -> " << r.status().message();
  }
}

TEST(ProtocolTest, EveryBadChatValueNamesItsParam) {
  const BadCase cases[] = {
      {R"({})", "messages"},
      {R"({"messages": "hi"})", "messages"},
      {R"({"messages": []})", "messages"},
      {R"({"messages": [1]})", "messages"},
      {R"({"messages": [{"content": "x"}]})", "messages"},
      {R"({"messages": [{"role": 1, "content": "x"}]})", "messages"},
      {R"({"messages": [{"role": "user", "content": 5}]})", "messages"},
      {R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", "messages"},
      {R"({"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 0})", "max_completion_tokens"},
      {R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": -1})", "max_tokens"},
      {R"({"messages": [{"role": "user", "content": "x"}], "logprobs": 1})", "logprobs"},
      {R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})", "top_logprobs"},
      {R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true, "top_logprobs": 21})", "top_logprobs"},
      {R"({"messages": [{"role": "user", "content": "x"}], "add_generation_prompt": "no"})", "add_generation_prompt"},
      {R"({"messages": [{"role": "user", "content": "x"}], "continue_final_message": true})", "continue_final_message"},
      {R"({"messages": [{"role": "user", "content": "x"}], "continue_final_message": true,
          "add_generation_prompt": false})",
       "continue_final_message"},
      {R"({"messages": [{"role": "user", "content": "x"}], "chat_template": 1})", "chat_template"},
      {R"({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": []})", "chat_template_kwargs"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": {}})", "tools"},
      {R"({"messages": [{"role": "user", "content": "x"}], "documents": "d"})", "documents"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "required"})", "tool_choice"},
      {R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_object", "x": 1}})",
       "response_format"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "required"})", "tool_choice"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {}}]})", "tools"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "sometimes",
          "tools": [{"type": "function", "function": {"name": "f"}}]})",
       "tool_choice"},
      // Tools that would need tool-call parsing (tool_choice absent or "auto"), the legacy function fields and
      // non-text modalities are refused, not ignored.
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]})", "tools"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}], "tool_choice": "auto"})",
       "tools"},
      {R"({"messages": [{"role": "user", "content": "x"}], "functions": [{"name": "f"}]})", "functions"},
      {R"({"messages": [{"role": "user", "content": "x"}], "function_call": "auto"})", "function_call"},
      {R"({"messages": [{"role": "user", "content": "x"}], "modalities": ["text", "audio"]})", "modalities"},
      {R"({"messages": [{"role": "user", "content": "x"}], "modalities": "text"})", "modalities"},
      {R"({"messages": [{"role": "user", "content": "x"}], "temperature": -1})", "temperature"},
      {R"({"messages": [{"role": "user", "content": "x"}], "n": 0})", "n"},
  };
  for (const BadCase &c : cases) {
    auto r = chat(c.json);
    ASSERT_FALSE(r.ok()) << c.json;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << c.json;
    EXPECT_EQ(param_of(r.status().message()), c.param) << c.json << " -> " << r.status().message();
  }
}

TEST(ProtocolTest, MalformedBodies) {
  for (const char *body : {"", "{", "[1, 2]", "\"x\"", "{\"prompt\": \"\xff\xfe\"}", "{\"a\": 1,}", "nul"}) {
    auto r = parse_json_object(body);
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << body;
  }
  // Deep nesting is a parse, not a crash.
  std::string deep(100000, '[');
  EXPECT_FALSE(parse_json_object(deep).ok());
}

// Random JSON values in random fields never crash the parser, and every rejection names a param.
TEST(ProtocolTest, RandomFieldValuesAreHandled) {
  std::mt19937 rng(7);
  const char *fields[] = {"n",          "temperature",      "top_p",      "top_k",          "min_p",
                          "seed",       "max_tokens",       "min_tokens", "stop",           "stop_token_ids",
                          "logit_bias", "logprobs",         "priority",   "stream",         "echo",
                          "ignore_eos", "presence_penalty", "prompt",     "stream_options", "prompt_logprobs"};
  const OJson values[] = {nullptr,
                          true,
                          0,
                          -1,
                          1,
                          7,
                          1e300,
                          -1e300,
                          0.5,
                          "s",
                          "",
                          OJson::array(),
                          OJson::array({1, 2}),
                          OJson::object(),
                          OJson{{"1", 1}},
                          1LL << 40};
  for (int i = 0; i < 3000; ++i) {
    OJson body = {{"prompt", "hello"}};
    for (int k = 0; k < 3; ++k) {
      body[fields[rng() % std::size(fields)]] = values[rng() % std::size(values)];
    }
    auto r = parse_completion_request(body, SamplingParams{}, limits());
    if (!r.ok()) {
      EXPECT_FALSE(param_of(r.status().message()).empty()) << body.dump() << " -> " << r.status().message();
    } else {
      EXPECT_TRUE(r->params.validate(1000).ok()) << body.dump();
    }
  }
}

TEST(ProtocolTest, ParamOf) {
  EXPECT_EQ(param_of("max_tokens must be at least 1"), "max_tokens");
  EXPECT_EQ(param_of("prompt: bad"), "prompt");
  EXPECT_EQ(param_of("The model `x` does not exist."), "");
  EXPECT_EQ(param_of("n"), "");
}

}  // namespace
}  // namespace llmserve::server
