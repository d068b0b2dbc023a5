// `llmserve tokenize --tokenizer DIR --input FILE.jsonl`: one JSON result line per input line, in order.
// {"text", "add_special_tokens"} -> {"ids", "tokens"}; {"ids", "skip_special_tokens"} -> {"text", "stream"}
// (full decode and the incremental detokenizer's concatenated output); {"messages", "add_generation_prompt",
// "tools"} -> {"ids", "tokens", "text"} through the model's chat template. Bad lines answer {"error": ...}.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cli/command.h"
#include "cli/engine_flags.h"
#include "core/thread_pool.h"
#include "tokenizer/chat_template/chat_template.h"
#include "tokenizer/incremental_detokenizer.h"
#include "tokenizer/tokenizer.h"

namespace llmserve::cli {
namespace {

using Json = nlohmann::json;

std::string error_line(const std::string& message) {
  Json out = {{"error", message}};
  return out.dump(-1, ' ', false, Json::error_handler_t::replace);
}

bool get_bool(const Json& j, const char* key, bool fallback, std::string* error) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) {
    *error = std::string("\"") + key + "\" must be a boolean";
    return fallback;
  }
  return it->get<bool>();
}

Json ids_and_tokens(const Tokenizer& tok, const std::vector<int32_t>& ids) {
  Json tokens = Json::array();
  for (int32_t id : ids) tokens.push_back(tok.id_to_token(id).value_or(""));
  return {{"ids", ids}, {"tokens", tokens}};
}

