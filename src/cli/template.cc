// `llmserve template render`: renders a chat template for a conversation (one case, or many from a JSONL batch).
// Output is the rendered prompt exactly, with no newline added; errors go to stderr with a non-zero exit code.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

#include "cli/command.h"
#include "tokenizer/chat_template/chat_template.h"

namespace llmserve::cli {
namespace {

using OJson = nlohmann::ordered_json;

StatusOr<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("cannot open " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

StatusOr<OJson> read_json(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, read_file(path));
  OJson j = OJson::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return invalid_argument(path + ": not valid JSON");
  return j;
}

// A special token in tokenizer_config.json is a string or an AddedToken-like {"content": ...} object.
std::optional<std::string> token_string(const OJson& config, const char* key) {
  if (!config.contains(key)) return std::nullopt;
  const OJson& v = config[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return std::nullopt;
}

struct ModelTemplate {
  std::string source;
  std::optional<std::string> bos, eos;
};

StatusOr<ModelTemplate> load_model_template(const std::string& dir) {
  ModelTemplate mt;
  OJson config = OJson::object();
  std::string config_path = dir + "/tokenizer_config.json";
  if (std::ifstream(config_path).good()) {
    ASSIGN_OR_RETURN(config, read_json(config_path));
    mt.bos = token_string(config, "bos_token");
    mt.eos = token_string(config, "eos_token");
  }
  if (auto jinja = read_file(dir + "/chat_template.jinja"); jinja.ok()) {
    mt.source = *jinja;
    return mt;
  }
  if (!config.contains("chat_template"))
    return not_found(dir + ": no chat_template.jinja and no chat_template in " + config_path);
  const OJson& ct = config["chat_template"];
  if (ct.is_string()) {
    mt.source = ct.get<std::string>();
    return mt;
  }
  if (ct.is_array()) {
    for (const OJson& entry : ct) {
      if (entry.is_object() && entry.value("name", "") == "default" && entry.contains("template") &&
          entry["template"].is_string()) {
        mt.source = entry["template"].get<std::string>();
        return mt;
      }
    }
    return not_found(config_path + ": chat_template list has no \"default\" entry");
  }
  return invalid_argument(config_path + ": chat_template must be a string or a list of {name, template}");
}

// One JSONL line: {"template": source, "context": {...}, "now": "YYYY-MM-DD HH:MM:SS"} -> {"text"} or {"error"}.
std::string render_batch_line(const std::string& line, std::map<std::string, StatusOr<ChatTemplate>>& cache) {
  OJson req = OJson::parse(line, nullptr, false);
  OJson out = OJson::object();
  if (req.is_discarded() || !req.is_object() || !req.contains("template") || !req["template"].is_string()) {
    out["error"] = "batch line is not a JSON object with a \"template\" string";
    return out.dump(-1, ' ', false, OJson::error_handler_t::replace);
  }
  std::string source = req["template"].get<std::string>();
  auto it = cache.find(source);
  if (it == cache.end()) it = cache.emplace(source, ChatTemplate::parse(source)).first;
  ChatTemplateOptions options;
  if (req.contains("now") && req["now"].is_string()) {
    auto now = parse_template_time(req["now"].get<std::string>());
    if (!now.ok()) {
      out["error"] = now.status().message();
      return out.dump(-1, ' ', false, OJson::error_handler_t::replace);
    }
    options.now = *now;
  }
  if (!it->second.ok()) {
    out["error"] = it->second.status().message();
  } else {
    auto text = it->second->render(req.value("context", OJson::object()), options);
    if (text.ok())
      out["text"] = *text;
    else
      out["error"] = text.status().message();
  }
  return out.dump(-1, ' ', false, OJson::error_handler_t::replace);
}

int run_batch(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "template render: cannot open %s\n", path.c_str());
    return 1;
  }
  std::map<std::string, StatusOr<ChatTemplate>> cache;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    std::string result = render_batch_line(line, cache);
    std::fwrite(result.data(), 1, result.size(), stdout);
    std::fputc('\n', stdout);
  }
  return 0;
}

