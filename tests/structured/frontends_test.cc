// Front ends: EBNF syntax errors with line:column, regex errors and refusals, JSON-schema refusals naming keyword
// and path, UTF-8 range expansion vs brute force, and languages checked by membership (a grammar accepts exactly
// the strings it should).
#include <gtest/gtest.h>

#include <random>

#include "reference_recognizer.h"
#include "structured/ebnf_parser.h"
#include "structured/json_schema_to_grammar.h"
#include "structured/program.h"
#include "structured/regex_to_grammar.h"

namespace llmserve::structured {
namespace {

std::string error_of(const StatusOr<Grammar>& g) { return g.ok() ? "OK" : g.status().message(); }

TEST(Ebnf, SyntaxErrorsNameLineAndColumn) {
  EXPECT_EQ(error_of(parse_ebnf("root ::= \"a\"\nitem ::= [a-z\n")),
            "grammar syntax error at 2:10: '[' is never closed");
  EXPECT_EQ(error_of(parse_ebnf("root ::= (\"a\" | \"b\"\n")), "grammar syntax error at 1:10: '(' is never closed");
  EXPECT_EQ(error_of(parse_ebnf("root ::= \"a\" missing\n")),
            "grammar syntax error at 1:14: rule 'missing' is used but not defined");
  EXPECT_EQ(error_of(parse_ebnf("root = \"a\"")), "grammar syntax error at 1:6: expected '::=' after rule name 'root'");
  EXPECT_EQ(error_of(parse_ebnf("item ::= \"a\"")), "grammar has no rule named 'root' (the start rule)");
  EXPECT_EQ(error_of(parse_ebnf("root ::= \"a\"{3,1}")), "grammar syntax error at 1:13: repetition {m,n} with n < m");
  EXPECT_EQ(error_of(parse_ebnf("root ::= [^\\x00-\\U0010FFFF]")),
            "grammar syntax error at 1:10: character class matches nothing");
  EXPECT_EQ(error_of(parse_ebnf("root ::= \"a\" loop\nloop ::= \"b\" loop")),
            "rule 'root' can never finish: every alternative needs itself or another such rule again");
  EXPECT_EQ(error_of(parse_ebnf("root ::= \"\\q\"")), "grammar syntax error at 1:11: unknown escape \\q");
  EXPECT_EQ(error_of(parse_ebnf("root ::= \"a\"\nroot ::= \"b\"")),
            "grammar syntax error at 2:1: rule 'root' is defined twice");
  EXPECT_NE(error_of(parse_ebnf("root ::= root \"a\" | \"b\"")).find("left-recursive"), std::string::npos);
  EXPECT_NE(error_of(parse_ebnf("root ::= x | \"c\"\nx ::= \"\"? root \"a\"")).find("left-recursive"), std::string::npos);
}

// Accepts `s` from the start and can end there.
bool matches(const Grammar& g, const std::string& s) {
  auto p = lower_grammar(g);
  EXPECT_TRUE(p.ok());
  ReferenceRecognizer r(*p);
  return r.feed(s) && r.can_end();
}

TEST(Ebnf, Language) {
  auto g = parse_ebnf(R"~(
root ::= "x" num{2} | 'q' [^\x00-\x7F] | "\u00e9" .   # mixed quoting, escapes, any char
num ::= [0-9] )~");
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  EXPECT_TRUE(matches(*g, "x12"));
  EXPECT_FALSE(matches(*g, "x1"));
  EXPECT_FALSE(matches(*g, "x123"));
  EXPECT_TRUE(matches(*g, "q\xE2\x82\xAC"));
  EXPECT_FALSE(matches(*g, "qa"));
  EXPECT_TRUE(matches(*g, "\xC3\xA9\xF0\x9F\x98\x80"));
  EXPECT_FALSE(matches(*g, "\xC3\xA9\xC3"));
}

TEST(Regex, Language) {
  auto g = regex_to_grammar(R"~(^(?P<y>\d{4})-(?:0[1-9]|1[0-2])(T\d\d?)??[.,]\s*\w+[^\d\s]{0,2}$)~");
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  EXPECT_TRUE(matches(*g, "2024-12T5. abc"));
  EXPECT_TRUE(matches(*g, "2024-01,x_Y!"));
  EXPECT_FALSE(matches(*g, "2024-13,x"));
  EXPECT_FALSE(matches(*g, "2024-12T5. ab c"));
  auto lit = regex_to_grammar(R"~(a{,2}\{b{x)~");
  ASSERT_TRUE(lit.ok()) << lit.status().to_string();
  EXPECT_TRUE(matches(*lit, "aa{b{x"));
  EXPECT_TRUE(matches(*lit, "{b{x"));
}

TEST(Lowering, RefusesGrammarsTooLargeToExpand) {
  auto g = regex_to_grammar("((ab){1000}){3000}");
  ASSERT_TRUE(g.ok());
  auto p = lower_grammar(*g);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(p.status().message().find("grammar too large"), std::string::npos);
}

TEST(Regex, RefusesWhatItCannotGenerate) {
  EXPECT_EQ(error_of(regex_to_grammar("a(?=b)")), "regex error at offset 1: lookaround assertions are not supported");
  EXPECT_EQ(error_of(regex_to_grammar("a(?<!b)")), "regex error at offset 1: lookaround assertions are not supported");
  EXPECT_EQ(error_of(regex_to_grammar("(a)\\1")), "regex error at offset 3: backreferences are not supported");
  EXPECT_EQ(error_of(regex_to_grammar("(?i)a")), "regex error at offset 0: inline flags like (?i) are not supported");
  EXPECT_EQ(error_of(regex_to_grammar("a^b")),
            "regex error at offset 1: anchor ^ is only supported at the start of the pattern");
  EXPECT_EQ(error_of(regex_to_grammar("a$b")),
            "regex error at offset 1: anchor $ is only supported at the end of the pattern");
  EXPECT_EQ(error_of(regex_to_grammar("[a-")), "regex error at offset 0: unterminated character set");
  EXPECT_EQ(error_of(regex_to_grammar("(ab")), "regex error at offset 0: missing ), unterminated subpattern");
  EXPECT_EQ(error_of(regex_to_grammar("ab)")), "regex error at offset 2: unbalanced ')'");
  EXPECT_EQ(error_of(regex_to_grammar("*a")), "regex error at offset 0: nothing to repeat");
  EXPECT_EQ(error_of(regex_to_grammar("a**")), "regex error at offset 2: multiple repeat");
  EXPECT_EQ(error_of(regex_to_grammar("a*+")), "regex error at offset 2: possessive quantifiers are not supported");
  EXPECT_EQ(error_of(regex_to_grammar("a\\ud800")), "regex error at offset 1: surrogate code points are not supported");
  EXPECT_EQ(error_of(regex_to_grammar("\\bx")),
            "regex error at offset 0: word-boundary assertion \\b is not supported");
}

TEST(JsonSchema, RefusalsNameKeywordAndPath) {
  auto err = [](const char* schema) { return error_of(json_schema_to_grammar(schema, 0)); };
  EXPECT_EQ(err(R"~({"type":"object","properties":{"a":{"type":"integer","multipleOf":3}}})~"),
            "schema /properties/a/multipleOf: unsupported keyword 'multipleOf'");
  EXPECT_EQ(err(R"~({"type":"object","patternProperties":{}})~"),
            "schema /patternProperties: unsupported keyword 'patternProperties'");
  EXPECT_EQ(err(R"~({"type":"array","items":{"type":"string","format":"hostname-x"}})~"),
            "schema /items/format: unsupported format 'hostname-x' (supported: date, time, date-time, uuid, email, "
            "ipv4, hostname, uri)");
  EXPECT_EQ(err(R"~({"type":"object","properties":{"a":{"type":"string"}},"required":["b"]})~"),
            "schema /required: required property 'b' is not declared in `properties`");
  EXPECT_EQ(err(R"~({"$ref":"#/$defs/missing"})~"), "schema /$ref: reference '#/$defs/missing' does not resolve");
  EXPECT_EQ(err(R"~({"type":"string","pattern":"a(?=b)"})~"),
            "schema /pattern: regex error at offset 1: lookaround assertions are not supported");
  EXPECT_EQ(err(R"~({"type":"number","minimum":0.5})~"),
            "schema /minimum: `minimum` must be an integer for a `number` (fractional bounds are not supported)");
  EXPECT_EQ(err(R"~({"type":"integer","minimum":5,"maximum":1})~"), "schema /: minimum above maximum: no number fits");
  EXPECT_EQ(err(R"~({"type":"widget"})~"), "schema /type: unknown type 'widget'");
  EXPECT_EQ(err(R"~({"allOf":[{"type":"string"},{"maxLength":2}]})~"),
            "schema /allOf: `allOf` is supported with exactly one subschema");
  EXPECT_EQ(err("{not json"), "schema is not valid JSON");
  EXPECT_EQ(err("false"), "schema /: the schema `false` matches nothing");
}

TEST(JsonSchema, Language) {
  auto g = json_schema_to_grammar(R"~({
    "type": "object",
    "properties": {"a": {"type": "integer", "exclusiveMinimum": -3, "maximum": 250},
                   "b": {"type": ["string", "null"], "maxLength": 2},
                   "c": {"type": "number", "minimum": -2, "maximum": 3}},
    "required": ["b"], "additionalProperties": false})~",
                                  0);
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  for (const char* ok : {R"~({"b":null})~", R"~({"a":-2,"b":"xy"})~", R"~({"a":250,"b":"","c":2.999})~",
                         R"~({"b":"\n","c":-1.5})~", R"~({"a":0,"b":null,"c":3})~", R"~({"b":null,"c":-2})~"}) {
    EXPECT_TRUE(matches(*g, ok)) << ok;
  }
  for (const char* bad : {R"~({"a":-3,"b":null})~", R"~({"a":251,"b":null})~", R"~({"a":1})~", R"~({"b":"xyz"})~",
                          R"~({"b":null,"a":1})~", R"~({"b":null,"c":3.5})~", R"~({"b":null,"c":-2.5})~",
                          R"~({"a":01,"b":null})~", R"~({"b": null})~"}) {
    EXPECT_FALSE(matches(*g, bad)) << bad;
  }
  auto extra = json_schema_to_grammar(
      R"~({"type":"object","properties":{"ab":{"type":"integer"},"\"":{"type":"null"}},"additionalProperties":{"type":"boolean"}})~",
      0);
  ASSERT_TRUE(extra.ok()) << extra.status().to_string();
  for (const char* ok :
       {R"~({})~", R"~({"ab":1,"a":true,"abc":false,"":true,"b":true})~", R"~({"\"":null,"x":true})~"}) {
    EXPECT_TRUE(matches(*extra, ok)) << ok;
  }
  for (const char* bad :
       {R"~({"ab":true})~", R"~({"ab":1,"ab":true})~", R"~({"x":true,"ab":1})~", R"~({"a\u0062":true})~"}) {
    EXPECT_FALSE(matches(*extra, bad)) << bad;
  }
  auto ws = json_schema_to_grammar(R"~({"type":"array","items":{"type":"boolean"},"minItems":1})~", 2);
  ASSERT_TRUE(ws.ok());
  EXPECT_TRUE(matches(*ws, "[ true,\n false]"));
  EXPECT_FALSE(matches(*ws, "[   true]"));
  EXPECT_FALSE(matches(*ws, "[]"));
}

