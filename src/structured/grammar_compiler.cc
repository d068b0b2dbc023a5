// GrammarCompiler: front-end dispatch by constraint kind, lowering, and the (kind, text) cache of compiled grammars.
// Compilation runs outside the cache lock, so different specs compile in parallel.
#include <algorithm>
#include <list>
#include <map>
#include <nlohmann/json.hpp>

#include "structured/compiled_grammar.h"
#include "structured/ebnf_parser.h"
#include "structured/grammar_matcher.h"
#include "structured/json_schema_to_grammar.h"
#include "structured/regex_to_grammar.h"
#include "tokenizer/tokenizer.h"

namespace llmserve::structured {

const char* constraint_kind_name(ConstraintSpec::Kind kind) {
  switch (kind) {
    case ConstraintSpec::Kind::kJsonSchema:
      return "json_schema";
    case ConstraintSpec::Kind::kJsonObject:
      return "json_object";
    case ConstraintSpec::Kind::kRegex:
      return "regex";
    case ConstraintSpec::Kind::kChoice:
      return "choice";
    case ConstraintSpec::Kind::kGrammar:
      return "grammar";
  }
  return "?";
}

struct GrammarCompiler::Impl {
  using Key = std::pair<int, std::string>;  // (kind, text); kind -1: compile_grammar()'s caller keys

  std::shared_ptr<const CompiledGrammar> find(const Key& key);
  StatusOr<std::shared_ptr<const CompiledGrammar>> build(const Key& key, ConstraintSpec spec, const Grammar& grammar);

