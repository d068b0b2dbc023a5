// `llmserve` entry point: dispatches the first argument to a registered subcommand (see command.h).
#include <cstdio>
#include <string>
#include <vector>

#include "cli/command.h"

namespace {

void print_commands(FILE* out) {
  std::fprintf(out, "usage: llmserve <command> [options]   (llmserve <command> --help for its options)\n\ncommands:\n");
  for (const auto& [name, command] : llmserve::cli::command_registry()) {
    if (command.summary.empty()) continue;  // internal commands (engine-core)
    std::fprintf(out, "  %-12s %s\n", name.c_str(), command.summary.c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    print_commands(stderr);
    return 2;
  }
  std::string name = argv[1];
  if (name == "--help" || name == "-h" || name == "help") {
    print_commands(stdout);
    return 0;
  }
  auto& registry = llmserve::cli::command_registry();
  if (name == "--version" || name == "-V") name = "version";  // as `vllm --version`
  auto it = registry.find(name);
  if (it == registry.end()) {
    std::fprintf(stderr, "llmserve: unknown command '%s'\n", name.c_str());
    print_commands(stderr);
    return 2;
  }
  return it->second.run(std::vector<std::string>(argv + 2, argv + argc));
}
