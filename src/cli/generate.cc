// `llmserve generate`: offline generation for one or more prompts through
// LLMEngine (scheduler, paged KV cache, sampler, stop handling). Prompts come
// from --prompt / --prompt-ids flags and/or a JSONL file (--input). Without
// --model it runs the built-in default (a tiny random-weight model) and says
// so.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/engine_flags.h"
#include "frontend/llm_engine.h"

namespace llmserve::cli {
namespace {

struct GenerateFlags {
  ModelFlags model;
  EngineFlags engine;
  SamplingFlags sampling;
  std::string output = "text", input;
  std::vector<std::string> prompts, prompt_ids, positional;
  bool progress = true;
};

// One JSONL line: {"prompt": "text"} or {"prompt_token_ids": [ids]}, optionally with "priority": int (lower is
// served earlier; needs --scheduling-policy priority).
Status read_jsonl(const std::string &path, std::vector<PromptInput> *prompts, std::vector<int32_t> *priorities) {
  std::ifstream in(path);
  if (!in) return not_found("--input " + path + ": cannot open");
  std::string line;
  for (int line_no = 1; std::getline(in, line); ++line_no) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    const std::string where = path + " line " + std::to_string(line_no);
    if (j.is_discarded() || !j.is_object()) return invalid_argument(where + ": not a JSON object");
    PromptInput p;
    if (j.contains("prompt") && j["prompt"].is_string()) {
      p.text = j["prompt"].get<std::string>();
    } else if (j.contains("prompt_token_ids") && j["prompt_token_ids"].is_array()) {
      for (const auto &v : j["prompt_token_ids"]) {
        if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX) {
          return invalid_argument(where + ": prompt_token_ids holds a value that is not a token id");
        }
        p.token_ids.push_back(v.get<int32_t>());
      }
      if (p.token_ids.empty()) return invalid_argument(where + ": prompt_token_ids is empty");
    } else {
      return invalid_argument(where + ": expected a string \"prompt\" or an array \"prompt_token_ids\"");
    }
    int32_t priority = 0;
    if (j.contains("priority")) {
      const auto &v = j["priority"];
      if (!v.is_number_integer() || v.get<int64_t>() < INT32_MIN || v.get<int64_t>() > INT32_MAX) {
        return invalid_argument(where + ": priority must be a 32-bit integer");
      }
      priority = v.get<int32_t>();
    }
    prompts->push_back(std::move(p));
    priorities->resize(prompts->size() - 1, 0);
    priorities->push_back(priority);
  }
  return ok_status();
}

const char *reason_name(const CompletionOutput &c) {
  return c.finish_reason ? finish_reason_name(*c.finish_reason) : "";
}

// {"token_id", "logprob", "rank", "top": [[id, logprob], ...]}: the scored token first, then the top-k.
nlohmann::ordered_json logprob_json(const TokenLogprobs &lp) {
  nlohmann::ordered_json top = nlohmann::ordered_json::array();
  for (size_t k = 1; k < lp.token_ids.size(); ++k) top.push_back({lp.token_ids[k], lp.logprobs[k]});
  return {{"token_id", lp.token_ids[0]}, {"logprob", lp.logprobs[0]}, {"rank", lp.sampled_token_rank}, {"top", top}};
}

// vLLM's shape: null for the first prompt token.
nlohmann::ordered_json prompt_logprobs_json(const RequestOutput &r) {
  nlohmann::ordered_json lps = nlohmann::ordered_json::array();
  for (const std::optional<TokenLogprobs> &lp : r.prompt_logprobs) lps.push_back(lp ? logprob_json(*lp) : nullptr);
  return lps;
}

nlohmann::ordered_json completion_json(size_t index, const RequestOutput &r, const CompletionOutput &c, bool text,
                                       int32_t n) {
  nlohmann::ordered_json j = {{"index", index}};
  if (n > 1) j["completion_index"] = c.index;
  j["prompt_token_ids"] = r.prompt_token_ids;
  j["token_ids"] = c.token_ids;
  if (text) j["text"] = c.text;
  j["finish_reason"] = reason_name(c);
  if (const auto *id = std::get_if<int32_t>(&c.stop_reason)) j["stop_reason"] = *id;
  if (const auto *s = std::get_if<std::string>(&c.stop_reason)) j["stop_reason"] = *s;
  if (!c.logprobs.empty()) {
    nlohmann::ordered_json lps = nlohmann::ordered_json::array();
    for (const TokenLogprobs &lp : c.logprobs) lps.push_back(logprob_json(lp));
    j["logprobs"] = lps;
  }
  if (!r.prompt_logprobs.empty()) j["prompt_logprobs"] = prompt_logprobs_json(r);
  return j;
}

