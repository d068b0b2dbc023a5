// Recursive-descent Jinja2 parser following jinja2/parser.py function by function (names kept for review).
// Invariant: expression/statement nesting is bounded by kMaxDepth; every node carries its source line.
#include "tokenizer/chat_template/parser.h"

#include <set>

#include "tokenizer/chat_template/lexer.h"

namespace llmserve::jinja {
namespace {

constexpr int kMaxDepth = 200;

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : toks_(std::move(tokens)) {}

  Template parse() {
    Template t;
    t.body = subparse({});
    if (cur().kind != TokenKind::kEof) fail("unexpected tag");
    return t;
  }

 private:
  struct DepthGuard {
    explicit DepthGuard(Parser* p) : p(p) {
      if (++p->depth_ > kMaxDepth) throw TemplateError("template nested too deeply", p->cur().line);
    }
    ~DepthGuard() { --p->depth_; }
    Parser* p;
  };
  // Filters/tests unknown at compile time are errors except inside `if` tests/bodies and conditional expressions.
  struct SoftGuard {
    SoftGuard(Parser* p, bool soft) : p(p), saved(p->soft_) { p->soft_ = soft; }
    ~SoftGuard() { p->soft_ = saved; }
    Parser* p;
    bool saved;
  };

  const Token& cur() const { return toks_[pos_]; }
  const Token& peek(size_t n = 1) const { return toks_[std::min(pos_ + n, toks_.size() - 1)]; }
  void next() {
    if (pos_ + 1 < toks_.size()) ++pos_;
  }
  [[noreturn]] void fail(const std::string& msg) const { throw TemplateError(msg, cur().line); }
  bool is_op(const char* op) const { return cur().kind == TokenKind::kOperator && cur().text == op; }
  bool is_name(const char* name) const { return cur().kind == TokenKind::kName && cur().text == name; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(const char* name) {
    if (!is_name(name)) return false;
    next();
    return true;
  }
  void expect_op(const char* op) {
    if (!skip_op(op)) fail(std::string("expected token '") + op + "', got '" + describe() + "'");
  }
  std::string expect_name() {
    if (cur().kind != TokenKind::kName) fail("expected name, got '" + describe() + "'");
    std::string n = cur().text;
    next();
    return n;
  }
  void expect_block_end() {
    if (cur().kind != TokenKind::kBlockEnd) fail("expected end of statement block, got '" + describe() + "'");
    next();
  }
  std::string describe() const {
    switch (cur().kind) {
      case TokenKind::kEof:
        return "end of template";
      case TokenKind::kBlockEnd:
        return "end of statement block";
      case TokenKind::kVarEnd:
        return "end of print statement";
      default:
        return cur().text;
    }
  }

  ExprPtr node(ExprKind kind, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
  }

  // Parses statements until `{% <one of end_tags> ...`; leaves the stream on that tag's name.
  Body subparse(const std::set<std::string>& end_tags) {
    Body body;
    while (true) {
      const Token& t = cur();
      if (t.kind == TokenKind::kEof) {
        if (!end_tags.empty()) fail("unexpected end of template, expected '" + *end_tags.begin() + "'");
        return body;
      }
      if (t.kind == TokenKind::kData) {
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::kText;
        s->line = t.line;
        s->text = t.text;
        body.push_back(std::move(s));
        next();
      } else if (t.kind == TokenKind::kVarBegin) {
        next();
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::kPrint;
        s->line = cur().line;
        s->expr = parse_tuple(false, true, {});
        if (cur().kind != TokenKind::kVarEnd) fail("expected end of print statement, got '" + describe() + "'");
        next();
        body.push_back(std::move(s));
      } else if (t.kind == TokenKind::kBlockBegin) {
        next();
        if (cur().kind == TokenKind::kName && end_tags.count(cur().text)) return body;
        body.push_back(parse_statement());
      } else {
        fail("unexpected token '" + describe() + "'");
      }
    }
  }

  // Parses a body up to one of end_tags; consumes the closing tag when drop_needle.
  Body parse_statements(const std::set<std::string>& end_tags, bool drop_needle) {
    expect_block_end();
    Body body = subparse(end_tags);
    if (drop_needle) {
      next();
      expect_block_end();
    }
    return body;
  }

  StmtPtr parse_statement() {
    DepthGuard guard(this);
    if (cur().kind != TokenKind::kName) fail("tag name expected");
    std::string tag = cur().text;
    int line = cur().line;
    auto s = std::make_unique<Stmt>();
    s->line = line;
    next();
    if (tag == "if") return parse_if(std::move(s));
    if (tag == "for") return parse_for(std::move(s));
    if (tag == "set") return parse_set(std::move(s));
    if (tag == "macro") return parse_macro(std::move(s));
    if (tag == "call") return parse_call_block(std::move(s));
    if (tag == "filter") {
      s->kind = StmtKind::kFilterBlock;
      s->filter = parse_filter(nullptr, true);
      SoftGuard soft(this, false);
      s->body = parse_statements({"endfilter"}, true);
      return s;
    }
    if (tag == "with") return parse_with(std::move(s));
    if (tag == "generation") {  // transformers' AssistantTracker extension: renders its body unchanged
      s->kind = StmtKind::kBody;
      s->body = parse_statements({"endgeneration"}, true);
      return s;
    }
    if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) fail("'" + tag + "' outside of a loop");
      s->kind = tag == "break" ? StmtKind::kBreak : StmtKind::kContinue;
      expect_block_end();
      return s;
    }
    pos_--;
    fail("Encountered unknown tag '" + tag + "'.");
  }

