// Statement execution and expression evaluation with jinja2's scoping: `if` shares its scope, every `for`
// iteration and macro call gets a fresh child scope, and only namespaces carry values out of a loop.
// Invariant: every error leaving eval()/exec() carries the line of the innermost node that raised it.
#include "tokenizer/chat_template/interpreter.h"

#include <cmath>

namespace llmserve::jinja {

const Value* Scope::lookup(const std::string& name) const {
  for (const Scope* s = this; s; s = s->parent.get()) {
    auto it = s->vars.find(name);
    if (it != s->vars.end()) return &it->second;
  }
  return nullptr;
}

const Value* Args::kwarg(const char* name) const {
  for (const auto& [k, v] : kwargs) {
    if (k == name) return &v;
  }
  return nullptr;
}

Value Args::get(size_t index, const char* name, Value def) const {
  const Value* kw = name ? kwarg(name) : nullptr;
  if (index < positional.size()) {
    if (kw) throw TemplateError(std::string("got multiple values for argument '") + name + "'");
    return positional[index];
  }
  return kw ? *kw : def;
}

void Args::check(const char* fn, size_t max_positional, std::initializer_list<const char*> names) const {
  if (positional.size() > max_positional) {
    throw TemplateError(std::string(fn) + "() takes at most " + std::to_string(max_positional) +
                        " positional arguments (" + std::to_string(positional.size()) + " given)");
  }
  for (const auto& [k, v] : kwargs) {
    bool ok = false;
    for (const char* n : names) ok = ok || k == n;
    if (!ok) throw TemplateError(std::string(fn) + "() got an unexpected keyword argument '" + k + "'");
  }
}

void Interpreter::check_size(size_t bytes) const {
  if (bytes > limits_.max_output_bytes) {
    throw TemplateError("output exceeds the sandbox limit of " + std::to_string(limits_.max_output_bytes) + " bytes");
  }
}

void Interpreter::append(std::string& out, const std::string& text) const {
  check_size(out.size() + text.size());
  out += text;
}

std::string Interpreter::to_str(const Value& v) { return v.to_str(); }

std::string Interpreter::render(std::unordered_map<std::string, Value> context) {
  globals_ = std::make_shared<Scope>(nullptr);
  install_globals(*globals_, now_);
  auto root = std::make_shared<Scope>(globals_);
  root->vars = std::move(context);
  std::string out;
  exec_body(tmpl_.body, root, out);
  return out;
}

Interpreter::Flow Interpreter::exec_body(const Body& body, const ScopePtr& scope, std::string& out) {
  for (const auto& s : body) {
    Flow f = exec(*s, scope, out);
    if (f != Flow::kNormal) return f;
  }
  return Flow::kNormal;
}

Interpreter::Flow Interpreter::exec(const Stmt& s, const ScopePtr& scope, std::string& out) {
  if (++eval_depth_ > kMaxNesting) {
    --eval_depth_;
    throw TemplateError("template evaluation nested too deeply (sandbox limit)", s.line);
  }
  struct Restore {
    int* d;
    ~Restore() { --*d; }
  } restore{&eval_depth_};
  try {
    switch (s.kind) {
      case StmtKind::kText:
        append(out, s.text);
        break;
      case StmtKind::kPrint:
        append(out, to_str(eval(*s.expr, scope)));
        break;
      case StmtKind::kIf:
        for (const auto& [cond, body] : s.branches) {
          if (eval(*cond, scope).truthy()) return exec_body(body, scope, out);
        }
        return exec_body(s.else_body, scope, out);
      case StmtKind::kFor:
        exec_for(s, scope, out);
        break;
      case StmtKind::kSet:
        exec_set(s, scope);
        break;
      case StmtKind::kBlockSet: {
        std::string body;
        exec_body(s.body, std::make_shared<Scope>(scope), body);
        Value v(body);
        if (s.filter) v = eval_filter_chain(*s.filter, scope, v);
        scope->vars[s.targets[0]] = v;
        break;
      }
      case StmtKind::kMacro:
        scope->vars[s.name] = make_macro(s, scope);
        break;
      case StmtKind::kCallBlock:
        exec_call_block(s, scope, out);
        break;
      case StmtKind::kFilterBlock: {
        std::string body;
        exec_body(s.body, std::make_shared<Scope>(scope), body);
        append(out, to_str(eval_filter_chain(*s.filter, scope, Value(body))));
        break;
      }
      case StmtKind::kBreak:
        return Flow::kBreak;
      case StmtKind::kContinue:
        return Flow::kContinue;
      case StmtKind::kScope: {
        auto inner = std::make_shared<Scope>(scope);
        for (const auto& [name, expr] : s.params) inner->vars[name] = eval(*expr, scope);
        exec_body(s.body, inner, out);
        break;
      }
      case StmtKind::kBody:
        return exec_body(s.body, scope, out);
    }
  } catch (TemplateError& e) {
    if (e.line == 0) e.line = s.line;
    throw;
  }
  return Flow::kNormal;
}

void Interpreter::assign_targets(const std::vector<std::string>& targets, const Value& v, Scope& scope) {
  if (targets.size() == 1) {
    scope.vars[targets[0]] = v;
    return;
  }
  ValueList items = iterate(v);
  if (items.size() != targets.size()) {
    throw TemplateError((items.size() < targets.size() ? "not enough values to unpack (expected "
                                                       : "too many values to unpack (expected ") +
                        std::to_string(targets.size()) + ", got " + std::to_string(items.size()) + ")");
  }
  for (size_t i = 0; i < targets.size(); ++i) scope.vars[targets[i]] = items[i];
}

void Interpreter::exec_for(const Stmt& s, const ScopePtr& scope, std::string& out) {
  Value iterable = eval(*s.expr, scope);
  if (!iterable.is_list() && !iterable.is_dict() && !iterable.is_string() && !iterable.is_undefined()) {
    throw TemplateError("'" + iterable.type_name() + "' object is not iterable");
  }
  if (s.recursive) throw TemplateError("recursive loops are not supported");
  ValueList items = iterate(iterable);
  if (s.cond) {  // `for x in xs if cond`: the filter sees the loop target but not `loop`
    ValueList kept;
    for (const Value& item : items) {
      auto probe = std::make_shared<Scope>(scope);
      assign_targets(s.targets, item, *probe);
      if (eval(*s.cond, probe).truthy()) kept.push_back(item);
    }
    items = std::move(kept);
  }
  const int64_t n = static_cast<int64_t>(items.size());
  // One `loop` object and one iteration scope per loop, refreshed in place each iteration: jinja2 gives every
  // iteration a fresh scope, which clearing the variables reproduces without an allocation per iteration.
  enum LoopField { kIndex, kIndex0, kRevindex, kRevindex0, kFirst, kLast, kPrevitem, kNextitem };
  auto loop = std::make_shared<DictData>();
  for (const char* key : {"index", "index0", "revindex", "revindex0", "first", "last", "previtem", "nextitem"}) {
    loop->items.emplace_back(Value(key), Value());
  }
  loop->items.emplace_back(Value("length"), Value(n));
  loop->items.emplace_back(Value("depth"), Value(1));
  loop->items.emplace_back(Value("depth0"), Value(0));
  auto cycle_index = std::make_shared<int64_t>(0);
  loop->items.emplace_back(Value("cycle"), Value::callable("loop.cycle", [cycle_index](Args& a) -> Value {
                             if (a.positional.empty()) throw TemplateError("no items for cycling given");
                             return a.positional[*cycle_index % static_cast<int64_t>(a.positional.size())];
                           }));
  // loop.changed(*values): true when the values differ from the previous call's (the first call is true).
  auto last_changed = std::make_shared<std::optional<Value>>();
  loop->items.emplace_back(Value("changed"), Value::callable("loop.changed", [last_changed](Args& a) -> Value {
                             Value now = Value::list(a.positional);
                             if (*last_changed && values_equal(**last_changed, now)) return Value(false);
                             *last_changed = now;
                             return Value(true);
                           }));
  const Value loop_value = Value::dict(loop);
  auto iter_scope = std::make_shared<Scope>(scope);
  for (int64_t i = 0; i < n; ++i) {
    if (++num_iterations_ > limits_.max_loop_iterations) {
      throw TemplateError("loop iteration limit of " + std::to_string(limits_.max_loop_iterations) + " exceeded");
    }
    auto& f = loop->items;
    f[kIndex].second = Value(i + 1);
    f[kIndex0].second = Value(i);
    f[kRevindex].second = Value(n - i);
    f[kRevindex0].second = Value(n - i - 1);
    f[kFirst].second = Value(i == 0);
    f[kLast].second = Value(i == n - 1);
    f[kPrevitem].second = i > 0 ? items[i - 1] : Value::undefined("previtem");
    f[kNextitem].second = i + 1 < n ? items[i + 1] : Value::undefined("nextitem");
    *cycle_index = i;
    // The body usually assigns nothing, leaving exactly `loop` + the targets: then rebinding them is enough and
    // costs no allocation. Anything else the previous iteration set is dropped, as in jinja2.
    if (iter_scope->vars.size() != 1 + s.targets.size()) iter_scope->vars.clear();
    iter_scope->vars["loop"] = loop_value;
    assign_targets(s.targets, items[i], *iter_scope);
    Flow flow = exec_body(s.body, iter_scope, out);
    if (flow == Flow::kBreak) break;
  }
  if (n == 0) exec_body(s.else_body, std::make_shared<Scope>(scope), out);
}

void Interpreter::exec_set(const Stmt& s, const ScopePtr& scope) {
  Value v = eval(*s.expr, scope);
  if (!s.ns_name.empty()) {
    const Value* ns = scope->lookup(s.ns_name);
    if (!ns || !ns->is_namespace()) throw TemplateError("cannot assign attribute on non-namespace object");
    ns->mutable_namespace().set(Value(s.attr), v);
    return;
  }
  assign_targets(s.targets, v, *scope);
}

Value Interpreter::make_macro(const Stmt& s, const ScopePtr& scope) {
  const Stmt* stmt = &s;
  std::weak_ptr<Scope> weak = scope;  // the closure's scope holds the macro: avoid a reference cycle
  std::string name = s.name;
  return Value::callable(name, [this, stmt, weak, name](Args& args) -> Value {
    ScopePtr closure = weak.lock();
    if (!closure) throw TemplateError("macro '" + name + "' called after its scope ended");
    return invoke_macro(*stmt, closure, args, name);
  });
}

Value Interpreter::invoke_macro(const Stmt& s, const ScopePtr& closure, Args& args, const std::string& name) {
  if (++call_depth_ > limits_.max_call_depth) {
    --call_depth_;
    throw TemplateError("maximum macro call depth of " + std::to_string(limits_.max_call_depth) + " exceeded");
  }
  struct DepthRestore {
    int* d;
    ~DepthRestore() { --*d; }
  } restore{&call_depth_};
  auto scope = std::make_shared<Scope>(closure);
  if (args.positional.size() > s.params.size() && !s.uses_varargs) {
    throw TemplateError("macro '" + name + "' takes not more than " + std::to_string(s.params.size()) + " argument(s)");
  }
  ValueList varargs;
  for (size_t i = 0; i < args.positional.size(); ++i) {
    if (i < s.params.size())
      scope->vars[s.params[i].first] = args.positional[i];
    else
      varargs.push_back(args.positional[i]);
  }
  auto kwargs = std::make_shared<DictData>();
  for (const auto& [k, v] : args.kwargs) {
    if (k == "caller" && s.uses_caller) {
      scope->vars["caller"] = v;
      continue;
    }
    bool is_param = false;
    for (size_t i = 0; i < s.params.size(); ++i) {
      if (s.params[i].first != k) continue;
      if (i < args.positional.size())
        throw TemplateError("macro '" + name + "' got multiple values for argument '" + k + "'");
      scope->vars[k] = v;
      is_param = true;
    }
    if (!is_param && !s.uses_kwargs) throw TemplateError("macro '" + name + "' takes no keyword argument '" + k + "'");
    if (!is_param) kwargs->set(Value(k), v);
  }
  for (size_t i = args.positional.size(); i < s.params.size(); ++i) {
    const auto& [pname, def] = s.params[i];
    if (scope->vars.count(pname)) continue;
    scope->vars[pname] = def ? eval(*def, scope) : Value::undefined(pname);
  }
  scope->vars["varargs"] = Value::list(std::move(varargs), /*is_tuple=*/true);
  scope->vars["kwargs"] = Value::dict(kwargs);
  std::string out;
  exec_body(s.body, scope, out);
  return Value(out);
}

void Interpreter::exec_call_block(const Stmt& s, const ScopePtr& scope, std::string& out) {
  const Stmt* stmt = &s;
  std::weak_ptr<Scope> weak = scope;
  Value caller = Value::callable("caller", [this, stmt, weak](Args& args) -> Value {
    ScopePtr closure = weak.lock();
    if (!closure) throw TemplateError("caller() used after its scope ended");
    return invoke_macro(*stmt, closure, args, "caller");
  });
  const Expr& call = *s.expr;
  Value callee = eval(*call.a, scope);
  Args args = eval_args(call, scope);
  args.kwargs.emplace_back("caller", caller);
  append(out, to_str(this->call(callee, args)));
}

Value Interpreter::call(const Value& callee, Args& args) {
  args.interp = this;
  if (callee.is_undefined()) {
    throw TemplateError(callee.str().empty() ? "undefined value is not callable"
                                             : "'" + callee.str() + "' is undefined");
  }
  if (!callee.is_callable()) throw TemplateError("'" + callee.type_name() + "' object is not callable");
  return callee.callable().fn(args);
}

Value Interpreter::lookup_name(const std::string& name, const ScopePtr& scope) {
  if (const Value* v = scope->lookup(name)) return *v;
  return Value::undefined(name);
}

Value Interpreter::get_attr(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) {
    throw TemplateError(obj.str().empty() ? "'" + name + "' of undefined value" : "'" + obj.str() + "' is undefined");
  }
  if (obj.is_namespace()) {
    const Value* v = obj.dict_data().find(Value(name));
    return v ? *v : Value::undefined("'Namespace' object has no attribute '" + name + "'");
  }
  if (auto m = bound_method(obj, name)) return *m;
  if (obj.is_dict()) {
    const Value* v = obj.dict_data().find(Value(name));
    if (v) return *v;
  }
  return Value::undefined();
}

