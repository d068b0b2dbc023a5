// Methods callable on values (str.strip, dict.get, ...) and the environment's globals (range, namespace, dict,
// raise_exception, strftime_now). Mutating list/dict methods exist but raise, as ImmutableSandboxedEnvironment does.
// Invariant: no method performs I/O; results are bounded by the interpreter's size limit.
#include <chrono>
#include <ctime>
#include <unordered_set>

#include "tokenizer/chat_template/interpreter.h"
#include "tokenizer/chat_template/py_string.h"

namespace llmserve::jinja {
namespace {

std::optional<std::string> opt_str(const Value& v, const char* what) {
  if (v.is_undefined() || v.is_none()) return std::nullopt;
  if (!v.is_string()) throw TemplateError(std::string(what) + " arg must be None or str");
  return v.str();
}

int64_t opt_int(const Value& v, int64_t def) {
  if (v.is_undefined() || v.is_none()) return def;
  if (!v.is_int() && !v.is_bool())
    throw TemplateError("'" + v.type_name() + "' object cannot be interpreted as an integer");
  return v.as_int();
}

Value str_list(const std::vector<std::string>& parts) {
  ValueList items;
  for (const auto& p : parts) items.emplace_back(p);
  return Value::list(std::move(items));
}

bool affix_match(const std::string& s, const Value& affix, bool prefix) {
  auto one = [&](const Value& a) {
    if (!a.is_string()) throw TemplateError("startswith/endswith first arg must be str or a tuple of str");
    const std::string& x = a.str();
    if (x.size() > s.size()) return false;
    return prefix ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0;
  };
  if (affix.is_tuple()) {
    for (const Value& a : affix.items()) {
      if (one(a)) return true;
    }
    return false;
  }
  return one(affix);
}

Value string_search_method(const std::string& s, const std::string& name, Args& a);
Value string_predicate_method(const std::string& s, const std::string& name, Args& a);

Value string_method(const Value& self, const std::string& name, Args& a) {
  const std::string& s = self.str();
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    a.check(name.c_str(), 1, {});
    return Value(py_strip(s, opt_str(a.get(0, nullptr), name.c_str()), name != "rstrip", name != "lstrip"));
  }
  if (name == "split" || name == "rsplit") {
    a.check(name.c_str(), 2, {"sep", "maxsplit"});
    auto sep = opt_str(a.get(0, "sep"), "sep");
    int64_t maxsplit = opt_int(a.get(1, "maxsplit"), -1);
    return str_list(name == "split" ? py_split(s, sep, maxsplit) : py_rsplit(s, sep, maxsplit));
  }
  if (name == "splitlines") return str_list(py_splitlines(s, a.get(0, "keepends", Value(false)).truthy()));
  if (name == "startswith" || name == "endswith") {
    a.check(name.c_str(), 1, {});
    return Value(affix_match(s, a.get(0, nullptr), name == "startswith"));
  }
  if (name == "replace") {
    a.check("replace", 3, {"count"});
    Value old = a.get(0, nullptr), repl = a.get(1, nullptr);
    if (!old.is_string() || !repl.is_string()) throw TemplateError("replace() arguments must be str");
    std::string out = py_replace(s, old.str(), repl.str(), opt_int(a.get(2, "count"), -1));
    a.interp->check_size(out.size());
    return Value(out);
  }
  if (name == "lower") return Value(py_lower(s));
  if (name == "upper") return Value(py_upper(s));
  if (name == "capitalize") return Value(py_capitalize(s));
  if (name == "title") return Value(py_title(s));
  return string_search_method(s, name, a);
}

// find/index/count/join/removeprefix and the is*() predicates.
Value string_search_method(const std::string& s, const std::string& name, Args& a) {
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    Value sub = a.get(0, nullptr);
    if (!sub.is_string()) throw TemplateError("must be str, not " + sub.type_name());
    if (name == "count") {
      if (sub.str().empty()) return Value(static_cast<int64_t>(py_len(s) + 1));
      int64_t n = 0;
      for (size_t p = s.find(sub.str()); p != std::string::npos; p = s.find(sub.str(), p + sub.str().size())) ++n;
      return Value(n);
    }
    size_t p = (name == "find" || name == "index") ? s.find(sub.str()) : s.rfind(sub.str());
    if (p == std::string::npos) {
      if (name == "index" || name == "rindex") throw TemplateError("substring not found");
      return Value(static_cast<int64_t>(-1));
    }
    return Value(static_cast<int64_t>(py_len(s.substr(0, p))));
  }
  if (name == "join") {
    std::string out;
    bool first = true;
    for (const Value& v : a.interp->iterate(a.get(0, nullptr))) {
      if (!v.is_string()) throw TemplateError("sequence item: expected str instance, " + v.type_name() + " found");
      if (!first) out += s;
      first = false;
      out += v.str();
      a.interp->check_size(out.size());
    }
    return Value(out);
  }
  if (name == "removeprefix" || name == "removesuffix") {
    Value x = a.get(0, nullptr);
    if (!x.is_string()) throw TemplateError(name + "() argument must be str");
    if (!affix_match(s, x, name == "removeprefix")) return Value(s);
    return Value(name == "removeprefix" ? s.substr(x.str().size()) : s.substr(0, s.size() - x.str().size()));
  }
  return string_predicate_method(s, name, a);
}

