// GrammarMatcher against the brute-force ReferenceRecognizer: at every step of seeded random walks the mask must
// equal "feed this token's bytes to a fresh recognizer replaying the output so far"; rollback == replay.
#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "reference_recognizer.h"
#include "structured/compiled_grammar.h"
#include "structured/grammar_matcher.h"
#include "structured/json_schema_to_grammar.h"

namespace llmserve::structured {
namespace {

// A small vocabulary: every printable ASCII byte, whitespace, JSON-ish and multi-byte tokens, UTF-8 characters
// and lone UTF-8 bytes (so tokens that split a character are exercised), one special token and EOS last.
Vocabulary small_vocab() {
  Vocabulary v;
  for (int c = 0x20; c < 0x7F; ++c) v.token_bytes.push_back(std::string(1, static_cast<char>(c)));
  // Every non-ASCII byte, as byte-level and byte-fallback vocabularies have: any started character can be finished.
  for (int c = 0x80; c < 0x100; ++c) v.token_bytes.push_back(std::string(1, static_cast<char>(c)));
  for (const char* t : {"\n",    "\t",       "\r",       "{\"",  "\":",      "\",",          "\"}",
                        "},",    "}}",       "]}",       "[{",   "true",     "false",        "null",
                        "nul",   "12",       "-0",       "0.",   "e+",       "abc",          " the",
                        "ab",    "a\"",      "\\n",      "\\u",  "\\u00",    "00e9",         "12:",
                        "2024-", "-01-",     "@ex",      ".com", "\xC3\xA9", "\xE2\x82\xAC", "\xF0\x9F\x98\x80",
                        "\xC3",  "\xA9",     "\x82\xAC", "\xE2", "\xF0\x9F", "yes",          "no",
                        "maybe", "\"name\"", "\"age\":", "::=",  "  ",       "\"\"",         ",\""}) {
    v.token_bytes.push_back(std::string(t));
  }
  v.token_bytes.push_back(std::nullopt);  // a special token: never allowed
  v.token_bytes.push_back(std::nullopt);  // EOS
  return v;
}

std::string replay_bytes(const Vocabulary& v, const std::vector<int32_t>& ids, int32_t eos) {
  std::string s;
  for (int32_t id : ids) {
    if (id != eos) s += *v.token_bytes[id];
  }
  return s;
}

// Walks `steps` tokens (or until terminated) checking each mask against the reference; returns the output.
void check_walks(const ConstraintSpec& spec, int num_walks, int steps, uint32_t seed) {
  Vocabulary vocab = small_vocab();
  int32_t eos = static_cast<int32_t>(vocab.token_bytes.size()) - 1;
  int32_t vocab_size = eos + 5;  // logits wider than the tokenizer: the padding ids are never allowed
  auto compiler = GrammarCompiler::create(vocab, vocab_size, {eos});
  ASSERT_TRUE(compiler.ok()) << compiler.status().to_string();
  auto grammar = (*compiler)->compile(spec);
  ASSERT_TRUE(grammar.ok()) << grammar.status().to_string();
  std::mt19937 rng(seed);
  for (int w = 0; w < num_walks; ++w) {
    GrammarMatcher m(*grammar);
    std::vector<int32_t> out;
    std::vector<uint32_t> mask(m.bitmask_words(), 0xDEADBEEFu);  // poisoned: every word must be written
    for (int step = 0; step < steps && !m.is_terminated(); ++step) {
      m.fill_next_token_bitmask(mask.data());
      std::string prefix = replay_bytes(vocab, out, eos);
      ReferenceRecognizer ref((*grammar)->program());
      ASSERT_TRUE(ref.feed(prefix));
      std::vector<int32_t> allowed;
      for (int32_t t = 0; t < vocab_size; ++t) {
        bool got = (mask[t >> 5] >> (t & 31)) & 1;
        bool want;
        if (t == eos) {
          want = ref.can_end();
        } else if (t >= static_cast<int32_t>(vocab.token_bytes.size()) || !vocab.token_bytes[t]) {
          want = false;
        } else {
          ReferenceRecognizer r2 = ref;
          want = r2.feed(*vocab.token_bytes[t]) && r2.alive();
        }
        ASSERT_EQ(got, want) << "token " << t << " after '" << prefix << "' (" << spec.text << ")";
        if (got) allowed.push_back(t);
      }
      ASSERT_FALSE(allowed.empty()) << "dead end after '" << prefix << "'";
      EXPECT_EQ(m.is_terminated(), ref.only_end()) << "after '" << prefix << "'";
      // A refused token leaves the state unchanged.
      for (int32_t t = 0; t < vocab_size; ++t) {
        if (!((mask[t >> 5] >> (t & 31)) & 1)) {
          EXPECT_FALSE(m.accept_token(t));
          break;
        }
      }
      int32_t pick = allowed[rng() % allowed.size()];
      ASSERT_TRUE(m.accept_token(pick));
      out.push_back(pick);
    }
    // rollback == replay: undo a random suffix, the mask equals a fresh matcher fed the kept prefix.
    if (!out.empty()) {
      int32_t k = static_cast<int32_t>(rng() % (out.size() + 1));
      m.rollback(k);
      GrammarMatcher fresh(*grammar);
      for (size_t i = 0; i + k < out.size(); ++i) ASSERT_TRUE(fresh.accept_token(out[i]));
      std::vector<uint32_t> a(m.bitmask_words()), b(m.bitmask_words());
      m.fill_next_token_bitmask(a.data());
      fresh.fill_next_token_bitmask(b.data());
      EXPECT_EQ(a, b);
      EXPECT_EQ(m.is_terminated(), fresh.is_terminated());
      EXPECT_EQ(m.num_accepted_tokens(), fresh.num_accepted_tokens());
      m.reset();
      GrammarMatcher start(*grammar);
      m.fill_next_token_bitmask(a.data());
      start.fill_next_token_bitmask(b.data());
      EXPECT_EQ(a, b);
    }
  }
}

using Kind = ConstraintSpec::Kind;

TEST(GrammarMatcher, EbnfMatchesBruteForce) {
  check_walks({Kind::kGrammar, R"~(
    root ::= greeting (" " item)* "!"?   # comment
    greeting ::= "hello" | "hi" | "yes"
    item ::= [a-c]+ | num | "(" root ")"
    num ::= "-"? [0-9]{1,3} ("." [0-9]+)?
  )~"},
              6, 25, 1);
}

TEST(GrammarMatcher, NullableLoopsAndUnicodeClasses) {
  check_walks({Kind::kGrammar, R"~(root ::= ( "a"? | [é€-€😀] )* "b" ( [^a-z"] )* ";")~"}, 6, 20, 2);
}

TEST(GrammarMatcher, RegexMatchesBruteForce) {
  check_walks({Kind::kRegex, R"~(^(\d{3}-\d{4}|[A-Z][a-z]+ (?:ab|c)*?)\.?$)~"}, 6, 20, 3);
  check_walks({Kind::kRegex, R"~([^"\\]{2,5}"\w+@ex\.com)~"}, 6, 20, 4);
}

