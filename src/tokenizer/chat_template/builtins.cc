// jinja2's builtin filters and tests (jinja2/filters.py, jinja2/tests.py, version 3.1) plus transformers'
// `tojson` override. Invariant: each behaves like its Python counterpart for the argument types templates use,
// including which calls raise (e.g. len() of a generator) and what undefined values turn into.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <unordered_map>
#include <utility>

#include "tokenizer/chat_template/interpreter.h"
#include "tokenizer/chat_template/parser.h"
#include "tokenizer/chat_template/py_string.h"

namespace llmserve::jinja {
namespace {

Value soft_str(const Value& v) { return v.is_string() ? v : Value(v.to_str()); }

int64_t len_of(const Value& v) {
  if (v.is_undefined()) return 0;
  if (v.is_string()) return static_cast<int64_t>(py_len(v.str()));
  if (v.is_list() && !v.is_iterator()) return static_cast<int64_t>(v.items().size());
  if (v.is_dict() && !v.is_namespace()) return static_cast<int64_t>(v.dict_data().items.size());
  throw TemplateError("object of type '" + v.type_name() + "' has no len()");
}

// Resolves "a.b.0" like jinja2's make_attrgetter: each part through getitem, digits as integers.
Value get_path(Interpreter& in, Value v, const Value& attribute) {
  if (!attribute.is_string()) return in.get_item(v, attribute);
  for (const std::string& part : py_split(attribute.str(), std::string("."), -1)) {
    bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    v = in.get_item(v, digits ? Value(static_cast<int64_t>(std::stoll(part))) : Value(part));
  }
  return v;
}

// Sort key with jinja2's ignore_case: strings compare lowercased unless case_sensitive.
Value sort_key(const Value& v, bool case_sensitive) {
  return (!case_sensitive && v.is_string()) ? Value(py_lower(v.str())) : v;
}

Value filter_tojson(const Value& v, Args& a) {
  a.check("tojson", 5, {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonDumpOptions o;
  o.ensure_ascii = a.get(0, "ensure_ascii", Value(false)).truthy();
  Value indent = a.get(1, "indent", Value::none());
  if (!indent.is_none()) {
    o.has_indent = true;
    if (indent.is_string())
      o.indent = indent.str();
    else if (indent.is_int())
      o.indent = std::string(std::clamp<int64_t>(indent.as_int(), 0, 1 << 16), ' ');
    else
      throw TemplateError("tojson: indent must be an int or a string");
    o.item_separator = ",";
  }
  Value seps = a.get(2, "separators", Value::none());
  if (!seps.is_none()) {
    if (!seps.is_list() || seps.items().size() != 2 || !seps.items()[0].is_string() || !seps.items()[1].is_string()) {
      throw TemplateError("tojson: separators must be a pair of strings");
    }
    o.item_separator = seps.items()[0].str();
    o.key_separator = seps.items()[1].str();
  }
  o.sort_keys = a.get(3, "sort_keys", Value(false)).truthy();
  std::string out = json_dumps(v, o);
  a.interp->check_size(out.size());
  return Value(out);
}

Value filter_indent(const Value& v, Args& a) {
  a.check("indent", 3, {"width", "first", "blank"});
  Value width = a.get(0, "width", Value(4));
  if (!width.is_string() && !width.is_int()) throw TemplateError("indent width must be an int or a string");
  if (width.is_int()) a.interp->check_size(static_cast<size_t>(std::max<int64_t>(0, width.as_int())));
  std::string ind = width.is_string() ? width.str() : std::string(std::max<int64_t>(0, width.as_int()), ' ');
  bool first = a.get(1, "first", Value(false)).truthy();
  bool blank = a.get(2, "blank", Value(false)).truthy();
  std::string s = soft_str(v).str() + "\n";  // jinja2's quirk so that splitlines keeps a trailing empty line
  std::vector<std::string> lines = py_splitlines(s, false);
  std::string rv;
  if (blank) {
    for (size_t i = 0; i < lines.size(); ++i) rv += (i ? "\n" + ind : "") + lines[i];
  } else {
    rv = lines.empty() ? "" : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) rv += "\n" + (lines[i].empty() ? "" : ind) + lines[i];
  }
  if (first) rv = ind + rv;
  a.interp->check_size(rv.size());
  return Value(rv);
}

Value filter_int(const Value& v, Args& a) {
  Value def = a.get(0, "default", Value(0));
  int64_t base = a.get(1, "base", Value(10)).as_int();
  if (v.is_int() || v.is_bool()) return Value(v.as_int());
  if (v.is_float()) {
    if (!std::isfinite(v.as_double())) throw TemplateError("cannot convert float infinity or NaN to integer");
    return Value(static_cast<int64_t>(v.as_double()));
  }
  if (v.is_string()) {
    std::string s = py_strip(v.str(), std::nullopt, true, true);
    std::string clean;
    for (char c : s) {
      if (c != '_') clean += c;
    }
    if (!clean.empty()) {
      try {
        size_t used = 0;
        long long r = std::stoll(clean, &used, static_cast<int>(base));
        if (used == clean.size()) return Value(static_cast<int64_t>(r));
      } catch (const std::exception&) {
      }
      try {
        size_t used = 0;
        double d = std::stod(clean, &used);
        if (used == clean.size() && std::isfinite(d)) return Value(static_cast<int64_t>(d));
      } catch (const std::exception&) {
      }
    }
  }
  return def;
}

Value filter_float(const Value& v, Args& a) {
  Value def = a.get(0, "default", Value(0.0));
  if (v.is_number()) return Value(v.as_double());
  if (v.is_string()) {
    std::string s = py_strip(v.str(), std::nullopt, true, true);
    try {
      size_t used = 0;
      double d = std::stod(s, &used);
      if (used == s.size()) return Value(d);
    } catch (const std::exception&) {
    }
  }
  return def;
}

Value filter_title(const Value& v) {
  std::u32string s = utf8_decode(soft_str(v).str());
  std::string out;
  bool word_start = true;
  for (char32_t c : s) {
    bool sep = c == '-' || py_isspace(c) || c == '(' || c == '{' || c == '[' || c == '<';
    std::string one = utf8_encode(std::u32string(1, c));
    out += sep ? one : (word_start ? py_upper(one) : py_lower(one));
    word_start = sep;
  }
  return Value(out);
}

// select/reject/selectattr/rejectattr share this: `attr_mode` reads the attribute named by the first argument.
Value filter_select(Interpreter& in, const Value& v, Args& a, bool attr_mode, bool keep) {
  size_t off = 0;
  Value attribute;
  if (attr_mode) {
    if (a.positional.empty()) throw TemplateError("Missing parameter for attribute name");
    attribute = a.positional[0];
    off = 1;
  }
  std::string test;
  Args test_args;
  test_args.interp = &in;
  if (a.positional.size() > off) {
    test = a.positional[off].to_str();
    test_args.positional.assign(a.positional.begin() + off + 1, a.positional.end());
    test_args.kwargs = a.kwargs;
  }
  ValueList out;
  if (!v.truthy()) return Value::iterator({});  // jinja2 checks `if value:` before iterating
  for (const Value& item : in.iterate(v)) {
    Value x = attr_mode ? get_path(in, item, attribute) : item;
    bool r = test.empty() ? x.truthy() : in.apply_test(test, x, test_args);
    if (r == keep) out.push_back(item);
  }
  return Value::iterator(std::move(out));
}

Value filter_map(Interpreter& in, const Value& v, Args& a) {
  ValueList out;
  if (!v.truthy()) return Value::iterator({});  // jinja2 checks `if value:` before iterating
  if (const Value* attribute = a.kwarg("attribute")) {
    Value def = a.kwarg("default") ? *a.kwarg("default") : Value();
    for (const Value& item : in.iterate(v)) {
      Value x = get_path(in, item, *attribute);
      out.push_back(x.is_undefined() && a.kwarg("default") ? def : x);
    }
    return Value::iterator(std::move(out));
  }
  if (a.positional.empty()) return Value::iterator({});
  std::string name = a.positional[0].to_str();
  Args fargs;
  fargs.positional.assign(a.positional.begin() + 1, a.positional.end());
  fargs.kwargs = a.kwargs;
  for (const Value& item : in.iterate(v)) {
    Args copy = fargs;
    out.push_back(in.apply_filter(name, item, copy));
  }
  return Value::iterator(std::move(out));
}

Value filter_dictsort(const Value& v, Args& a) {
  a.check("dictsort", 3, {"case_sensitive", "by", "reverse"});
  if (!v.is_dict() || v.is_namespace()) throw TemplateError("dictsort: expected a mapping, got " + v.type_name());
  bool cs = a.get(0, "case_sensitive", Value(false)).truthy();
  std::string by = a.get(1, "by", Value("key")).to_str();
  if (by != "key" && by != "value") throw TemplateError("You can only sort by either \"key\" or \"value\"");
  bool reverse = a.get(2, "reverse", Value(false)).truthy();
  size_t pos = by == "key" ? 0 : 1;
  ValueList items;
  for (const auto& [k, val] : v.dict_data().items) items.push_back(Value::list({k, val}, true));
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    Value kx = sort_key(x.items()[pos], cs), ky = sort_key(y.items()[pos], cs);
    return reverse ? values_less(ky, kx) : values_less(kx, ky);
  });
  return Value::list(std::move(items));
}

Value filter_sort(Interpreter& in, const Value& v, Args& a) {
  a.check("sort", 3, {"reverse", "case_sensitive", "attribute"});
  bool reverse = a.get(0, "reverse", Value(false)).truthy();
  bool cs = a.get(1, "case_sensitive", Value(false)).truthy();
  Value attribute = a.get(2, "attribute", Value::none());
  ValueList items = in.iterate(v);
  std::vector<std::pair<Value, Value>> keyed;
  for (const Value& item : items) {
    Value k = attribute.is_none() ? item : get_path(in, item, attribute);
    keyed.emplace_back(sort_key(k, cs), item);
  }
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    return reverse ? values_less(y.first, x.first) : values_less(x.first, y.first);
  });
  ValueList out;
  for (auto& [k, item] : keyed) out.push_back(item);
  return Value::list(std::move(out));
}

