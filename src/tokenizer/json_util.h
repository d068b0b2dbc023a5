// Typed, non-throwing accessors over nlohmann::json for the tokenizer loaders.
// Every error names the JSON path of the offending field, e.g. "model.merges[12]: expected a string".
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace llmserve::json_util {

using Json = nlohmann::json;

inline Status field_error(std::string_view path, std::string_view what) {
  return invalid_argument(std::string(path) + ": " + std::string(what));
}
inline std::string join(std::string_view path, std::string_view key) {
  return path.empty() ? std::string(key) : std::string(path) + "." + std::string(key);
}
// j[key] if present and not null, else nullptr.
inline const Json* find(const Json& j, std::string_view key) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return nullptr;
  return &*it;
}
inline StatusOr<std::string> get_string(const Json& j, std::string_view key, std::string_view path) {
  const Json* v = find(j, key);
  if (v == nullptr) return field_error(join(path, key), "missing");
  if (!v->is_string()) return field_error(join(path, key), "expected a string");
  return v->get<std::string>();
}
inline StatusOr<std::string> get_string_or(const Json& j, std::string_view key, std::string_view path,
                                           std::string fallback) {
  if (find(j, key) == nullptr) return fallback;
  return get_string(j, key, path);
}
inline StatusOr<bool> get_bool_or(const Json& j, std::string_view key, std::string_view path, bool fallback) {
  const Json* v = find(j, key);
  if (v == nullptr) return fallback;
  if (!v->is_boolean()) return field_error(join(path, key), "expected a boolean");
  return v->get<bool>();
}
inline StatusOr<int64_t> get_int_or(const Json& j, std::string_view key, std::string_view path, int64_t fallback) {
  const Json* v = find(j, key);
  if (v == nullptr) return fallback;
  if (!v->is_number_integer()) return field_error(join(path, key), "expected an integer");
  return v->get<int64_t>();
}
inline StatusOr<double> get_double_or(const Json& j, std::string_view key, std::string_view path, double fallback) {
  const Json* v = find(j, key);
  if (v == nullptr) return fallback;
  if (!v->is_number()) return field_error(join(path, key), "expected a number");
  return v->get<double>();
}

// The elements of the list j[key], each built by make(element, "<path>.<key>[i]") -> StatusOr<unique_ptr<T>>:
// the "Sequence" form every tokenizer stage (normalizer, pre-tokenizer, post-processor, decoder) shares.
template <typename T, typename Make>
StatusOr<std::vector<std::unique_ptr<T>>> make_each(const Json& j, std::string_view key, std::string_view path,
                                                    Make make) {
  const Json* list = find(j, key);
  const std::string list_path = join(path, key);
  if (list == nullptr || !list->is_array()) return field_error(list_path, "expected a list");
  std::vector<std::unique_ptr<T>> parts;
  for (size_t i = 0; i < list->size(); ++i) {
    ASSIGN_OR_RETURN(std::unique_ptr<T> part, make((*list)[i], list_path + "[" + std::to_string(i) + "]"));
    parts.push_back(std::move(part));
  }
  return parts;
}

}  // namespace llmserve::json_util
