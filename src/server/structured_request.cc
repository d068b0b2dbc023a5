// Parsing of the output-constraint and tool fields (structured_request.h). Only shapes are checked here; whether a
// schema / regex / grammar compiles is decided by the engine's grammar compiler at request validation
// (InputProcessor), whose error the server reports under the field named here.
#include "server/structured_request.h"

#include <vector>

namespace llmserve::server {
namespace {

using OJson = nlohmann::ordered_json;

const OJson *find(const OJson &obj, const char *name) {
  auto it = obj.find(name);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

// A JSON schema given as an object (or a boolean schema), or as a string holding one.
Status read_schema(const OJson &v, const std::string &field, std::string *out) {
  if (v.is_object() || v.is_boolean()) {
    *out = v.dump();
    return ok_status();
  }
  if (!v.is_string()) return invalid_argument(field + ": the JSON schema must be an object or a JSON string");
  OJson parsed = OJson::parse(v.get<std::string>(), nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded() || !(parsed.is_object() || parsed.is_boolean())) {
    return invalid_argument(field + ": the JSON schema string is not a JSON object");
  }
  *out = parsed.dump();
  return ok_status();
}

Status read_string(const OJson &v, const std::string &field, std::string *out) {
  if (!v.is_string()) return invalid_argument(field + ": expected a string");
  *out = v.get<std::string>();
  return ok_status();
}

Status read_choices(const OJson &v, const std::string &field, std::vector<std::string> *out) {
  if (!v.is_array() || v.empty()) return invalid_argument(field + ": expected a non-empty list of strings");
  for (const OJson &c : v) {
    if (!c.is_string()) return invalid_argument(field + ": expected a non-empty list of strings");
    out->push_back(c.get<std::string>());
  }
  return ok_status();
}

// OpenAI's response_format: text (no constraint), json_object, json_schema {name, schema, strict, description}.
Status parse_response_format(const OJson &v, std::optional<StructuredOutputsParams> *out) {
  if (!v.is_object()) return invalid_argument("response_format: expected an object with a \"type\"");
  const OJson *type = find(v, "type");
  if (type == nullptr || !type->is_string()) return invalid_argument("response_format: \"type\" is required");
  const std::string t = type->get<std::string>();
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (it.key() != "type" && !(t == "json_schema" && it.key() == "json_schema") && !it->is_null()) {
      return invalid_argument("response_format: unexpected key \"" + it.key() + "\" for type \"" + t + "\"");
    }
  }
  if (t == "text") return ok_status();
  StructuredOutputsParams so;
  if (t == "json_object") {
    so.json_object = true;
  } else if (t == "json_schema") {
    const OJson *js = find(v, "json_schema");
    if (js == nullptr || !js->is_object()) {
      return invalid_argument("response_format: type \"json_schema\" needs a \"json_schema\" object");
    }
    for (auto it = js->begin(); it != js->end(); ++it) {
      const std::string &k = it.key();
      if (k != "name" && k != "schema" && k != "strict" && k != "description" && !it->is_null()) {
        return invalid_argument("response_format: json_schema has an unknown key \"" + k + "\"");
      }
    }
    const OJson *name = find(*js, "name");
    if (name == nullptr || !name->is_string()) {
      return invalid_argument("response_format: json_schema.name is required (a string)");
    }
    if (const OJson *strict = find(*js, "strict"); strict != nullptr && !strict->is_boolean()) {
      return invalid_argument("response_format: json_schema.strict must be a boolean");
    }
    // OpenAI: without a schema any JSON object is valid output (the schema is optional in the API reference).
    const OJson *schema = find(*js, "schema");
    so.json.emplace();
    if (schema == nullptr) {
      *so.json = OJson{{"type", "object"}}.dump();
    } else {
      RETURN_IF_ERROR(read_schema(*schema, "response_format", &*so.json));
    }
  } else {
    return invalid_argument("response_format: type \"" + t +
                            "\" is not supported (expected \"text\", \"json_object\" or \"json_schema\")");
  }
  *out = std::move(so);
  return ok_status();
}

// vLLM's structured_outputs object (StructuredOutputsParams): json, regex, choice, grammar, json_object.
Status parse_structured_outputs(const OJson &v, std::optional<StructuredOutputsParams> *out) {
  const std::string field = "structured_outputs";
  if (!v.is_object()) return invalid_argument(field + ": expected an object");
  StructuredOutputsParams so;
  for (auto it = v.begin(); it != v.end(); ++it) {
    const std::string &k = it.key();
    const OJson &x = *it;
    if (x.is_null()) continue;
    if (k == "json") {
      RETURN_IF_ERROR(read_schema(x, field, &so.json.emplace()));
    } else if (k == "regex") {
      RETURN_IF_ERROR(read_string(x, field, &so.regex.emplace()));
    } else if (k == "choice") {
      RETURN_IF_ERROR(read_choices(x, field, &so.choice.emplace()));
    } else if (k == "grammar") {
      RETURN_IF_ERROR(read_string(x, field, &so.grammar.emplace()));
    } else if (k == "json_object") {
      if (!x.is_boolean()) return invalid_argument(field + ": json_object must be a boolean");
      so.json_object = x.get<bool>();
    } else {
      return invalid_argument(field + ": \"" + k + "\" is not supported (refused rather than ignored)");
    }
  }
  if (so.num_constraints() == 0) return invalid_argument(field + ": none of json, regex, choice, grammar, json_object");
  if (so.num_constraints() > 1) {
    return invalid_argument(field + ": only one of json, regex, choice, grammar, json_object may be set");
  }
  *out = std::move(so);
  return ok_status();
}

// The older guided_* names (vLLM < 0.11), one field each.
Status parse_guided(const OJson &body, const char *name, std::optional<StructuredOutputsParams> *out) {
  const OJson *v = find(body, name);
  if (v == nullptr) return ok_status();
  const std::string field(name);
  StructuredOutputsParams so;
  if (field == "guided_json") {
    RETURN_IF_ERROR(read_schema(*v, field, &so.json.emplace()));
  } else if (field == "guided_regex") {
    RETURN_IF_ERROR(read_string(*v, field, &so.regex.emplace()));
  } else if (field == "guided_choice") {
    RETURN_IF_ERROR(read_choices(*v, field, &so.choice.emplace()));
  } else {
    RETURN_IF_ERROR(read_string(*v, field, &so.grammar.emplace()));
  }
  *out = std::move(so);
  return ok_status();
}

Status parse_tool(const OJson &tool, size_t i, std::vector<std::string> *names) {
  const std::string where = "tools: tools[" + std::to_string(i) + "]";
  if (!tool.is_object()) return invalid_argument(where + " is not an object");
  const OJson *type = find(tool, "type");
  if (type == nullptr || *type != "function") return invalid_argument(where + ".type must be \"function\"");
  const OJson *fn = find(tool, "function");
  if (fn == nullptr || !fn->is_object()) return invalid_argument(where + ".function must be an object");
  const OJson *name = find(*fn, "name");
  if (name == nullptr || !name->is_string() || name->get<std::string>().empty()) {
    return invalid_argument(where + ".function.name must be a non-empty string");
  }
  if (const OJson *params = find(*fn, "parameters"); params != nullptr && !params->is_object()) {
    return invalid_argument(where + ".function.parameters must be a JSON schema object");
  }
  names->push_back(name->get<std::string>());
  return ok_status();
}

}  // namespace

Status parse_output_constraint(const OJson &body, std::optional<StructuredOutputsParams> *out, std::string *field) {
  out->reset();
  field->clear();
  struct Found {
    std::string field;
    std::optional<StructuredOutputsParams> so;
  };
  std::vector<Found> found;
  if (const OJson *v = find(body, "response_format")) {
    Found f{"response_format", std::nullopt};
    RETURN_IF_ERROR(parse_response_format(*v, &f.so));
    if (f.so) found.push_back(std::move(f));
  }
  if (const OJson *v = find(body, "structured_outputs")) {
    Found f{"structured_outputs", std::nullopt};
    RETURN_IF_ERROR(parse_structured_outputs(*v, &f.so));
    found.push_back(std::move(f));
  }
  for (const char *name : {"guided_json", "guided_regex", "guided_choice", "guided_grammar"}) {
    Found f{name, std::nullopt};
    RETURN_IF_ERROR(parse_guided(body, name, &f.so));
    if (f.so) found.push_back(std::move(f));
  }
  if (found.size() > 1) {
    return invalid_argument(found[1].field + ": conflicts with " + found[0].field +
                            ": a request takes one output constraint (response_format, structured_outputs or one "
                            "guided_* field)");
  }
  if (found.size() == 1) {
    *out = std::move(found[0].so);
    *field = found[0].field;
  }
  return ok_status();
}

Status parse_tools(const OJson &body, ToolsRequest *out) {
  std::vector<std::string> names;
  if (const OJson *v = find(body, "tools")) {
    if (!v->is_array()) return invalid_argument("tools: expected a list");
    for (size_t i = 0; i < v->size(); ++i) RETURN_IF_ERROR(parse_tool((*v)[i], i, &names));
    out->tools = *v;
  }
  const bool has_tools = !names.empty();
  // vLLM: tool_choice defaults to "auto" when tools are given, else "none".
  out->choice = has_tools ? ToolChoice::kAuto : ToolChoice::kNone;
  const OJson *v = find(body, "tool_choice");
  if (v == nullptr) return ok_status();
  if (v->is_string()) {
    const std::string c = v->get<std::string>();
    if (c == "none") {
      out->choice = ToolChoice::kNone;
    } else if (c == "auto") {
      out->choice = ToolChoice::kAuto;
    } else if (c == "required") {
      out->choice = ToolChoice::kRequired;
    } else {
      return invalid_argument("tool_choice: expected \"none\", \"auto\", \"required\" or a named function, got \"" + c +
                              "\"");
    }
  } else if (v->is_object()) {
    const OJson *type = find(*v, "type");
    const OJson *fn = find(*v, "function");
    const OJson *name = fn != nullptr && fn->is_object() ? find(*fn, "name") : nullptr;
    if (type == nullptr || *type != "function" || name == nullptr || !name->is_string()) {
      return invalid_argument(
          "tool_choice: a named tool choice is {\"type\": \"function\", \"function\": {\"name\": ...}}");
    }
    out->choice = ToolChoice::kNamed;
    out->named_function = name->get<std::string>();
    if (has_tools && std::find(names.begin(), names.end(), out->named_function) == names.end()) {
      return invalid_argument("tool_choice: the function \"" + out->named_function + "\" is not among the tools");
    }
  } else {
    return invalid_argument("tool_choice: expected a string or an object");
  }
  if ((out->choice == ToolChoice::kRequired || out->choice == ToolChoice::kNamed) && !has_tools) {
    return invalid_argument("tool_choice: when using `tool_choice`, `tools` must be set.");
  }
  return ok_status();
}

StructuredOutputsParams tool_call_constraint(const ToolsRequest &tools) {
  auto parameters_of = [](const OJson &fn) {
    auto it = fn.find("parameters");
    return it == fn.end() || it->is_null() ? OJson{{"type", "object"}} : *it;
  };
  StructuredOutputsParams so;
  if (tools.choice == ToolChoice::kNamed) {
    for (const OJson &tool : tools.tools) {
      if (tool["function"]["name"] == tools.named_function) so.json = parameters_of(tool["function"]).dump();
    }
    return so;
  }
  // "required": [{"name": <one of the tools>, "parameters": <its arguments>}, ...] (vLLM's schema). $defs of the
  // tools' schemas are hoisted to the root, where their "#/$defs/..." references point.
  OJson any_of = OJson::array();
  OJson defs = OJson::object();
  for (const OJson &tool : tools.tools) {
    const OJson &fn = tool["function"];
    OJson params = parameters_of(fn);
    if (auto d = params.find("$defs"); d != params.end() && d->is_object()) {
      for (auto it = d->begin(); it != d->end(); ++it) defs[it.key()] = *it;
      params.erase("$defs");
    }
    any_of.push_back({{"type", "object"},
                      {"properties", {{"name", {{"type", "string"}, {"enum", {fn["name"]}}}}, {"parameters", params}}},
                      {"required", {"name", "parameters"}},
                      {"additionalProperties", false}});
  }
  OJson schema = {{"type", "array"}, {"minItems", 1}, {"items", {{"anyOf", std::move(any_of)}}}};
  if (!defs.empty()) schema["$defs"] = std::move(defs);
  so.json = schema.dump();
  return so;
}

}  // namespace llmserve::server
