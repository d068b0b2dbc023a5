// Schema walker that emits grammar rules as it goes: each subschema becomes an expression, each $ref a rule (so
// recursive schemas work), and a schema keyword this file does not handle is an error, never silently dropped.
// Additional properties: absent = not allowed when `properties` are declared (OpenAI strict mode's rule, and a subset
// of what the schema allows); `true` or a schema = extra keys after the declared ones, none equal to a declared name.
#include "structured/json_schema_to_grammar.h"

#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>

#include "structured/json_grammar_builder.h"
#include "structured/regex_to_grammar.h"

namespace llmserve::structured {

namespace {

using Json = nlohmann::json;

// Keywords that carry no constraint.
const std::set<std::string> kAnnotations = {"title",   "description", "$schema",    "$id",      "$comment",
                                            "default", "examples",    "deprecated", "readOnly", "writeOnly",
                                            "$defs",   "definitions", "strict",     "name"};
const std::set<std::string> kObjectKeys = {"properties", "required", "additionalProperties"};
const std::set<std::string> kArrayKeys = {"items", "minItems", "maxItems"};
const std::set<std::string> kStringKeys = {"minLength", "maxLength", "pattern", "format"};
const std::set<std::string> kNumberKeys = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};

std::string escape_pointer(const std::string& key) {
  std::string out;
  for (char c : key) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

class SchemaConverter {
 public:
  SchemaConverter(Grammar& g, int32_t max_ws, const Json& root) : b_(g, max_ws), g_(g), root_(root) {}

  StatusOr<ExprId> convert(const Json& s, const std::string& path) {
    if (s.is_boolean()) {
      if (s.get<bool>()) return b_.value();
      return error(path, "the schema `false` matches nothing");
    }
    if (!s.is_object()) return error(path, "a schema must be an object or a boolean");
    if (s.contains("$ref")) return convert_ref(s, path);
    if (s.contains("const")) return convert_const_or_enum(s, path, "const");
    if (s.contains("enum")) return convert_const_or_enum(s, path, "enum");
    if (s.contains("anyOf") || s.contains("oneOf")) return convert_any_of(s, path);
    if (s.contains("allOf")) return convert_all_of(s, path);

    std::vector<std::string> types;
    if (s.contains("type")) {
      const Json& t = s["type"];
      if (t.is_string()) {
        types.push_back(t.get<std::string>());
      } else if (t.is_array() && !t.empty()) {
        for (const Json& x : t) {
          if (!x.is_string()) return error(path + "/type", "type names must be strings");
          types.push_back(x.get<std::string>());
        }
      } else {
        return error(path + "/type", "`type` must be a string or a non-empty array of strings");
      }
    } else {
      auto inferred = infer_type(s, path);
      if (!inferred.ok()) return inferred.status();
      if (inferred->empty()) {
        Status st = check_keys(s, path, {});
        if (!st.ok()) return st;
        return b_.value();
      }
      types.push_back(*inferred);
    }
    std::set<std::string> allowed = {"type"};
    for (const auto& t : types) {
      const std::set<std::string>* keys = keys_of_type(t);
      if (keys == nullptr) return error(path + "/type", "unknown type '" + t + "'");
      allowed.insert(keys->begin(), keys->end());
    }
    Status st = check_keys(s, path, allowed);
    if (!st.ok()) return st;
    std::vector<ExprId> alts;
    for (const auto& t : types) {
      auto e = convert_typed(s, t, path);
      if (!e.ok()) return e.status();
      alts.push_back(*e);
    }
    return g_.choice(std::move(alts));
  }

 private:
  static Status error(const std::string& path, const std::string& what) {
    return invalid_argument("schema " + (path.empty() ? std::string("/") : path) + ": " + what);
  }

  static const std::set<std::string>* keys_of_type(const std::string& t) {
    static const std::set<std::string> kNone;
    if (t == "object") return &kObjectKeys;
    if (t == "array") return &kArrayKeys;
    if (t == "string") return &kStringKeys;
    if (t == "integer" || t == "number") return &kNumberKeys;
    if (t == "boolean" || t == "null") return &kNone;
    return nullptr;
  }

  Status check_keys(const Json& s, const std::string& path, const std::set<std::string>& allowed) {
    for (auto it = s.begin(); it != s.end(); ++it) {
      if (kAnnotations.count(it.key()) || allowed.count(it.key())) continue;
      return error(path + "/" + escape_pointer(it.key()),
                   "unsupported keyword '" + it.key() + "'" + (keys_of_any_type(it.key()) ? " for this type" : ""));
    }
    return ok_status();
  }

  static bool keys_of_any_type(const std::string& k) {
    return kObjectKeys.count(k) || kArrayKeys.count(k) || kStringKeys.count(k) || kNumberKeys.count(k);
  }

  // The type a schema without `type` constrains: "" for none (any value).
  StatusOr<std::string> infer_type(const Json& s, const std::string& path) {
    std::string found;
    for (auto it = s.begin(); it != s.end(); ++it) {
      std::string t = kObjectKeys.count(it.key())   ? "object"
                      : kArrayKeys.count(it.key())  ? "array"
                      : kStringKeys.count(it.key()) ? "string"
                      : kNumberKeys.count(it.key()) ? "number"
                                                    : "";
      if (t.empty()) continue;
      if (!found.empty() && found != t) {
        return error(path, "keywords of both " + found + " and " + t + " without `type`; add `type`");
      }
      found = t;
    }
    return found;
  }

  StatusOr<ExprId> convert_typed(const Json& s, const std::string& t, const std::string& path) {
    if (t == "null") return b_.lit("null");
    if (t == "boolean") return g_.choice({b_.lit("true"), b_.lit("false")});
    if (t == "string") return convert_string(s, path);
    if (t == "integer") return convert_integer(s, path);
    if (t == "number") return convert_number(s, path);
    if (t == "array") return convert_array(s, path);
    return convert_object(s, path);
  }

  StatusOr<int32_t> count(const Json& s, const char* key, const std::string& path, int32_t dflt) {
    if (!s.contains(key)) return dflt;
    const Json& v = s[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 0) {
      return error(path + "/" + key, std::string("`") + key + "` must be a non-negative integer");
    }
    if (v.get<int64_t>() > 10000) return error(path + "/" + key, std::string("`") + key + "` above 10000");
    return static_cast<int32_t>(v.get<int64_t>());
  }

  StatusOr<ExprId> convert_string(const Json& s, const std::string& path) {
    auto min_len = count(s, "minLength", path, 0);
    if (!min_len.ok()) return min_len.status();
    auto max_len = count(s, "maxLength", path, kUnbounded);
    if (!max_len.ok()) return max_len.status();
    if (*max_len < *min_len) return error(path + "/maxLength", "maxLength below minLength");
    bool has_length = s.contains("minLength") || s.contains("maxLength");
    if (s.contains("pattern")) {
      if (has_length) return error(path + "/pattern", "`pattern` together with minLength/maxLength is not supported");
      if (s.contains("format")) return error(path + "/pattern", "`pattern` together with `format` is not supported");
      if (!s["pattern"].is_string()) return error(path + "/pattern", "`pattern` must be a string");
      return convert_pattern(s["pattern"].get<std::string>(), path + "/pattern");
    }
    if (s.contains("format")) {
      if (has_length) return error(path + "/format", "`format` together with minLength/maxLength is not supported");
      if (!s["format"].is_string()) return error(path + "/format", "`format` must be a string");
      return convert_format(s["format"].get<std::string>(), path + "/format");
    }
    return b_.string(*min_len, *max_len);
  }

  // The pattern's characters, JSON-escaped where JSON requires it: each code point the regex allows becomes one
  // string character (an escape for '"', '\\' and control characters).
  StatusOr<ExprId> convert_pattern(const std::string& pattern, const std::string& path);

  StatusOr<ExprId> convert_format(const std::string& f, const std::string& path) {
    static const std::map<std::string, std::string> kFormats = {
        {"date", "DATE"},
        {"time", "TIME"},
        {"date-time", "DATE[Tt]TIME"},
        {"uuid", "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"},
        {"email",
         "[A-Za-z0-9_%+-]+(\\.[A-Za-z0-9_%+-]+)*@[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?"
         "(\\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)+"},
        {"ipv4", "OCTET\\.OCTET\\.OCTET\\.OCTET"},
        // At most 3 labels of <= 63 characters: under the 253-character limit.
        {"hostname", "LABEL(\\.LABEL){0,2}"},
        // scheme://host[:port][/path][?query], unreserved and sub-delimiter characters only (no % escapes).
        {"uri",
         "[a-z][a-z0-9+.-]{0,9}://LABEL(\\.LABEL){0,2}(:[0-9]{1,5})?(/[A-Za-z0-9._~!$&'()*+,;=:@-]*)*"
         "(\\?[A-Za-z0-9._~!$&'()*+,;=:@/?-]*)?"},
    };
    auto it = kFormats.find(f);
    if (it == kFormats.end()) {
      return error(
          path, "unsupported format '" + f + "' (supported: date, time, date-time, uuid, email, ipv4, hostname, uri)");
    }
    // Days per month without Feb 29, so every output is a real date.
    const std::string date =
        "[0-9]{4}-((0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])|(0[469]|11)-(0[1-9]|[12][0-9]|30)|02-(0[1-9]|1[0-9]|2[0-8]"
        "))";
    const std::string time =
        "([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,6})?([Zz]|[+-]([01][0-9]|2[0-3]):[0-5][0-9])";
    const std::string octet = "(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])";
    std::string re = it->second;
    auto replace = [&](const std::string& from, const std::string& to) {
      for (size_t p; (p = re.find(from)) != std::string::npos;) re.replace(p, from.size(), to);
    };
    replace("DATE", date);
    replace("TIME", time);
    replace("OCTET", octet);
    replace("LABEL", "[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?");
    return convert_pattern(re, path);
  }

  StatusOr<std::optional<int64_t>> bound(const Json& s, const char* key, const std::string& path, bool integer_only) {
    if (!s.contains(key)) return std::optional<int64_t>();
    const Json& v = s[key];
    if (!v.is_number()) return error(path + "/" + key, std::string("`") + key + "` must be a number");
    double d = v.get<double>();
    if (std::abs(d) > 1e15) return error(path + "/" + key, std::string("`") + key + "` beyond +-1e15 is not supported");
    if (integer_only && d != std::floor(d)) {
      return error(path + "/" + key, std::string("`") + key +
                                         "` must be an integer for a `number` (fractional bounds "
                                         "are not supported)");
    }
    return std::optional<int64_t>(static_cast<int64_t>(std::floor(d)));
  }

  // Integer bounds: [lo, hi] after applying exclusive bounds (fractional bounds round inward).
  Status integer_bounds(const Json& s, const std::string& path, bool integer_only, std::optional<int64_t>& lo,
                        std::optional<int64_t>& hi, bool& lo_excl, bool& hi_excl) {
    auto mn = bound(s, "minimum", path, integer_only);
    auto mx = bound(s, "maximum", path, integer_only);
    auto xmn = bound(s, "exclusiveMinimum", path, integer_only);
    auto xmx = bound(s, "exclusiveMaximum", path, integer_only);
    for (auto* r : {&mn, &mx, &xmn, &xmx}) {
      if (!r->ok()) return r->status();
    }
    lo_excl = hi_excl = false;
    if (*mn) lo = s["minimum"].get<double>() == static_cast<double>(**mn) ? **mn : **mn + 1;  // ceil
    if (*xmn) {
      int64_t v = **xmn + 1;  // floor(x) + 1 is the least integer > x
      if (!lo || v > *lo) lo = v, lo_excl = true;
    }
    if (*mx) hi = **mx;
    if (*xmx) {
      double d = s["exclusiveMaximum"].get<double>();
      int64_t v = d == static_cast<double>(**xmx) ? **xmx - 1 : **xmx;
      if (!hi || v < *hi) hi = v, hi_excl = true;
    }
    if (lo && hi && *lo > *hi) return error(path, "minimum above maximum: no number fits");
    return ok_status();
  }

  StatusOr<ExprId> convert_integer(const Json& s, const std::string& path) {
    std::optional<int64_t> lo, hi;
    bool lo_excl, hi_excl;
    Status st = integer_bounds(s, path, false, lo, hi, lo_excl, hi_excl);
    if (!st.ok()) return st;
    if (!lo && !hi) return b_.integer_unbounded();
    return IntegerRange(g_).range(lo, hi);
  }

  StatusOr<ExprId> convert_number(const Json& s, const std::string& path) {
    std::optional<int64_t> lo, hi;
    bool lo_excl, hi_excl;
    Status st = integer_bounds(s, path, true, lo, hi, lo_excl, hi_excl);
    if (!st.ok()) return st;
    if (!lo && !hi) return b_.number();
    // Integers in [lo, hi], or k.fff (value in [k, k+1)) with [k, k+1) inside the bounds, or -k.fff (value in
    // (-(k+1), -k]). With exclusive bounds lo/hi already moved inward by one, which keeps every value inside.
    IntegerRange ints(g_);
    std::vector<ExprId> alts = {ints.range(lo, hi)};
    ExprId fraction = g_.sequence({b_.lit("."), g_.plus(g_.char_class({{'0', '9'}}))});
    int64_t pos_lo = lo ? std::max<int64_t>(0, *lo) : 0;
    std::optional<int64_t> pos_hi = hi ? std::optional<int64_t>(*hi - 1) : std::nullopt;
    if (!pos_hi || pos_lo <= *pos_hi) alts.push_back(g_.sequence({ints.nonneg(pos_lo, pos_hi), fraction}));
    int64_t neg_lo = hi ? std::max<int64_t>(0, -*hi) : 0;
    std::optional<int64_t> neg_hi = lo ? std::optional<int64_t>(-*lo - 1) : std::nullopt;
    if (!neg_hi || neg_lo <= *neg_hi) {
      alts.push_back(g_.sequence({b_.lit("-"), ints.nonneg(neg_lo, neg_hi), fraction}));
    }
    return g_.choice(std::move(alts));
  }

  StatusOr<ExprId> convert_array(const Json& s, const std::string& path) {
    auto min_items = count(s, "minItems", path, 0);
    if (!min_items.ok()) return min_items.status();
    auto max_items = count(s, "maxItems", path, kUnbounded);
    if (!max_items.ok()) return max_items.status();
    if (*max_items < *min_items) return error(path + "/maxItems", "maxItems below minItems");
    ExprId item;
    if (s.contains("items")) {
      if (s["items"].is_array()) return error(path + "/items", "tuple `items` (an array) is not supported");
      auto e = convert(s["items"], path + "/items");
      if (!e.ok()) return e.status();
      item = *e;
    } else {
      item = b_.value();
    }
    return b_.array_of(item, *min_items, *max_items);
  }

  StatusOr<ExprId> convert_object(const Json& s, const std::string& path) {
    std::vector<std::pair<std::string, ExprId>> props;
    std::set<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) return error(path + "/required", "`required` must be an array of names");
      for (const Json& r : s["required"]) {
        if (!r.is_string()) return error(path + "/required", "`required` must be an array of names");
        required.insert(r.get<std::string>());
      }
    }
    if (s.contains("properties")) {
      const Json& p = s["properties"];
      if (!p.is_object()) return error(path + "/properties", "`properties` must be an object");
      for (auto it = p.begin(); it != p.end(); ++it) {
        auto e = convert(it.value(), path + "/properties/" + escape_pointer(it.key()));
        if (!e.ok()) return e.status();
        props.push_back({it.key(), *e});
      }
    }
    for (const auto& r : required) {
      bool found = false;
      for (const auto& [name, e] : props) found |= name == r;
      if (!found) {
        return error(path + "/required", "required property '" + r + "' is not declared in `properties`");
      }
    }
    bool has_props = s.contains("properties");
    std::optional<ExprId> extra_value;  // the value schema of additional properties, if they are allowed
    if (s.contains("additionalProperties")) {
      const Json& ap = s["additionalProperties"];
      if (!(ap.is_boolean() && !ap.get<bool>())) {
        auto v = convert(ap, path + "/additionalProperties");
        if (!v.ok()) return v.status();
        if (!has_props) return b_.object_of(*v);
        extra_value = *v;
      }
    } else if (!has_props) {
      return b_.any_object();
    }
    // Declared order; optional properties may be skipped. first[i]/rest[i]: the members from i on when none / some
    // member was already written (which decides whether a comma comes first).
    size_t n = props.size();
    std::vector<ExprId> first(n + 1), rest(n + 1);
    first[n] = b_.lit("");
    rest[n] = b_.lit("");
    if (extra_value) {
      // Extra properties after the declared ones, keys unescaped and distinct from every declared name.
      std::vector<std::string> names;
      for (const auto& p : props) names.push_back(p.first);
      ExprId extra = g_.sequence({b_.key_not_in(names), b_.ws(), b_.lit(":"), b_.ws(), *extra_value, b_.ws()});
      ExprId more = g_.star(g_.sequence({b_.lit(","), b_.ws(), extra}));
      first[n] = g_.optional(g_.sequence({extra, more}));
      rest[n] = more;
    }
    for (size_t k = n; k-- > 0;) {
      ExprId member =
          g_.sequence({b_.lit(Json(props[k].first).dump()), b_.ws(), b_.lit(":"), b_.ws(), props[k].second, b_.ws()});
      RuleId rf = g_.add_rule("obj_first"), rr = g_.add_rule("obj_rest");
      ExprId with_first = g_.sequence({member, rest[k + 1]});
      ExprId with_rest = g_.sequence({b_.lit(","), b_.ws(), member, rest[k + 1]});
      bool req = required.count(props[k].first) != 0;
      g_.set_body(rf, req ? with_first : g_.choice({with_first, first[k + 1]}));
      g_.set_body(rr, req ? with_rest : g_.choice({with_rest, rest[k + 1]}));
      first[k] = g_.ref(rf);
      rest[k] = g_.ref(rr);
    }
    return g_.sequence({b_.lit("{"), b_.ws(), first[0], b_.lit("}")});
  }

