// Mutation fuzzing of the chat-template parser and interpreter: thousands of random edits of the real templates in
// the shared test data must parse-or-fail and render-or-fail cleanly (run under ASan+UBSan by scripts/test).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "tokenizer/chat_template/chat_template.h"

namespace llmserve {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> load_templates() {
  const char* env = std::getenv("LLMSERVE_TESTDATA");
  fs::path root = fs::path(env ? env : "../shared/testdata") / "chat-templates";
  std::vector<std::string> out;
  std::error_code ec;
  for (const char* sub : {"llama.cpp", "mistral.rs"}) {
    for (const auto& entry : fs::directory_iterator(root / sub, ec)) {
      if (entry.path().extension() != ".jinja") continue;
      std::ifstream in(entry.path(), std::ios::binary);
      std::stringstream ss;
      ss << in.rdbuf();
      out.push_back(ss.str());
    }
  }
  std::sort(out.begin(), out.end());  // directory order is unspecified; keep runs reproducible
  return out;
}

// Jinja fragments that make mutations reach deeper into the grammar than random bytes do.
const std::vector<std::string> kFragments = {"{%",
                                             "%}",
                                             "{{",
                                             "}}",
                                             "{#",
                                             "#}",
                                             "{%-",
                                             "-%}",
                                             "{% endif %}",
                                             "{% endfor %}",
                                             "{% else %}",
                                             "{% if x %}",
                                             "{% for a in b %}",
                                             "{% set x = 1 %}",
                                             "{% macro m(a) %}",
                                             "{% endmacro %}",
                                             "|tojson",
                                             "|trim",
                                             "|length",
                                             " is defined",
                                             " is not none",
                                             "[::-1]",
                                             "(",
                                             ")",
                                             "[",
                                             "]",
                                             "{",
                                             "}",
                                             "'",
                                             "\"",
                                             "\\",
                                             ".",
                                             ",",
                                             ":",
                                             "~",
                                             "+",
                                             "-",
                                             "*",
                                             "**",
                                             "//",
                                             "%",
                                             "not ",
                                             " and ",
                                             " or ",
                                             " in ",
                                             "loop.index",
                                             "ns.x",
                                             "namespace(",
                                             "range(99999)",
                                             "{% break %}",
                                             "{% continue %}",
                                             "caller()",
                                             "{% call m() %}",
                                             "{% endcall %}",
                                             "{% raw %}",
                                             "{% endraw %}",
                                             "\n",
                                             " ",
                                             "é",
                                             "\xff",
                                             "\xe2\x82",
                                             "0",
                                             "1e999",
                                             "9223372036854775807",
                                             "-9223372036854775808"};

std::string mutate(std::string s, std::mt19937_64& rng) {
  auto pick = [&](size_t n) { return n == 0 ? size_t{0} : static_cast<size_t>(rng() % n); };
  int num_edits = 1 + static_cast<int>(rng() % 4);
  for (int e = 0; e < num_edits; ++e) {
    size_t pos = pick(s.size() + 1);
    switch (rng() % 6) {
      case 0:
        s.erase(pos, 1 + pick(16));
        break;  // delete a few bytes
      case 1:
        s.insert(pos, kFragments[pick(kFragments.size())]);
        break;  // insert a fragment
      case 2:
        s.insert(pos, 1, static_cast<char>(rng() & 0xFF));
        break;  // insert a random byte
      case 3:
        if (pos < s.size()) s[pos] = static_cast<char>(rng() & 0xFF);
        break;   // flip a byte
      case 4: {  // duplicate a span
        size_t len = pick(64);
        s.insert(pos, s.substr(pick(s.size() + 1), len));
        break;
      }
      default: {  // swap two spans
        size_t a = pick(s.size() + 1), b = pick(s.size() + 1), len = pick(32);
        std::string x = s.substr(a, len), y = s.substr(b, len);
        if (a < s.size()) s.replace(a, x.size(), y);
        break;
      }
    }
  }
  return s;
}

nlohmann::ordered_json fuzz_context() {
  return nlohmann::ordered_json::parse(R"({
    "messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi ✓"},
                 {"role": "assistant", "content": "", "tool_calls": [{"type": "function",
                   "function": {"name": "f", "arguments": {"a": 1}}}]},
                 {"role": "tool", "content": "42"}, {"role": "user", "content": [{"type": "text", "text": "p"}]}],
    "tools": [{"type": "function", "function": {"name": "f", "description": "d",
               "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}}}}],
    "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>"
  })");
}

TEST(ChatTemplateFuzzTest, RandomMutationsOfRealTemplatesNeverCrash) {
  std::vector<std::string> templates = load_templates();
  ASSERT_GE(templates.size(), 50u) << "chat templates not found; set LLMSERVE_TESTDATA";
  std::mt19937_64 rng(20240726);
  ChatTemplateOptions options;
  options.max_loop_iterations = 20000;
  options.max_output_bytes = 1 << 20;
  options.now = std::tm{};
  auto context = fuzz_context();
  int num_parsed = 0, num_rendered = 0;
  const int kNumCases = 2000;  // plus 2000 random-byte templates below; ~5 s under ASan
  for (int i = 0; i < kNumCases; ++i) {
    std::string source = mutate(templates[i % templates.size()], rng);
    auto t = ChatTemplate::parse(source);
    if (!t.ok()) {
      EXPECT_EQ(t.status().message().rfind("line ", 0), 0u) << t.status().message();
      continue;
    }
    ++num_parsed;
    auto r = t->render(context, options);
    if (r.ok()) {
      ++num_rendered;
    } else {
      EXPECT_EQ(r.status().message().rfind("line ", 0), 0u) << r.status().message();
    }
  }
  // The mutations must exercise both outcomes, or the fuzzer is not reaching the interpreter.
  EXPECT_GT(num_parsed, kNumCases / 10);
  EXPECT_GT(num_rendered, kNumCases / 20);
  std::printf("fuzz: %d cases, %d parsed, %d rendered\n", kNumCases, num_parsed, num_rendered);
}

TEST(ChatTemplateFuzzTest, RandomBytesNeverCrash) {
  std::mt19937_64 rng(7);
  for (int i = 0; i < 2000; ++i) {
    std::string s;
    size_t n = rng() % 64;
    for (size_t k = 0; k < n; ++k) {
      s += (rng() % 3 == 0) ? kFragments[rng() % kFragments.size()] : std::string(1, static_cast<char>(rng() & 0xFF));
    }
    auto t = ChatTemplate::parse(s);
    if (t.ok()) (void)t->render(fuzz_context());
  }
}

}  // namespace
}  // namespace llmserve