Value filter_unique(Interpreter& in, const Value& v, Args& a) {
  bool cs = a.get(0, "case_sensitive", Value(false)).truthy();
  Value attribute = a.get(1, "attribute", Value::none());
  ValueList seen, out;
  for (const Value& item : in.iterate(v)) {
    Value k = sort_key(attribute.is_none() ? item : get_path(in, item, attribute), cs);
    if (k.is_list() && !k.is_tuple()) throw TemplateError("unhashable type: 'list'");
    if (k.is_dict()) throw TemplateError("unhashable type: 'dict'");
    bool dup = false;
    for (const Value& s : seen) dup = dup || values_equal(s, k);
    if (dup) continue;
    seen.push_back(k);
    out.push_back(item);
  }
  return Value::iterator(std::move(out));
}

Value filter_join(Interpreter& in, const Value& v, Args& a) {
  a.check("join", 2, {"d", "attribute"});
  std::string sep = a.get(0, "d", Value("")).to_str();
  Value attribute = a.get(1, "attribute", Value::none());
  std::string out;
  bool first = true;
  for (const Value& item : in.iterate(v)) {
    if (!first) out += sep;
    first = false;
    out += (attribute.is_none() ? item : get_path(in, item, attribute)).to_str();
    in.check_size(out.size());
  }
  return Value(out);
}

