// Status names and the fatal path for misuse of StatusOr.
#include "core/status.h"

#include <cstdio>
#include <cstdlib>

namespace llmserve {

std::string_view status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "OK";
    case StatusCode::kInvalidArgument: return "INVALID_ARGUMENT";
    case StatusCode::kNotFound: return "NOT_FOUND";
    case StatusCode::kAlreadyExists: return "ALREADY_EXISTS";
    case StatusCode::kOutOfRange: return "OUT_OF_RANGE";
    case StatusCode::kResourceExhausted: return "RESOURCE_EXHAUSTED";
    case StatusCode::kFailedPrecondition: return "FAILED_PRECONDITION";
    case StatusCode::kUnimplemented: return "UNIMPLEMENTED";
    case StatusCode::kUnauthenticated: return "UNAUTHENTICATED";
    case StatusCode::kDataLoss: return "DATA_LOSS";
    case StatusCode::kInternal: return "INTERNAL";
    case StatusCode::kUnavailable: return "UNAVAILABLE";
    case StatusCode::kAborted: return "ABORTED";
  }
  return "UNKNOWN";
}

std::string Status::to_string() const {
  if (ok()) return "OK";
  return std::string(status_code_name(code_)) + ": " + message_;
}

Status Status::with_context(std::string_view context) const {
  if (ok()) return *this;
  return Status(code_, std::string(context) + ": " + message_);
}

void status_or_fatal(const Status& status, bool has_value) {
  if (has_value) {
    std::fprintf(stderr, "FATAL: StatusOr::value() on error: %s\n", status.to_string().c_str());
  } else {
    std::fprintf(stderr, "FATAL: StatusOr constructed from an OK status without a value\n");
  }
  std::abort();
}

}  // namespace llmserve
