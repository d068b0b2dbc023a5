// Python str methods on UTF-8 strings (strip/split/replace/case/splitlines...) with CPython's exact semantics
// for the arguments templates pass. Invariant: inputs and outputs are UTF-8; indices count code points.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace llmserve::jinja {

// chars == nullopt strips Python whitespace.
std::string py_strip(const std::string& s, const std::optional<std::string>& chars, bool left, bool right);
// sep == nullopt splits on runs of whitespace; maxsplit < 0 means no limit.
std::vector<std::string> py_split(const std::string& s, const std::optional<std::string>& sep, int64_t maxsplit);
std::vector<std::string> py_rsplit(const std::string& s, const std::optional<std::string>& sep, int64_t maxsplit);
std::vector<std::string> py_splitlines(const std::string& s, bool keepends);
std::string py_replace(const std::string& s, const std::string& old, const std::string& repl, int64_t count);
std::string py_lower(const std::string& s);
std::string py_upper(const std::string& s);
std::string py_capitalize(const std::string& s);
std::string py_title(const std::string& s);
size_t py_len(const std::string& s);

}  // namespace llmserve::jinja
