// Oracle walker for tests/structured/test_structured_oracle.py: compiles each case (json_schema / json_object /
// regex / choice / grammar) against a real vocabulary and samples seeded random walks through the masks, writing
// every output (and whether it ended) or the compile error as JSON, for Python's jsonschema / re to judge.
// Usage: structured_walk IN.json OUT.json
//   IN: {"tokenizer": DIR | "tiktoken": FILE, "seed": N, "walks": W, "max_tokens": M, "cases": [{"kind","text"}]}
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "structured/grammar_matcher.h"
#include "tokenizer/tokenizer.h"

using namespace llmserve;
using namespace llmserve::structured;

namespace {

int fail(const std::string& msg) {
  std::fprintf(stderr, "structured_walk: %s\n", msg.c_str());
  return 1;
}

StatusOr<ConstraintSpec::Kind> kind_of(const std::string& k) {
  if (k == "json_schema") return ConstraintSpec::Kind::kJsonSchema;
  if (k == "json_object") return ConstraintSpec::Kind::kJsonObject;
  if (k == "regex") return ConstraintSpec::Kind::kRegex;
  if (k == "choice") return ConstraintSpec::Kind::kChoice;
  if (k == "grammar") return ConstraintSpec::Kind::kGrammar;
  return invalid_argument("unknown kind " + k);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) return fail("usage: structured_walk IN.json OUT.json");
  std::ifstream in(argv[1]);
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json cfg = nlohmann::json::parse(ss.str(), nullptr, false);
  if (cfg.is_discarded()) return fail("IN is not JSON");
  Vocabulary vocab;
  std::vector<int32_t> eos;
  if (cfg.contains("tokenizer")) {
    auto tok = Tokenizer::from_dir(cfg["tokenizer"].get<std::string>());
    if (!tok.ok()) return fail(tok.status().to_string());
    auto v = Vocabulary::from_tokenizer(**tok);
    if (!v.ok()) return fail(v.status().to_string());
    vocab = std::move(*v);
    eos = (*tok)->eos_token_ids();
  } else {
    auto v = Vocabulary::from_tiktoken_file(cfg["tiktoken"].get<std::string>(), 256);
    if (!v.ok()) return fail(v.status().to_string());
    vocab = std::move(*v);
    eos = {128001, 128009};
  }
  const int32_t vocab_size = static_cast<int32_t>(vocab.token_bytes.size());
  std::vector<std::string> bytes(vocab_size);
  std::vector<char> closing(vocab_size, 0);  // tokens that can end a JSON string / container / the output
  for (int32_t t = 0; t < vocab_size; ++t) {
    if (vocab.token_bytes[t]) bytes[t] = *vocab.token_bytes[t];
    closing[t] = bytes[t].find_first_of("\"}],") != std::string::npos;
  }
  for (int32_t t : eos) closing[t] = 1;
  auto compiler = GrammarCompiler::create(std::move(vocab), vocab_size, eos);
  if (!compiler.ok()) return fail(compiler.status().to_string());

  std::mt19937_64 rng(cfg.value("seed", 0));
  const int walks = cfg.value("walks", 1);
  const int max_tokens = cfg.value("max_tokens", 256);
  nlohmann::json results = nlohmann::json::array();
  std::vector<uint32_t> mask;
  for (const auto& c : cfg["cases"]) {
    nlohmann::json r;
    auto kind = kind_of(c["kind"].get<std::string>());
    if (!kind.ok()) return fail(kind.status().to_string());
    auto grammar = (*compiler)->compile({*kind, c.value("text", "")});
    if (!grammar.ok()) {
      r["error"] = grammar.status().message();
      results.push_back(r);
      continue;
    }
    r["outputs"] = nlohmann::json::array();
    for (int w = 0; w < walks; ++w) {
      GrammarMatcher m(*grammar);
      mask.assign(m.bitmask_words(), 0);
      std::string text;
      bool finished = false;
      for (int step = 0; step < max_tokens; ++step) {
        if (m.is_terminated()) {
          finished = true;
          break;
        }
        m.fill_next_token_bitmask(mask.data());
        // Uniform among allowed tokens; every other step among the allowed ones that can close something, so most
        // walks finish under the cap (any path through the masks must validate, however it is chosen).
        std::vector<int32_t> allowed, closers;
        for (int32_t t = 0; t < vocab_size; ++t) {
          if ((mask[t >> 5] >> (t & 31)) & 1) {
            allowed.push_back(t);
            if (closing[t]) closers.push_back(t);
          }
        }
        if (allowed.empty()) return fail("no token allowed in case " + c.dump());
        const auto& pool = (step % 2 == 1 && !closers.empty()) ? closers : allowed;
        int32_t pick = pool[rng() % pool.size()];
        if (!m.accept_token(pick)) return fail("an allowed token was refused");
        text += bytes[pick];
      }
      if (m.is_terminated()) finished = true;
      r["outputs"].push_back({{"text", text}, {"finished", finished}});
    }
    results.push_back(r);
  }
  std::ofstream out(argv[2]);
  out << results.dump(1, ' ', false, nlohmann::json::error_handler_t::replace);
  return 0;
}