  StatusOr<ExprId> convert_const_or_enum(const Json& s, const std::string& path, const char* key) {
    Status st = check_keys(s, path, {key, "type"});
    if (!st.ok()) return st;
    std::vector<Json> values;
    if (std::string(key) == "const") {
      values.push_back(s["const"]);
    } else {
      if (!s["enum"].is_array() || s["enum"].empty()) return error(path + "/enum", "`enum` must be a non-empty array");
      for (const Json& v : s["enum"]) values.push_back(v);
    }
    std::vector<ExprId> alts;
    for (const Json& v : values) {
      if (s.contains("type") && !matches_type(v, s["type"])) continue;  // the type keyword excludes this value
      alts.push_back(b_.lit(v.dump()));
    }
    if (alts.empty()) return error(path + "/" + key, "no value also satisfies `type`");
    return g_.choice(std::move(alts));
  }

  static bool matches_type(const Json& v, const Json& type) {
    auto one = [&](const std::string& t) {
      if (t == "null") return v.is_null();
      if (t == "boolean") return v.is_boolean();
      if (t == "string") return v.is_string();
      if (t == "integer")
        return v.is_number_integer() || (v.is_number_float() && v.get<double>() == std::floor(v.get<double>()));
      if (t == "number") return v.is_number();
      if (t == "array") return v.is_array();
      if (t == "object") return v.is_object();
      return false;
    };
    if (type.is_string()) return one(type.get<std::string>());
    if (type.is_array()) {
      for (const Json& t : type) {
        if (t.is_string() && one(t.get<std::string>())) return true;
      }
    }
    return false;
  }

