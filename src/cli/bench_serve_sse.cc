// Incremental Server-Sent Events parser (see bench_serve_sse.h); keeps at most one partial line between calls.
#include "cli/bench_serve_sse.h"

namespace llmserve::cli {

std::vector<std::string> SseParser::feed(std::string_view bytes) {
  std::vector<std::string> out;
  for (char c : bytes) {
    if (last_was_cr_) {
      last_was_cr_ = false;
      if (c == '\n') continue;  // the "\n" of a "\r\n" split across (or within) reads
    }
    if (c == '\n' || c == '\r') {
      last_was_cr_ = c == '\r';
      process_line(&out);
    } else {
      line_.push_back(c);
    }
  }
  return out;
}

std::vector<std::string> SseParser::finish() {
  std::vector<std::string> out;
  if (!line_.empty()) process_line(&out);
  dispatch(&out);
  last_was_cr_ = false;
  return out;
}

void SseParser::process_line(std::vector<std::string>* out) {
  if (line_.empty()) {
    dispatch(out);
    return;
  }
  if (line_[0] == ':') {  // comment, e.g. a keep-alive ping
    line_.clear();
    return;
  }
  const size_t colon = line_.find(':');
  std::string_view field = std::string_view(line_).substr(0, colon);
  std::string_view value;
  if (colon != std::string::npos) {
    value = std::string_view(line_).substr(colon + 1);
    if (!value.empty() && value[0] == ' ') value.remove_prefix(1);
  }
  if (field == "data") {
    if (has_data_) data_.push_back('\n');
    data_.append(value);
    has_data_ = true;
  }
  line_.clear();
}

void SseParser::dispatch(std::vector<std::string>* out) {
  if (has_data_) out->push_back(std::move(data_));
  data_.clear();
  has_data_ = false;
}

}  // namespace llmserve::cli