  std::shared_ptr<const TokenIndex> tokens;
  CompilerOptions options;
  std::shared_ptr<std::atomic<int64_t>> mask_budget;  // bytes, shared by every grammar of this compiler
  std::mutex mu;
  std::list<std::pair<Key, std::shared_ptr<const CompiledGrammar>>> lru;  // most recently used first
  std::map<Key, decltype(lru)::iterator> by_key;
};

GrammarCompiler::GrammarCompiler(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GrammarCompiler::~GrammarCompiler() = default;

StatusOr<std::unique_ptr<GrammarCompiler>> GrammarCompiler::create(const Tokenizer& tok, int32_t vocab_size,
                                                                   std::vector<int32_t> eos_token_ids,
                                                                   CompilerOptions options) {
  auto vocab = Vocabulary::from_tokenizer(tok);
  if (!vocab.ok()) return vocab.status();
  return create(std::move(*vocab), vocab_size, std::move(eos_token_ids), options);
}

StatusOr<std::unique_ptr<GrammarCompiler>> GrammarCompiler::create(Vocabulary vocab, int32_t vocab_size,
                                                                   std::vector<int32_t> eos_token_ids,
                                                                   CompilerOptions options) {
  if (vocab_size <= 0 || vocab_size < static_cast<int32_t>(vocab.token_bytes.size())) {
    return invalid_argument("grammar compiler: vocab_size " + std::to_string(vocab_size) +
                            " is below the tokenizer's " + std::to_string(vocab.token_bytes.size()) + " tokens");
  }
  for (int32_t id : eos_token_ids) {
    if (id < 0 || id >= vocab_size) {
      return invalid_argument("grammar compiler: EOS id " + std::to_string(id) + " outside [0, vocab_size)");
    }
  }
  if (options.json_max_whitespace < 0 || options.json_max_whitespace > 64) {
    return invalid_argument("grammar compiler: json_max_whitespace must be in [0, 64]");
  }
  auto impl = std::make_unique<Impl>();
  impl->tokens = std::make_shared<const TokenIndex>(vocab, vocab_size, std::move(eos_token_ids));
  impl->options = options;
  if (options.mask_cache_bytes < 0) return invalid_argument("grammar compiler: mask_cache_bytes must be >= 0");
  impl->mask_budget = std::make_shared<std::atomic<int64_t>>(options.mask_cache_bytes);
  return std::unique_ptr<GrammarCompiler>(new GrammarCompiler(std::move(impl)));
}

int32_t GrammarCompiler::vocab_size() const { return impl_->tokens->vocab_size; }

namespace {

StatusOr<Grammar> choice_grammar(const std::string& text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_array() || j.empty()) {
    return invalid_argument("choice must be a non-empty JSON array of strings");
  }
  Grammar g;
  std::vector<ExprId> alts;
  for (const auto& c : j) {
    if (!c.is_string()) return invalid_argument("choice must be a non-empty JSON array of strings");
    alts.push_back(g.bytes(c.get<std::string>()));
  }
  RuleId root = g.add_rule("root");
  g.set_body(root, g.choice(std::move(alts)));
  g.set_root(root);
  return g;
}

}  // namespace

const CompilerOptions& GrammarCompiler::options() const { return impl_->options; }

std::shared_ptr<const CompiledGrammar> GrammarCompiler::Impl::find(const Key& key) {
  std::lock_guard<std::mutex> lock(mu);
  auto it = by_key.find(key);
  if (it == by_key.end()) return nullptr;
  lru.splice(lru.begin(), lru, it->second);
  return it->second->second;
}

StatusOr<std::shared_ptr<const CompiledGrammar>> GrammarCompiler::Impl::build(const Key& key, ConstraintSpec spec,
                                                                              const Grammar& grammar) {
  auto program = lower_grammar(grammar);
  if (!program.ok()) return program.status();
  auto compiled = std::make_shared<const CompiledGrammar>(std::move(spec), tokens, std::move(*program), mask_budget);
  // The first step's mask, paid at validation time; an empty one means no output can ever be produced.
  const int32_t start = compiled->start_state();
  auto first = compiled->mask(start);
  if (!compiled->can_end(start) && std::all_of(first->begin(), first->end(), [](uint32_t w) { return w == 0; })) {
    return invalid_argument("the constraint admits no output: no token of the vocabulary can start it");
  }
  std::lock_guard<std::mutex> lock(mu);
  auto it = by_key.find(key);
  if (it != by_key.end()) return it->second->second;  // another thread compiled it meanwhile
  lru.emplace_front(key, compiled);
  by_key[key] = lru.begin();
  while (static_cast<int32_t>(lru.size()) > std::max(1, options.max_cached_grammars)) {
    by_key.erase(lru.back().first);
    lru.pop_back();
  }
  return std::shared_ptr<const CompiledGrammar>(compiled);
}

StatusOr<std::shared_ptr<const CompiledGrammar>> GrammarCompiler::compile(const ConstraintSpec& spec) {
  Impl::Key key{static_cast<int>(spec.kind), spec.text};
  if (auto hit = impl_->find(key)) return hit;
  StatusOr<Grammar> grammar = invalid_argument("unknown constraint kind");
  int32_t ws = impl_->options.json_max_whitespace;
  switch (spec.kind) {
    case ConstraintSpec::Kind::kJsonObject:
      if (!spec.text.empty()) return invalid_argument("json_object takes no schema text");
      grammar = json_object_grammar(ws);
      break;
    case ConstraintSpec::Kind::kJsonSchema:
      grammar = json_schema_to_grammar(spec.text, ws);
      break;
    case ConstraintSpec::Kind::kRegex:
      grammar = regex_to_grammar(spec.text);
      break;
    case ConstraintSpec::Kind::kChoice:
      grammar = choice_grammar(spec.text);
      break;
    case ConstraintSpec::Kind::kGrammar:
      grammar = parse_ebnf(spec.text);
      break;
  }
  if (!grammar.ok()) return grammar.status();
  return impl_->build(key, spec, *grammar);
}

StatusOr<std::shared_ptr<const CompiledGrammar>> GrammarCompiler::compile_grammar(const Grammar& grammar,
                                                                                  const std::string& cache_key) {
  Impl::Key key{-1, cache_key};
  if (auto hit = impl_->find(key)) return hit;
  Status st = grammar.validate();
  if (!st.ok()) return st;
  return impl_->build(key, ConstraintSpec{ConstraintSpec::Kind::kGrammar, cache_key}, grammar);
}

}  // namespace llmserve::structured
