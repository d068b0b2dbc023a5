// `llmserve version`: prints the version and the build's backends.
#include <cstdio>

#include "cli/command.h"

namespace llmserve::cli {
namespace {

int run_version(const std::vector<std::string>& args) {
  ArgParser parser("version", "Prints the llmserve version and the backends compiled in.");
  if (int code = parse_or_exit_code(parser, args); code >= 0) return code;
#ifdef LLMSERVE_WITH_CUDA
  const char* backends = "cpu, cuda";
#else
  const char* backends = "cpu";
#endif
  std::printf("llmserve %s (backends: %s)\n", LLMSERVE_VERSION, backends);
  return 0;
}

}  // namespace

LLMSERVE_REGISTER_COMMAND("version", "print the version and compiled-in backends", run_version);

}  // namespace llmserve::cli
