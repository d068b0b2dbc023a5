// Subcommand registry and a small flag parser shared by every `llmserve <command>`.
// Each command file registers itself with LLMSERVE_REGISTER_COMMAND, so adding one touches no other file.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

namespace llmserve::cli {

// A command receives the arguments after its name; it returns the process exit code.
using CommandFn = std::function<int(const std::vector<std::string>& args)>;

struct Command {
  std::string name;
  std::string summary;  // one line for `llmserve --help`
  CommandFn run;
};

std::map<std::string, Command>& command_registry();

struct CommandRegistrar {
  CommandRegistrar(std::string name, std::string summary, CommandFn fn);
};

#define LLMSERVE_REGISTER_COMMAND(name, summary, fn) \
  static ::llmserve::cli::CommandRegistrar LLMSERVE_CONCAT(llmserve_command_, __LINE__)(name, summary, fn)

// Parses `--name value`, `--name=value` and boolean `--flag` / `--no-flag`. Unknown flags, missing or
// malformed values are InvalidArgument errors naming the flag. Positional arguments are collected in order.
class ArgParser {
 public:
  ArgParser(std::string command, std::string description);

  void add_string(const std::string& name, std::string* out, const std::string& help);
  void add_strings(const std::string& name, std::vector<std::string>* out, const std::string& help);  // repeatable
  // As argparse's nargs="+": the words after the flag up to the next flag (`--served-model-name a b`), replacing
  // the default list.
  void add_string_list(const std::string& name, std::vector<std::string>* out, const std::string& help);
  void add_int(const std::string& name, int64_t* out, const std::string& help);
  void add_int(const std::string& name, std::optional<int64_t>* out, const std::string& help);  // unset: not given
  void add_float(const std::string& name, double* out, const std::string& help);
  void add_float(const std::string& name, std::optional<double>* out, const std::string& help);  // unset: not given
  void add_bool(const std::string& name, bool* out, const std::string& help);  // also accepts --no-<name>
  // As add_bool, but `out` stays unset when neither form is given (a default that depends on other flags).
  void add_bool(const std::string& name, std::optional<bool>* out, const std::string& help);
  // A single-dash short spelling of a registered flag (vLLM's -tp for --tensor-parallel-size): "-tp 2", "-tp=2".
  void add_short(const std::string& short_name, const std::string& name);
  // Names the positional arguments in usage; `out` receives them (may be null if none are accepted).
  void set_positional(const std::string& usage_name, std::vector<std::string>* out);

  // Returns OK, or the error; `help_requested()` is true after --help / -h (usage was printed to stdout).
  Status parse(const std::vector<std::string>& args);
  bool help_requested() const { return help_requested_; }
  std::string usage() const;

 private:
  enum class Kind { kString, kStrings, kStringList, kInt, kOptionalInt, kFloat, kOptionalFloat, kBool, kOptionalBool };
  struct Flag {
    Kind kind;
    void* out;
    std::string help;
    std::string default_text;  // the value at registration, shown by usage() unless the help names a default
  };
  void add(const std::string& name, Flag flag);
  Status assign(const std::string& name, Flag& flag, const std::string& value);
  static void set_bool(Flag& flag, bool value);

  std::string command_;
  std::string description_;
  std::map<std::string, Flag> flags_;
  std::vector<std::string> order_;
  std::map<std::string, std::string> short_to_name_;
  std::string positional_name_;
  std::vector<std::string>* positional_ = nullptr;
  bool help_requested_ = false;
};

// Runs a parser and turns the outcome into an exit code: -1 means "go on", else the code to return.
int parse_or_exit_code(ArgParser& parser, const std::vector<std::string>& args);

}  // namespace llmserve::cli
