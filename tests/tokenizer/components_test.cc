// Pipeline pieces on small hand-written tokenizer.json files: BPE merges against a naive reference, byte
// fallback, unk fusing, added-token rules, normalizers, decoders, and clear errors for malformed files.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "tokenizer/normalizer.h"
#include "tokenizer/tokenizer.h"

namespace llmserve {
namespace {

using Json = nlohmann::json;

std::unique_ptr<Tokenizer> load(const Json& j) {
  auto t = Tokenizer::from_json(j.dump());
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  return t.ok() ? std::move(t).value() : nullptr;
}

Json bpe_json(const Json& vocab, const Json& merges) {
  return {{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}}};
}

// Reference BPE: repeatedly merge the lowest-rank adjacent pair, leftmost first.
std::vector<std::string> naive_bpe(const std::string& word,
                                   const std::map<std::pair<std::string, std::string>, int>& ranks) {
  std::vector<std::string> s;
  for (char c : word) s.push_back(std::string(1, c));
  for (;;) {
    int best = -1;
    size_t at = 0;
    for (size_t i = 0; i + 1 < s.size(); ++i) {
      auto it = ranks.find({s[i], s[i + 1]});
      if (it != ranks.end() && (best < 0 || it->second < best)) {
        best = it->second;
        at = i;
      }
    }
    if (best < 0) return s;
    s[at] += s[at + 1];
    s.erase(s.begin() + static_cast<long>(at) + 1);
  }
}

TEST(Bpe, MatchesNaiveReferenceOnRandomMerges) {
  std::mt19937 rng(42);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<std::string> tokens = {"a", "b", "c", "d"};
    std::map<std::pair<std::string, std::string>, int> ranks;
    Json merges = Json::array(), vocab = Json::object();
    for (int m = 0; m < 40; ++m) {
      std::string x = tokens[rng() % tokens.size()], y = tokens[rng() % tokens.size()];
      if (std::find(tokens.begin(), tokens.end(), x + y) != tokens.end()) continue;
      ranks[{x, y}] = static_cast<int>(merges.size());
      // Alternate both merge spellings: "x y" (old) and ["x", "y"] (new).
      merges.push_back(m % 2 ? Json(x + " " + y) : Json::array({x, y}));
      tokens.push_back(x + y);
    }
    for (size_t i = 0; i < tokens.size(); ++i) vocab[tokens[i]] = static_cast<int>(i);
    auto tok = load(bpe_json(vocab, merges));
    ASSERT_NE(tok, nullptr);
    for (int w = 0; w < 50; ++w) {
      std::string word;
      for (size_t n = 1 + rng() % 30; n > 0; --n) word.push_back("abcd"[rng() % 4]);
      std::vector<int32_t> expected;
      for (const auto& t : naive_bpe(word, ranks)) expected.push_back(vocab[t].get<int32_t>());
      EXPECT_EQ(tok->encode(word, false), expected) << word;
    }
  }
}

TEST(Bpe, ByteFallbackAndFusedUnk) {
  Json vocab = {{"<unk>", 0}, {"a", 1}, {"<0xC3>", 2}, {"<0xA9>", 3}};
  Json j = bpe_json(vocab, Json::array());
  j["model"]["byte_fallback"] = true;
  j["model"]["unk_token"] = "<unk>";
  j["model"]["fuse_unk"] = true;
  j["decoder"] = {{"type", "Sequence"}, {"decoders", {{{"type", "ByteFallback"}}, {{"type", "Fuse"}}}}};
  auto tok = load(j);
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->encode("a\u00e9a", false), (std::vector<int32_t>{1, 2, 3, 1}));  // é = C3 A9
  // "ü" = C3 BC: 0xBC has no token, so the character is unknown; consecutive unknowns fuse.
  EXPECT_EQ(tok->encode("a\u00fc\u00fca", false), (std::vector<int32_t>{1, 0, 1}));
  EXPECT_EQ(tok->decode(std::vector<int32_t>{1, 2, 3}), "a\u00e9");
  EXPECT_EQ(tok->decode(std::vector<int32_t>{1, 2, 1}), "a\uFFFDa");  // invalid byte run
  EXPECT_EQ(tok->decode(std::vector<int32_t>{1, -5, 99, 1}), "aa");   // unknown ids are skipped
}

TEST(Bpe, IgnoreMergesTakesWholeWord) {
  Json vocab = {{"a", 0}, {"b", 1}, {"ab", 2}, {"abb", 3}, {"bb", 4}};
  Json j = bpe_json(vocab, {"a b", "b b"});
  auto plain = load(j);
  EXPECT_EQ(plain->encode("abb", false), (std::vector<int32_t>{2, 1}));
  j["model"]["ignore_merges"] = true;
  auto ignoring = load(j);
  EXPECT_EQ(ignoring->encode("abb", false), (std::vector<int32_t>{3}));
}

Json char_tokenizer(const Json& added) {
  Json vocab = Json::object();
  std::string chars = " abcdefghijklmnopqrstuvwxyz<>|_";
  for (size_t i = 0; i < chars.size(); ++i) vocab[std::string(1, chars[i])] = static_cast<int>(i);
  Json j = bpe_json(vocab, Json::array());
  j["added_tokens"] = added;
  return j;
}