Status render_one(const std::string& model, const std::string& template_path, const std::string& messages_path,
                  const std::string& tools_path, bool add_generation_prompt, const std::string& bos,
                  const std::string& eos, const std::string& now) {
  std::string source;
  std::optional<std::string> bos_token, eos_token;
  if (!model.empty()) {
    ASSIGN_OR_RETURN(ModelTemplate mt, load_model_template(model));
    source = std::move(mt.source);
    bos_token = mt.bos;
    eos_token = mt.eos;
  } else {
    ASSIGN_OR_RETURN(source, read_file(template_path));
  }
  if (!bos.empty()) bos_token = bos;
  if (!eos.empty()) eos_token = eos;
  OJson context = OJson::object();
  ASSIGN_OR_RETURN(OJson messages, read_json(messages_path));
  // A file may hold the message list itself or an object with "messages" (and optionally "tools").
  if (messages.is_object() && messages.contains("messages")) {
    for (auto it = messages.begin(); it != messages.end(); ++it) context[it.key()] = it.value();
  } else {
    context["messages"] = messages;
  }
  // Like transformers' apply_chat_template, tools and documents are always passed, None when absent.
  if (!context.contains("tools")) context["tools"] = nullptr;
  if (!context.contains("documents")) context["documents"] = nullptr;
  if (!tools_path.empty()) {
    ASSIGN_OR_RETURN(OJson tools, read_json(tools_path));
    context["tools"] = tools;
  }
  context["add_generation_prompt"] = add_generation_prompt;
  if (bos_token) context["bos_token"] = *bos_token;
  if (eos_token) context["eos_token"] = *eos_token;
  ChatTemplateOptions options;
  if (!now.empty()) {
    ASSIGN_OR_RETURN(options.now, parse_template_time(now));
  }
  ASSIGN_OR_RETURN(ChatTemplate tmpl, ChatTemplate::parse(source));
  ASSIGN_OR_RETURN(std::string text, tmpl.render(context, options));
  std::fwrite(text.data(), 1, text.size(), stdout);
  return ok_status();
}

int run_template(const std::vector<std::string>& args) {
  ArgParser parser("template",
                   "Renders a chat template: --model DIR | --template FILE, with --messages FILE.json; or many cases "
                   "with --batch FILE.jsonl (lines {\"template\",\"context\",\"now\"} -> {\"text\"} | {\"error\"}).");
  std::string model, template_path, messages, tools, bos, eos, batch, now;
  bool add_generation_prompt = false;
  std::vector<std::string> positional;
  parser.add_string("model", &model, "model directory (chat_template.jinja or tokenizer_config.json)");
  parser.add_string("template", &template_path, "template file");
  parser.add_string("messages", &messages, "JSON file: a list of messages, or an object with \"messages\"");
  parser.add_string("tools", &tools, "JSON file with the tools list");
  parser.add_bool("add-generation-prompt", &add_generation_prompt, "end with the assistant turn's header");
  parser.add_string("bos-token", &bos, "bos_token string (overrides the model's)");
  parser.add_string("eos-token", &eos, "eos_token string (overrides the model's)");
  parser.add_string("now", &now, "pin strftime_now() to this time: YYYY-MM-DD[ HH:MM:SS]");
  parser.add_string("batch", &batch, "JSONL file of render requests");
  parser.set_positional("render", &positional);
  if (int code = parse_or_exit_code(parser, args); code >= 0) return code;
  if (positional.size() != 1 || positional[0] != "render") {
    std::fprintf(stderr, "template: expected the subcommand 'render'\n%s", parser.usage().c_str());
    return 2;
  }
  if (!batch.empty()) return run_batch(batch);
  if ((model.empty() == template_path.empty()) || messages.empty()) {
    std::fprintf(stderr, "template render: give exactly one of --model/--template, and --messages\n");
    return 2;
  }
  Status st = render_one(model, template_path, messages, tools, add_generation_prompt, bos, eos, now);
  if (!st.ok()) {
    std::fprintf(stderr, "template render: %s\n", st.message().c_str());
    return 1;
  }
  return 0;
}

}  // namespace

LLMSERVE_REGISTER_COMMAND("template", "render a chat template (template render --help)", run_template);

}  // namespace llmserve::cli