Value filter_minmax(Interpreter& in, const Value& v, Args& a, bool is_max) {
  bool cs = a.get(0, "case_sensitive", Value(false)).truthy();
  Value attribute = a.get(1, "attribute", Value::none());
  ValueList items = in.iterate(v);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  auto key = [&](size_t i) { return sort_key(attribute.is_none() ? items[i] : get_path(in, items[i], attribute), cs); };
  for (size_t i = 1; i < items.size(); ++i) {
    if (is_max ? values_less(key(best), key(i)) : values_less(key(i), key(best))) best = i;
  }
  return items[best];
}

// ---- filters with a body of a few lines, each named like jinja2's do_<name> ----

using FilterFn = Value (*)(Interpreter& in, const Value& v, Args& a);
using TestFn = bool (*)(Interpreter& in, const Value& v, Args& a);

Value do_trim(Interpreter&, const Value& v, Args& a) {
  Value chars = a.get(0, "chars", Value::none());
  auto set = chars.is_none() ? std::nullopt : std::optional(chars.to_str());
  return Value(py_strip(soft_str(v).str(), set, true, true), v.is_safe());
}

Value do_default(Interpreter&, const Value& v, Args& a) {
  bool boolean = a.get(1, "boolean", Value(false)).truthy();
  if (v.is_undefined() || (boolean && !v.truthy())) return a.get(0, "default_value", Value(""));
  return v;
}