// --output jsonl: one object per prompt, its sequences under "outputs" (completion_json's fields).
nlohmann::ordered_json prompt_json(size_t index, const PromptInput &prompt, const RequestOutput &r, bool text) {
  nlohmann::ordered_json j = {{"index", index}};
  if (!prompt.text.empty()) j["prompt"] = prompt.text;
  j["prompt_token_ids"] = r.prompt_token_ids;
  nlohmann::ordered_json outputs = nlohmann::ordered_json::array();
  for (const CompletionOutput &c : r.outputs) {
    nlohmann::ordered_json o = completion_json(index, r, c, text, /*n=*/2);
    for (const char *key : {"index", "prompt_token_ids", "prompt_logprobs"}) o.erase(key);
    outputs.push_back(std::move(o));
  }
  j["outputs"] = std::move(outputs);
  if (!r.prompt_logprobs.empty()) j["prompt_logprobs"] = prompt_logprobs_json(r);
  return j;
}

void print_progress(size_t done, size_t total, int64_t tokens, double seconds) {
  const int width = 30;
  const int filled = total ? static_cast<int>(width * done / total) : width;
  std::fprintf(stderr, "\rProcessed prompts: %zu/%zu [%s%s] %.1f output tok/s", done, total,
               std::string(filled, '#').c_str(), std::string(width - filled, ' ').c_str(),
               seconds > 0 ? static_cast<double>(tokens) / seconds : 0.0);
  if (done == total) std::fprintf(stderr, "\n");
}

