// LineReader over libedit (LLMSERVE_WITH_LIBEDIT) or std::getline.
#include "cli/line_reader.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>

#ifdef LLMSERVE_WITH_LIBEDIT
#include <editline/readline.h>
#endif

namespace llmserve::cli {

LineReader::LineReader() : interactive_(isatty(STDIN_FILENO) != 0) {}

std::optional<std::string> LineReader::read(const char *prompt) {
#ifdef LLMSERVE_WITH_LIBEDIT
  if (interactive_) {
    char *line = readline(prompt);
    if (line == nullptr) return std::nullopt;
    std::string out(line);
    std::free(line);
    if (!out.empty()) add_history(out.c_str());
    return out;
  }
#endif
  if (interactive_) {
    std::fputs(prompt, stderr);
    std::fflush(stderr);
  }
  std::string line;
  if (!std::getline(std::cin, line)) return std::nullopt;
  return line;
}

}  // namespace llmserve::cli