Value do_replace(Interpreter& in, const Value& v, Args& a) {
  Value count = a.get(2, "count", Value::none());
  std::string out =
      py_replace(v.to_str(), a.get(0, "old").to_str(), a.get(1, "new").to_str(), count.is_none() ? -1 : count.as_int());
  in.check_size(out.size());
  return Value(out);
}

Value do_first(Interpreter& in, const Value& v, Args&) {
  ValueList items = in.iterate(v);
  return items.empty() ? Value::undefined("No first item, sequence was empty.") : items.front();
}

Value do_last(Interpreter& in, const Value& v, Args&) {
  if (v.is_iterator()) throw TemplateError("'generator' object is not reversible");
  if (v.is_dict()) throw TemplateError("'dict' object is not reversible");
  ValueList items = in.iterate(v);
  return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
}

Value do_items(Interpreter&, const Value& v, Args&) {
  if (v.is_undefined()) return Value::iterator({});
  if (!v.is_dict() || v.is_namespace()) throw TemplateError("Can only get item pairs from a mapping.");
  ValueList items;
  for (const auto& [k, val] : v.dict_data().items) items.push_back(Value::list({k, val}, true));
  return Value::iterator(std::move(items));
}

Value do_abs(Interpreter&, const Value& v, Args&) {
  if (!v.is_number()) throw TemplateError("bad operand type for abs(): '" + v.type_name() + "'");
  if (!v.is_float() && v.as_int() == INT64_MIN) throw TemplateError("integer overflow in abs()");
  return v.is_float() ? Value(std::fabs(v.as_double())) : Value(static_cast<int64_t>(std::llabs(v.as_int())));
}

Value do_round(Interpreter&, const Value& v, Args& a) {
  int64_t precision = a.get(0, "precision", Value(0)).as_int();
  std::string method = a.get(1, "method", Value("common")).to_str();
  if (method != "common" && method != "ceil" && method != "floor") {
    throw TemplateError("method must be 'common', 'ceil' or 'floor'");
  }
  if (!v.is_number()) throw TemplateError("type " + v.type_name() + " doesn't define __round__ method");
  double x = v.as_double();
  if (method == "common" && precision >= 0 && precision < 300 && std::isfinite(x)) {
    // Python's round() is correctly rounded, half to even: exactly what printf's %.*f does.
    char buf[512];
    std::snprintf(buf, sizeof(buf), "%.*f", static_cast<int>(precision), x);
    return Value(std::strtod(buf, nullptr));
  }
  double scale = std::pow(10.0, static_cast<double>(precision));
  double r = method == "ceil"    ? std::ceil(x * scale)
             : method == "floor" ? std::floor(x * scale)
                                 : std::nearbyint(x * scale);
  return Value(r / scale);
}

Value do_reverse(Interpreter& in, const Value& v, Args&) {
  if (v.is_string()) {
    std::u32string s = utf8_decode(v.str());
    std::reverse(s.begin(), s.end());
    return Value(utf8_encode(s));
  }
  ValueList items = in.iterate(v);
  std::reverse(items.begin(), items.end());
  return Value::iterator(std::move(items));
}

Value do_sum(Interpreter& in, const Value& v, Args& a) {
  Value attribute = a.get(0, "attribute", Value::none());
  Value total = a.get(1, "start", Value(0));
  for (const Value& item : in.iterate(v)) {
    Value x = attribute.is_none() ? item : get_path(in, item, attribute);
    if (!x.is_number() || !total.is_number()) throw TemplateError("unsupported operand type(s) for +");
    int64_t r = 0;
    if (!x.is_float() && !total.is_float() && __builtin_add_overflow(total.as_int(), x.as_int(), &r)) {
      throw TemplateError("integer overflow in sum()");
    }
    total = (x.is_float() || total.is_float()) ? Value(total.as_double() + x.as_double()) : Value(r);
  }
  return total;
}

Value do_center(Interpreter& in, const Value& v, Args& a) {
  int64_t width = a.get(0, "width", Value(80)).as_int();
  std::string s = soft_str(v).str();
  int64_t len = static_cast<int64_t>(py_len(s));
  if (width <= len) return Value(s);
  in.check_size(static_cast<size_t>(width));
  int64_t total = width - len, left = total / 2 + (total & width & 1);
  return Value(std::string(left, ' ') + s + std::string(total - left, ' '));
}