TEST(GrammarMatcher, ChoiceMatchesBruteForce) {
  check_walks({Kind::kChoice, R"~(["yes", "no", "maybe", "nobody"])~"}, 6, 10, 5);
}

TEST(GrammarMatcher, JsonObjectMatchesBruteForce) { check_walks({Kind::kJsonObject, ""}, 8, 30, 6); }

TEST(GrammarMatcher, JsonSchemaMatchesBruteForce) {
  check_walks({Kind::kJsonSchema, R"~({
    "type": "object",
    "properties": {
      "name": {"type": "string", "maxLength": 4},
      "age": {"type": "integer", "minimum": -5, "maximum": 120},
      "tags": {"type": "array", "items": {"enum": ["a", 1, null]}, "maxItems": 3},
      "when": {"type": "string", "format": "date"},
      "next": {"$ref": "#"}
    },
    "required": ["name"],
    "additionalProperties": false
  })~"},
              8, 30, 7);
}

TEST(GrammarMatcher, EosOnlyWhereTheGrammarCanEnd) {
  Vocabulary vocab = small_vocab();
  int32_t eos = static_cast<int32_t>(vocab.token_bytes.size()) - 1;
  auto compiler = GrammarCompiler::create(vocab, eos + 1, {eos});
  ASSERT_TRUE(compiler.ok());
  auto g = (*compiler)->compile({Kind::kRegex, "ab+"});
  ASSERT_TRUE(g.ok());
  GrammarMatcher m(*g);
  EXPECT_FALSE(m.accept_token(eos));
  auto id = [&](const std::string& s) {
    for (size_t i = 0; i < vocab.token_bytes.size(); ++i) {
      if (vocab.token_bytes[i] == s) return static_cast<int32_t>(i);
    }
    return -1;
  };
  ASSERT_TRUE(m.accept_token(id("ab")));
  EXPECT_FALSE(m.is_terminated());  // more b's may follow
  ASSERT_TRUE(m.accept_token(eos));
  EXPECT_TRUE(m.is_terminated());
  EXPECT_FALSE(m.accept_token(id("b")));
  std::vector<uint32_t> mask(m.bitmask_words());
  m.fill_next_token_bitmask(mask.data());
  for (int32_t t = 0; t <= eos; ++t) EXPECT_EQ((mask[t >> 5] >> (t & 31)) & 1, t == eos ? 1u : 0u) << t;
  m.rollback(1);
  EXPECT_FALSE(m.is_terminated());
  // A choice that can only end: terminated without EOS.
  auto c = (*compiler)->compile({Kind::kChoice, R"~(["no"])~"});
  ASSERT_TRUE(c.ok());
  GrammarMatcher mc(*c);
  ASSERT_TRUE(mc.accept_token(id("no")));
  EXPECT_TRUE(mc.is_terminated());
}

