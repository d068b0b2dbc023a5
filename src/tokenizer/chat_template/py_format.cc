// Python string formatting for templates: printf-style `'%s' % x` and `'{}'.format(x)` (what the sandbox's
// SandboxedFormatter allows: positional/keyword fields, !r/!s conversions and simple format specs).
// Invariant: an unsupported directive is a TemplateError, never silently different output.
#include <cstdio>

#include "tokenizer/chat_template/interpreter.h"
#include "tokenizer/chat_template/py_string.h"

namespace llmserve::jinja {
namespace {

std::string pad(const std::string& s, int64_t width, char align, char fill) {
  int64_t len = static_cast<int64_t>(py_len(s));
  if (width <= len) return s;
  std::string padding;
  for (int64_t i = 0; i < width - len; ++i) padding += fill;
  if (align == '<') return s + padding;
  if (align == '^') {
    size_t left = padding.size() / 2;
    return padding.substr(0, left) + s + padding.substr(left);
  }
  return padding + s;
}

// Formats one number with a C conversion (d, f, e, g, x, o, X, E, G) plus flags/width/precision.
std::string c_format(const Value& v, const std::string& flags, int64_t width, int64_t precision, char type) {
  if (!v.is_number())
    throw TemplateError(std::string("%") + type + " format: a real number is required, not " + v.type_name());
  std::string spec = "%" + flags;
  if (width >= 0) spec += std::to_string(std::min<int64_t>(width, 4096));
  if (precision >= 0) spec += "." + std::to_string(std::min<int64_t>(precision, 100));
  char buf[8192];
  if (type == 'd' || type == 'i' || type == 'u' || type == 'x' || type == 'X' || type == 'o') {
    int64_t i = v.is_float() ? static_cast<int64_t>(v.as_double()) : v.as_int();
    spec += std::string("ll") + (type == 'i' || type == 'u' ? 'd' : type);
    std::snprintf(buf, sizeof(buf), spec.c_str(), static_cast<long long>(i));
  } else {
    spec += type;
    std::snprintf(buf, sizeof(buf), spec.c_str(), v.as_double());
  }
  return buf;
}

}  // namespace

Value percent_format(const std::string& fmt, const Value& operand) {
  bool is_tuple = operand.is_tuple();
  const Value* mapping = operand.is_dict() ? &operand : nullptr;
  ValueList args = is_tuple ? operand.items() : ValueList{operand};
  size_t next = 0;
  bool used_mapping = false;
  std::string out;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out += fmt[i];
      continue;
    }
    if (++i >= fmt.size()) throw TemplateError("incomplete format");
    const Value* arg = nullptr;
    Value named;
    if (fmt[i] == '(') {
      size_t close = fmt.find(')', i);
      if (close == std::string::npos || !mapping) throw TemplateError("format requires a mapping");
      const Value* v = mapping->dict_data().find(Value(fmt.substr(i + 1, close - i - 1)));
      if (!v) throw TemplateError("KeyError: '" + fmt.substr(i + 1, close - i - 1) + "'");
      named = *v;
      arg = &named;
      used_mapping = true;
      i = close + 1;
    }
    std::string flags;
    while (i < fmt.size() && std::string("-+ #0").find(fmt[i]) != std::string::npos) flags += fmt[i++];
    int64_t width = -1, precision = -1;
    while (i < fmt.size() && fmt[i] >= '0' && fmt[i] <= '9')
      width = std::max<int64_t>(width, 0) * 10 + (fmt[i++] - '0');
    if (i < fmt.size() && fmt[i] == '.') {
      precision = 0;
      ++i;
      while (i < fmt.size() && fmt[i] >= '0' && fmt[i] <= '9') precision = precision * 10 + (fmt[i++] - '0');
    }
    if (i >= fmt.size()) throw TemplateError("incomplete format");
    char type = fmt[i];
    if (type == '%') {
      out += '%';
      continue;
    }
    if (!arg) {
      if (next >= args.size()) throw TemplateError("not enough arguments for format string");
      arg = &args[next++];
    }
    if (width > (1 << 20)) throw TemplateError("format width too large");
    if (type == 's' || type == 'r' || type == 'a') {
      std::string s = type == 's' ? arg->to_str() : arg->repr();
      if (precision >= 0) s = utf8_encode(utf8_decode(s).substr(0, precision));
      out += pad(s, width, flags.find('-') != std::string::npos ? '<' : '>', ' ');
    } else if (type == 'c') {
      out += arg->is_string() ? arg->str() : utf8_encode(std::u32string(1, static_cast<char32_t>(arg->as_int())));
    } else if (std::string("diuxXofFeEgG").find(type) != std::string::npos) {
      out += c_format(*arg, flags, width, precision, type);
    } else {
      throw TemplateError(std::string("unsupported format character '") + type + "'");
    }
  }
  if (!used_mapping && !mapping && next < args.size()) {
    throw TemplateError("not all arguments converted during string formatting");
  }
  return Value(out);
}