Value string_predicate_method(const std::string& s, const std::string& name, Args& a) {
  if (name == "isdigit" || name == "isnumeric" || name == "isdecimal") {
    if (s.empty()) return Value(false);
    for (char c : s) {
      if (c < '0' || c > '9') return Value(false);
    }
    return Value(true);
  }
  if (name == "isspace") {
    std::u32string u = utf8_decode(s);
    if (u.empty()) return Value(false);
    for (char32_t c : u) {
      if (!py_isspace(c)) return Value(false);
    }
    return Value(true);
  }
  if (name == "isalpha" || name == "isalnum") {
    if (s.empty()) return Value(false);
    for (char c : s) {
      bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (name == "isalnum" && c >= '0' && c <= '9');
      if (!ok) return Value(false);
    }
    return Value(true);
  }
  if (name == "islower" || name == "isupper") {
    bool any = false;
    for (char32_t c : utf8_decode(s)) {
      std::string one = utf8_encode(std::u32string(1, c));
      if (py_lower(one) != one || py_upper(one) != one) {
        any = true;
        if ((name == "islower") != (py_lower(one) == one)) return Value(false);
      }
    }
    return Value(any);
  }
  if (name == "format") {
    Value r = str_format(s, a);
    a.interp->check_size(r.str().size());
    return r;
  }
  throw TemplateError("'str' object has no attribute '" + name + "'");
}

Value dict_method(const Value& self, const std::string& name, Args& a) {
  const DictData& d = self.dict_data();
  if (name == "get") {
    a.check("get", 2, {});
    const Value* v = d.find(a.get(0, nullptr));
    return v ? *v : a.get(1, nullptr, Value::none());
  }
  if (name == "items") {
    ValueList items;
    for (const auto& [k, v] : d.items) items.push_back(Value::list({k, v}, true));
    return Value::list(std::move(items));
  }
  if (name == "keys" || name == "values") {
    ValueList items;
    for (const auto& [k, v] : d.items) items.push_back(name == "keys" ? k : v);
    return Value::list(std::move(items));
  }
  if (name == "copy") return Value::dict(std::make_shared<DictData>(d));
  throw TemplateError("access to attribute '" + name + "' of 'dict' object is unsafe.");
}

Value list_method(const Value& self, const std::string& name, Args& a) {
  if (name == "index" || name == "count") {
    Value x = a.get(0, nullptr);
    int64_t n = 0;
    for (size_t i = 0; i < self.items().size(); ++i) {
      if (!values_equal(self.items()[i], x)) continue;
      if (name == "index") return Value(static_cast<int64_t>(i));
      ++n;
    }
    if (name == "index") throw TemplateError(x.repr() + " is not in list");
    return Value(n);
  }
  if (name == "copy") return Value::list(self.items());
  throw TemplateError("access to attribute '" + name + "' of '" + self.type_name() + "' object is unsafe.");
}

}  // namespace

std::optional<Value> bound_method(const Value& obj, const std::string& name) {
  using Fn = Value (*)(const Value&, const std::string&, Args&);
  using Names = std::unordered_set<std::string>;
  static const Names kStr = {"strip",      "lstrip",   "rstrip",    "split",     "rsplit",       "splitlines",
                             "startswith", "endswith", "replace",   "lower",     "upper",        "capitalize",
                             "title",      "find",     "rfind",     "index",     "rindex",       "count",
                             "join",       "isdigit",  "isnumeric", "isdecimal", "removeprefix", "removesuffix",
                             "isspace",    "isalpha",  "isalnum",   "islower",   "isupper",      "format"};
  static const Names kDict = {"get", "items",   "keys",   "values",     "copy",
                              "pop", "popitem", "update", "setdefault", "clear"};
  static const Names kTuple = {"index", "count"};
  static const Names kList = {"index",  "count",  "copy", "append",  "pop",  "insert",
                              "extend", "remove", "sort", "reverse", "clear"};
  Fn fn = nullptr;
  if (obj.is_string() && kStr.count(name)) {
    fn = string_method;
  } else if (obj.is_dict() && !obj.is_namespace() && kDict.count(name)) {
    fn = dict_method;
  } else if (obj.is_list() && !obj.is_iterator() && (obj.is_tuple() ? kTuple : kList).count(name)) {
    fn = list_method;
  }
  if (!fn) return std::nullopt;
  return Value::callable(name, [obj, name, fn](Args& a) { return fn(obj, name, a); });
}