  StatusOr<ExprId> convert_any_of(const Json& s, const std::string& path) {
    const char* key = s.contains("anyOf") ? "anyOf" : "oneOf";
    if (s.contains("anyOf") && s.contains("oneOf")) return error(path, "both anyOf and oneOf are not supported");
    Status st = check_keys(s, path, {key});
    if (!st.ok()) return st;
    const Json& list = s[key];
    if (!list.is_array() || list.empty())
      return error(path + "/" + key, std::string("`") + key + "` must be a non-empty array");
    std::vector<ExprId> alts;
    for (size_t i = 0; i < list.size(); ++i) {
      auto e = convert(list[i], path + "/" + key + "/" + std::to_string(i));
      if (!e.ok()) return e.status();
      alts.push_back(*e);
    }
    return g_.choice(std::move(alts));
  }

  StatusOr<ExprId> convert_all_of(const Json& s, const std::string& path) {
    Status st = check_keys(s, path, {"allOf"});
    if (!st.ok()) return st;
    const Json& list = s["allOf"];
    if (!list.is_array() || list.size() != 1) {
      return error(path + "/allOf", "`allOf` is supported with exactly one subschema");
    }
    return convert(list[0], path + "/allOf/0");
  }

  StatusOr<ExprId> convert_ref(const Json& s, const std::string& path) {
    Status st = check_keys(s, path, {"$ref"});
    if (!st.ok()) return st;
    if (!s["$ref"].is_string()) return error(path + "/$ref", "`$ref` must be a string");
    std::string ref = s["$ref"].get<std::string>();
    auto it = refs_.find(ref);
    if (it != refs_.end()) return g_.ref(it->second);
    if (ref.empty() || ref[0] != '#')
      return error(path + "/$ref", "only local references ('#/...') are supported: " + ref);
    const Json* target = &root_;
    std::string pointer = ref.substr(1);
    if (!pointer.empty()) {
      try {
        target = &root_.at(Json::json_pointer(pointer));
      } catch (const std::exception&) {
        return error(path + "/$ref", "reference '" + ref + "' does not resolve");
      }
    }
    RuleId r = g_.add_rule("ref");
    refs_[ref] = r;
    auto body = convert(*target, pointer);
    if (!body.ok()) return body.status();
    g_.set_body(r, *body);
    return g_.ref(r);
  }

