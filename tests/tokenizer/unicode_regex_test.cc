// UTF-8 helpers (lossy decoding by maximal subparts, as Python's errors="replace" and Rust's from_utf8_lossy)
// and the PCRE2 wrapper's Oniguruma-compatible classes.
#include <gtest/gtest.h>

#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"

namespace llmserve {
namespace {

TEST(Utf8, LossyReplacesMaximalSubparts) {
  // Expected values computed with Python: bytes.decode("utf-8", "replace").
  EXPECT_EQ(unicode::utf8_lossy("a\xE2\x82"), "a\uFFFD");
  EXPECT_EQ(unicode::utf8_lossy("\xF0\x80\x80"), "\uFFFD\uFFFD\uFFFD");
  EXPECT_EQ(unicode::utf8_lossy("a\xED\xA0\x80"
                                "b"),
            "a\uFFFD\uFFFD\uFFFDb");
  EXPECT_EQ(unicode::utf8_lossy("\xE2\x82\xACx\xC3"), "\u20ACx\uFFFD");
  EXPECT_EQ(unicode::utf8_lossy("\xE2\x82"
                                "A"),
            "\uFFFD"
            "A");
  EXPECT_EQ(unicode::utf8_lossy("\xFF\xC0\xAF"), "\uFFFD\uFFFD\uFFFD");
  EXPECT_EQ(unicode::utf8_lossy("\xF4\x90\x80\x80"), "\uFFFD\uFFFD\uFFFD\uFFFD");
}

TEST(Utf8, ValidityAndCompletePrefix) {
  EXPECT_TRUE(unicode::is_valid_utf8("h\u00e9\u20ac\U0001F999"));
  EXPECT_FALSE(unicode::is_valid_utf8("\xC3"));
  EXPECT_FALSE(unicode::is_valid_utf8("\xED\xA0\x80"));  // surrogate
  EXPECT_EQ(unicode::complete_utf8_prefix("ab\xE2\x82"), 2u);
  EXPECT_EQ(unicode::complete_utf8_prefix("ab\xE2\x82\xAC"), 5u);
  EXPECT_EQ(unicode::complete_utf8_prefix("\xFF"
                                          "a"),
            2u);  // invalid bytes are not "incomplete"
}

TEST(Unicode, NormalizeAndLowercase) {
  EXPECT_EQ(unicode::normalize("\uFB01", unicode::NormalForm::kNFKC), "fi");
  EXPECT_EQ(unicode::normalize("e\u0301", unicode::NormalForm::kNFC), "\u00e9");
  EXPECT_EQ(unicode::normalize("\u00e9", unicode::NormalForm::kNFD), "e\u0301");
  EXPECT_EQ(unicode::normalize("\u2460", unicode::NormalForm::kNFKD), "1");
  EXPECT_EQ(unicode::to_lower("ÄBC\u0130\u03a3"), "äbci\u0307\u03c3");  // no final-sigma context rule
}

TEST(Unicode, CharClasses) {
  EXPECT_TRUE(unicode::is_whitespace(0x3000));
  EXPECT_FALSE(unicode::is_whitespace(0x180E));  // not White_Space since Unicode 6.3
  EXPECT_FALSE(unicode::is_whitespace(0x200B));
  EXPECT_TRUE(unicode::is_punctuation(U'\u00bf'));
  EXPECT_TRUE(unicode::is_punctuation(U'$'));  // ASCII punctuation per Rust
  EXPECT_TRUE(unicode::is_word_char(0x200D));  // Join_Control is \w in Rust regex
  EXPECT_TRUE(unicode::is_numeric(U'\u00bd'));
  EXPECT_TRUE(unicode::is_chinese_char(U'\u4e2d'));
}

std::vector<std::pair<size_t, size_t>> matches(const std::string& pattern, const std::string& text) {
  auto re = Regex::compile(pattern);
  EXPECT_TRUE(re.ok()) << re.status().to_string();
  return (*re)->find_all(text);
}

TEST(Regex, OnigurumaShorthandClasses) {
  // U+180E is \s for PCRE2 but not for Oniguruma; U+200D is \w for Oniguruma.
  EXPECT_TRUE(matches(R"(\s)", "\u180E").empty());
  EXPECT_EQ(matches(R"(\s+)", "a\u3000\u2003b").size(), 1u);
  EXPECT_EQ(matches(R"(\w+)", "a\u200Db").size(), 1u);
  EXPECT_EQ(matches(R"([^\s\p{L}])", "a b!").size(), 1u);
  EXPECT_EQ(translate_oniguruma_pattern(R"(x\S)"),
            std::string("x[^") + std::string("\\x{9}-\\x{d}\\x{20}\\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}"
                                             "\\x{2029}\\x{202f}\\x{205f}\\x{3000}]"));
}

TEST(Regex, LookaheadAndCaseInsensitiveGroups) {
  auto m = matches(R"(\s+(?!\S)|\s+)", "a   b");
  ASSERT_EQ(m.size(), 2u);  // "  " then " " before b
  EXPECT_EQ(m[0], std::make_pair(size_t{1}, size_t{3}));
  EXPECT_EQ(matches(R"((?i:'s|'t))", "IT'S it'T").size(), 2u);
}

TEST(Regex, BadPatternIsInvalidArgument) {
  auto re = Regex::compile("(unclosed");
  ASSERT_FALSE(re.ok());
  EXPECT_EQ(re.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(re.status().message().find("(unclosed"), std::string::npos);
}

}  // namespace
}  // namespace llmserve
