// Expression evaluation: Python semantics for operators (int vs float division, floor modulo, `and`/`or`
// returning operands, chained comparisons), jinja2's undefined rules, slicing by code point.
// Invariant: evaluation depth is bounded, and every arithmetic result that could grow without bound is sized first.
#include <cmath>

#include "tokenizer/chat_template/interpreter.h"

namespace llmserve::jinja {
namespace {

[[noreturn]] void undefined_error(const Value& v) {
  throw TemplateError(v.str().empty() ? "undefined value used in an expression" : "'" + v.str() + "' is undefined");
}

std::string op_error(const std::string& op, const Value& a, const Value& b) {
  return "unsupported operand type(s) for " + op + ": '" + a.type_name() + "' and '" + b.type_name() + "'";
}

int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

}  // namespace

Value concat_strings(const Value& a, const Value& b) {
  if (a.is_safe() || b.is_safe()) {  // markupsafe: the plain side is escaped, the result stays Markup
    std::string l = a.is_safe() ? a.str() : html_escape(a.str());
    std::string r = b.is_safe() ? b.str() : html_escape(b.str());
    return Value(l + r, true);
  }
  return Value(a.str() + b.str());
}

Value Interpreter::eval(const Expr& e, const ScopePtr& scope) {
  if (++eval_depth_ > kMaxNesting) {
    --eval_depth_;
    throw TemplateError("template evaluation nested too deeply (sandbox limit)", e.line);
  }
  struct Restore {
    int* d;
    ~Restore() { --*d; }
  } restore{&eval_depth_};
  try {
    return eval_inner(e, scope);
  } catch (TemplateError& err) {
    if (err.line == 0) err.line = e.line;
    throw;
  }
}

Args Interpreter::eval_args(const Expr& e, const ScopePtr& scope) {
  Args args;
  args.interp = this;
  for (const auto& a : e.args) args.positional.push_back(eval(*a, scope));
  if (e.star_args) {
    for (const Value& v : iterate(eval(*e.star_args, scope))) args.positional.push_back(v);
  }
  for (const auto& [k, v] : e.kwargs) args.kwargs.emplace_back(k, eval(*v, scope));
  if (e.star_kwargs) {
    Value d = eval(*e.star_kwargs, scope);
    if (!d.is_dict()) throw TemplateError("argument after ** must be a mapping");
    for (const auto& [k, v] : d.dict_data().items) args.kwargs.emplace_back(k.to_str(), v);
  }
  return args;
}

Value Interpreter::eval_inner(const Expr& e, const ScopePtr& scope) {
  switch (e.kind) {
    case ExprKind::kLiteral:
      return e.value;
    case ExprKind::kName:
      return lookup_name(e.name, scope);
    case ExprKind::kList:
    case ExprKind::kTuple: {
      ValueList items;
      for (const auto& a : e.args) items.push_back(eval(*a, scope));
      return Value::list(std::move(items), e.kind == ExprKind::kTuple);
    }
    case ExprKind::kDict: {
      auto d = std::make_shared<DictData>();
      for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
        Value k = eval(*e.args[i], scope);
        if (k.is_list() && !k.is_tuple()) throw TemplateError("unhashable type: 'list'");
        if (k.is_dict()) throw TemplateError("unhashable type: 'dict'");
        d->set(k, eval(*e.args[i + 1], scope));
      }
      return Value::dict(std::move(d));
    }
    case ExprKind::kUnary: {
      Value v = eval(*e.a, scope);
      if (e.name == "not") return Value(!v.truthy());
      if (v.is_undefined()) undefined_error(v);
      if (!v.is_number()) throw TemplateError("bad operand type for unary " + e.name + ": '" + v.type_name() + "'");
      if (e.name == "+") return v.is_float() ? v : Value(v.as_int());
      if (!v.is_float() && v.as_int() == INT64_MIN) throw TemplateError("integer overflow in unary '-'");
      return v.is_float() ? Value(-v.as_double()) : Value(-v.as_int());
    }
    case ExprKind::kBinary:
      return eval_binary(e.name, eval(*e.a, scope), eval(*e.b, scope));
    case ExprKind::kAnd: {
      Value a = eval(*e.a, scope);
      return a.truthy() ? eval(*e.b, scope) : a;
    }
    case ExprKind::kOr: {
      Value a = eval(*e.a, scope);
      return a.truthy() ? a : eval(*e.b, scope);
    }
    case ExprKind::kCompare: {
      Value left = eval(*e.a, scope);
      for (size_t i = 0; i < e.ops.size(); ++i) {
        Value right = eval(*e.args[i], scope);
        if (!eval_compare(e.ops[i], left, right)) return Value(false);
        left = std::move(right);
      }
      return Value(true);
    }
    case ExprKind::kCondExpr: {
      if (eval(*e.b, scope).truthy()) return eval(*e.a, scope);
      return e.c ? eval(*e.c, scope) : Value::undefined();
    }
    case ExprKind::kGetAttr:
      return get_attr(eval(*e.a, scope), e.name);
    case ExprKind::kGetItem:
      return get_item(eval(*e.a, scope), eval(*e.b, scope));
    case ExprKind::kSlice: {
      Value obj = eval(*e.a, scope);
      Value start = e.b ? eval(*e.b, scope) : Value::none();
      Value stop = e.c ? eval(*e.c, scope) : Value::none();
      Value step = e.d ? eval(*e.d, scope) : Value::none();
      return eval_slice(obj, start, stop, step);
    }
    case ExprKind::kCall: {
      Value callee = eval(*e.a, scope);
      Args args = eval_args(e, scope);
      return call(callee, args);
    }
    case ExprKind::kFilter: {
      Value operand = eval(*e.a, scope);
      Args args = eval_args(e, scope);
      return apply_filter(e.name, operand, args);
    }
    case ExprKind::kTest: {
      Value operand = eval(*e.a, scope);
      Args args = eval_args(e, scope);
      bool r = apply_test(e.name, operand, args);
      return Value(e.negated ? !r : r);
    }
  }
  throw TemplateError("unknown expression");
}

