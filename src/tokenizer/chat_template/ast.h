// Abstract syntax tree of a parsed Jinja template: expressions and statements, each tagged with its source line.
// Invariant: the tree is immutable after parsing and owns all its nodes (unique_ptr), so a ChatTemplate can be
// rendered concurrently from several threads.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/chat_template/value.h"

namespace llmserve::jinja {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

enum class ExprKind {
  kLiteral,   // value
  kName,      // name
  kList,      // args
  kTuple,     // args
  kDict,      // args as key0, value0, key1, value1...
  kUnary,     // name in {"not", "-", "+"}, a
  kBinary,    // name in {"+","-","*","/","//","%","**","~"}, a, b
  kAnd,       // a, b
  kOr,        // a, b
  kCompare,   // a, then ops (name list in `ops`) against args
  kCondExpr,  // a if b else c (c may be null)
  kGetAttr,   // a.name
  kGetItem,   // a[b]
  kSlice,     // a[b:c:d] (b, c, d may be null)
  kCall,      // a(args, kwargs)
  kFilter,    // a | name(args, kwargs); a == null means "the enclosing block's body" (filter/set blocks)
  kTest,      // a is [not] name(args); negated
};

struct Expr {
  ExprKind kind;
  int line = 0;
  std::string name;
  Value value;
  ExprPtr a, b, c, d;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;
  ExprPtr star_args, star_kwargs;  // f(*x, **y)
  bool negated = false;
};

enum class StmtKind {
  kText,         // text
  kPrint,        // expr
  kIf,           // branches (cond, body); else_body
  kFor,          // targets, iter, cond (filter), body, else_body, recursive
  kSet,          // targets (1 name or several for unpacking), or ns_name + attr; expr
  kBlockSet,     // targets[0]; filter (may be null); body
  kMacro,        // name, params (name, default), body
  kCallBlock,    // expr (the call), params (caller's), body
  kFilterBlock,  // filter; body
  kBreak,
  kContinue,
  kScope,  // body in its own scope (`with`), expr assignments in params
  kBody,   // body inline (generation blocks)
};

struct Stmt {
  StmtKind kind;
  int line = 0;
  std::string text;
  ExprPtr expr;    // print / set / call / for iter
  ExprPtr cond;    // for's `if`
  ExprPtr filter;  // block set / filter block: a kFilter chain whose innermost operand is null
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body, else_body;
  std::vector<std::string> targets;
  std::string ns_name, attr;
  std::string name;
  std::vector<std::pair<std::string, ExprPtr>> params;  // macro params with optional defaults
  bool recursive = false;
  // Macros (and call blocks) accept extra positionals / unknown keywords / a caller only when their body
  // mentions varargs / kwargs / caller, as jinja2 decides at compile time.
  bool uses_varargs = false, uses_kwargs = false, uses_caller = false;
};

struct Template {
  Body body;
};

}  // namespace llmserve::jinja