  JsonGrammarBuilder b_;
  Grammar& g_;
  const Json& root_;
  std::map<std::string, RuleId> refs_;
};

// Rewrites the regex's expression tree into JSON string content: every character class or literal byte that JSON
// must escape (", \, U+0000..U+001F) becomes the choice of its escape forms.
ExprId jsonify(Grammar& g, ExprId id, std::map<ExprId, ExprId>& memo) {
  auto it = memo.find(id);
  if (it != memo.end()) return it->second;
  Expr e = g.expr(id);
  ExprId out = id;
  auto escape_of = [&](uint32_t cp) -> std::string {
    switch (cp) {
      case '"':
        return "\\\"";
      case '\\':
        return "\\\\";
      case '\n':
        return "\\n";
      case '\t':
        return "\\t";
      case '\r':
        return "\\r";
      case '\b':
        return "\\b";
      case '\f':
        return "\\f";
      default: {
        char buf[8];
        snprintf(buf, sizeof(buf), "\\u%04x", cp);
        return buf;
      }
    }
  };
  switch (e.kind) {
    case Expr::Kind::kBytes: {
      std::vector<ExprId> parts;
      std::string run;
      for (unsigned char c : e.bytes) {
        if (c == '"' || c == '\\' || c < 0x20) {
          run += escape_of(c);
        } else {
          run.push_back(static_cast<char>(c));
        }
      }
      out = g.bytes(run);
      break;
    }
    case Expr::Kind::kCharClass: {
      // Split off the code points JSON must escape.
      std::vector<std::pair<uint32_t, uint32_t>> plain;
      std::vector<uint32_t> special;
      std::vector<std::pair<uint32_t, uint32_t>> norm = e.ranges;
      if (e.negated) {
        // Materialize the complement so escapes can be split off.
        std::sort(norm.begin(), norm.end());
        std::vector<std::pair<uint32_t, uint32_t>> inv;
        uint32_t next = 0;
        for (auto [lo, hi] : norm) {
          if (lo > next) inv.push_back({next, lo - 1});
          next = std::max(next, hi + 1);
        }
        if (next <= 0x10FFFF) inv.push_back({next, 0x10FFFF});
        norm = std::move(inv);
      }
      for (auto [lo, hi] : norm) {
        uint32_t start = lo;
        for (uint32_t c = lo; c <= hi && c < 0x80; ++c) {
          if (c == '"' || c == '\\' || c < 0x20) {
            if (c > start) plain.push_back({start, c - 1});
            special.push_back(c);
            start = c + 1;
          }
        }
        if (start <= hi) plain.push_back({start, hi});
      }
      std::vector<ExprId> alts;
      if (!plain.empty()) alts.push_back(g.char_class(plain));
      for (uint32_t c : special) alts.push_back(g.bytes(escape_of(c)));
      out = g.choice(alts);
      break;
    }
    case Expr::Kind::kSequence:
    case Expr::Kind::kChoice:
    case Expr::Kind::kRepeat: {
      std::vector<ExprId> kids;
      for (ExprId c : e.children) kids.push_back(jsonify(g, c, memo));
      if (e.kind == Expr::Kind::kSequence)
        out = g.sequence(kids);
      else if (e.kind == Expr::Kind::kChoice)
        out = g.choice(kids);
      else
        out = g.repeat(kids[0], e.min, e.max);
      break;
    }
    case Expr::Kind::kRuleRef:
      break;  // regexes make no rules
  }
  memo[id] = out;
  return out;
}

}  // namespace