Value Interpreter::eval_binary(const std::string& op, const Value& a, const Value& b) {
  if (op == "~") {
    std::string s = to_str(a);
    std::string t = to_str(b);
    check_size(s.size() + t.size());
    return Value(s + t);
  }
  if (a.is_undefined()) undefined_error(a);
  if (b.is_undefined()) undefined_error(b);
  if (a.is_number() && b.is_number()) {
    bool is_float = a.is_float() || b.is_float();
    double x = a.as_double(), y = b.as_double();
    int64_t i = a.as_int(), j = b.as_int();
    int64_t r = 0;
    // Python ints never overflow; ours are 64-bit, so an overflow is reported instead of wrapping.
    auto checked = [&](bool overflow) {
      if (overflow) throw TemplateError("integer overflow in '" + op + "'");
      return Value(r);
    };
    if (op == "+") return is_float ? Value(x + y) : checked(__builtin_add_overflow(i, j, &r));
    if (op == "-") return is_float ? Value(x - y) : checked(__builtin_sub_overflow(i, j, &r));
    if (op == "*") return is_float ? Value(x * y) : checked(__builtin_mul_overflow(i, j, &r));
    if (op == "/") {
      if (y == 0) throw TemplateError("division by zero");
      return Value(x / y);
    }
    if (op == "//" || op == "%") {
      if (y == 0) throw TemplateError(is_float ? "float division by zero" : "integer division or modulo by zero");
      if (is_float) {
        double m = std::fmod(x, y);
        if (m != 0 && ((m < 0) != (y < 0))) m += y;
        return op == "%" ? Value(m) : Value(std::floor((x - m) / y));
      }
      if (i == INT64_MIN && j == -1) throw TemplateError("integer overflow in '" + op + "'");
      int64_t q = floor_div(i, j);
      return op == "//" ? Value(q) : Value(i - q * j);
    }
    if (op == "**") {
      if (!is_float && j >= 0) {
        r = 1;
        for (int64_t k = 0; k < j; ++k) {
          if (__builtin_mul_overflow(r, i, &r)) throw TemplateError("integer overflow in '**'");
          if (r == 0 || r == 1) break;  // 0**n, 1**n
          if (r == -1) {
            r = ((j - k - 1) % 2 == 0) ? -1 : 1;
            break;
          }
        }
        return Value(r);
      }
      return Value(std::pow(x, y));
    }
  }
  if (op == "+") {
    if (a.is_string() && b.is_string()) {
      check_size(a.str().size() + b.str().size());
      return concat_strings(a, b);
    }
    if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
      ValueList items = a.items();
      items.insert(items.end(), b.items().begin(), b.items().end());
      return Value::list(std::move(items), a.is_tuple());
    }
  }
  if (op == "*") {
    const Value* seq = a.is_int() ? &b : &a;
    const Value* count = a.is_int() ? &a : &b;
    if ((seq->is_string() || seq->is_list()) && (count->is_int() || count->is_bool())) {
      int64_t n = std::max<int64_t>(0, count->as_int());
      size_t unit = seq->is_string() ? seq->str().size() : seq->items().size() * 16;
      if (unit > 0 && n > 0) check_size(static_cast<size_t>(n) > limits_.max_output_bytes ? SIZE_MAX : unit * n);
      if (seq->is_string()) {
        std::string out;
        for (int64_t k = 0; k < n; ++k) out += seq->str();
        return Value(out, seq->is_safe());
      }
      ValueList items;
      for (int64_t k = 0; k < n; ++k) items.insert(items.end(), seq->items().begin(), seq->items().end());
      return Value::list(std::move(items), seq->is_tuple());
    }
  }
  if (op == "%" && a.is_string()) {
    Value r = percent_format(a.str(), b);
    check_size(r.str().size());
    return r;
  }
  throw TemplateError(op_error(op, a, b));
}

