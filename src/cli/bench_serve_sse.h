// Incremental Server-Sent Events parser for `llmserve bench serve`: bytes arrive in arbitrary pieces (a TCP read
// may end mid-line, mid-"\r\n" or mid-UTF-8); an event is dispatched only once its blank line has arrived.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace llmserve::cli {

// Follows the WHATWG event-stream rules that OpenAI-style servers use: lines end in "\n", "\r\n" or "\r"; a blank
// line ends an event; "data:" lines (one optional space after the colon removed) are joined with "\n"; comment
// lines (":...") and other fields (event, id, retry) are ignored; an event without data lines is not dispatched.
class SseParser {
 public:
  // Consumes `bytes` and returns the data of every event completed by them, in order.
  std::vector<std::string> feed(std::string_view bytes);
  // End of stream: a final event not followed by a blank line is dispatched too (servers that close the
  // connection right after the last "data:" line).
  std::vector<std::string> finish();

  // Bytes held waiting for the end of their line (bounded by one line).
  size_t num_pending_bytes() const { return line_.size(); }

 private:
  void process_line(std::vector<std::string>* out);
  void dispatch(std::vector<std::string>* out);

  std::string line_;  // the current, unterminated line
  std::string data_;  // data lines of the current event, joined with "\n"
  bool has_data_ = false;
  bool last_was_cr_ = false;  // a "\r" ended the previous line: a "\n" right after it is part of that line ending
};

}  // namespace llmserve::cli
