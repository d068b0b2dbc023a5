// RequestId: an immutable, shared request id string. Copies share one allocation (a reference count), so the
// per-step structs that name every running request (SchedulerOutput, ModelRunnerOutput, EngineCoreOutputs)
// cost no string copy; equality tries pointer identity before comparing characters.
#pragma once

#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <string_view>

namespace llmserve {

class RequestId {
 public:
  RequestId() = default;  // the empty id; holds no allocation
  RequestId(std::string s) : s_(std::make_shared<const std::string>(std::move(s))) {}  // NOLINT: implicit
  RequestId(const char* s) : RequestId(std::string(s)) {}                              // NOLINT: implicit

  const std::string& str() const { return s_ ? *s_ : kEmpty; }
  operator const std::string&() const { return str(); }  // NOLINT: implicit, ids read as strings everywhere
  bool empty() const { return str().empty(); }

  friend bool operator==(const RequestId& a, const RequestId& b) { return a.s_ == b.s_ || a.str() == b.str(); }
  friend bool operator==(const RequestId& a, const std::string& b) { return a.str() == b; }
  friend bool operator==(const RequestId& a, const char* b) { return a.str() == b; }
  friend bool operator<(const RequestId& a, const RequestId& b) { return a.str() < b.str(); }
  friend std::ostream& operator<<(std::ostream& os, const RequestId& id) { return os << id.str(); }

 private:
  static inline const std::string kEmpty;
  std::shared_ptr<const std::string> s_;
};

}  // namespace llmserve

template <>
struct std::hash<llmserve::RequestId> {
  size_t operator()(const llmserve::RequestId& id) const { return std::hash<std::string>()(id.str()); }
};
