// The value model of the Jinja interpreter: Python-like values (undefined, none, bool, int, float, str, list/tuple,
// insertion-ordered dict, namespace, callable) with Python's str()/repr() and json.dumps formatting.
// Invariant: lists and dicts are shared and immutable once built, except namespaces (mutated only by `set ns.x`).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace llmserve::jinja {

// Every template error inside the interpreter is thrown as this and converted to a Status at the API boundary.
// line == 0 means "not yet known": the statement being executed fills it in.
struct TemplateError : std::runtime_error {
  TemplateError(const std::string& message, int line = 0) : std::runtime_error(message), line(line) {}
  int line;
};

class Value;
using ValueList = std::vector<Value>;
struct Args;  // call arguments (positional + keyword), defined in interpreter.h
using NativeFn = std::function<Value(Args& args)>;

// Lists and dicts nest at most this deep (so every recursive walk — repr, ==, tojson, destruction — is bounded),
// and namespaces are never stored inside them (so a namespace's mutation cannot deepen or cycle a container).
constexpr int kMaxValueDepth = 200;

struct ListData {
  ValueList items;
  int depth = 1;
  bool is_tuple = false;
  // A Python generator/iterator (what map/select/selectattr/unique/reverse return): always truthy, no len(),
  // not subscriptable, and empty once iterated.
  bool is_iterator = false;
  mutable bool consumed = false;
};
struct DictData {
  std::vector<std::pair<Value, Value>> items;  // insertion order, keys unique
  bool is_namespace = false;
  int depth = 1;
  const Value* find(const Value& key) const;
  void set(const Value& key, Value value);
};
struct Callable {
  std::string name;
  NativeFn fn;
};

class Value {
 public:
  enum class Type { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kCallable };

  Value() = default;  // undefined
  static Value undefined(std::string hint = "") {
    Value v;
    v.str_ = std::move(hint);
    return v;
  }
  static Value none() { return Value(Type::kNone); }
  Value(bool b) : type_(Type::kBool), int_(b) {}                                                      // NOLINT
  Value(int64_t i) : type_(Type::kInt), int_(i) {}                                                    // NOLINT
  Value(int i) : type_(Type::kInt), int_(i) {}                                                        // NOLINT
  Value(double d) : type_(Type::kFloat), float_(d) {}                                                 // NOLINT
  Value(std::string s, bool safe = false) : type_(Type::kString), safe_(safe), str_(std::move(s)) {}  // NOLINT
  Value(const char* s) : Value(std::string(s)) {}                                                     // NOLINT
  static Value list(ValueList items, bool is_tuple = false);
  static Value iterator(ValueList items);
  static Value dict(std::shared_ptr<DictData> data);
  static Value dict() { return dict(std::make_shared<DictData>()); }
  static Value callable(std::string name, NativeFn fn);
  // Throws TemplateError when the JSON nests deeper than kMaxValueDepth.
  static Value from_json(const nlohmann::ordered_json& j, int depth = 0);

  Type type() const { return type_; }
  bool is_undefined() const { return type_ == Type::kUndefined; }
  bool is_none() const { return type_ == Type::kNone; }
  bool is_bool() const { return type_ == Type::kBool; }
  bool is_int() const { return type_ == Type::kInt; }  // bools are not ints here (unlike Python)
  bool is_float() const { return type_ == Type::kFloat; }
  bool is_number() const { return type_ == Type::kInt || type_ == Type::kFloat || type_ == Type::kBool; }
  bool is_string() const { return type_ == Type::kString; }
  bool is_list() const { return type_ == Type::kList; }
  bool is_tuple() const { return type_ == Type::kList && list_->is_tuple; }
  bool is_iterator() const { return type_ == Type::kList && list_->is_iterator; }
  const ListData& list_data() const { return *list_; }
  bool is_dict() const { return type_ == Type::kDict; }
  bool is_namespace() const { return type_ == Type::kDict && dict_->is_namespace; }
  bool is_callable() const { return type_ == Type::kCallable; }
  bool is_safe() const { return safe_; }  // a markupsafe.Markup string

  bool as_bool() const { return int_ != 0; }
  int64_t as_int() const { return int_; }  // also for bools
  double as_double() const { return type_ == Type::kFloat ? float_ : static_cast<double>(int_); }
  const std::string& str() const { return str_; }  // string contents, or the undefined's name hint
  const ValueList& items() const { return list_->items; }
  const DictData& dict_data() const { return *dict_; }
  DictData& mutable_namespace() const { return *dict_; }
  const Callable& callable() const { return *fn_; }

  int depth() const;  // 0 for scalars, 1 for a flat list/dict
  bool truthy() const;
  // Python str(): what `{{ v }}` prints. Undefined prints "".
  std::string to_str() const;
  // Python repr() (used inside containers).
  std::string repr() const;
  // Python's type name, for error messages.
  std::string type_name() const;

 private:
  explicit Value(Type t) : type_(t) {}
  Type type_ = Type::kUndefined;
  bool safe_ = false;
  int64_t int_ = 0;
  double float_ = 0;
  std::string str_;
  std::shared_ptr<const ListData> list_;
  std::shared_ptr<DictData> dict_;
  std::shared_ptr<const Callable> fn_;
};

// Python semantics: 1 == 1.0 == True; lists/dicts compare deeply; undefined equals undefined.
bool values_equal(const Value& a, const Value& b);
// Python ordering (<): numbers, strings (by code point), lists lexicographically; other pairs raise.
bool values_less(const Value& a, const Value& b);

// json.dumps(v, ensure_ascii, indent, separators, sort_keys=False) as transformers' tojson filter calls it.
// indent: none (compact), int (spaces) or string. Raises TemplateError for values JSON can't hold.
struct JsonDumpOptions {
  bool ensure_ascii = false;
  bool has_indent = false;
  std::string indent;  // the per-level indent string
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
};
std::string json_dumps(const Value& v, const JsonDumpOptions& options);

// Python float repr ("1.0", "1e+20", "0.30000000000000004", "inf", "nan").
std::string float_repr(double d);
// Python repr of a str: quotes chosen like CPython, escapes for unprintable characters.
std::string string_repr(const std::string& s);
// HTML escaping as markupsafe.escape does it.
std::string html_escape(const std::string& s);

// UTF-8 helpers: Python strings index by code point.
std::u32string utf8_decode(const std::string& s);
std::string utf8_encode(const std::u32string& s);
void utf8_append(std::string& out, char32_t c);
bool py_isspace(char32_t c);

}  // namespace llmserve::jinja
