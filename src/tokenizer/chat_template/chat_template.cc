// ChatTemplate: the Status-returning boundary around the exception-based parser and interpreter.
// Invariant: nothing thrown inside (TemplateError, std::bad_alloc, nlohmann errors) escapes this file.
#include "tokenizer/chat_template/chat_template.h"

#include <cstdio>

#include "tokenizer/chat_template/interpreter.h"
#include "tokenizer/chat_template/parser.h"

namespace llmserve {
namespace {

Status to_status(const jinja::TemplateError& e) {
  return invalid_argument("line " + std::to_string(e.line) + ": " + e.what());
}

}  // namespace

StatusOr<ChatTemplate> ChatTemplate::parse(std::string source) {
  ChatTemplate t;
  try {
    t.tmpl_ = std::make_shared<const jinja::Template>(jinja::parse_template(source));
  } catch (const jinja::TemplateError& e) {
    return to_status(e);
  } catch (const std::exception& e) {
    return invalid_argument(std::string("chat template: ") + e.what());
  }
  t.source_ = std::move(source);
  return t;
}

StatusOr<std::string> ChatTemplate::render(const nlohmann::ordered_json& context,
                                           const ChatTemplateOptions& options) const {
  if (!context.is_object()) return invalid_argument("chat template context must be a JSON object");
  try {
    std::unordered_map<std::string, jinja::Value> vars;
    for (auto it = context.begin(); it != context.end(); ++it) vars[it.key()] = jinja::Value::from_json(it.value());
    jinja::RenderLimits limits;
    limits.max_loop_iterations = options.max_loop_iterations;
    limits.max_call_depth = options.max_call_depth;
    limits.max_output_bytes = options.max_output_bytes;
    jinja::Interpreter interp(*tmpl_, limits, options.now);
    return interp.render(std::move(vars));
  } catch (const jinja::TemplateError& e) {
    return to_status(e);
  } catch (const std::exception& e) {
    return invalid_argument(std::string("chat template: ") + e.what());
  }
}

StatusOr<std::string> ChatTemplate::render(const nlohmann::json& context, const ChatTemplateOptions& options) const {
  nlohmann::ordered_json ordered;
  try {
    ordered = nlohmann::ordered_json::parse(context.dump());
  } catch (const std::exception& e) {
    return invalid_argument(std::string("chat template context: ") + e.what());
  }
  return render(ordered, options);
}

StatusOr<std::tm> parse_template_time(const std::string& text) {
  std::tm tm{};
  int y = 0, mo = 0, d = 0, h = 0, mi = 0, s = 0;
  char sep = 0;
  int n = std::sscanf(text.c_str(), "%d-%d-%d%c%d:%d:%d", &y, &mo, &d, &sep, &h, &mi, &s);
  if (n != 3 && n != 7) return invalid_argument("time '" + text + "': expected YYYY-MM-DD[ HH:MM:SS]");
  if (mo < 1 || mo > 12 || d < 1 || d > 31 || h < 0 || h > 23 || mi < 0 || mi > 59 || s < 0 || s > 60) {
    return invalid_argument("time '" + text + "': field out of range");
  }
  tm.tm_year = y - 1900;
  tm.tm_mon = mo - 1;
  tm.tm_mday = d;
  tm.tm_hour = h;
  tm.tm_min = mi;
  tm.tm_sec = s;
  std::tm copy = tm;
  timegm(&copy);  // fills in tm_wday / tm_yday so %a, %A, %j work
  tm.tm_wday = copy.tm_wday;
  tm.tm_yday = copy.tm_yday;
  return tm;
}

}  // namespace llmserve
