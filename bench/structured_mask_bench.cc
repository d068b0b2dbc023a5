// Token-mask time per token on one core, Llama 3's 128k vocabulary (tiktoken file): json_object and a 20-property
// JSON schema, seeded random walks through the masks. Prints p50/p99 of fill_next_token_bitmask (and of
// accept_token) beside the floor: copying one bitmask of vocab/32 words.
// Usage: structured_mask_bench [TIKTOKEN_FILE] [WALKS] [TOKENS_PER_WALK]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "structured/grammar_matcher.h"

using namespace llmserve::structured;
using Clock = std::chrono::steady_clock;

namespace {

double us(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

double pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * v.size()))];
}

std::string twenty_property_schema() {
  std::string props, req;
  const char* kinds[] = {
      R"({"type":"string"})",
      R"({"type":"integer"})",
      R"({"type":"number"})",
      R"({"type":"boolean"})",
      R"({"enum":["red","green","blue"]})",
      R"({"type":"array","items":{"type":"string"},"maxItems":4})",
      R"({"type":["string","null"]})",
      R"({"type":"string","format":"date"})",
      R"({"type":"integer","minimum":0,"maximum":150})",
      R"({"type":"object","properties":{"x":{"type":"number"},"y":{"type":"number"}},"required":["x","y"],"additionalProperties":false})"};
  for (int i = 0; i < 20; ++i) {
    std::string name = "field_" + std::to_string(i);
    props += (i ? "," : "") + ("\"" + name + "\":") + kinds[i % 10];
    req += (i ? "," : "") + ("\"" + name + "\"");
  }
  return R"({"type":"object","properties":{)" + props + R"(},"required":[)" + req +
         R"(],"additionalProperties":false})";
}

}  // namespace

int main(int argc, char** argv) {
  std::string path = argc > 1 ? argv[1] : "../shared/testdata/tokenizers/llama3/tokenizer.model";
  int walks = argc > 2 ? std::atoi(argv[2]) : 20;
  int max_tokens = argc > 3 ? std::atoi(argv[3]) : 300;
  auto vocab = Vocabulary::from_tiktoken_file(path, 256);
  if (!vocab.ok()) {
    std::fprintf(stderr, "%s\n", vocab.status().to_string().c_str());
    return 1;
  }
  const int32_t vocab_size = static_cast<int32_t>(vocab->token_bytes.size());
  std::vector<std::string> bytes(vocab_size);
  for (int32_t t = 0; t < vocab_size; ++t) bytes[t] = vocab->token_bytes[t].value_or("");
  const std::vector<int32_t> eos = {128001, 128009};
  auto compiler = GrammarCompiler::create(std::move(*vocab), vocab_size, eos);
  if (!compiler.ok()) {
    std::fprintf(stderr, "%s\n", compiler.status().to_string().c_str());
    return 1;
  }
  // Floor: one bitmask copy from a pool of 256 cached masks (4 MiB: past L2, as the grammar's cached masks are).
  const int32_t words = (vocab_size + 31) / 32;
  std::vector<std::vector<uint32_t>> pool(256, std::vector<uint32_t>(words, 1));
  std::vector<uint32_t> b(words);
  auto t0 = Clock::now();
  for (int i = 0; i < 10000; ++i) {
    auto& a = pool[(i * 97) % pool.size()];
    std::memcpy(b.data(), a.data(), words * 4);
    a[i % words] ^= b[(i * 7) % words];
  }
  double floor_us = us(Clock::now() - t0) / 10000;

  std::printf("vocab %d (%d mask words), %d walks x <= %d tokens, seed 1, one thread\n", vocab_size, words, walks,
              max_tokens);
  std::printf("%-16s %9s %7s %9s %9s %9s %9s %9s %9s %8s\n", "constraint", "compile_ms", "tokens", "cold_p50",
              "cold_p99", "warm_p50", "warm_p99", "accept_p50", "floor_us", "p50/flr");
  struct Case {
    const char* name;
    ConstraintSpec spec;
  };
  std::vector<Case> cases = {{"json_object", {ConstraintSpec::Kind::kJsonObject, ""}},
                             {"schema_20_props", {ConstraintSpec::Kind::kJsonSchema, twenty_property_schema()}}};
  for (const auto& c : cases) {
    auto c0 = Clock::now();
    auto grammar = (*compiler)->compile(c.spec);
    double compile_ms = us(Clock::now() - c0) / 1000;
    if (!grammar.ok()) {
      std::fprintf(stderr, "%s: %s\n", c.name, grammar.status().to_string().c_str());
      return 1;
    }
    // Two passes over the same seeded walks: the first meets states for the first time (cold: masks computed),
    // the second is what every later request sees (warm: served from the grammar's cache).
    std::vector<double> cold, warm, accept;
    int64_t tokens = 0;
    for (int pass = 0; pass < 2; ++pass) {
      std::mt19937_64 rng(1);
      std::vector<uint32_t> mask(words);
      for (int w = 0; w < walks; ++w) {
        GrammarMatcher m(*grammar);
        for (int step = 0; step < max_tokens && !m.is_terminated(); ++step) {
          auto s = Clock::now();
          m.fill_next_token_bitmask(mask.data());
          (pass == 0 ? cold : warm).push_back(us(Clock::now() - s));
          std::vector<int32_t> allowed, closers;
          for (int32_t t = 0; t < vocab_size; ++t) {
            if ((mask[t >> 5] >> (t & 31)) & 1) {
              allowed.push_back(t);
              if (bytes[t].find_first_of("\"}],") != std::string::npos || t == eos[0]) closers.push_back(t);
            }
          }
          const auto& pool = (step % 2 == 1 && !closers.empty()) ? closers : allowed;
          int32_t pick = pool[rng() % pool.size()];
          s = Clock::now();
          bool ok = m.accept_token(pick);
          if (pass == 1) accept.push_back(us(Clock::now() - s));
          if (!ok) {
            std::fprintf(stderr, "allowed token refused\n");
            return 1;
          }
          tokens += pass;
        }
      }
    }
    std::printf("%-16s %9.1f %7lld %9.1f %9.1f %9.2f %9.2f %9.2f %9.2f %8.1f\n", c.name, compile_ms,
                static_cast<long long>(tokens), pct(cold, 0.5), pct(cold, 0.99), pct(warm, 0.5), pct(warm, 0.99),
                pct(accept, 0.5), floor_us, pct(warm, 0.5) / floor_us);
  }
  std::printf("times in microseconds per token per request; floor = one %d-byte bitmask copy from a 4 MiB pool\n",
              words * 4);
  return 0;
}