Value do_batch(Interpreter& in, const Value& v, Args& a) {
  int64_t size = a.get(0, "linecount").as_int();
  if (size <= 0) throw TemplateError("batch: linecount must be positive");
  Value fill = a.get(1, "fill_with", Value::none());
  ValueList out, cur;
  for (const Value& item : in.iterate(v)) {
    cur.push_back(item);
    if (static_cast<int64_t>(cur.size()) == size) out.push_back(Value::list(std::exchange(cur, {})));
  }
  if (!cur.empty()) {
    while (!fill.is_none() && static_cast<int64_t>(cur.size()) < size) cur.push_back(fill);
    out.push_back(Value::list(std::move(cur)));
  }
  return Value::iterator(std::move(out));
}

Value do_truncate(Interpreter&, const Value& v, Args& a) {
  std::u32string s = utf8_decode(soft_str(v).str());
  int64_t length = a.get(0, "length", Value(255)).as_int();
  bool killwords = a.get(1, "killwords", Value(false)).truthy();
  std::u32string end = utf8_decode(a.get(2, "end", Value("...")).to_str());
  Value leeway_v = a.get(3, "leeway", Value::none());
  int64_t leeway = leeway_v.is_none() ? 5 : leeway_v.as_int();
  if (length < static_cast<int64_t>(end.size()) || leeway < 0) throw TemplateError("truncate: bad length/leeway");
  if (static_cast<int64_t>(s.size()) <= length + leeway) return Value(utf8_encode(s));
  std::u32string head = s.substr(0, length - end.size());
  if (!killwords) {
    size_t space = head.rfind(U' ');
    if (space != std::u32string::npos) head = head.substr(0, space);
  }
  return Value(utf8_encode(head + end));
}

Value do_format(Interpreter&, const Value& v, Args& a) {
  bool single_mapping = a.positional.size() == 1 && a.positional[0].is_dict();
  return percent_format(soft_str(v).str(), single_mapping ? a.positional[0] : Value::list(a.positional, true));
}

Value do_unsupported(Interpreter&, const Value&, Args&) {
  throw TemplateError("this jinja2 filter is not supported by this template engine");
}

