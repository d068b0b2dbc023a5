// Command registry and ArgParser.
#include "cli/command.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "core/logging.h"

namespace llmserve::cli {

std::map<std::string, Command>& command_registry() {
  static std::map<std::string, Command> registry;
  return registry;
}

CommandRegistrar::CommandRegistrar(std::string name, std::string summary, CommandFn fn) {
  Command command{name, std::move(summary), std::move(fn)};
  command_registry()[name] = std::move(command);
}

ArgParser::ArgParser(std::string command, std::string description)
    : command_(std::move(command)), description_(std::move(description)) {}

void ArgParser::add(const std::string& name, Flag flag) {
  flags_[name] = std::move(flag);
  order_.push_back(name);
}
void ArgParser::add_string(const std::string& name, std::string* out, const std::string& help) {
  add(name, {Kind::kString, out, help, *out});
}
void ArgParser::add_strings(const std::string& name, std::vector<std::string>* out, const std::string& help) {
  add(name, {Kind::kStrings, out, help, ""});
}
void ArgParser::add_string_list(const std::string& name, std::vector<std::string>* out, const std::string& help) {
  std::string defaults;
  for (const std::string& v : *out) defaults += (defaults.empty() ? "" : " ") + v;
  add(name, {Kind::kStringList, out, help, defaults});
}
void ArgParser::add_int(const std::string& name, int64_t* out, const std::string& help) {
  add(name, {Kind::kInt, out, help, std::to_string(*out)});
}
void ArgParser::add_int(const std::string& name, std::optional<int64_t>* out, const std::string& help) {
  add(name, {Kind::kOptionalInt, out, help, ""});
}
void ArgParser::add_float(const std::string& name, double* out, const std::string& help) {
  std::ostringstream text;
  text << *out;
  add(name, {Kind::kFloat, out, help, text.str()});
}
void ArgParser::add_float(const std::string& name, std::optional<double>* out, const std::string& help) {
  add(name, {Kind::kOptionalFloat, out, help, ""});
}
void ArgParser::add_bool(const std::string& name, bool* out, const std::string& help) {
  add(name, {Kind::kBool, out, help, *out ? "on" : "off"});
}
void ArgParser::add_bool(const std::string& name, std::optional<bool>* out, const std::string& help) {
  add(name, {Kind::kOptionalBool, out, help, ""});
}
void ArgParser::set_positional(const std::string& usage_name, std::vector<std::string>* out) {
  positional_name_ = usage_name;
  positional_ = out;
}

void ArgParser::set_bool(Flag& flag, bool value) {
  if (flag.kind == Kind::kOptionalBool) {
    *static_cast<std::optional<bool>*>(flag.out) = value;
  } else {
    *static_cast<bool*>(flag.out) = value;
  }
}

Status ArgParser::assign(const std::string& name, Flag& flag, const std::string& value) {
  switch (flag.kind) {
    case Kind::kString:
      *static_cast<std::string*>(flag.out) = value;
      return ok_status();
    case Kind::kStrings:
    case Kind::kStringList:
      static_cast<std::vector<std::string>*>(flag.out)->push_back(value);
      return ok_status();
    case Kind::kInt:
    case Kind::kOptionalInt: {
      char* end = nullptr;
      errno = 0;
      long long v = std::strtoll(value.c_str(), &end, 10);
      if (value.empty() || *end != '\0' || errno != 0) {
        return invalid_argument("--" + name + " expects an integer, got '" + value + "'");
      }
      if (flag.kind == Kind::kOptionalInt) {
        *static_cast<std::optional<int64_t>*>(flag.out) = v;
      } else {
        *static_cast<int64_t*>(flag.out) = v;
      }
      return ok_status();
    }
    case Kind::kFloat:
    case Kind::kOptionalFloat: {
      char* end = nullptr;
      errno = 0;
      double v = std::strtod(value.c_str(), &end);
      if (value.empty() || *end != '\0' || errno != 0) {
        return invalid_argument("--" + name + " expects a number, got '" + value + "'");
      }
      if (flag.kind == Kind::kOptionalFloat) {
        *static_cast<std::optional<double>*>(flag.out) = v;
      } else {
        *static_cast<double*>(flag.out) = v;
      }
      return ok_status();
    }
    case Kind::kBool:
    case Kind::kOptionalBool: {
      bool v = false;
      if (value == "true" || value == "1")
        v = true;
      else if (value == "false" || value == "0")
        v = false;
      else
        return invalid_argument("--" + name + " expects true or false, got '" + value + "'");
      set_bool(flag, v);
      return ok_status();
    }
  }
  return internal_error("unreachable");
}

void ArgParser::add_short(const std::string& short_name, const std::string& name) {
  CHECK(flags_.count(name)) << "short flag " << short_name << " for unknown --" << name;
  short_to_name_[short_name] = name;
}

Status ArgParser::parse(const std::vector<std::string>& args) {
  for (size_t i = 0; i < args.size(); ++i) {
    std::string arg = args[i];
    if (arg.size() > 1 && arg[0] == '-' && arg[1] != '-') {  // a short spelling: rewritten to its --name
      const std::string head = arg.substr(0, arg.find('='));
      if (auto s = short_to_name_.find(head); s != short_to_name_.end())
        arg = "--" + s->second + arg.substr(head.size());
    }
    if (arg == "--help" || arg == "-h") {
      help_requested_ = true;
      std::fputs(usage().c_str(), stdout);
      return ok_status();
    }
    if (arg.rfind("--", 0) != 0 || arg == "--") {
      if (positional_ == nullptr) return invalid_argument("unexpected argument '" + arg + "'");
      positional_->push_back(arg);
      continue;
    }
    std::string name = arg.substr(2);
    std::string value;
    bool has_value = false;
    if (size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    auto it = flags_.find(name);
    if (it == flags_.end() && name.rfind("no-", 0) == 0 && !has_value) {
      auto neg = flags_.find(name.substr(3));
      if (neg != flags_.end() && (neg->second.kind == Kind::kBool || neg->second.kind == Kind::kOptionalBool)) {
        set_bool(neg->second, false);
        continue;
      }
    }
    if (it == flags_.end()) return invalid_argument("unknown flag --" + name + " for '" + command_ + "'");
    Flag& flag = it->second;
    if ((flag.kind == Kind::kBool || flag.kind == Kind::kOptionalBool) && !has_value) {
      set_bool(flag, true);
      continue;
    }
    if (!has_value) {
      if (i + 1 >= args.size()) return invalid_argument("--" + name + " needs a value");
      value = args[++i];
    }
    if (flag.kind == Kind::kStringList) {
      auto* list = static_cast<std::vector<std::string>*>(flag.out);
      list->assign(1, value);
      while (!has_value && i + 1 < args.size() && args[i + 1].rfind("-", 0) != 0) list->push_back(args[++i]);
      continue;
    }
    RETURN_IF_ERROR(assign(name, flag, value));
  }
  return ok_status();
}

std::string ArgParser::usage() const {
  std::ostringstream os;
  os << "usage: llmserve " << command_ << " [options]";
  if (positional_ != nullptr) os << ' ' << positional_name_;
  os << "\n\n" << description_ << "\n\noptions:\n";
  for (const std::string& name : order_) {
    const Flag& f = flags_.at(name);
    const bool boolean = f.kind == Kind::kBool || f.kind == Kind::kOptionalBool;
    std::string left = boolean ? "  --[no-]" + name : "  --" + name;
    if (f.kind == Kind::kInt || f.kind == Kind::kOptionalInt) left += " N";
    if (f.kind == Kind::kFloat || f.kind == Kind::kOptionalFloat) left += " X";
    if (f.kind == Kind::kString || f.kind == Kind::kStrings) left += " VALUE";
    if (f.kind == Kind::kStringList) left += " VALUE...";
    if (left.size() < 30) left.resize(30, ' ');
    os << left << ' ' << f.help;
    if (!f.default_text.empty() && f.help.find("default") == std::string::npos) {
      os << " (default " << f.default_text << ")";
    }
    os << '\n';
  }
  return os.str();
}

int parse_or_exit_code(ArgParser& parser, const std::vector<std::string>& args) {
  Status s = parser.parse(args);
  if (!s.ok()) {
    std::fprintf(stderr, "error: %s\n%s", s.message().c_str(), parser.usage().c_str());
    return 2;
  }
  return parser.help_requested() ? 0 : -1;
}

}  // namespace llmserve::cli
