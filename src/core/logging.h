// Logging and invariant checks: LOG(INFO) << ...; CHECK(cond) << ...; CHECK_EQ(a, b).
// CHECK is for internal invariants only (it aborts with file:line); user input is validated with Status.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace llmserve {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3, kFatal = 4 };

// Messages below this level are dropped. Initialised from $LLMSERVE_LOG_LEVEL (debug|info|warning|error).
LogLevel min_log_level();
void set_min_log_level(LogLevel level);
// Parses "debug", "info", "warning", "error"; returns false on anything else.
bool parse_log_level(const std::string& name, LogLevel* level);

// What a FATAL message (a failed CHECK) throws instead of aborting while a ScopedThrowOnFatal is alive on the thread.
class FatalError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// While one lives on this thread, a FATAL message throws FatalError (its text, without the file:line prefix)
// instead of writing it and aborting. For a host runtime that calls into the library and must turn a rejected
// argument into its own exception (the torch ops: a RuntimeError, the Python process going on). Hold it only around
// code whose CHECKs run before any state changes, such as an op's argument check.
class ScopedThrowOnFatal {
 public:
  ScopedThrowOnFatal();
  ~ScopedThrowOnFatal();
  ScopedThrowOnFatal(const ScopedThrowOnFatal&) = delete;
  ScopedThrowOnFatal& operator=(const ScopedThrowOnFatal&) = delete;
};

class LogMessage {
 public:
  LogMessage(const char* file, int line, LogLevel level);
  // Writes the line to stderr; aborts for kFatal (throws FatalError under a ScopedThrowOnFatal).
  ~LogMessage() noexcept(false);
  std::ostream& stream() { return stream_; }

 private:
  LogLevel level_;
  std::ostringstream stream_;
  size_t prefix_size_ = 0;  // "[F file:line] ": left out of a FatalError's text
};

// Swallows the stream when a log statement is disabled.
struct LogVoidify {
  void operator&(std::ostream&) {}
};

}  // namespace llmserve

#define LLMSERVE_LOG_DEBUG ::llmserve::LogLevel::kDebug
#define LLMSERVE_LOG_INFO ::llmserve::LogLevel::kInfo
#define LLMSERVE_LOG_WARNING ::llmserve::LogLevel::kWarning
#define LLMSERVE_LOG_ERROR ::llmserve::LogLevel::kError
#define LLMSERVE_LOG_FATAL ::llmserve::LogLevel::kFatal

#define LOG(severity)                                                 \
  (LLMSERVE_LOG_##severity < ::llmserve::min_log_level())             \
      ? (void)0                                                       \
      : ::llmserve::LogVoidify() &                                    \
            ::llmserve::LogMessage(__FILE__, __LINE__, LLMSERVE_LOG_##severity).stream()

#define CHECK(cond)                                                                        \
  (cond) ? (void)0                                                                         \
         : ::llmserve::LogVoidify() &                                                      \
               ::llmserve::LogMessage(__FILE__, __LINE__, ::llmserve::LogLevel::kFatal).stream() \
                   << "Check failed: " #cond " "

#define LLMSERVE_CHECK_OP(a, b, op) CHECK((a)op(b)) << "(" << (a) << " vs " << (b) << ") "
#define CHECK_EQ(a, b) LLMSERVE_CHECK_OP(a, b, ==)
#define CHECK_NE(a, b) LLMSERVE_CHECK_OP(a, b, !=)
#define CHECK_LT(a, b) LLMSERVE_CHECK_OP(a, b, <)
#define CHECK_LE(a, b) LLMSERVE_CHECK_OP(a, b, <=)
#define CHECK_GT(a, b) LLMSERVE_CHECK_OP(a, b, >)
#define CHECK_GE(a, b) LLMSERVE_CHECK_OP(a, b, >=)
// Aborts if a Status-returning expression fails (for code where failure is a bug, e.g. tests, tools).
#define CHECK_OK(expr)                                     \
  do {                                                     \
    ::llmserve::Status _llmserve_s = (expr);               \
    CHECK(_llmserve_s.ok()) << _llmserve_s.to_string();    \
  } while (0)
