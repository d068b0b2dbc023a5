// Status / StatusOr: errors as values for the control plane (config, weights, tokenizer, requests).
// A Status is OK or carries a canonical code plus a message that names what failed and where.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace llmserve {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,
  kNotFound,
  kAlreadyExists,
  kOutOfRange,
  kResourceExhausted,
  kFailedPrecondition,
  kUnimplemented,
  kUnauthenticated,
  kDataLoss,
  kInternal,
  kUnavailable,
  kAborted,
};

std::string_view status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "INVALID_ARGUMENT: message", or "OK".
  std::string to_string() const;
  // Returns a copy whose message is "context: message" (no-op on OK).
  Status with_context(std::string_view context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status ok_status() { return Status(); }
inline Status invalid_argument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status not_found(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status out_of_range(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
inline Status resource_exhausted(std::string m) { return {StatusCode::kResourceExhausted, std::move(m)}; }
inline Status failed_precondition(std::string m) { return {StatusCode::kFailedPrecondition, std::move(m)}; }
inline Status unimplemented(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
inline Status data_loss(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
inline Status internal_error(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

// Either a value or a non-OK Status. Accessing value() of an error aborts (it is a bug, not user input).
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(Status status) : status_(std::move(status)) { check_not_ok(); }  // NOLINT: implicit by design
  StatusOr(T value) : value_(std::move(value)) {}                            // NOLINT: implicit by design

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() & { check_ok(); return *value_; }
  const T& value() const& { check_ok(); return *value_; }
  T&& value() && { check_ok(); return std::move(*value_); }
  T* operator->() { check_ok(); return &*value_; }
  const T* operator->() const { check_ok(); return &*value_; }
  T& operator*() & { check_ok(); return *value_; }
  const T& operator*() const& { check_ok(); return *value_; }

 private:
  void check_ok() const;
  void check_not_ok() const;
  Status status_;
  std::optional<T> value_;
};

[[noreturn]] void status_or_fatal(const Status& status, bool has_value);

template <typename T>
void StatusOr<T>::check_ok() const {
  if (!status_.ok()) status_or_fatal(status_, true);
}
template <typename T>
void StatusOr<T>::check_not_ok() const {
  if (status_.ok()) status_or_fatal(status_, false);
}

}  // namespace llmserve

#define LLMSERVE_CONCAT_INNER(a, b) a##b
#define LLMSERVE_CONCAT(a, b) LLMSERVE_CONCAT_INNER(a, b)

// Returns the Status from the enclosing function if `expr` is not OK.
#define RETURN_IF_ERROR(expr)                                 \
  do {                                                        \
    ::llmserve::Status _llmserve_status = (expr);             \
    if (!_llmserve_status.ok()) return _llmserve_status;      \
  } while (0)

// `ASSIGN_OR_RETURN(auto x, MakeX());` declares x from a StatusOr or returns its error.
#define ASSIGN_OR_RETURN(lhs, expr) ASSIGN_OR_RETURN_IMPL(LLMSERVE_CONCAT(_llmserve_or_, __LINE__), lhs, expr)
#define ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                          \
  if (!tmp.ok()) return tmp.status();         \
  lhs = std::move(tmp).value()
