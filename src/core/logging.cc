// Logging sink: one line per message on stderr, "[I file:line] text"; FATAL aborts after writing (or throws, under
// a ScopedThrowOnFatal).
#include "core/logging.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>

namespace llmserve {
namespace {

LogLevel initial_level() {
  const char* env = std::getenv("LLMSERVE_LOG_LEVEL");
  LogLevel level = LogLevel::kInfo;
  if (env != nullptr) parse_log_level(env, &level);
  return level;
}

std::atomic<LogLevel>& level_storage() {
  static std::atomic<LogLevel> level{initial_level()};
  return level;
}

char level_letter(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug: return 'D';
    case LogLevel::kInfo: return 'I';
    case LogLevel::kWarning: return 'W';
    case LogLevel::kError: return 'E';
    case LogLevel::kFatal: return 'F';
  }
  return '?';
}

}  // namespace

LogLevel min_log_level() { return level_storage().load(std::memory_order_relaxed); }
void set_min_log_level(LogLevel level) { level_storage().store(level, std::memory_order_relaxed); }

bool parse_log_level(const std::string& name, LogLevel* level) {
  if (name == "debug") *level = LogLevel::kDebug;
  else if (name == "info") *level = LogLevel::kInfo;
  else if (name == "warning") *level = LogLevel::kWarning;
  else if (name == "error") *level = LogLevel::kError;
  else return false;
  return true;
}

namespace {
thread_local int throw_on_fatal_depth = 0;
}  // namespace

ScopedThrowOnFatal::ScopedThrowOnFatal() { ++throw_on_fatal_depth; }
ScopedThrowOnFatal::~ScopedThrowOnFatal() { --throw_on_fatal_depth; }

LogMessage::LogMessage(const char* file, int line, LogLevel level) : level_(level) {
  const char* base = std::strrchr(file, '/');
  stream_ << '[' << level_letter(level) << ' ' << (base ? base + 1 : file) << ':' << line << "] ";
  prefix_size_ = stream_.str().size();
}

LogMessage::~LogMessage() noexcept(false) {
  // Not while another exception unwinds the stack (a throw there would terminate): then the abort below stands.
  if (level_ == LogLevel::kFatal && throw_on_fatal_depth > 0 && std::uncaught_exceptions() == 0) {
    throw FatalError(stream_.str().substr(prefix_size_));
  }
  stream_ << '\n';
  std::string text = stream_.str();
  std::fwrite(text.data(), 1, text.size(), stderr);
  if (level_ == LogLevel::kFatal) {
    std::fflush(stderr);
    std::abort();
  }
}

}  // namespace llmserve
