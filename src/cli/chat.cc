// `llmserve chat`: an interactive chat in the terminal. Each stdin line is a
// user turn; the conversation is rendered with the model's chat template, run
// through LLMEngine and the reply is streamed to stdout as it is detokenized.
// Works with stdin as a pipe (one turn per line), so it can be scripted and
// tested.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/command.h"
#include "cli/engine_flags.h"
#include "frontend/llm_engine.h"
#include "tokenizer/chat_template/chat_template.h"

namespace llmserve::cli {
namespace {

struct ChatFlags {
  ModelFlags model;
  EngineFlags engine;
  SamplingFlags sampling;
  std::string system, chat_template;
  std::vector<std::string> positional;
};

// Runs one turn; streams the reply's text to stdout and returns it.
StatusOr<std::string> run_turn(LLMEngine &engine, int turn, const std::vector<int32_t> &ids, SamplingParams params) {
  const int64_t room = engine.max_model_len() - static_cast<int64_t>(ids.size());
  if (room < 1) {
    return invalid_argument("the conversation (" + std::to_string(ids.size()) +
                            " tokens) no longer fits max_model_len (" + std::to_string(engine.max_model_len()) +
                            "); type /reset to start over");
  }
  if (params.max_tokens) params.max_tokens = std::min(*params.max_tokens, room);
  RETURN_IF_ERROR(engine.add_request("turn-" + std::to_string(turn), PromptInput{"", ids}, params));
  std::string reply;
  while (engine.has_unfinished()) {
    ASSIGN_OR_RETURN(std::vector<RequestOutput> outs, engine.step());
    for (const RequestOutput &o : outs) {
      const std::string &delta = o.outputs[0].delta_text;
      std::fwrite(delta.data(), 1, delta.size(), stdout);
      std::fflush(stdout);
      if (o.finished) reply = o.outputs[0].text;
    }
  }
  std::printf("\n");
  std::fflush(stdout);
  return reply;
}

int run_chat(const std::vector<std::string> &args) {
  ChatFlags f;
  ArgParser parser("chat",
                   "Interactive chat with --model using its chat template. One line "
                   "of stdin per user turn;\n"
                   "/reset clears the conversation, /exit (or end of input) quits.");
  parser.set_positional("[MODEL]", &f.positional);
  add_model_flags(parser, &f.model);
  add_engine_flags(parser, &f.engine);
  f.sampling.max_tokens = 256;
  add_sampling_flags(parser, &f.sampling);
  parser.add_string("system", &f.system, "system message that opens the conversation");
  parser.add_string("chat-template", &f.chat_template, "chat template file (default: the tokenizer's)");
  if (int code = parse_or_exit_code(parser, args); code >= 0) return code;
  if (Status s = take_positional_model(f.positional, "chat", &f.model); !s.ok()) return usage_error(s);
  if (f.model.model.empty() && f.model.config_file.empty()) return usage_error(invalid_argument("--model is required"));
  if (Status s = check_model_flags(f.model); !s.ok()) return usage_error(s);
  if (Status s = check_engine_flags(f.engine); !s.ok()) return usage_error(s);
  if (StatusOr<SamplingParams> p = to_sampling_params(f.sampling, f.model, SamplingParams()); !p.ok()) {
    return usage_error(p.status());
  }
  if (f.sampling.n != 1) return usage_error(invalid_argument("--n: chat shows one reply"));
  if (Status s = resolve_model_flags(&f.model); !s.ok()) return fail(s);
  StatusOr<SamplingParams> defaults = sampling_defaults_for(f.sampling, f.model);
  if (!defaults.ok()) return fail(defaults.status());
  StatusOr<SamplingParams> params = to_sampling_params(f.sampling, f.model, *defaults);
  if (!params.ok()) return usage_error(params.status());
  StatusOr<LoadedModel> loaded = load_model_from_flags(f.model, /*need_tokenizer=*/true);
  if (!loaded.ok()) return fail(loaded.status());
  const Tokenizer &tokenizer = *loaded->tokenizer;

  std::string source;
  if (!f.chat_template.empty()) {
    std::ifstream in(f.chat_template);
    if (!in) return fail(not_found("--chat-template " + f.chat_template + ": cannot open"));
    std::stringstream ss;
    ss << in.rdbuf();
    source = ss.str();
  } else if (auto t = tokenizer.chat_template(); t) {
    source = *t;
  } else {
    return fail(invalid_argument("the tokenizer has no chat template; give --chat-template FILE"));
  }
  StatusOr<ChatTemplate> tmpl = ChatTemplate::parse(source);
  if (!tmpl.ok()) return fail(tmpl.status());

  StatusOr<std::unique_ptr<LLMEngine>> engine =
      LLMEngine::create(*loaded->model, &tokenizer, to_engine_args(f.engine, f.model));
  if (!engine.ok()) return fail(engine.status());

  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  if (!f.system.empty()) messages.push_back({{"role", "system"}, {"content", f.system}});
  const size_t base = messages.size();
  const bool interactive = isatty(STDIN_FILENO) != 0;
  std::string line;
  for (int turn = 0;; ++turn) {
    if (interactive) {
      std::fprintf(stderr, "> ");
      std::fflush(stderr);
    }
    if (!std::getline(std::cin, line) || line == "/exit") break;
    if (line == "/reset") {
      messages.erase(messages.begin() + static_cast<std::ptrdiff_t>(base), messages.end());
      continue;
    }
    if (line.empty()) continue;
    messages.push_back({{"role", "user"}, {"content", line}});
    nlohmann::ordered_json context = {{"messages", messages},
                                      {"add_generation_prompt", true},
                                      {"bos_token", tokenizer.bos_token()},
                                      {"eos_token", tokenizer.eos_token()}};
    StatusOr<std::string> prompt = tmpl->render(context);
    if (!prompt.ok()) return fail(prompt.status());
    // The template writes the special tokens (BOS) itself, as in vLLM's chat
    // path.
    StatusOr<std::string> reply = run_turn(**engine, turn, tokenizer.encode(*prompt, false), *params);
    if (!reply.ok()) {
      std::fprintf(stderr, "error: %s\n", reply.status().message().c_str());
      messages.erase(messages.end() - 1);
      continue;
    }
    messages.push_back({{"role", "assistant"}, {"content", *reply}});
  }
  return 0;
}

}  // namespace

LLMSERVE_REGISTER_COMMAND("chat",
                          "interactive chat with a model in the terminal (chat "
                          "template, streamed reply)",
                          run_chat);

}  // namespace llmserve::cli