TEST(Utf8, SequencesEncodeExactlyTheRanges) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<std::pair<uint32_t, uint32_t>> ranges;
    for (int k = 0; k < 3; ++k) {
      uint32_t a = rng() % 0x110000, b = std::min<uint32_t>(0x10FFFF, a + rng() % (trial % 2 ? 300 : 70000));
      ranges.push_back({a, b});
    }
    bool negated = trial % 3 == 0;
    auto seqs = utf8_sequences(ranges, negated);
    for (int probe = 0; probe < 2000; ++probe) {
      uint32_t cp = probe < 1000 ? rng() % 0x110000 : ranges[probe % 3].first + (probe % 7) - 3;
      if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) continue;
      bool in = false;
      for (auto [lo, hi] : ranges) in |= cp >= lo && cp <= hi;
      in ^= negated;
      std::string enc;
      append_utf8(cp, enc);
      bool encoded = false;
      for (const auto& s : seqs) {
        if (s.size() != enc.size()) continue;
        bool all = true;
        for (size_t i = 0; i < s.size(); ++i) {
          all &= static_cast<uint8_t>(enc[i]) >= s[i].first && static_cast<uint8_t>(enc[i]) <= s[i].second;
        }
        encoded |= all;
      }
      ASSERT_EQ(encoded, in) << std::hex << cp;
    }
  }
}

}  // namespace
}  // namespace llmserve::structured
