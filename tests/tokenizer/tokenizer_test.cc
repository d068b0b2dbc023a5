// Real checkpoints' tokenizer files from the shared test data: side-file loading (special tokens, chat
// templates, EOS lists), batch encode, and the streaming detokenizer's guarantees on random id sequences.
#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <random>

#include "tokenizer/incremental_detokenizer.h"
#include "tokenizer/unicode.h"

namespace llmserve {
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

TEST(Tokenizer, LoadsSideFiles) {
  auto tiny = load("tinyllama-1.1b-chat-v1.0");
  ASSERT_NE(tiny, nullptr);
  EXPECT_EQ(tiny->bos_token(), "<s>");
  EXPECT_EQ(tiny->bos_token_id(), 1);
  EXPECT_EQ(tiny->eos_token_id(), 2);
  EXPECT_EQ(tiny->eos_token_ids(), std::vector<int32_t>{2});
  auto tmpl = tiny->chat_template();
  ASSERT_TRUE(tmpl.has_value());
  EXPECT_NE(tmpl->find("<|user|>"), std::string::npos);  // from chat_template.jinja
  EXPECT_FALSE(tiny->chat_template("tool_use").has_value());
  EXPECT_EQ(tiny->encode("Hello"), (std::vector<int32_t>{1, 15043}));
  EXPECT_EQ(tiny->encode("Hello", false), (std::vector<int32_t>{15043}));

  auto mistral = load("mistral-7b-instruct-v0.3");
  ASSERT_NE(mistral, nullptr);
  EXPECT_TRUE(mistral->chat_template().has_value());  // chat_template string in tokenizer_config.json
  EXPECT_EQ(mistral->eos_token(), "</s>");
  EXPECT_TRUE(mistral->is_special(2));
  EXPECT_EQ(mistral->vocab_size(), 32768);
}

TEST(Tokenizer, ConfigTemplatesAndLlamaFlags) {
  std::string json = R"({"model": {"type": "BPE", "vocab": {"<s>": 0, "</s>": 1, "a": 2}, "merges": []},
    "added_tokens": [{"id": 0, "content": "<s>", "special": true}, {"id": 1, "content": "</s>", "special": true}],
    "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
      {"Sequence": {"id": "A", "type_id": 0}}], "special_tokens": {"<s>": {"id": "<s>", "ids": [0], "tokens": ["<s>"]}}}})";
  auto plain = Tokenizer::from_json(json);
  ASSERT_TRUE(plain.ok()) << plain.status().to_string();
  EXPECT_EQ((*plain)->encode("a"), (std::vector<int32_t>{0, 2}));
  EXPECT_FALSE((*plain)->chat_template().has_value());
  // The tokenizers pipeline rebuilds a Llama tokenizer's post-processor from add_bos_token / add_eos_token.
  std::string config = R"({"tokenizer_class": "LlamaTokenizerFast", "bos_token": "<s>",
    "eos_token": {"content": "</s>", "special": true}, "add_bos_token": false, "add_eos_token": true,
    "chat_template": [{"name": "default", "template": "D"}, {"name": "tool_use", "template": "T"}]})";
  auto llama = Tokenizer::from_json(json, config, TokenizerPipeline::kHfTokenizers);
  ASSERT_TRUE(llama.ok()) << llama.status().to_string();
  EXPECT_EQ((*llama)->encode("a"), (std::vector<int32_t>{2, 1}));
  // transformers 5 drops both flags when tokenizer.json exists: tokenizer.json's post-processor (BOS) stays.
  auto v5 = Tokenizer::from_json(json, config);
  ASSERT_TRUE(v5.ok()) << v5.status().to_string();
  std::vector<int32_t> ids = (*v5)->encode("a");
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids.front(), 0);
  EXPECT_NE(ids.back(), 1);
  EXPECT_EQ((*llama)->chat_template(), "D");
  EXPECT_EQ((*llama)->chat_template("tool_use"), "T");
  EXPECT_EQ((*llama)->chat_template_names(), (std::vector<std::string>{"default", "tool_use"}));
  EXPECT_EQ((*llama)->eos_token_id(), 1);
  EXPECT_EQ((*llama)->add_eos_token(), true);
  auto bad = Tokenizer::from_json(json, R"({"chat_template": 5})");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("tokenizer_config.json: chat_template"), std::string::npos);
}