namespace {

Value builtin_range(Args& a) {
  if (!a.kwargs.empty()) throw TemplateError("range() takes no keyword arguments");
  std::vector<int64_t> v;
  for (const Value& x : a.positional) {
    if (!x.is_int() && !x.is_bool())
      throw TemplateError("'" + x.type_name() + "' object cannot be interpreted as an integer");
    v.push_back(x.as_int());
  }
  int64_t start = 0, stop = 0, step = 1;
  if (v.size() == 1) {
    stop = v[0];
  } else if (v.size() == 2 || v.size() == 3) {
    start = v[0];
    stop = v[1];
    if (v.size() == 3) step = v[2];
  } else {
    throw TemplateError("range expected 1 to 3 arguments, got " + std::to_string(v.size()));
  }
  if (step == 0) throw TemplateError("range() arg 3 must not be zero");
  using Wide = __int128;  // the span of two int64 values does not fit an int64
  Wide wn = step > 0 ? (stop > start ? (Wide(stop) - start + step - 1) / step : 0)
                     : (start > stop ? (Wide(start) - stop - step - 1) / -Wide(step) : 0);
  int64_t n = wn > 100001 ? 100001 : static_cast<int64_t>(wn);
  if (n > 100000) {  // jinja2.sandbox.MAX_RANGE
    throw TemplateError("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
  }
  ValueList items;
  for (int64_t i = 0; i < n; ++i) items.emplace_back(start + i * step);
  return Value::list(std::move(items));
}

Value builtin_namespace(Args& a) {
  auto d = std::make_shared<DictData>();
  d->is_namespace = true;
  for (const Value& p : a.positional) {
    if (!p.is_dict()) throw TemplateError("namespace() positional argument must be a mapping");
    for (const auto& [k, v] : p.dict_data().items) d->set(k, v);
  }
  for (const auto& [k, v] : a.kwargs) d->set(Value(k), v);
  return Value::dict(std::move(d));
}

Value builtin_dict(Args& a) {
  auto d = std::make_shared<DictData>();
  for (const Value& p : a.positional) {
    if (p.is_dict()) {
      for (const auto& [k, v] : p.dict_data().items) d->set(k, v);
    } else {
      for (const Value& kv : a.interp->iterate(p)) {
        ValueList pair = a.interp->iterate(kv);
        if (pair.size() != 2) throw TemplateError("dictionary update sequence element has wrong length");
        d->set(pair[0], pair[1]);
      }
    }
  }
  for (const auto& [k, v] : a.kwargs) d->set(Value(k), v);
  return Value::dict(std::move(d));
}

}  // namespace

void install_globals(Scope& globals, std::optional<std::tm> now) {
  globals.vars["range"] = Value::callable("range", builtin_range);
  globals.vars["namespace"] = Value::callable("namespace", builtin_namespace);
  globals.vars["dict"] = Value::callable("dict", builtin_dict);
  globals.vars["raise_exception"] =
      Value::callable("raise_exception", [](Args& a) -> Value { throw TemplateError(a.get(0, "message").to_str()); });
  globals.vars["strftime_now"] = Value::callable("strftime_now", [now](Args& a) -> Value {
    Value fmt = a.get(0, "format");
    if (!fmt.is_string()) throw TemplateError("strftime() argument 1 must be str, not " + fmt.type_name());
    std::tm tm{};
    if (now) {
      tm = *now;
    } else {
      std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
      localtime_r(&t, &tm);
    }
    char buf[512];
    size_t n = std::strftime(buf, sizeof(buf), fmt.str().c_str(), &tm);
    if (n == 0 && !fmt.str().empty()) throw TemplateError("strftime format too long or invalid");
    return Value(std::string(buf, n));
  });
}

}  // namespace llmserve::jinja