  StmtPtr parse_if(StmtPtr s) {
    SoftGuard soft(this, true);
    s->kind = StmtKind::kIf;
    while (true) {
      ExprPtr test = parse_tuple(false, false, {});
      Body body = parse_statements({"elif", "else", "endif"}, false);
      s->branches.emplace_back(std::move(test), std::move(body));
      std::string tok = cur().text;
      next();
      if (tok == "elif") continue;
      if (tok == "else")
        s->else_body = parse_statements({"endif"}, true);
      else
        expect_block_end();
      return s;
    }
  }

  std::vector<std::string> parse_targets(const std::set<std::string>& end_names) {
    std::vector<std::string> targets;
    bool paren = skip_op("(");
    while (true) {
      targets.push_back(expect_name());
      if (!skip_op(",")) break;
      if (cur().kind == TokenKind::kName && end_names.count(cur().text)) break;
      if (paren && is_op(")")) break;
    }
    if (paren) expect_op(")");
    return targets;
  }

  StmtPtr parse_for(StmtPtr s) {
    s->kind = StmtKind::kFor;
    s->targets = parse_targets({"in"});
    if (!skip_name("in")) fail("expected 'in'");
    s->expr = parse_tuple(false, false, {"recursive"});
    if (skip_name("if")) s->cond = parse_expression(true);
    s->recursive = skip_name("recursive");
    SoftGuard soft(this, false);
    ++loop_depth_;
    s->body = parse_statements({"endfor", "else"}, false);
    --loop_depth_;
    if (cur().text == "else") {
      next();
      s->else_body = parse_statements({"endfor"}, true);
    } else {
      next();
      expect_block_end();
    }
    return s;
  }

  StmtPtr parse_set(StmtPtr s) {
    if (cur().kind == TokenKind::kName && peek().kind == TokenKind::kOperator && peek().text == ".") {
      s->ns_name = expect_name();
      next();
      s->attr = expect_name();
    } else {
      s->targets = parse_targets({});
    }
    if (skip_op("=")) {
      s->kind = StmtKind::kSet;
      s->expr = parse_tuple(false, true, {});
      expect_block_end();
      return s;
    }
    if (!s->ns_name.empty() || s->targets.size() != 1) fail("expected token '='");
    s->kind = StmtKind::kBlockSet;
    if (is_op("|")) s->filter = parse_filter(nullptr, false);
    s->body = parse_statements({"endset"}, true);
    return s;
  }

  void parse_signature(StmtPtr& s) {
    expect_op("(");
    bool seen_default = false;
    while (!is_op(")")) {
      if (!s->params.empty()) expect_op(",");
      if (is_op(")")) break;
      std::string name = expect_name();
      ExprPtr def;
      if (skip_op("=")) {
        def = parse_expression(true);
        seen_default = true;
      } else if (seen_default) {
        fail("non-default argument follows default argument");
      }
      s->params.emplace_back(name, std::move(def));
    }
    expect_op(")");
  }

  StmtPtr parse_macro(StmtPtr s) {
    s->kind = StmtKind::kMacro;
    s->name = expect_name();
    parse_signature(s);
    SoftGuard soft(this, false);
    int saved_loops = loop_depth_;
    loop_depth_ = 0;
    std::set<std::string> names;
    name_sinks_.push_back(&names);
    s->body = parse_statements({"endmacro"}, true);
    name_sinks_.pop_back();
    note_special_names(*s, names);
    loop_depth_ = saved_loops;
    return s;
  }