TEST(Tokenizer, RejectsUnsplittableLegacyMerge) {
  // This file's merges contain "   " (three spaces), which "left right" strings cannot express; HF refuses it too.
  auto t = Tokenizer::from_dir(testdata() + "/tokenizers/llama2");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("model.merges[18917]"), std::string::npos) << t.status().to_string();
}

TEST(Tokenizer, BatchEqualsSingle) {
  auto phi = load("phi-2");
  ASSERT_NE(phi, nullptr);
  std::vector<std::string> texts;
  for (int i = 0; i < 64; ++i) texts.push_back("item " + std::to_string(i * 7919) + " \u00fcber  \U0001F999\n");
  auto batch = phi->encode_batch(texts, true);
  ASSERT_EQ(batch.size(), texts.size());
  for (size_t i = 0; i < texts.size(); ++i) EXPECT_EQ(batch[i], phi->encode(texts[i], true));
}

TEST(Tokenizer, SpacesBetweenSpecialTokens) {
  auto tiny = load("tinyllama-1.1b-chat-v1.0");
  ASSERT_NE(tiny, nullptr);
  std::vector<int32_t> ids = tiny->encode("Hello world", false);
  std::vector<int32_t> with = ids;
  with.insert(with.begin(), 1);
  with.push_back(2);
  EXPECT_EQ(tiny->decode(with, false, true), "<s> Hello world</s>");  // HF tokenizers' decode
  EXPECT_EQ(tiny->decode(with, false, false), "<s>Hello world</s>");
  EXPECT_EQ(tiny->decode(with, true, false), tiny->decode(ids));
}

TEST(Tokenizer, InvalidUtf8InputIsRepaired) {
  auto phi = load("phi-2");
  ASSERT_NE(phi, nullptr);
  EXPECT_EQ(phi->encode("a\xFF"
                        "b",
                        false),
            phi->encode("a\uFFFD"
                        "b",
                        false));
}

// Streams random ids (and the ids of text with multi-byte characters) and checks every piece.
void check_streaming(const Tokenizer& tok, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::vector<int32_t>> seqs;
  for (int n = 0; n < 300; ++n) {
    std::vector<int32_t> s;
    for (size_t k = 1 + rng() % 40; k > 0; --k) s.push_back(static_cast<int32_t>(rng() % tok.vocab_size()));
    seqs.push_back(s);
  }
  seqs.push_back(
      tok.encode("日本語のテキスト 🦙🚀 emoji, Ünïcödé, \u0915\u094d\u0937 and 中文字符", true));
  for (const auto& s : seqs) {
    for (int mode = 0; mode < 4; ++mode) {
      bool skip = mode & 1, spaces = mode < 2;
      IncrementalDetokenizer detok(tok, skip, spaces);
      std::string joined;
      for (int32_t id : s) {
        std::string piece = detok.push(id);
        EXPECT_TRUE(unicode::is_valid_utf8(piece));  // never a partial character
        joined += piece;
        EXPECT_EQ(joined, detok.text());
      }
      joined += detok.flush();
      EXPECT_EQ(joined, tok.decode(s, skip, spaces));
    }
  }
}

TEST(IncrementalDetokenizer, ByteFallbackTokenizer) {
  auto tiny = load("tinyllama-1.1b-chat-v1.0");
  ASSERT_NE(tiny, nullptr);
  check_streaming(*tiny, 1);
  // "🦙" is four byte-fallback tokens: nothing is emitted until the character is complete and its run ends.
  std::vector<int32_t> ids = tiny->encode("\U0001F999!", false);
  ASSERT_GE(ids.size(), 5u);
  IncrementalDetokenizer detok(*tiny);
  std::vector<std::string> pieces;
  for (int32_t id : ids) pieces.push_back(detok.push(id));
  pieces.push_back(detok.flush());
  for (size_t i = 0; i + 2 < ids.size(); ++i) EXPECT_EQ(pieces[i], "") << i;
  std::string out;
  for (const auto& p : pieces) out += p;
  EXPECT_EQ(out, "\U0001F999!");
}

TEST(IncrementalDetokenizer, ByteLevelTokenizer) {
  auto phi = load("phi-2");
  ASSERT_NE(phi, nullptr);
  check_streaming(*phi, 2);
}

}  // namespace
}  // namespace llmserve