StatusOr<ExprId> SchemaConverter::convert_pattern(const std::string& pattern, const std::string& path) {
  auto e = add_regex(g_, pattern);
  if (!e.ok()) return error(path, e.status().message());
  std::map<ExprId, ExprId> memo;
  return g_.sequence({b_.lit("\""), jsonify(g_, *e, memo), b_.lit("\"")});
}

StatusOr<ExprId> add_json_schema(Grammar& g, std::string_view schema_json, int32_t max_whitespace) {
  Json schema = Json::parse(schema_json, nullptr, false);
  if (schema.is_discarded()) return invalid_argument("schema is not valid JSON");
  SchemaConverter conv(g, max_whitespace, schema);
  return conv.convert(schema, "");
}

StatusOr<Grammar> json_schema_to_grammar(std::string_view schema_json, int32_t max_whitespace) {
  Grammar g;
  RuleId root = g.add_rule("root");
  auto body = add_json_schema(g, schema_json, max_whitespace);
  if (!body.ok()) return body.status();
  g.set_body(root, *body);
  g.set_root(root);
  Status st = g.validate();
  if (!st.ok()) return st;
  return g;
}

Grammar json_object_grammar(int32_t max_whitespace) {
  Grammar g;
  RuleId root = g.add_rule("root");
  JsonGrammarBuilder b(g, max_whitespace);
  g.set_body(root, b.any_object());
  g.set_root(root);
  return g;
}

}  // namespace llmserve::structured