// One walk's tokens and a checksum of every mask on the way.
std::pair<std::vector<int32_t>, uint64_t> seeded_walk(const std::shared_ptr<const CompiledGrammar>& g, uint32_t seed) {
  std::mt19937 rng(seed);
  GrammarMatcher m(g);
  std::vector<uint32_t> mask(m.bitmask_words());
  std::vector<int32_t> out;
  uint64_t sum = 0;
  for (int step = 0; step < 40 && !m.is_terminated(); ++step) {
    m.fill_next_token_bitmask(mask.data());
    std::vector<int32_t> allowed;
    for (int32_t t = 0; t < m.bitmask_words() * 32; ++t) {
      if ((mask[t >> 5] >> (t & 31)) & 1) allowed.push_back(t);
    }
    for (uint32_t w : mask) sum = sum * 1000003 + w;
    int32_t pick = allowed[rng() % allowed.size()];
    EXPECT_TRUE(m.accept_token(pick));
    out.push_back(pick);
  }
  return {out, sum};
}

// Matchers of one grammar on many threads at once (the grammar's automaton and mask cache are shared) give the
// same walks and masks as a fresh grammar walked on one thread.
TEST(GrammarMatcher, ConcurrentMatchersShareOneGrammar) {
  Vocabulary vocab = small_vocab();
  int32_t eos = static_cast<int32_t>(vocab.token_bytes.size()) - 1;
  const ConstraintSpec spec{
      Kind::kJsonSchema,
      R"~({"type":"object","properties":{"a":{"type":"array","items":{"type":"string"}},)~"
      R"~("b":{"anyOf":[{"type":"number"},{"$ref":"#"}]}},"required":["a"],"additionalProperties":false})~"};
  auto shared_compiler = GrammarCompiler::create(vocab, eos + 1, {eos});
  auto solo_compiler = GrammarCompiler::create(vocab, eos + 1, {eos});
  ASSERT_TRUE(shared_compiler.ok() && solo_compiler.ok());
  constexpr int kThreads = 8, kWalks = 12;
  std::vector<std::vector<std::pair<std::vector<int32_t>, uint64_t>>> got(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto g = (*shared_compiler)->compile(spec);  // concurrent compiles of one spec, too
      ASSERT_TRUE(g.ok());
      for (int w = 0; w < kWalks; ++w) got[t].push_back(seeded_walk(*g, 100 + t * kWalks + w));
    });
  }
  for (auto& th : threads) th.join();
  auto solo = (*solo_compiler)->compile(spec);
  ASSERT_TRUE(solo.ok());
  for (int t = 0; t < kThreads; ++t) {
    for (int w = 0; w < kWalks; ++w) EXPECT_EQ(got[t][w], seeded_walk(*solo, 100 + t * kWalks + w)) << t << " " << w;
  }
}

