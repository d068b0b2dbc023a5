// Constrained decoding, the public interface: a request's ConstraintSpec is compiled once per (kind, text) into an
// immutable CompiledGrammar, and each request walks it with its own GrammarMatcher that yields allowed-token bitmasks.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "structured/vocabulary.h"

namespace llmserve {
class Tokenizer;
}

namespace llmserve::structured {

class Grammar;

// What a request asks for. text: the JSON schema (JSON text) / regex / EBNF grammar (GBNF-style, start rule `root`) /
// JSON array of choice strings; empty for kJsonObject.
struct ConstraintSpec {
  enum class Kind { kJsonSchema, kJsonObject, kRegex, kChoice, kGrammar };
  Kind kind = Kind::kJsonObject;
  std::string text;
  bool operator==(const ConstraintSpec&) const = default;
};

// "json_schema", "json_object", "regex", "choice", "grammar" (for error messages and logs).
const char* constraint_kind_name(ConstraintSpec::Kind kind);

class CompiledGrammar;  // immutable to its users, shareable between requests and threads (see compiled_grammar.h)

// Options fixed per compiler (they apply to every grammar it compiles).
struct CompilerOptions {
  // Longest run of whitespace ([ \t\n\r]) the JSON grammars (json_object, json_schema) allow between JSON tokens;
  // 0 = compact JSON (`{"a":1,"b":[2]}`), so a weak model cannot spend its budget on whitespace.
  int32_t json_max_whitespace = 0;
  // Compiled grammars kept by (kind, text); the least recently used is dropped past this (requests still holding
  // it keep it alive).
  int32_t max_cached_grammars = 256;
  // Bytes of token masks cached across all grammars of this compiler (vocab/8 bytes each: 16 KiB at 128k); past
  // it, masks of new states are computed on every use instead of cached.
  int64_t mask_cache_bytes = int64_t{1} << 30;
};

// Built once per tokenizer; compile() validates and caches compiled grammars by (kind, text). Thread-safe: any
// number of threads may call compile() at once.
class GrammarCompiler {
 public:
  // vocab_size: the model's logits width (may exceed the tokenizer's); ids past the tokenizer are never allowed.
  // eos_token_ids: the ids that end a grammar (allowed only where the grammar can end; may be empty: then only
  // is_terminated() or the length limit ends the output). InvalidArgument if
  // vocab_size < the tokenizer's size, or an EOS id is outside [0, vocab_size).
  static StatusOr<std::unique_ptr<GrammarCompiler>> create(const Tokenizer& tok, int32_t vocab_size,
                                                           std::vector<int32_t> eos_token_ids,
                                                           CompilerOptions options = {});
  // The same from a vocabulary view (each token's bytes; see vocabulary.h), e.g. one read from a tiktoken file.
  static StatusOr<std::unique_ptr<GrammarCompiler>> create(Vocabulary vocab, int32_t vocab_size,
                                                           std::vector<int32_t> eos_token_ids,
                                                           CompilerOptions options = {});
  ~GrammarCompiler();

  // InvalidArgument naming what is wrong (unsupported keyword and its JSON path, bad regex with its offset, grammar
  // syntax error with line:column, an undefined / left-recursive / never-finishing rule, an empty choice list, a
  // constraint no vocabulary token can start); the caller prefixes the request field.
  StatusOr<std::shared_ptr<const CompiledGrammar>> compile(const ConstraintSpec& spec);
  // A grammar the caller built from the IR (structured/grammar.h; e.g. literal tags around add_json_schema() of
  // json_schema_to_grammar.h, for tool calls), cached under cache_key — one key per distinct grammar, in a space
  // apart from compile()'s. InvalidArgument as compile() (no root, undefined / left-recursive / never-finishing rule,
  // no token can start it).
  StatusOr<std::shared_ptr<const CompiledGrammar>> compile_grammar(const Grammar& grammar,
                                                                   const std::string& cache_key);
  const CompilerOptions& options() const;

  int32_t vocab_size() const;

 private:
  struct Impl;
  explicit GrammarCompiler(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Per-request state machine over a CompiledGrammar. Not thread-safe by itself (one request = one thread at a time);
// many matchers of the same grammar may run on different threads at once (the grammar's shared caches lock).
// Copyable: a copy continues independently from the same point (n > 1 sequences of one request).
class GrammarMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar);

  // ceil(vocab_size / 32): the number of uint32 words fill_next_token_bitmask writes.
  int32_t bitmask_words() const;
  // Writes bitmask_words() words: bit t of words[t/32] (bit t%32) set = token t may come next. EOS ids are set only
  // where the grammar can end; after termination only EOS ids are set.
  void fill_next_token_bitmask(uint32_t* words) const;
  // Advances on `token`; false (state unchanged) if it is not allowed now.
  bool accept_token(int32_t token);
  // True after accepting EOS, or when the grammar can only end (nothing but EOS is allowed).
  bool is_terminated() const;
  // Undoes the last num_tokens accepted tokens (preemption, speculative decoding); CHECKs num_tokens <= accepted.
  void rollback(int32_t num_tokens);
  // Back to the start, as newly constructed.
  void reset();
  // Tokens accepted since the start (after rollbacks).
  int32_t num_accepted_tokens() const { return static_cast<int32_t>(history_.size()) - 1; }
  // The grammar it walks (matchers of one grammar share its lock: callers batch them on one thread).
  const CompiledGrammar *grammar() const { return grammar_.get(); }

 private:
  std::shared_ptr<const CompiledGrammar> grammar_;
  std::vector<int32_t> history_;  // automaton state after each accepted token; [0] = start; kTerminated after EOS
};

}  // namespace llmserve::structured
