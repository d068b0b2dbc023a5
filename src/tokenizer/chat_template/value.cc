// Value: construction, Python str()/repr(), equality/ordering and json.dumps as transformers' tojson calls it.
// Every formatting routine here mirrors CPython's output byte for byte for the values templates produce.
#include "tokenizer/chat_template/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace llmserve::jinja {

const Value* DictData::find(const Value& key) const {
  for (const auto& [k, v] : items) {
    if (values_equal(k, key)) return &v;
  }
  return nullptr;
}

static void check_storable(const Value& v) {
  if (v.is_namespace()) throw TemplateError("namespace objects cannot be stored in lists or dicts (sandbox rule)");
}

static int child_depth(int depth_of_child) {
  if (depth_of_child + 1 > kMaxValueDepth) {
    throw TemplateError("value nested deeper than " + std::to_string(kMaxValueDepth) + " levels");
  }
  return depth_of_child + 1;
}

int Value::depth() const {
  if (type_ == Type::kList) return list_->depth;
  if (type_ == Type::kDict) return dict_->depth;
  return 0;
}

void DictData::set(const Value& key, Value value) {
  check_storable(value);
  check_storable(key);
  depth = std::max({depth, child_depth(value.depth()), child_depth(key.depth())});
  for (auto& [k, v] : items) {
    if (values_equal(k, key)) {
      v = std::move(value);
      return;
    }
  }
  items.emplace_back(key, std::move(value));
}

Value Value::list(ValueList items, bool is_tuple) {
  Value v(Type::kList);
  auto data = std::make_shared<ListData>();
  for (const Value& item : items) {
    check_storable(item);
    data->depth = std::max(data->depth, child_depth(item.depth()));
  }
  data->items = std::move(items);
  data->is_tuple = is_tuple;
  v.list_ = std::move(data);
  return v;
}

Value Value::iterator(ValueList items) {
  Value v = list(std::move(items));
  std::const_pointer_cast<ListData>(v.list_)->is_iterator = true;
  return v;
}

Value Value::dict(std::shared_ptr<DictData> data) {
  Value v(Type::kDict);
  v.dict_ = std::move(data);
  return v;
}

Value Value::callable(std::string name, NativeFn fn) {
  Value v(Type::kCallable);
  v.fn_ = std::make_shared<Callable>(Callable{std::move(name), std::move(fn)});
  return v;
}

Value Value::from_json(const nlohmann::ordered_json& j, int depth) {
  if (depth >= kMaxValueDepth) {
    throw TemplateError("JSON value nested deeper than " + std::to_string(kMaxValueDepth) + " levels");
  }
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return none();
    case nlohmann::ordered_json::value_t::boolean:
      return Value(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Value(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      uint64_t u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value(static_cast<double>(u));
      return Value(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float:
      return Value(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return Value(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      ValueList items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(from_json(e, depth + 1));
      return list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      auto d = std::make_shared<DictData>();
      for (auto it = j.begin(); it != j.end(); ++it) d->set(Value(it.key()), from_json(it.value(), depth + 1));
      return dict(std::move(d));
    }
    default:
      return none();
  }
}

bool Value::truthy() const {
  switch (type_) {
    case Type::kUndefined:
    case Type::kNone:
      return false;
    case Type::kBool:
    case Type::kInt:
      return int_ != 0;
    case Type::kFloat:
      return float_ != 0.0;
    case Type::kString:
      return !str_.empty();
    case Type::kList:
      return list_->is_iterator || !list_->items.empty();
    case Type::kDict:
      return dict_->is_namespace || !dict_->items.empty();
    case Type::kCallable:
      return true;
  }
  return false;
}

std::string Value::type_name() const {
  switch (type_) {
    case Type::kUndefined:
      return "Undefined";
    case Type::kNone:
      return "NoneType";
    case Type::kBool:
      return "bool";
    case Type::kInt:
      return "int";
    case Type::kFloat:
      return "float";
    case Type::kString:
      return "str";
    case Type::kList:
      return list_->is_iterator ? "generator" : list_->is_tuple ? "tuple" : "list";
    case Type::kDict:
      return dict_->is_namespace ? "Namespace" : "dict";
    case Type::kCallable:
      return "function";
  }
  return "?";
}

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  // Shortest round-trip digits, then CPython's repr layout: exponent form when exp < -4 or exp >= 16.
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  bool negative = sci[0] == '-';
  if (negative) sci.erase(0, 1);
  size_t e_pos = sci.find('e');
  std::string mantissa = sci.substr(0, e_pos);
  int exp = std::stoi(sci.substr(e_pos + 1));
  std::string digits;
  for (char c : mantissa) {
    if (c != '.') digits += c;
  }
  std::string out = negative ? "-" : "";
  if (exp < -4 || exp >= 16) {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof(eb), "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    return out + eb;
  }
  if (exp < 0) {
    out += "0." + std::string(-exp - 1, '0') + digits;
  } else if (static_cast<int>(digits.size()) <= exp + 1) {
    out += digits + std::string(exp + 1 - digits.size(), '0') + ".0";
  } else {
    out += digits.substr(0, exp + 1) + "." + digits.substr(exp + 1);
  }
  return out;
}

void utf8_append(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

// Invalid bytes decode to U+FFFD so that malformed input can never desynchronise indexing.
std::u32string utf8_decode(const std::string& s) {
  std::u32string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = s[i];
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || i + len > s.size()) {
      out += U'\uFFFD';
      ++i;
      continue;
    }
    char32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
    bool ok = true;
    for (int k = 1; k < len; ++k) {
      unsigned char cc = s[i + k];
      if ((cc & 0xC0) != 0x80) ok = false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if (!ok) {
      out += U'\uFFFD';
      ++i;
      continue;
    }
    out += cp;
    i += len;
  }
  return out;
}

std::string utf8_encode(const std::u32string& s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) utf8_append(out, c);
  return out;
}

bool py_isspace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// An approximation of str.isprintable() beyond ASCII: control, format and separator characters are escaped.
static bool py_isprintable(char32_t c) {
  if (c < 0x20 || c == 0x7F) return false;
  if (c >= 0x80 && c <= 0xA0) return false;
  if (c == 0xAD || (c >= 0x2000 && c <= 0x200F) || (c >= 0x2028 && c <= 0x202F) || (c >= 0x205F && c <= 0x206F))
    return false;
  if (c == 0x3000 || c == 0xFEFF || c == 0x1680 || (c >= 0xD800 && c <= 0xDFFF) || (c >= 0xFFF9 && c <= 0xFFFB))
    return false;
  return true;
}

std::string string_repr(const std::string& s) {
  char quote = '\'';
  if (s.find('\'') != std::string::npos && s.find('"') == std::string::npos) quote = '"';
  std::string out(1, quote);
  for (char32_t c : utf8_decode(s)) {
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (!py_isprintable(c)) {
      char buf[16];
      if (c < 0x100) {
        std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned>(c));
      } else if (c < 0x10000) {
        std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(c));
      } else {
        std::snprintf(buf, sizeof(buf), "\\U%08x", static_cast<unsigned>(c));
      }
      out += buf;
    } else {
      utf8_append(out, c);
    }
  }
  out += quote;
  return out;
}