// A copied matcher (n > 1 forks) continues independently of its original.
TEST(GrammarMatcher, CopiesAreIndependent) {
  Vocabulary vocab = small_vocab();
  int32_t eos = static_cast<int32_t>(vocab.token_bytes.size()) - 1;
  auto compiler = GrammarCompiler::create(vocab, eos + 1, {eos});
  ASSERT_TRUE(compiler.ok());
  auto g = (*compiler)->compile({Kind::kChoice, R"~(["ab", "ac"])~"});
  ASSERT_TRUE(g.ok());
  auto id = [&](const std::string& s) {
    for (size_t i = 0; i < vocab.token_bytes.size(); ++i) {
      if (vocab.token_bytes[i] == s) return static_cast<int32_t>(i);
    }
    return -1;
  };
  GrammarMatcher a(*g);
  ASSERT_TRUE(a.accept_token(id("a")));
  GrammarMatcher b = a;
  ASSERT_TRUE(a.accept_token(id("b")));
  EXPECT_FALSE(a.accept_token(id("c")));
  ASSERT_TRUE(b.accept_token(id("c")));
  EXPECT_TRUE(a.is_terminated());
  EXPECT_TRUE(b.is_terminated());
  EXPECT_EQ(b.num_accepted_tokens(), 2);
}

// A caller-built grammar embedding a JSON schema between literal tags (the shape of tool calls), masks vs brute
// force through compile_grammar(); cached under its key.
TEST(GrammarCompiler, CompilesCallerBuiltGrammars) {
  Grammar g;
  auto call = add_json_schema(g,
                              R"~({"type":"object","properties":{"name":{"const":"get"},"n":{"type":"integer"}},)~"
                              R"~("required":["name","n"],"additionalProperties":false})~",
                              0);
  ASSERT_TRUE(call.ok()) << call.status().to_string();
  RuleId root = g.add_rule("root");
  g.set_body(root, g.plus(g.sequence({g.bytes("<call>"), *call, g.bytes("</call>")})));
  g.set_root(root);
  Vocabulary vocab = small_vocab();
  int32_t eos = static_cast<int32_t>(vocab.token_bytes.size()) - 1;
  auto compiler = GrammarCompiler::create(vocab, eos + 1, {eos});
  ASSERT_TRUE(compiler.ok());
  auto a = (*compiler)->compile_grammar(g, "tools:get");
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  auto b = (*compiler)->compile_grammar(Grammar(), "tools:get");  // cached: the key decides
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(a->get(), b->get());
  EXPECT_FALSE((*compiler)->compile_grammar(Grammar(), "other").ok());  // no root
  std::mt19937 rng(9);
  for (int walk = 0; walk < 3; ++walk) {
    GrammarMatcher m(*a);
    std::string prefix;
    std::vector<uint32_t> mask(m.bitmask_words());
    for (int step = 0; step < 40 && !m.is_terminated(); ++step) {
      m.fill_next_token_bitmask(mask.data());
      ReferenceRecognizer ref((*a)->program());
      ASSERT_TRUE(ref.feed(prefix));
      std::vector<int32_t> allowed;
      for (int32_t t = 0; t <= eos; ++t) {
        bool want =
            t == eos ? ref.can_end() : vocab.token_bytes[t] && ReferenceRecognizer(ref).feed(*vocab.token_bytes[t]);
        ASSERT_EQ(((mask[t >> 5] >> (t & 31)) & 1) != 0, want) << t << " after " << prefix;
        if (want) allowed.push_back(t);
      }
      int32_t pick = allowed[rng() % allowed.size()];
      ASSERT_TRUE(m.accept_token(pick));
      if (pick != eos) prefix += *vocab.token_bytes[pick];
    }
  }
}

TEST(GrammarCompiler, CachesByKindAndText) {
  Vocabulary vocab = small_vocab();
  int32_t eos = static_cast<int32_t>(vocab.token_bytes.size()) - 1;
  auto compiler = GrammarCompiler::create(vocab, eos + 1, {eos});
  ASSERT_TRUE(compiler.ok());
  auto a = (*compiler)->compile({Kind::kRegex, "a+"});
  auto b = (*compiler)->compile({Kind::kRegex, "a+"});
  auto c = (*compiler)->compile({Kind::kGrammar, "root ::= \"a\"+"});
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(a->get(), b->get());
  EXPECT_NE(a->get(), c->get());
  auto none = (*compiler)->compile({Kind::kRegex, R"~(\x01+)~"});  // no token of the small vocabulary holds \x01
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().message(), "the constraint admits no output: no token of the vocabulary can start it");
  EXPECT_FALSE(GrammarCompiler::create(vocab, eos, {eos}).ok());  // EOS outside vocab_size
  EXPECT_FALSE(GrammarCompiler::create(vocab, 10, {0}).ok());     // vocab_size below the tokenizer
}

}  // namespace
}  // namespace llmserve::structured