const std::unordered_map<std::string, FilterFn>& filter_table() {
  static const std::unordered_map<std::string, FilterFn> kTable = {
      {"tojson", [](Interpreter&, const Value& v, Args& a) { return filter_tojson(v, a); }},
      {"trim", do_trim},
      {"length", [](Interpreter&, const Value& v, Args&) { return Value(len_of(v)); }},
      {"count", [](Interpreter&, const Value& v, Args&) { return Value(len_of(v)); }},
      {"string", [](Interpreter&, const Value& v, Args&) { return soft_str(v); }},
      {"safe", [](Interpreter&, const Value& v, Args&) { return Value(v.to_str(), true); }},
      {"e", [](Interpreter&, const Value& v, Args&) { return v.is_safe() ? v : Value(html_escape(v.to_str()), true); }},
      {"escape",
       [](Interpreter&, const Value& v, Args&) { return v.is_safe() ? v : Value(html_escape(v.to_str()), true); }},
      {"forceescape", [](Interpreter&, const Value& v, Args&) { return Value(html_escape(v.to_str()), true); }},
      {"default", do_default},
      {"d", do_default},
      {"upper", [](Interpreter&, const Value& v, Args&) { return Value(py_upper(soft_str(v).str()), v.is_safe()); }},
      {"lower", [](Interpreter&, const Value& v, Args&) { return Value(py_lower(soft_str(v).str()), v.is_safe()); }},
      {"capitalize",
       [](Interpreter&, const Value& v, Args&) { return Value(py_capitalize(soft_str(v).str()), v.is_safe()); }},
      {"title", [](Interpreter&, const Value& v, Args&) { return filter_title(v); }},
      {"replace", do_replace},
      {"first", do_first},
      {"last", do_last},
      {"list", [](Interpreter& in, const Value& v, Args&) { return Value::list(in.iterate(v)); }},
      {"items", do_items},
      {"join", filter_join},
      {"map", filter_map},
      {"select", [](Interpreter& in, const Value& v, Args& a) { return filter_select(in, v, a, false, true); }},
      {"reject", [](Interpreter& in, const Value& v, Args& a) { return filter_select(in, v, a, false, false); }},
      {"selectattr", [](Interpreter& in, const Value& v, Args& a) { return filter_select(in, v, a, true, true); }},
      {"rejectattr", [](Interpreter& in, const Value& v, Args& a) { return filter_select(in, v, a, true, false); }},
      {"dictsort", [](Interpreter&, const Value& v, Args& a) { return filter_dictsort(v, a); }},
      {"sort", filter_sort},
      {"unique", filter_unique},
      {"indent", [](Interpreter&, const Value& v, Args& a) { return filter_indent(v, a); }},
      {"int", [](Interpreter&, const Value& v, Args& a) { return filter_int(v, a); }},
      {"float", [](Interpreter&, const Value& v, Args& a) { return filter_float(v, a); }},
      {"abs", do_abs},
      {"round", do_round},
      {"reverse", do_reverse},
      {"sum", do_sum},
      {"min", [](Interpreter& in, const Value& v, Args& a) { return filter_minmax(in, v, a, false); }},
      {"max", [](Interpreter& in, const Value& v, Args& a) { return filter_minmax(in, v, a, true); }},
      {"attr", [](Interpreter& in, const Value& v, Args& a) { return in.get_attr(v, a.get(0, "name").to_str()); }},
      {"wordcount",
       [](Interpreter&, const Value& v, Args&) {
         return Value(static_cast<int64_t>(py_split(soft_str(v).str(), std::nullopt, -1).size()));
       }},
      {"center", do_center},
      {"format", do_format},
      {"batch", do_batch},
      {"truncate", do_truncate},
      // jinja2 builtins not implemented here: known at compile time (as in jinja2), so a template that mentions
      // them only in a branch it never takes still renders; calling one is a clear runtime error.
      {"filesizeformat", do_unsupported},
      {"groupby", do_unsupported},
      {"pprint", do_unsupported},
      {"random", do_unsupported},
      {"slice", do_unsupported},
      {"striptags", do_unsupported},
      {"urlencode", do_unsupported},
      {"urlize", do_unsupported},
      {"wordwrap", do_unsupported},
      {"xmlattr", do_unsupported},
  };
  return kTable;
}

// ---- tests (jinja2/tests.py) ----

bool is_iterable(const Value& v) {
  return v.is_list() || v.is_string() || (v.is_dict() && !v.is_namespace()) || v.is_undefined();
}

bool test_in(Interpreter& in, const Value& v, Args& a) {
  Value seq = a.get(0, nullptr);
  if (seq.is_string()) return v.is_string() && seq.str().find(v.str()) != std::string::npos;
  if (seq.is_dict()) return seq.dict_data().find(v) != nullptr;
  for (const Value& x : in.iterate(seq)) {
    if (values_equal(x, v)) return true;
  }
  return false;
}

int64_t int_operand(const Value& v) {
  if (!v.is_int() && !v.is_bool()) throw TemplateError("not supported between instances of '" + v.type_name() + "'");
  return v.as_int();
}

bool test_divisibleby(Interpreter&, const Value& v, Args& a) {
  int64_t x = int_operand(v), d = a.get(0, nullptr).as_int();
  if (d == 0) throw TemplateError("integer division or modulo by zero");
  return d == -1 || x % d == 0;
}

Value arg0(Args& a) { return a.get(0, nullptr); }