bool Interpreter::eval_compare(const std::string& op, const Value& a, const Value& b) {
  if (op == "==") return values_equal(a, b);
  if (op == "!=") return !values_equal(a, b);
  if (op == "in" || op == "notin") {
    bool r;
    if (b.is_string()) {
      if (a.is_undefined()) undefined_error(a);
      if (!a.is_string()) throw TemplateError("'in <string>' requires string as left operand, not " + a.type_name());
      r = b.str().find(a.str()) != std::string::npos;
    } else if (b.is_dict() && !b.is_namespace()) {
      r = b.dict_data().find(a) != nullptr;
    } else if (b.is_list() || b.is_undefined()) {
      r = false;
      for (const Value& item : iterate(b)) {
        if (values_equal(item, a)) {
          r = true;
          break;
        }
      }
    } else {
      throw TemplateError("argument of type '" + b.type_name() + "' is not iterable");
    }
    return op == "in" ? r : !r;
  }
  if (a.is_undefined()) undefined_error(a);
  if (b.is_undefined()) undefined_error(b);
  if (op == "<") return values_less(a, b);
  if (op == ">") return values_less(b, a);
  if (op == "<=") return values_less(a, b) || values_equal(a, b);
  if (op == ">=") return values_less(b, a) || values_equal(a, b);
  throw TemplateError("unknown comparison " + op);
}

Value Interpreter::eval_slice(const Value& obj, const Value& start_v, const Value& stop_v, const Value& step_v) {
  if (obj.is_undefined()) undefined_error(obj);
  auto as_index = [](const Value& v, const char* what) -> std::optional<int64_t> {
    if (v.is_none()) return std::nullopt;
    if (!v.is_int() && !v.is_bool()) {
      throw TemplateError(std::string("slice ") + what + " must be an integer or None, not " + v.type_name());
    }
    return v.as_int();
  };
  std::optional<int64_t> start = as_index(start_v, "start"), stop = as_index(stop_v, "stop"),
                         step_o = as_index(step_v, "step");
  int64_t step = step_o.value_or(1);
  if (step == 0) throw TemplateError("slice step cannot be zero");
  std::u32string chars;
  int64_t n;
  if (obj.is_string()) {
    chars = utf8_decode(obj.str());
    n = static_cast<int64_t>(chars.size());
  } else if (obj.is_list() && !obj.is_iterator()) {
    n = static_cast<int64_t>(obj.items().size());
  } else {
    throw TemplateError("'" + obj.type_name() + "' object is not subscriptable");
  }
  // Python's PySlice_AdjustIndices.
  auto adjust = [n, step](std::optional<int64_t> v, bool is_start) -> int64_t {
    if (!v) return step < 0 ? (is_start ? n - 1 : -1) : (is_start ? 0 : n);
    int64_t i = *v;
    if (i < 0) {
      i += n;
      if (i < 0) i = step < 0 ? -1 : 0;
    } else if (i >= n) {
      i = step < 0 ? n - 1 : n;
    }
    return i;
  };
  int64_t b = adjust(start, true), e = adjust(stop, false);
  std::vector<int64_t> idx;
  using Wide = __int128;  // i + step must not overflow for huge steps
  if (step > 0) {
    for (Wide i = b; i < e; i += step) idx.push_back(static_cast<int64_t>(i));
  } else {
    for (Wide i = b; i > e; i += step) idx.push_back(static_cast<int64_t>(i));
  }
  if (obj.is_string()) {
    std::u32string out;
    for (int64_t i : idx) out += chars[i];
    return Value(utf8_encode(out));
  }
  ValueList items;
  for (int64_t i : idx) items.push_back(obj.items()[i]);
  return Value::list(std::move(items), obj.is_tuple());
}

}  // namespace llmserve::jinja