Json added_token(int id, const std::string& content, bool special, bool lstrip, bool rstrip, bool single_word) {
  return {{"id", id},         {"content", content},         {"special", special}, {"lstrip", lstrip},
          {"rstrip", rstrip}, {"single_word", single_word}, {"normalized", false}};
}

TEST(AddedTokens, StripAndSingleWordRules) {
  auto tok = load(char_tokenizer(
      {added_token(100, "<x>", true, true, true, false), added_token(101, "cat", false, false, false, true)}));
  ASSERT_NE(tok, nullptr);
  // lstrip/rstrip swallow the surrounding spaces.
  EXPECT_EQ(tok->encode("a  <x>  b", false), (std::vector<int32_t>{1, 100, 2}));
  // single_word: "cat" inside "bcats" is not the added token.
  EXPECT_EQ(tok->encode("cat bcats", false), (std::vector<int32_t>{101, 0, 2, 3, 1, 20, 19}));
  EXPECT_TRUE(tok->is_special(100));
  EXPECT_FALSE(tok->is_special(101));
  std::vector<int32_t> ids = {1, 100, 2};
  EXPECT_EQ(tok->decode(ids, /*skip_special_tokens=*/false), "a <x> b");  // no decoder: tokens joined by " "
  EXPECT_EQ(tok->decode(ids, /*skip_special_tokens=*/true), "a b");
  EXPECT_EQ(tok->token_to_id("<x>"), 100);
  EXPECT_EQ(tok->id_to_token(101), "cat");
  EXPECT_EQ(tok->vocab_size(), 102);
}

TEST(AddedTokens, LongestMatchWins) {
  auto tok = load(char_tokenizer(
      {added_token(100, "<|a|>", true, false, false, false), added_token(101, "<|a|>b", true, false, false, false)}));
  EXPECT_EQ(tok->encode("<|a|>bb<|a|>", false), (std::vector<int32_t>{101, 2, 100}));
}

std::string normalize(const Json& j, std::string text) {
  auto n = make_normalizer(j, "normalizer");
  EXPECT_TRUE(n.ok()) << n.status().to_string();
  if (n.ok()) (*n)->normalize(text);
  return text;
}

TEST(Normalizers, EachKind) {
  EXPECT_EQ(normalize({{"type", "NFKC"}}, "\uFB01\u2460"), "fi1");
  EXPECT_EQ(normalize({{"type", "Lowercase"}}, "ABC\u00c4"), "abc\u00e4");
  EXPECT_EQ(normalize({{"type", "Strip"}, {"strip_left", true}, {"strip_right", false}}, " \u3000a "), "a ");
  EXPECT_EQ(normalize({{"type", "Prepend"}, {"prepend", "\u2581"}}, "a"), "\u2581a");
  EXPECT_EQ(normalize({{"type", "Prepend"}, {"prepend", "\u2581"}}, ""), "");
  EXPECT_EQ(normalize({{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "_"}}, "a b  c"), "a_b__c");
  EXPECT_EQ(normalize({{"type", "Replace"}, {"pattern", {{"Regex", " {2,}"}}}, {"content", " "}}, "a b  c"), "a b c");
  EXPECT_EQ(normalize({{"type", "Sequence"}, {"normalizers", {{{"type", "NFD"}}, {{"type", "StripAccents"}}}}},
                      "\u00e9t\u00e9"),
            "ete");
  Json bert = {{"type", "BertNormalizer"},
               {"clean_text", true},
               {"handle_chinese_chars", true},
               {"strip_accents", nullptr},
               {"lowercase", true}};
  EXPECT_EQ(normalize(bert, "H\u00e9llo\t\u4e2d\x01!"), "hello  \u4e2d !");
}

Status load_error(const Json& j) {
  auto t = Tokenizer::from_json(j.dump());
  return t.ok() ? Status() : t.status();
}

TEST(Errors, MalformedFilesNameTheField) {
  auto bad_json = Tokenizer::from_json("{not json");
  ASSERT_FALSE(bad_json.ok());
  EXPECT_NE(bad_json.status().message().find("tokenizer.json"), std::string::npos);

  Status s = load_error(Json::object());
  EXPECT_NE(s.message().find("model"), std::string::npos) << s.message();

  s = load_error(bpe_json({{"a", 0}}, {"a b"}));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("model.merges[0]"), std::string::npos) << s.message();

  s = load_error(bpe_json({{"a", "zero"}}, Json::array()));
  EXPECT_NE(s.message().find("model.vocab.a"), std::string::npos) << s.message();

  Json j = bpe_json({{"a", 0}}, Json::array());
  j["normalizer"] = {{"type", "Frobnicate"}};
  s = load_error(j);
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
  EXPECT_NE(s.message().find("normalizer.type"), std::string::npos) << s.message();

  j = bpe_json({{"a", 0}}, Json::array());
  j["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers", {{{"type", "Split"}, {"pattern", {{"Regex", "(("}}}, {"behavior", "Isolated"}}}}};
  s = load_error(j);
  EXPECT_NE(s.message().find("pre_tokenizer.pretokenizers[0].pattern.Regex"), std::string::npos) << s.message();

  j = bpe_json({{"a", 0}}, Json::array());
  j["added_tokens"] = {{{"content", "x"}}};
  s = load_error(j);
  EXPECT_NE(s.message().find("added_tokens[0].id"), std::string::npos) << s.message();

  auto missing = Tokenizer::from_dir("/nonexistent/dir");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace llmserve
