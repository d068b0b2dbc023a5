// Tree-walking evaluator for a parsed template: scopes, statements, expressions, and the builtin filters, tests,
// methods and globals of the environment transformers builds (ImmutableSandboxedEnvironment).
// Invariant: sandboxed by construction — no I/O, and every loop, call depth and output buffer is bounded by
// RenderLimits; exceeding one is a TemplateError, never a hang or a crash.
#pragma once

#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tokenizer/chat_template/ast.h"
#include "tokenizer/chat_template/value.h"

namespace llmserve::jinja {

struct RenderLimits {
  int64_t max_loop_iterations = 2'000'000;  // summed over every loop of one render
  int max_call_depth = 128;                 // nested macro / caller calls
  size_t max_output_bytes = 32u << 20;      // any single string or output buffer
};

class Interpreter;

// Arguments of a call: positional then keyword, as the template wrote them.
struct Args {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> kwargs;
  Interpreter* interp = nullptr;

  // The argument at position `index` or named `name`; `def` when absent. Raises on duplicates.
  Value get(size_t index, const char* name, Value def = Value()) const;
  const Value* kwarg(const char* name) const;
  // Raises a TypeError-like error when more than `max_positional` positionals or unknown keywords are given.
  void check(const char* fn, size_t max_positional, std::initializer_list<const char*> names) const;
};

struct Scope {
  explicit Scope(std::shared_ptr<Scope> parent) : parent(std::move(parent)) {}
  std::shared_ptr<Scope> parent;
  std::unordered_map<std::string, Value> vars;
  const Value* lookup(const std::string& name) const;
};
using ScopePtr = std::shared_ptr<Scope>;

class Interpreter {
 public:
  Interpreter(const Template& tmpl, RenderLimits limits, std::optional<std::tm> now)
      : tmpl_(tmpl), limits_(limits), now_(now) {}

  // Renders with the given top-level variables. Throws TemplateError.
  std::string render(std::unordered_map<std::string, Value> context);

  // Used by builtins.
  Value call(const Value& callee, Args& args);
  Value get_attr(const Value& obj, const std::string& name);
  Value get_item(const Value& obj, const Value& key);
  Value apply_filter(const std::string& name, const Value& operand, Args& args);
  bool apply_test(const std::string& name, const Value& operand, Args& args);
  // Iterates like Python's iter(): list items, dict keys, string characters; undefined is empty.
  ValueList iterate(const Value& v);
  std::string to_str(const Value& v);
  void check_size(size_t bytes) const;
  const RenderLimits& limits() const { return limits_; }

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  Flow exec_body(const Body& body, const ScopePtr& scope, std::string& out);
  Flow exec(const Stmt& s, const ScopePtr& scope, std::string& out);
  void exec_for(const Stmt& s, const ScopePtr& scope, std::string& out);
  void exec_set(const Stmt& s, const ScopePtr& scope);
  void exec_call_block(const Stmt& s, const ScopePtr& scope, std::string& out);
  Value make_macro(const Stmt& s, const ScopePtr& scope);
  Value invoke_macro(const Stmt& s, const ScopePtr& closure, Args& args, const std::string& name);
  void assign_targets(const std::vector<std::string>& targets, const Value& v, Scope& scope);

  Value eval(const Expr& e, const ScopePtr& scope);
  Value eval_inner(const Expr& e, const ScopePtr& scope);
  Value eval_binary(const std::string& op, const Value& a, const Value& b);
  bool eval_compare(const std::string& op, const Value& a, const Value& b);
  Value eval_slice(const Value& obj, const Value& start, const Value& stop, const Value& step);
  Args eval_args(const Expr& e, const ScopePtr& scope);
  Value eval_filter_chain(const Expr& e, const ScopePtr& scope, const Value& body_value);
  Value lookup_name(const std::string& name, const ScopePtr& scope);

  void append(std::string& out, const std::string& text) const;

  const Template& tmpl_;
  RenderLimits limits_;
  std::optional<std::tm> now_;
  int64_t num_iterations_ = 0;
  int call_depth_ = 0;
  // Statements being executed plus expressions being evaluated, nested (macro calls included): bounds the C++
  // stack whatever mix of deep syntax and recursion a template uses.
  static constexpr int kMaxNesting = 1500;
  int eval_depth_ = 0;
  ScopePtr globals_;
};

// Builtins (builtins.cc, methods.cc).
Value call_builtin_filter(Interpreter& in, const std::string& name, const Value& v, Args& args, bool* found);
bool call_builtin_test(Interpreter& in, const std::string& name, const Value& v, Args& args, bool* found);
// Returns a bound method for obj.name, or nullopt when the type has no such method.
std::optional<Value> bound_method(const Value& obj, const std::string& name);
void install_globals(Scope& globals, std::optional<std::tm> now);
// Python `fmt % operand` and `fmt.format(*args, **kwargs)` (py_format.cc).
Value percent_format(const std::string& fmt, const Value& operand);
Value str_format(const std::string& fmt, const Args& args);
// The Markup rule: Markup + str escapes the plain side. Returns the concatenation of two strings.
Value concat_strings(const Value& a, const Value& b);

}  // namespace llmserve::jinja