Value Interpreter::get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) {
    throw TemplateError(obj.str().empty() ? "undefined value has no items" : "'" + obj.str() + "' is undefined");
  }
  if (obj.is_dict() && !obj.is_namespace()) {
    if (const Value* v = obj.dict_data().find(key)) return *v;
  } else if (obj.is_iterator()) {
    throw TemplateError("'generator' object is not subscriptable");
  } else if ((obj.is_list() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    int64_t i = key.as_int();
    if (obj.is_list()) {
      int64_t n = static_cast<int64_t>(obj.items().size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) return obj.items()[i];
    } else {
      std::u32string s = utf8_decode(obj.str());
      int64_t n = static_cast<int64_t>(s.size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) return Value(utf8_encode(s.substr(i, 1)));
    }
    return Value::undefined();
  }
  if (key.is_string()) return get_attr(obj, key.str());
  return Value::undefined();
}

ValueList Interpreter::iterate(const Value& v) {
  switch (v.type()) {
    case Value::Type::kUndefined:
      return {};
    case Value::Type::kList:
      if (v.is_iterator()) {
        if (v.list_data().consumed) return {};
        v.list_data().consumed = true;
      }
      return v.items();
    case Value::Type::kDict: {
      if (v.is_namespace()) break;
      ValueList keys;
      for (const auto& [k, _] : v.dict_data().items) keys.push_back(k);
      return keys;
    }
    case Value::Type::kString: {
      ValueList chars;
      std::string cur;
      for (char32_t c : utf8_decode(v.str())) {
        cur.clear();
        utf8_append(cur, c);
        chars.emplace_back(cur);
      }
      return chars;
    }
    default:
      break;
  }
  throw TemplateError("'" + v.type_name() + "' object is not iterable");
}

Value Interpreter::apply_filter(const std::string& name, const Value& operand, Args& args) {
  args.interp = this;
  bool found = false;
  Value v = call_builtin_filter(*this, name, operand, args, &found);
  if (!found) throw TemplateError("No filter named '" + name + "'.");
  return v;
}

bool Interpreter::apply_test(const std::string& name, const Value& operand, Args& args) {
  args.interp = this;
  bool found = false;
  bool r = call_builtin_test(*this, name, operand, args, &found);
  if (!found) throw TemplateError("No test named '" + name + "'.");
  return r;
}

Value Interpreter::eval_filter_chain(const Expr& e, const ScopePtr& scope, const Value& body_value) {
  Value operand = e.a ? eval_filter_chain(*e.a, scope, body_value) : body_value;
  Args args = eval_args(e, scope);
  return apply_filter(e.name, operand, args);
}

}  // namespace llmserve::jinja
