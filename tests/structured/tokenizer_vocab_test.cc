// Token bytes from real tokenizers (byte-level BPE: phi-2; SentencePiece with byte fallback: TinyLlama; tiktoken:
// Llama 3) checked against the tokenizer's own decode(), and masks on a real vocabulary vs brute force.
#include <gtest/gtest.h>

#include <random>

#include "reference_recognizer.h"
#include "structured/compiled_grammar.h"
#include "structured/grammar_matcher.h"
#include "tokenizer/tokenizer.h"

namespace llmserve::structured {
namespace {

std::string testdata() {
  const char* env = std::getenv("LLMSERVE_TESTDATA");
  return env != nullptr ? env : "../shared/testdata";
}

std::unique_ptr<Tokenizer> load(const std::string& name) {
  auto t = Tokenizer::from_dir(testdata() + "/tokenizers/" + name);
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  return t.ok() ? std::move(t).value() : nullptr;
}

bool valid_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || i + len > s.size()) return false;
    for (int k = 1; k < len; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) >> 6) != 2) return false;
    }
    i += len;
  }
  return true;
}

// Every token whose bytes are valid UTF-8 decodes, after an anchor token, to exactly those bytes; special and added
// tokens have none; byte tokens give their byte.
void check_vocab(const std::string& name, int min_multibyte_pieces) {
  auto tok = load(name);
  ASSERT_NE(tok, nullptr);
  auto v = Vocabulary::from_tokenizer(*tok);
  ASSERT_TRUE(v.ok()) << v.status().to_string();
  int32_t anchor = *tok->token_to_id("a");
  std::string anchor_text = tok->decode(std::vector<int32_t>{anchor});
  int partial = 0;
  for (int32_t id = 0; id < tok->vocab_size(); ++id) {
    const auto& b = v->token_bytes[id];
    if (tok->is_special(id) || tok->is_added(id)) {
      EXPECT_FALSE(b.has_value()) << name << " token " << id;
      continue;
    }
    ASSERT_TRUE(b.has_value()) << name << " token " << id << " " << *tok->id_to_token(id);
    if (!valid_utf8(*b)) {
      ++partial;
      continue;
    }
    ASSERT_EQ(tok->decode(std::vector<int32_t>{anchor, id}), anchor_text + *b) << name << " token " << id;
  }
  EXPECT_GE(partial, min_multibyte_pieces) << name << ": tokens holding part of a UTF-8 character";
}

TEST(Vocabulary, ByteLevelBpe) { check_vocab("phi-2", 100); }
TEST(Vocabulary, SentencePieceByteFallback) { check_vocab("tinyllama-1.1b-chat-v1.0", 128); }

TEST(Vocabulary, Tiktoken) {
  auto v = Vocabulary::from_tiktoken_file(testdata() + "/tokenizers/llama3/tokenizer.model", 256);
  ASSERT_TRUE(v.ok()) << v.status().to_string();
  EXPECT_EQ(v->token_bytes.size(), 128256u);
  EXPECT_EQ(v->token_bytes[0], "!");
  EXPECT_EQ(v->token_bytes[1], "\"");
  EXPECT_FALSE(v->token_bytes[128000].has_value());
  EXPECT_FALSE(Vocabulary::from_tiktoken_file("/nonexistent", 0).ok());
}

// Masks on a real vocabulary (32k SentencePiece, 50k byte-level) at random states of random walks vs brute force
// over every token.
class RealVocabulary : public ::testing::TestWithParam<const char*> {};

TEST_P(RealVocabulary, MasksMatchBruteForce) {
  auto tok = load(GetParam());
  ASSERT_NE(tok, nullptr);
  int32_t eos = *tok->eos_token_id();
  auto compiler = GrammarCompiler::create(*tok, tok->vocab_size() + 7, {eos});
  ASSERT_TRUE(compiler.ok()) << compiler.status().to_string();
  auto vocab = Vocabulary::from_tokenizer(*tok);
  ASSERT_TRUE(vocab.ok());
  std::mt19937 rng(11);
  const std::vector<ConstraintSpec> specs = {
      {ConstraintSpec::Kind::kJsonObject, ""},
      {ConstraintSpec::Kind::kJsonSchema,
       R"~({"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer","minimum":1,"maximum":14},)~"
       R"~("unit":{"enum":["celsius","fahrenheit"]}},"required":["city","unit"],"additionalProperties":false})~"},
      {ConstraintSpec::Kind::kRegex, R"~((\w+ ){1,3}[é€]?\d+)~"}};
  for (const auto& spec : specs) {
    auto g = (*compiler)->compile(spec);
    ASSERT_TRUE(g.ok()) << g.status().to_string();
    GrammarMatcher m(*g);
    std::string prefix;
    std::vector<uint32_t> mask(m.bitmask_words());
    for (int step = 0; step < 12 && !m.is_terminated(); ++step) {
      m.fill_next_token_bitmask(mask.data());
      std::vector<int32_t> allowed;
      if (step % 6 == 0) {  // brute force at a few states only: it feeds every token to a fresh recognizer
        ReferenceRecognizer ref((*g)->program());
        ASSERT_TRUE(ref.feed(prefix));
        for (int32_t t = 0; t < m.bitmask_words() * 32; ++t) {
          bool got = t < (*compiler)->vocab_size() && ((mask[t >> 5] >> (t & 31)) & 1);
          bool want = false;
          if (t == eos) {
            want = ref.can_end();
          } else if (t < static_cast<int32_t>(vocab->token_bytes.size()) && vocab->token_bytes[t]) {
            ReferenceRecognizer r2 = ref;
            want = r2.feed(*vocab->token_bytes[t]);
          }
          ASSERT_EQ(got, want) << "token " << t << " after '" << prefix << "'";
        }
      }
      for (int32_t t = 0; t < (*compiler)->vocab_size(); ++t) {
        if ((mask[t >> 5] >> (t & 31)) & 1) allowed.push_back(t);
      }
      ASSERT_FALSE(allowed.empty());
      int32_t pick = allowed[rng() % allowed.size()];
      ASSERT_TRUE(m.accept_token(pick));
      if (pick != eos) prefix += *vocab->token_bytes[pick];
    }
  }
}

INSTANTIATE_TEST_SUITE_P(GrammarMatcher, RealVocabulary, ::testing::Values("tinyllama-1.1b-chat-v1.0", "phi-2"),
                         [](const auto& info) {
                           return std::string(info.param).substr(0, 5) == "phi-2" ? "Phi2" : "TinyLlama";
                         });

}  // namespace
}  // namespace llmserve::structured