std::string html_escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '\'':
        out += "&#39;";
        break;
      case '"':
        out += "&#34;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string Value::to_str() const {
  switch (type_) {
    case Type::kUndefined:
      return "";
    case Type::kString:
      return str_;
    default:
      return repr();
  }
}

std::string Value::repr() const {
  switch (type_) {
    case Type::kUndefined:
      return "";
    case Type::kNone:
      return "None";
    case Type::kBool:
      return int_ ? "True" : "False";
    case Type::kInt:
      return std::to_string(int_);
    case Type::kFloat:
      return float_repr(float_);
    case Type::kString:
      return safe_ ? "Markup(" + string_repr(str_) + ")" : string_repr(str_);
    case Type::kList: {
      if (list_->is_iterator) return "<generator object>";
      std::string out = list_->is_tuple ? "(" : "[";
      for (size_t i = 0; i < list_->items.size(); ++i) {
        if (i) out += ", ";
        out += list_->items[i].repr();
      }
      if (list_->is_tuple && list_->items.size() == 1) out += ",";
      return out + (list_->is_tuple ? ")" : "]");
    }
    case Type::kDict: {
      std::string out = dict_->is_namespace ? "<Namespace {" : "{";
      bool first = true;
      for (const auto& [k, v] : dict_->items) {
        if (!first) out += ", ";
        first = false;
        out += k.repr() + ": " + v.repr();
      }
      return out + (dict_->is_namespace ? "}>" : "}");
    }
    case Type::kCallable:
      return "<function " + fn_->name + ">";
  }
  return "";
}

bool values_equal(const Value& a, const Value& b) {
  using T = Value::Type;
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.type() != b.type()) return false;
  switch (a.type()) {
    case T::kUndefined:
    case T::kNone:
      return true;
    case T::kString:
      return a.str() == b.str();
    case T::kList: {
      if (a.is_iterator() || b.is_iterator()) return &a.list_data() == &b.list_data();
      if (a.is_tuple() != b.is_tuple() || a.items().size() != b.items().size()) return false;
      for (size_t i = 0; i < a.items().size(); ++i) {
        if (!values_equal(a.items()[i], b.items()[i])) return false;
      }
      return true;
    }
    case T::kDict: {
      if (&a.dict_data() == &b.dict_data()) return true;
      if (a.is_namespace() || b.is_namespace()) return false;
      if (a.dict_data().items.size() != b.dict_data().items.size()) return false;
      for (const auto& [k, v] : a.dict_data().items) {
        const Value* other = b.dict_data().find(k);
        if (!other || !values_equal(v, *other)) return false;
      }
      return true;
    }
    case T::kCallable:
      return &a.callable() == &b.callable();
    default:
      return false;
  }
}