  static void note_special_names(Stmt& s, const std::set<std::string>& names) {
    s.uses_varargs = names.count("varargs") > 0;
    s.uses_kwargs = names.count("kwargs") > 0;
    s.uses_caller = names.count("caller") > 0;
  }

  StmtPtr parse_call_block(StmtPtr s) {
    s->kind = StmtKind::kCallBlock;
    if (is_op("(")) parse_signature(s);
    s->expr = parse_expression(true);
    if (s->expr->kind != ExprKind::kCall) fail("expected call");
    SoftGuard soft(this, false);
    int saved_loops = loop_depth_;
    loop_depth_ = 0;
    std::set<std::string> names;
    name_sinks_.push_back(&names);
    s->body = parse_statements({"endcall"}, true);
    name_sinks_.pop_back();
    note_special_names(*s, names);
    loop_depth_ = saved_loops;
    return s;
  }

  StmtPtr parse_with(StmtPtr s) {
    s->kind = StmtKind::kScope;
    while (cur().kind != TokenKind::kBlockEnd) {
      if (!s->params.empty()) expect_op(",");
      std::string name = expect_name();
      expect_op("=");
      s->params.emplace_back(name, parse_expression(true));
    }
    s->body = parse_statements({"endwith"}, true);
    return s;
  }

  // ---- expressions ----
  bool is_tuple_end(const std::set<std::string>& extra) const {
    TokenKind k = cur().kind;
    if (k == TokenKind::kVarEnd || k == TokenKind::kBlockEnd || k == TokenKind::kEof) return true;
    if (k == TokenKind::kOperator && cur().text == ")") return true;
    return k == TokenKind::kName && extra.count(cur().text);
  }