const std::unordered_map<std::string, TestFn>& test_table() {
  static const std::unordered_map<std::string, TestFn> kTable = {
      {"defined", [](Interpreter&, const Value& v, Args&) { return !v.is_undefined(); }},
      {"undefined", [](Interpreter&, const Value& v, Args&) { return v.is_undefined(); }},
      {"none", [](Interpreter&, const Value& v, Args&) { return v.is_none(); }},
      {"string", [](Interpreter&, const Value& v, Args&) { return v.is_string(); }},
      {"mapping", [](Interpreter&, const Value& v, Args&) { return v.is_dict() && !v.is_namespace(); }},
      {"number", [](Interpreter&, const Value& v, Args&) { return v.is_number(); }},
      {"integer", [](Interpreter&, const Value& v, Args&) { return v.is_int(); }},
      {"float", [](Interpreter&, const Value& v, Args&) { return v.is_float(); }},
      {"boolean", [](Interpreter&, const Value& v, Args&) { return v.is_bool(); }},
      {"true", [](Interpreter&, const Value& v, Args&) { return v.is_bool() && v.as_bool(); }},
      {"false", [](Interpreter&, const Value& v, Args&) { return v.is_bool() && !v.as_bool(); }},
      {"callable", [](Interpreter&, const Value& v, Args&) { return v.is_callable(); }},
      {"iterable", [](Interpreter&, const Value& v, Args&) { return is_iterable(v); }},
      // len() and __getitem__ both work: not for generators; Undefined has both.
      {"sequence", [](Interpreter&, const Value& v, Args&) { return is_iterable(v) && !v.is_iterator(); }},
      {"escaped", [](Interpreter&, const Value& v, Args&) { return v.is_safe(); }},
      {"lower", [](Interpreter&, const Value& v, Args&) { return py_lower(v.to_str()) == v.to_str(); }},
      {"upper", [](Interpreter&, const Value& v, Args&) { return py_upper(v.to_str()) == v.to_str(); }},
      {"eq", [](Interpreter&, const Value& v, Args& a) { return values_equal(v, arg0(a)); }},
      {"equalto", [](Interpreter&, const Value& v, Args& a) { return values_equal(v, arg0(a)); }},
      {"==", [](Interpreter&, const Value& v, Args& a) { return values_equal(v, arg0(a)); }},
      {"ne", [](Interpreter&, const Value& v, Args& a) { return !values_equal(v, arg0(a)); }},
      {"!=", [](Interpreter&, const Value& v, Args& a) { return !values_equal(v, arg0(a)); }},
      {"lt", [](Interpreter&, const Value& v, Args& a) { return values_less(v, arg0(a)); }},
      {"lessthan", [](Interpreter&, const Value& v, Args& a) { return values_less(v, arg0(a)); }},
      {"<", [](Interpreter&, const Value& v, Args& a) { return values_less(v, arg0(a)); }},
      {"gt", [](Interpreter&, const Value& v, Args& a) { return values_less(arg0(a), v); }},
      {"greaterthan", [](Interpreter&, const Value& v, Args& a) { return values_less(arg0(a), v); }},
      {">", [](Interpreter&, const Value& v, Args& a) { return values_less(arg0(a), v); }},
      {"le", [](Interpreter&, const Value& v, Args& a) { return !values_less(arg0(a), v); }},
      {"<=", [](Interpreter&, const Value& v, Args& a) { return !values_less(arg0(a), v); }},
      {"ge", [](Interpreter&, const Value& v, Args& a) { return !values_less(v, arg0(a)); }},
      {">=", [](Interpreter&, const Value& v, Args& a) { return !values_less(v, arg0(a)); }},
      {"sameas",
       [](Interpreter&, const Value& v, Args& a) {
         Value o = arg0(a);
         return v.type() == o.type() && values_equal(v, o);
       }},
      {"in", test_in},
      {"odd", [](Interpreter&, const Value& v, Args&) { return int_operand(v) % 2 != 0; }},
      {"even", [](Interpreter&, const Value& v, Args&) { return int_operand(v) % 2 == 0; }},
      {"divisibleby", test_divisibleby},
      {"filter", [](Interpreter&, const Value& v, Args&) { return is_known_filter(v.to_str()); }},
      {"test", [](Interpreter&, const Value& v, Args&) { return is_known_test(v.to_str()); }},
  };
  return kTable;
}

}  // namespace

bool is_known_filter(const std::string& name) { return filter_table().count(name) > 0; }
bool is_known_test(const std::string& name) { return test_table().count(name) > 0; }

Value call_builtin_filter(Interpreter& in, const std::string& name, const Value& v, Args& a, bool* found) {
  auto it = filter_table().find(name);
  *found = it != filter_table().end();
  if (!*found) return Value();
  if (it->second == do_unsupported) throw TemplateError("filter '" + name + "' is not supported by this engine");
  return it->second(in, v, a);
}

bool call_builtin_test(Interpreter& in, const std::string& name, const Value& v, Args& a, bool* found) {
  auto it = test_table().find(name);
  *found = it != test_table().end();
  return *found && it->second(in, v, a);
}

}  // namespace llmserve::jinja