bool values_less(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() < b.as_double();
    return a.as_int() < b.as_int();
  }
  if (a.is_string() && b.is_string()) return a.str() < b.str();  // UTF-8 byte order == code point order
  if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
    const auto& x = a.items();
    const auto& y = b.items();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!values_equal(x[i], y[i])) return values_less(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  throw TemplateError("'<' not supported between instances of '" + a.type_name() + "' and '" + b.type_name() + "'");
}

// Python json.dumps' escape of one code point below 0x80 that needs one ("\\n", "\\u001f", ...); false if
// it is copied as is.
static bool append_ascii_escape(std::string& out, char32_t c) {
  switch (c) {
    case '"':
      out += "\\\"";
      return true;
    case '\\':
      out += "\\\\";
      return true;
    case '\n':
      out += "\\n";
      return true;
    case '\r':
      out += "\\r";
      return true;
    case '\t':
      out += "\\t";
      return true;
    case '\b':
      out += "\\b";
      return true;
    case '\f':
      out += "\\f";
      return true;
    default:
      break;
  }
  if (c >= 0x20) return false;
  char buf[8];
  std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(c));
  out += buf;
  return true;
}

static void json_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out += '"';
  if (!ensure_ascii) {  // fast path: only ASCII specials change; multi-byte UTF-8 sequences are copied verbatim
    for (char ch : s) {
      if (!append_ascii_escape(out, static_cast<unsigned char>(ch))) out += ch;
    }
    out += '"';
    return;
  }
  for (char32_t c : utf8_decode(s)) {
    if (c < 0x7F) {
      if (!append_ascii_escape(out, c)) out += static_cast<char>(c);
      continue;
    }
    char buf[16];
    if (c >= 0x10000) {  // a UTF-16 surrogate pair, as Python writes it
      char32_t v = c - 0x10000;
      std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", static_cast<unsigned>(0xD800 | (v >> 10)),
                    static_cast<unsigned>(0xDC00 | (v & 0x3FF)));
    } else {
      std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(c));
    }
    out += buf;
  }
  out += '"';
}

static void json_dump_into(std::string& out, const Value& v, const JsonDumpOptions& o, int depth) {
  if (depth > 256) throw TemplateError("tojson: value nested too deeply");
  auto newline_indent = [&](int level) {
    out += '\n';
    for (int i = 0; i < level; ++i) out += o.indent;
  };
  switch (v.type()) {
    case Value::Type::kNone:
      out += "null";
      return;
    case Value::Type::kBool:
      out += v.as_bool() ? "true" : "false";
      return;
    case Value::Type::kInt:
      out += std::to_string(v.as_int());
      return;
    case Value::Type::kFloat: {
      double d = v.as_double();
      if (std::isnan(d))
        out += "NaN";
      else if (std::isinf(d))
        out += d > 0 ? "Infinity" : "-Infinity";
      else
        out += float_repr(d);
      return;
    }
    case Value::Type::kString:
      json_string(out, v.str(), o.ensure_ascii);
      return;
    case Value::Type::kList: {
      if (v.is_iterator()) break;
      if (v.items().empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < v.items().size(); ++i) {
        if (i) out += o.item_separator;
        if (o.has_indent) newline_indent(depth + 1);
        json_dump_into(out, v.items()[i], o, depth + 1);
      }
      if (o.has_indent) newline_indent(depth);
      out += ']';
      return;
    }
    case Value::Type::kDict: {
      if (v.is_namespace()) break;
      std::vector<const std::pair<Value, Value>*> entries;
      for (const auto& kv : v.dict_data().items) entries.push_back(&kv);
      if (o.sort_keys) {
        std::stable_sort(entries.begin(), entries.end(),
                         [](auto* a, auto* b) { return values_less(a->first, b->first); });
      }
      if (entries.empty()) {
        out += "{}";
        return;
      }
      out += '{';
      bool first = true;
      for (const auto* kv : entries) {
        if (!first) out += o.item_separator;
        first = false;
        if (o.has_indent) newline_indent(depth + 1);
        const Value& k = kv->first;
        if (k.is_string())
          json_string(out, k.str(), o.ensure_ascii);
        else if (k.is_none())
          out += "\"null\"";
        else if (k.is_bool())
          out += k.as_bool() ? "\"true\"" : "\"false\"";
        else if (k.is_int() || k.is_float())
          out += "\"" + k.repr() + "\"";
        else
          throw TemplateError("keys must be str, int, float, bool or None, not " + k.type_name());
        out += o.key_separator;
        json_dump_into(out, kv->second, o, depth + 1);
      }
      if (o.has_indent) newline_indent(depth);
      out += '}';
      return;
    }
    default:
      break;
  }
  throw TemplateError("Object of type " + v.type_name() + " is not JSON serializable");
}

std::string json_dumps(const Value& v, const JsonDumpOptions& options) {
  std::string out;
  json_dump_into(out, v, options, 0);
  return out;
}

}  // namespace llmserve::jinja