  ExprPtr parse_tuple(bool explicit_parens, bool with_condexpr, const std::set<std::string>& extra_end) {
    int line = cur().line;
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) expect_op(",");
      if (is_tuple_end(extra_end)) break;
      items.push_back(parse_expression(with_condexpr));
      if (is_op(","))
        is_tuple = true;
      else
        break;
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parens) fail("Expected an expression, got '" + describe() + "'");
    }
    auto e = node(ExprKind::kTuple, line);
    e->args = std::move(items);
    return e;
  }

  ExprPtr parse_expression(bool with_condexpr) {
    DepthGuard guard(this);
    return with_condexpr ? parse_condexpr() : parse_or();
  }

  ExprPtr parse_condexpr() {
    int line = cur().line;
    ExprPtr expr1 = parse_or();
    while (skip_name("if")) {
      SoftGuard soft(this, true);
      auto e = node(ExprKind::kCondExpr, line);
      e->b = parse_or();
      e->a = std::move(expr1);
      if (skip_name("else")) e->c = parse_condexpr();
      expr1 = std::move(e);
    }
    return expr1;
  }

  ExprPtr binary(ExprKind kind, std::string op, ExprPtr a, ExprPtr b, int line) {
    auto e = node(kind, line);
    e->name = std::move(op);
    e->a = std::move(a);
    e->b = std::move(b);
    return e;
  }

  ExprPtr parse_or() {
    int line = cur().line;
    ExprPtr left = parse_and();
    while (skip_name("or")) left = binary(ExprKind::kOr, "or", std::move(left), parse_and(), line);
    return left;
  }
  ExprPtr parse_and() {
    int line = cur().line;
    ExprPtr left = parse_not();
    while (skip_name("and")) left = binary(ExprKind::kAnd, "and", std::move(left), parse_not(), line);
    return left;
  }
  ExprPtr parse_not() {
    DepthGuard guard(this);
    if (is_name("not")) {
      int line = cur().line;
      next();
      auto e = node(ExprKind::kUnary, line);
      e->name = "not";
      e->a = parse_not();
      return e;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    int line = cur().line;
    ExprPtr expr = parse_math1();
    std::unique_ptr<Expr> cmp;
    while (true) {
      std::string op;
      if (cur().kind == TokenKind::kOperator && (cur().text == "==" || cur().text == "!=" || cur().text == "<" ||
                                                 cur().text == "<=" || cur().text == ">" || cur().text == ">=")) {
        op = cur().text;
        next();
      } else if (skip_name("in")) {
        op = "in";
      } else if (is_name("not") && peek().kind == TokenKind::kName && peek().text == "in") {
        next();
        next();
        op = "notin";
      } else {
        break;
      }
      if (!cmp) {
        cmp = node(ExprKind::kCompare, line);
        cmp->a = std::move(expr);
      }
      cmp->ops.push_back(op);
      cmp->args.push_back(parse_math1());
    }
    return cmp ? std::move(cmp) : std::move(expr);
  }

  ExprPtr parse_math1() {
    int line = cur().line;
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      std::string op = cur().text;
      next();
      left = binary(ExprKind::kBinary, op, std::move(left), parse_concat(), line);
    }
    return left;
  }
  ExprPtr parse_concat() {
    int line = cur().line;
    ExprPtr left = parse_math2();
    while (skip_op("~")) left = binary(ExprKind::kBinary, "~", std::move(left), parse_math2(), line);
    return left;
  }
  ExprPtr parse_math2() {
    int line = cur().line;
    ExprPtr left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      std::string op = cur().text;
      next();
      left = binary(ExprKind::kBinary, op, std::move(left), parse_pow(), line);
    }
    return left;
  }
  ExprPtr parse_pow() {
    int line = cur().line;
    ExprPtr left = parse_unary(true);
    while (skip_op("**")) left = binary(ExprKind::kBinary, "**", std::move(left), parse_unary(true), line);
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    DepthGuard guard(this);
    int line = cur().line;
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      std::string op = cur().text;
      next();
      e = node(ExprKind::kUnary, line);
      e->name = op;
      e->a = parse_unary(false);
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filter_expr(std::move(e));
    return e;
  }

  ExprPtr literal(Value v, int line) {
    auto e = node(ExprKind::kLiteral, line);
    e->value = std::move(v);
    return e;
  }

  ExprPtr parse_primary() {
    DepthGuard guard(this);
    const Token& t = cur();
    int line = t.line;
    switch (t.kind) {
      case TokenKind::kName: {
        std::string n = t.text;
        next();
        if (n == "true" || n == "True") return literal(Value(true), line);
        if (n == "false" || n == "False") return literal(Value(false), line);
        if (n == "none" || n == "None") return literal(Value::none(), line);
        auto e = node(ExprKind::kName, line);
        e->name = n;
        for (auto* sink : name_sinks_) sink->insert(n);
        return e;
      }
      case TokenKind::kString: {
        std::string s = t.text;
        next();
        while (cur().kind == TokenKind::kString) {
          s += cur().text;
          next();
        }
        return literal(Value(s), line);
      }
      case TokenKind::kInt: {
        std::string text = t.text;
        next();
        try {
          return literal(Value(static_cast<int64_t>(std::stoll(text))), line);
        } catch (const std::exception&) {
          return literal(Value(std::stod(text)), line);  // beyond int64: Python keeps a big int; rare
        }
      }
      case TokenKind::kFloat: {
        std::string text = t.text;
        next();
        return literal(Value(std::strtod(text.c_str(), nullptr)), line);
      }
      case TokenKind::kOperator:
        if (t.text == "(") {
          next();
          ExprPtr e = parse_tuple(true, true, {});
          expect_op(")");
          return e;
        }
        if (t.text == "[") return parse_list();
        if (t.text == "{") return parse_dict();
        break;
      default:
        break;
    }
    fail("unexpected '" + describe() + "'");
  }

  ExprPtr parse_list() {
    auto e = node(ExprKind::kList, cur().line);
    expect_op("[");
    while (!is_op("]")) {
      if (!e->args.empty()) expect_op(",");
      if (is_op("]")) break;
      e->args.push_back(parse_expression(true));
    }
    expect_op("]");
    return e;
  }

  ExprPtr parse_dict() {
    auto e = node(ExprKind::kDict, cur().line);
    expect_op("{");
    while (!is_op("}")) {
      if (!e->args.empty()) expect_op(",");
      if (is_op("}")) break;
      e->args.push_back(parse_expression(true));
      expect_op(":");
      e->args.push_back(parse_expression(true));
    }
    expect_op("}");
    return e;
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      if (is_op(".") || is_op("[")) {
        e = parse_subscript(std::move(e));
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_filter_expr(ExprPtr e) {
    while (true) {
      if (is_op("|")) {
        e = parse_filter(std::move(e), false);
      } else if (is_name("is")) {
        e = parse_test(std::move(e));
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr target) {
    DepthGuard guard(this);
    int line = cur().line;
    if (skip_op(".")) {
      if (cur().kind == TokenKind::kName) {
        auto e = node(ExprKind::kGetAttr, line);
        e->name = cur().text;
        e->a = std::move(target);
        next();
        return e;
      }
      if (cur().kind != TokenKind::kInt) fail("expected name or number");
      auto e = node(ExprKind::kGetItem, line);
      e->a = std::move(target);
      e->b = literal(Value(static_cast<int64_t>(std::stoll(cur().text))), line);
      next();
      return e;
    }
    expect_op("[");
    std::vector<ExprPtr> args;
    while (!is_op("]")) {
      if (!args.empty()) {
        expect_op(",");
        if (is_op("]")) break;
      }
      args.push_back(parse_subscribed());
    }
    expect_op("]");
    if (args.empty()) fail("expected subscript expression");
    if (args.size() == 1 && args[0]->kind == ExprKind::kSlice) {
      args[0]->a = std::move(target);
      return std::move(args[0]);
    }
    auto e = node(ExprKind::kGetItem, line);
    e->a = std::move(target);
    if (args.size() == 1) {
      e->b = std::move(args[0]);
    } else {
      e->b = node(ExprKind::kTuple, line);
      e->b->args = std::move(args);
    }
    return e;
  }

  ExprPtr parse_subscribed() {
    int line = cur().line;
    ExprPtr start;
    if (!is_op(":")) {
      start = parse_expression(true);
      if (!is_op(":")) return start;
    }
    next();
    auto e = node(ExprKind::kSlice, line);
    e->b = std::move(start);
    if (!is_op("]") && !is_op(",") && !is_op(":")) e->c = parse_expression(true);
    if (skip_op(":")) {
      if (!is_op("]") && !is_op(",")) e->d = parse_expression(true);
    }
    return e;
  }

  void parse_call_args(Expr* e) {
    expect_op("(");
    bool first = true;
    while (!is_op(")")) {
      if (!first) {
        expect_op(",");
        if (is_op(")")) break;
      }
      first = false;
      if (skip_op("*")) {
        e->star_args = parse_expression(true);
      } else if (skip_op("**")) {
        e->star_kwargs = parse_expression(true);
      } else if (cur().kind == TokenKind::kName && peek().kind == TokenKind::kOperator && peek().text == "=") {
        std::string key = cur().text;
        next();
        next();
        e->kwargs.emplace_back(key, parse_expression(true));
      } else {
        if (!e->kwargs.empty()) fail("positional argument after keyword argument");
        e->args.push_back(parse_expression(true));
      }
    }
    expect_op(")");
  }

  ExprPtr parse_call(ExprPtr target) {
    DepthGuard guard(this);
    auto e = node(ExprKind::kCall, cur().line);
    e->a = std::move(target);
    parse_call_args(e.get());
    return e;
  }

  std::string parse_dotted_name() {
    std::string name = expect_name();
    while (is_op(".") && peek().kind == TokenKind::kName) {
      next();
      name += "." + expect_name();
    }
    return name;
  }

  // `| f(args) | g` (or, with start_inline, `f(args) | g` as in filter blocks). A null operand stands for the
  // enclosing block's rendered body.
  ExprPtr parse_filter(ExprPtr operand, bool start_inline) {
    while (is_op("|") || start_inline) {
      if (!start_inline) next();
      start_inline = false;
      int line = cur().line;
      auto e = node(ExprKind::kFilter, line);
      e->name = parse_dotted_name();
      if (!soft_ && !is_known_filter(e->name)) throw TemplateError("No filter named '" + e->name + "'.", line);
      e->a = std::move(operand);
      if (is_op("(")) parse_call_args(e.get());
      operand = std::move(e);
    }
    return operand;
  }

  ExprPtr parse_test(ExprPtr operand) {
    DepthGuard guard(this);
    int line = cur().line;
    next();  // `is`
    auto e = node(ExprKind::kTest, line);
    e->negated = skip_name("not");
    e->name = parse_dotted_name();
    if (!soft_ && !is_known_test(e->name)) throw TemplateError("No test named '" + e->name + "'.", line);
    e->a = std::move(operand);
    if (is_op("(")) {
      parse_call_args(e.get());
    } else if ((cur().kind == TokenKind::kName || cur().kind == TokenKind::kString || cur().kind == TokenKind::kInt ||
                cur().kind == TokenKind::kFloat || is_op("(") || is_op("[") || is_op("{")) &&
               !is_name("else") && !is_name("or") && !is_name("and")) {
      if (is_name("is")) fail("You cannot chain multiple tests with is");
      ExprPtr arg = parse_postfix(parse_primary());
      e->args.push_back(std::move(arg));
    }
    return e;
  }

  std::vector<Token> toks_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
  bool soft_ = false;
  std::vector<std::set<std::string>*> name_sinks_;  // names referenced inside the macros being parsed
};

}  // namespace

Template parse_template(const std::string& source) { return Parser(tokenize(source)).parse(); }

}  // namespace llmserve::jinja