Value str_format(const std::string& fmt, const Args& a) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    char c = fmt[i];
    if (c == '}') {
      if (i + 1 < fmt.size() && fmt[i + 1] == '}')
        ++i;
      else
        throw TemplateError("Single '}' encountered in format string");
      out += '}';
      continue;
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    size_t close = fmt.find('}', i);
    if (close == std::string::npos) throw TemplateError("expected '}' before end of string");
    std::string field = fmt.substr(i + 1, close - i - 1);
    i = close;
    std::string spec, conversion;
    if (size_t colon = field.find(':'); colon != std::string::npos) {
      spec = field.substr(colon + 1);
      field = field.substr(0, colon);
    }
    if (size_t bang = field.find('!'); bang != std::string::npos) {
      conversion = field.substr(bang + 1);
      field = field.substr(0, bang);
    }
    Value v;
    if (field.empty()) {
      if (auto_index >= a.positional.size()) throw TemplateError("Replacement index out of range");
      v = a.positional[auto_index++];
    } else if (field.find_first_not_of("0123456789") == std::string::npos) {
      size_t idx = std::stoul(field);
      if (idx >= a.positional.size()) throw TemplateError("Replacement index out of range");
      v = a.positional[idx];
    } else {
      const Value* kw = a.kwarg(field.c_str());
      if (!kw) throw TemplateError("KeyError: '" + field + "'");
      v = *kw;
    }
    if (conversion == "r")
      v = Value(v.repr());
    else if (conversion == "s")
      v = Value(v.to_str());
    else if (!conversion.empty())
      throw TemplateError("Unknown conversion specifier " + conversion);
    if (spec.empty()) {
      out += v.to_str();
      continue;
    }
    // [[fill]align][width][.precision][type] — the subset templates use.
    char fill = ' ', align = v.is_number() ? '>' : '<';
    size_t p = 0;
    if (spec.size() >= 2 && std::string("<>^").find(spec[1]) != std::string::npos) {
      fill = spec[0];
      align = spec[1];
      p = 2;
    } else if (!spec.empty() && std::string("<>^").find(spec[0]) != std::string::npos) {
      align = spec[0];
      p = 1;
    }
    int64_t width = 0, precision = -1;
    while (p < spec.size() && spec[p] >= '0' && spec[p] <= '9')
      width = std::min<int64_t>(width * 10 + (spec[p++] - '0'), 1 << 20);
    if (p < spec.size() && spec[p] == '.') {
      precision = 0;
      ++p;
      while (p < spec.size() && spec[p] >= '0' && spec[p] <= '9')
        precision = std::min<int64_t>(precision * 10 + (spec[p++] - '0'), 100);
    }
    std::string type = spec.substr(p);
    std::string body;
    if (type.empty() || type == "s") {
      body = v.to_str();
      if (precision >= 0 && v.is_string()) body = utf8_encode(utf8_decode(body).substr(0, precision));
    } else if (type == "d" || type == "f" || type == "e" || type == "g" || type == "x") {
      body = c_format(v, "", -1, precision, type[0]);
    } else {
      throw TemplateError("unsupported format spec '" + spec + "'");
    }
    out += pad(body, width, align, fill);
  }
  return Value(out);
}

}  // namespace llmserve::jinja
