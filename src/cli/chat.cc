// `llmserve chat`: an interactive chat in the terminal. Each input line is a user turn; the conversation is
// rendered with the model's chat template, run through LLMEngine and the reply streamed as it is detokenized. On a
// terminal: line editing and history (libedit), a banner, /help, /reset (confirmed), Ctrl-C stops the reply being
// written and keeps the conversation, Ctrl-D quits. From a pipe: one turn per line, no prompts (scriptable).
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/builtin_default.h"
#include "cli/command.h"
#include "cli/engine_flags.h"
#include "cli/line_reader.h"
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

// Set by Ctrl-C (SIGINT, installed on a terminal only): the reply being written stops.
std::atomic<bool> g_interrupted{false};
void on_sigint(int) { g_interrupted.store(true); }

constexpr const char *kHelp =
    "/help   this list\n"
    "/reset  start a new conversation (asks first)\n"
    "/exit   quit (or Ctrl-D)\n"
    "Ctrl-C  stop the reply being written (the conversation keeps what was written)\n";

// Runs one turn; streams the reply's text to stdout and returns it (what was written, when Ctrl-C stopped it).
StatusOr<std::string> run_turn(LLMEngine &engine, int turn, const std::vector<int32_t> &ids, SamplingParams params) {
  const int64_t room = engine.max_model_len() - static_cast<int64_t>(ids.size());
  if (room < 1) {
    return invalid_argument("the conversation (" + std::to_string(ids.size()) +
                            " tokens) no longer fits max_model_len (" + std::to_string(engine.max_model_len()) +
                            "); type /reset to start over");
  }
  if (params.max_tokens) params.max_tokens = std::min(*params.max_tokens, room);
  const std::string id = "turn-" + std::to_string(turn);
  g_interrupted.store(false);
  RETURN_IF_ERROR(engine.add_request(id, PromptInput{"", ids}, params));
  std::string reply;
  bool stopped = false;
  while (engine.has_unfinished()) {
    if (g_interrupted.exchange(false) && !stopped) stopped = engine.abort_request(id);  // the abort lands next step
    ASSIGN_OR_RETURN(std::vector<RequestOutput> outs, engine.step());
    for (const RequestOutput &o : outs) {
      const std::string &delta = o.outputs[0].delta_text;
      std::fwrite(delta.data(), 1, delta.size(), stdout);
      std::fflush(stdout);
      reply += delta;
    }
  }
  std::printf(stopped ? " [stopped]\n" : "\n");
  std::fflush(stdout);
  return reply;
}

int run_chat(const std::vector<std::string> &args) {
  ChatFlags f;
  ArgParser parser("chat",
                   "Interactive chat with MODEL (default: the built-in model) using its chat template. One line per\n"
                   "user turn; /help lists the commands, /reset starts over, /exit or Ctrl-D quits, Ctrl-C stops a\n"
                   "reply.");
  parser.set_positional("[MODEL]", &f.positional);
  add_model_flags(parser, &f.model);
  add_engine_flags(parser, &f.engine);
  f.sampling.max_tokens = 256;
  add_sampling_flags(parser, &f.sampling, /*several_outputs=*/false);
  parser.add_string("system", &f.system, "system message that opens the conversation");
  parser.add_string("chat-template", &f.chat_template, "chat template file (default: the tokenizer's)");
  if (int code = parse_or_exit_code(parser, args); code >= 0) return code;
  if (Status s = take_positional_model(f.positional, "chat", &f.model); !s.ok()) return usage_error(s);
  int exit_code = 0;
  const std::optional<SamplingParams> params = start_sampling_command(&f.model, f.engine, f.sampling, &exit_code);
  if (!params) return exit_code;
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
  } else if (loaded->builtin_default) {
    source = builtin_default_chat_template();
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
  LineReader input;
  const bool interactive = input.interactive();
  if (interactive) {
    struct sigaction sa = {};
    sa.sa_handler = on_sigint;  // no SA_RESTART: a read in progress returns, the loop decides
    sigaction(SIGINT, &sa, nullptr);
    const std::string name = f.model.model.empty() ? "the built-in default model" : f.model.model;
    std::fprintf(stderr, "llmserve chat with %s (temperature %g, up to %lld tokens a reply). /help for commands.\n",
                 name.c_str(), params->temperature, static_cast<long long>(params->max_tokens.value_or(0)));
  }
  for (int turn = 0;; ++turn) {
    std::optional<std::string> line = input.read("> ");
    if (!line) {
      if (interactive && g_interrupted.exchange(false)) {  // Ctrl-C at the prompt: a fresh line, no quitting
        std::fprintf(stderr, "\n");
        continue;
      }
      if (interactive) std::fprintf(stderr, "\n");  // Ctrl-D: leave the shell's prompt on a line of its own
      break;
    }
    if (*line == "/exit") break;
    if (*line == "/help") {
      std::fputs(kHelp, stderr);
      continue;
    }
    if (*line == "/reset") {
      if (interactive) {
        std::optional<std::string> yes = input.read("Start a new conversation? [y/N] ");
        if (!yes || (*yes != "y" && *yes != "Y" && *yes != "yes")) {
          std::fprintf(stderr, "kept the conversation\n");
          continue;
        }
      }
      messages.erase(messages.begin() + static_cast<std::ptrdiff_t>(base), messages.end());
      if (interactive) std::fprintf(stderr, "new conversation\n");
      continue;
    }
    if (line->size() > 1 && (*line)[0] == '/' && line->find(' ') == std::string::npos) {
      std::fprintf(stderr, "unknown command %s: /help lists them\n", line->c_str());
      continue;
    }
    if (line->empty()) continue;
    messages.push_back({{"role", "user"}, {"content", *line}});
    nlohmann::ordered_json context = {{"messages", messages},
                                      {"add_generation_prompt", true},
                                      {"bos_token", tokenizer.bos_token()},
                                      {"eos_token", tokenizer.eos_token()}};
    StatusOr<std::string> prompt = tmpl->render(context);
    if (!prompt.ok()) return fail(prompt.status());
    // The template writes the special tokens (BOS) itself, as in vLLM's chat path.
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
