// The chat's input: libedit's readline on a terminal (line editing, the arrow keys, history), plain lines from a
// pipe. Built without libedit, a terminal gets plain lines too.
#pragma once

#include <optional>
#include <string>

namespace llmserve::cli {

class LineReader {
 public:
  LineReader();
  // Whether stdin is a terminal (prompts are shown, history kept).
  bool interactive() const { return interactive_; }
  // The next line without its newline; nullopt at end of input (Ctrl-D on a terminal).
  std::optional<std::string> read(const char *prompt);

 private:
  bool interactive_;
};

}  // namespace llmserve::cli