int run_generate(const std::vector<std::string> &args) {
  GenerateFlags f;
  ArgParser parser("generate",
                   "Generation for each --prompt / --prompt-ids / --input line through the "
                   "engine.\n"
                   "Without --model, a built-in tiny model with random weights runs.");
  parser.set_positional("[MODEL]", &f.positional);
  add_model_flags(parser, &f.model);
  add_engine_flags(parser, &f.engine);
  add_sampling_flags(parser, &f.sampling);
  add_prompt_logprobs_flag(parser, &f.sampling);
  parser.add_strings("prompt", &f.prompts, "prompt text (repeatable: prompts run as one batch)");
  parser.add_strings("prompt-ids", &f.prompt_ids, "prompt as comma-separated token ids (repeatable)");
  parser.add_string("input", &f.input,
                    "JSONL file, one {\"prompt\": ...} or "
                    "{\"prompt_token_ids\": [...]} per line");
  parser.add_string("output", &f.output,
                    "text (several sequences: each after a '=== prompt I ===' line) | json (one JSON object per "
                    "sequence) | jsonl (one JSON object per prompt, its sequences under \"outputs\")");
  parser.add_bool("progress", &f.progress, "progress bar on stderr when several prompts run (default on)");
  if (int code = parse_or_exit_code(parser, args); code >= 0) return code;
  // The command line first (exit 2), before anything loads.
  if (Status s = take_positional_model(f.positional, "generate", &f.model); !s.ok()) return usage_error(s);
  if (f.sampling.max_tokens < 0) return usage_error(invalid_argument("--max-tokens must be >= 0"));
  if (f.output != "text" && f.output != "json" && f.output != "jsonl") {
    return usage_error(invalid_argument("--output '" + f.output + "': expected text, json or jsonl"));
  }
  std::vector<PromptInput> prompts;
  for (const std::string &text : f.prompts) prompts.push_back(PromptInput{text, {}});
  for (const std::string &ids : f.prompt_ids) {
    StatusOr<std::vector<int32_t>> parsed = parse_id_list(ids, "--prompt-ids");
    if (!parsed.ok()) return usage_error(parsed.status());
    prompts.push_back(PromptInput{"", *parsed});
  }
  int exit_code = 0;
  const std::optional<SamplingParams> params = start_sampling_command(&f.model, f.engine, f.sampling, &exit_code);
  if (!params) return exit_code;
  std::vector<int32_t> priorities;  // by prompt index; missing entries are 0
  if (!f.input.empty()) {
    if (Status s = read_jsonl(f.input, &prompts, &priorities); !s.ok()) return fail(s);
  }
  const bool any_text =
      std::any_of(prompts.begin(), prompts.end(), [](const PromptInput &p) { return p.token_ids.empty(); });
  StatusOr<LoadedModel> loaded = load_model_from_flags(f.model, any_text);
  if (!loaded.ok()) return fail(loaded.status());
  CausalLM &model = *loaded->model;
  const Tokenizer *tokenizer = loaded->tokenizer.get();
  if (prompts.empty()) {
    if (tokenizer == nullptr) return fail(invalid_argument("give --prompt, --prompt-ids or --input"));
    prompts.push_back(PromptInput{"", tokenizer->encode("", true)});  // BOS alone: an unconditional sample
  }
  priorities.resize(prompts.size(), 0);
  // Tokenize up front: the CLI's own checks name the prompt and the model
  // limit.
  const ModelConfig &config = model.config();
  int64_t longest = 0, needed = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    if (prompts[i].token_ids.empty()) prompts[i].token_ids = tokenizer->encode(prompts[i].text, true);
    const auto &ids = prompts[i].token_ids;
    if (ids.empty()) return fail(invalid_argument("prompt " + std::to_string(i) + " has no tokens"));
    for (int32_t id : ids) {
      if (id >= config.vocab_size) {
        return fail(invalid_argument("prompt " + std::to_string(i) + ": token id " + std::to_string(id) +
                                     " is outside the vocabulary (" + std::to_string(config.vocab_size) + ")"));
      }
    }
    const int64_t total = static_cast<int64_t>(ids.size()) + f.sampling.max_tokens;
    if (total > config.max_position_embeddings) {
      return fail(invalid_argument("prompt " + std::to_string(i) + " (" + std::to_string(ids.size()) +
                                   " tokens) + --max-tokens exceeds the model's max_position_embeddings "
                                   "(" +
                                   std::to_string(config.max_position_embeddings) + ")"));
    }
    longest = std::max(longest, total);
    needed += (total + f.engine.block_size) * f.sampling.n;
  }
  std::vector<RequestOutput> results(prompts.size());
  if (f.sampling.max_tokens > 0) {
    EngineArgs args = to_engine_args(f.engine, f.model);
    // Size the engine for this batch: max_model_len to the longest request, the
    // cache to all of them (capped; the scheduler preempts when a larger batch
    // does not fit).
    if (args.max_model_len <= 0) args.max_model_len = longest;
    if (args.num_kv_cache_tokens <= 0) {
      args.num_kv_cache_tokens = std::max(args.max_model_len, std::min<int64_t>(needed, int64_t{1} << 16));
    }
    StatusOr<std::unique_ptr<LLMEngine>> engine = LLMEngine::create(model, tokenizer, args);
    if (!engine.ok()) return fail(engine.status());
    std::map<std::string, size_t> index;
    for (size_t i = 0; i < prompts.size(); ++i) {
      const std::string id = std::to_string(i);
      if (Status s = (*engine)->add_request(id, prompts[i], *params, priorities[i]); !s.ok()) {
        return fail(invalid_argument("prompt " + id + ": " + s.message()));
      }
      index[id] = i;
    }
    const bool progress = f.progress && prompts.size() > 1;
    const auto start = std::chrono::steady_clock::now();
    size_t done = 0;
    int64_t tokens = 0;
    while ((*engine)->has_unfinished()) {
      StatusOr<std::vector<RequestOutput>> outs = (*engine)->step();
      if (!outs.ok()) return fail(outs.status());
      for (RequestOutput &o : *outs) {
        for (const CompletionOutput &c : o.outputs) tokens += static_cast<int64_t>(c.delta_token_ids.size());
        if (!o.finished) continue;
        results[index.at(o.request_id)] = std::move(o);
        ++done;
        if (progress) {
          print_progress(done, prompts.size(), tokens,
                         std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
        }
      }
    }
  } else {
    for (size_t i = 0; i < prompts.size(); ++i) {
      results[i].prompt_token_ids = prompts[i].token_ids;
      results[i].outputs.resize(static_cast<size_t>(f.sampling.n));
    }
  }

  // Several sequences in text form: a header line before each (texts may hold newlines of their own).
  const bool headers = results.size() > 1 || params->n > 1;
  for (size_t i = 0; i < results.size(); ++i) {
    if (f.output == "jsonl") {
      std::printf("%s\n", prompt_json(i, prompts[i], results[i], tokenizer != nullptr).dump().c_str());
      continue;
    }
    for (const CompletionOutput &c : results[i].outputs) {
      if (f.output == "json") {
        std::printf("%s\n", completion_json(i, results[i], c, tokenizer != nullptr, params->n).dump().c_str());
        continue;
      }
      if (headers) {
        std::printf(params->n > 1 ? "=== prompt %zu, output %d ===\n" : "=== prompt %zu ===\n", i, c.index);
      }
      if (tokenizer != nullptr) {
        std::printf("%s\n", c.text.c_str());
      } else {
        for (size_t k = 0; k < c.token_ids.size(); ++k) std::printf("%s%d", k ? " " : "", c.token_ids[k]);
        std::printf("\n");
      }
    }
  }
  return 0;
}

}  // namespace

LLMSERVE_REGISTER_COMMAND("generate",
                          "generate text for prompts through the engine "
                          "(sampling, stop strings, batches)",
                          run_generate);

}  // namespace llmserve::cli