// Renders the conversation with the model's chat template as transformers' apply_chat_template does (tools and
// documents null when absent, the tokenizer's bos/eos strings), then encodes without adding special tokens: the
// template writes them itself.
std::string process_messages(const Tokenizer& tok, const StatusOr<ChatTemplate>& chat_template, const std::string& line,
                             const std::string& where) {
  if (!chat_template.ok()) return error_line(where + chat_template.status().message());
  // Parsed again with key order kept: templates print tool schemas with tojson.
  nlohmann::ordered_json in = nlohmann::ordered_json::parse(line, nullptr, /*allow_exceptions=*/false);
  const auto& messages = in["messages"];
  if (!messages.is_array()) return error_line(where + "\"messages\" must be a list of message objects");
  auto gen = in.find("add_generation_prompt");
  if (gen != in.end() && !gen->is_boolean()) return error_line(where + "\"add_generation_prompt\" must be a boolean");
  nlohmann::ordered_json context = {{"messages", messages},
                                    {"tools", in.contains("tools") ? in["tools"] : nullptr},
                                    {"documents", in.contains("documents") ? in["documents"] : nullptr},
                                    {"add_generation_prompt", gen != in.end() && gen->get<bool>()},
                                    {"bos_token", tok.bos_token()},
                                    {"eos_token", tok.eos_token()}};
  if (auto kw = in.find("chat_template_kwargs"); kw != in.end()) {
    if (!kw->is_object()) return error_line(where + "\"chat_template_kwargs\" must be an object");
    for (auto it = kw->begin(); it != kw->end(); ++it) context[it.key()] = it.value();
  }
  StatusOr<std::string> text = chat_template->render(context);
  if (!text.ok()) return error_line(where + "chat template: " + text.status().message());
  Json out = ids_and_tokens(tok, tok.encode(*text, /*add_special_tokens=*/false));
  out["text"] = *text;
  return out.dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string process_line(const Tokenizer& tok, const StatusOr<ChatTemplate>& chat_template, const std::string& line,
                         size_t line_no) {
  std::string where = "line " + std::to_string(line_no) + ": ";
  Json in = Json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (in.is_discarded() || !in.is_object()) return error_line(where + "not a JSON object");
  std::string err;
  if (in.contains("messages")) return process_messages(tok, chat_template, line, where);
  if (auto it = in.find("text"); it != in.end()) {
    if (!it->is_string()) return error_line(where + "\"text\" must be a string");
    bool add_special = get_bool(in, "add_special_tokens", true, &err);
    if (!err.empty()) return error_line(where + err);
    Json out = ids_and_tokens(tok, tok.encode(it->get_ref<const std::string&>(), add_special));
    return out.dump(-1, ' ', false, Json::error_handler_t::replace);
  }
  if (auto it = in.find("ids"); it != in.end()) {
    if (!it->is_array()) return error_line(where + "\"ids\" must be a list of integers");
    std::vector<int32_t> ids;
    for (const Json& v : *it) {
      if (!v.is_number_integer()) return error_line(where + "\"ids\" must be a list of integers");
      int64_t id = v.get<int64_t>();
      if (id < INT32_MIN || id > INT32_MAX) return error_line(where + "id out of range");
      ids.push_back(static_cast<int32_t>(id));
    }
    bool skip = get_bool(in, "skip_special_tokens", false, &err);
    bool spaces = get_bool(in, "spaces_between_special_tokens", true, &err);
    if (!err.empty()) return error_line(where + err);
    IncrementalDetokenizer detok(tok, skip, spaces);
    Json pieces = Json::array();
    for (int32_t id : ids) pieces.push_back(detok.push(id));
    pieces.push_back(detok.flush());
    Json out = {{"text", tok.decode(ids, skip, spaces)}, {"stream", detok.text()}, {"pieces", pieces}};
    return out.dump(-1, ' ', false, Json::error_handler_t::replace);
  }
  return error_line(where + "expected \"text\", \"ids\" or \"messages\"");
}

int run_tokenize(const std::vector<std::string>& args) {
  std::string tokenizer_path, input = "-", pipeline_name = "transformers";
  ArgParser parser("tokenize",
                   "Tokenizes JSONL: each line {\"text\": ..., \"add_special_tokens\": bool} gives "
                   "{\"ids\": [...], \"tokens\": [...]}; {\"ids\": [...]} gives {\"text\": ...};\n"
                   "{\"messages\": [...], \"add_generation_prompt\": bool, \"tools\": [...]} renders the model's chat "
                   "template and gives {\"ids\", \"tokens\", \"text\"}.");
  parser.add_string("tokenizer", &tokenizer_path, "model directory or tokenizer.json path");
  parser.add_string("input", &input, "JSONL file, or - for stdin (default)");
  parser.add_string("tokenizer-pipeline", &pipeline_name, kTokenizerPipelineHelp);
  if (int code = parse_or_exit_code(parser, args); code >= 0) return code;
  if (tokenizer_path.empty()) {
    std::fprintf(stderr, "tokenize: --tokenizer is required\n");
    return 2;
  }
  TokenizerPipeline pipeline;
  if (!parse_tokenizer_pipeline(pipeline_name, &pipeline)) {
    std::fprintf(stderr, "tokenize: --tokenizer-pipeline '%s': expected transformers or tokenizers\n",
                 pipeline_name.c_str());
    return 2;
  }
  auto tok = Tokenizer::from_dir(tokenizer_path, pipeline);
  if (!tok.ok()) {
    std::fprintf(stderr, "tokenize: %s\n", tok.status().to_string().c_str());
    return 1;
  }
  std::ifstream file;
  std::istream* in = &std::cin;
  if (input != "-") {
    file.open(input, std::ios::binary);
    if (!file) {
      std::fprintf(stderr, "tokenize: cannot read --input %s\n", input.c_str());
      return 1;
    }
    in = &file;
  }
  std::vector<std::string> lines;
  for (std::string line; std::getline(*in, line);) lines.push_back(std::move(line));
  std::optional<std::string> source = (*tok)->chat_template();
  const StatusOr<ChatTemplate> chat_template =
      source ? ChatTemplate::parse(*source) : StatusOr<ChatTemplate>(not_found("the tokenizer has no chat template"));
  std::vector<std::string> results(lines.size());
  ThreadPool::global().parallel_for(static_cast<int64_t>(lines.size()), 16, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      results[i] = process_line(**tok, chat_template, lines[i], static_cast<size_t>(i + 1));
  });
  for (const auto& r : results) {
    std::fwrite(r.data(), 1, r.size(), stdout);
    std::fputc('\n', stdout);
  }
  return 0;
}

}  // namespace

LLMSERVE_REGISTER_COMMAND("tokenize", "tokenize / detokenize JSONL lines with a HF tokenizer", run_tokenize);

}  // namespace llmserve::cli
