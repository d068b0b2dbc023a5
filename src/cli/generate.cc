// `llmserve generate`: offline greedy generation for one or more prompts through the paged KV cache.
// Without --model it runs the built-in default (a tiny random-weight model) and says so.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/builtin_default.h"
#include "cli/command.h"
#include "core/thread_pool.h"
#include "model/model_registry.h"
#include "runtime/paged_runner.h"
#include "tokenizer/tokenizer.h"

namespace llmserve::cli {
namespace {

struct GenerateFlags {
  std::string model, tokenizer, load_format = "auto", dtype = "auto", output = "text";
  std::vector<std::string> prompts, prompt_ids;
  int64_t max_tokens = 16, num_threads = 0, seed = 0, kv_cache_tokens = 0;
  double temperature = 0.0;
  bool ignore_eos = false;
};

StatusOr<std::vector<int32_t>> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < 0 || v > INT32_MAX) {
      return invalid_argument("--prompt-ids: '" + item + "' is not a token id");
    }
    ids.push_back(static_cast<int32_t>(v));
  }
  if (ids.empty()) return invalid_argument("--prompt-ids is empty");
  return ids;
}

int fail(const Status& status) {
  std::fprintf(stderr, "error: %s\n", status.message().c_str());
  return 1;
}

int run_generate(const std::vector<std::string>& args) {
  GenerateFlags f;
  ArgParser parser("generate", "Greedy generation for each --prompt (or --prompt-ids), printed as text.\n"
                               "Without --model, a built-in tiny model with random weights runs.");
  parser.add_string("model", &f.model, "Hugging Face model directory (config.json, *.safetensors, tokenizer.json)");
  parser.add_string("tokenizer", &f.tokenizer, "tokenizer directory (default: the model directory)");
  parser.add_strings("prompt", &f.prompts, "prompt text (repeatable: prompts run as one batch)");
  parser.add_strings("prompt-ids", &f.prompt_ids, "prompt as comma-separated token ids (repeatable)");
  parser.add_int("max-tokens", &f.max_tokens, "tokens to generate per prompt (default 16)");
  parser.add_float("temperature", &f.temperature, "0 = greedy (the only mode until the engine lands)");
  parser.add_bool("ignore-eos", &f.ignore_eos, "keep generating past end-of-sequence tokens");
  parser.add_string("dtype", &f.dtype, "weight dtype: auto (the checkpoint's) | float32 | bfloat16");
  parser.add_string("load-format", &f.load_format, "auto | safetensors | dummy (random weights from config.json)");
  parser.add_int("seed", &f.seed, "seed for --load-format dummy");
  parser.add_int("num-threads", &f.num_threads, "CPU threads (default: all)");
  parser.add_int("kv-cache-tokens", &f.kv_cache_tokens, "KV cache capacity in tokens (default: enough for the batch)");
  parser.add_string("output", &f.output, "text | json (one JSON object per prompt)");
  if (int code = parse_or_exit_code(parser, args); code >= 0) return code;
  if (f.temperature != 0.0) {
    return fail(invalid_argument("--temperature " + std::to_string(f.temperature) +
                                 ": only greedy decoding (0) is available until the engine lands"));
  }
  if (f.max_tokens < 0) return fail(invalid_argument("--max-tokens must be >= 0"));
  if (f.output != "text" && f.output != "json") return fail(invalid_argument("--output must be text or json"));
  if (f.num_threads > 0) ThreadPool::set_global_num_threads(static_cast<int>(f.num_threads));

  ModelLoadOptions options;
  if (!parse_load_format(f.load_format, &options.load_format)) {
    return fail(invalid_argument("--load-format '" + f.load_format + "': expected auto, safetensors or dummy"));
  }
  options.seed = static_cast<uint64_t>(f.seed);
  if (!parse_dtype_flag(f.dtype, &options.weight_dtype)) {
    return fail(invalid_argument("--dtype '" + f.dtype + "': expected auto, float32 or bfloat16"));
  }
  StatusOr<std::unique_ptr<CausalLM>> model = internal_error("model not loaded");
  StatusOr<std::unique_ptr<Tokenizer>> tokenizer = not_found("no tokenizer");
  if (f.model.empty()) {
    std::fprintf(stderr, "llmserve: no --model given; running the built-in default (a tiny Llama with random "
                         "weights and a byte-level tokenizer), so the text is noise\n");
    StatusOr<ModelConfig> config = parse_model_config(nlohmann::json::parse(builtin_default_config_json()));
    if (!config.ok()) return fail(config.status());
    options.load_format = LoadFormat::kDummy;
    model = load_model("", options, &*config);
    tokenizer = Tokenizer::from_json(builtin_default_tokenizer_json());
  } else {
    model = load_model(f.model, options);
    const std::string tok_dir = f.tokenizer.empty() ? f.model : f.tokenizer;
    if (!f.prompts.empty() || std::filesystem::exists(std::filesystem::path(tok_dir) / "tokenizer.json")) {
      tokenizer = Tokenizer::from_dir(tok_dir);
    }
  }
  if (!model.ok()) return fail(model.status());
  const bool have_tokenizer = tokenizer.ok() && *tokenizer != nullptr;
  if (!f.prompts.empty() && !have_tokenizer) return fail(tokenizer.status());

  std::vector<std::vector<int32_t>> prompts;
  for (const std::string& text : f.prompts) prompts.push_back((*tokenizer)->encode(text, true));
  for (const std::string& ids : f.prompt_ids) {
    StatusOr<std::vector<int32_t>> parsed = parse_ids(ids);
    if (!parsed.ok()) return fail(parsed.status());
    prompts.push_back(*parsed);
  }
  if (prompts.empty()) {
    if (!have_tokenizer) return fail(invalid_argument("give --prompt or --prompt-ids"));
    prompts.push_back((*tokenizer)->encode("", true));  // BOS alone: an unconditional sample
  }
  const ModelConfig& config = (*model)->config();
  for (size_t i = 0; i < prompts.size(); ++i) {
    if (prompts[i].empty()) return fail(invalid_argument("prompt " + std::to_string(i) + " has no tokens"));
    for (int32_t id : prompts[i]) {
      if (id >= config.vocab_size) {
        return fail(invalid_argument("prompt " + std::to_string(i) + ": token id " + std::to_string(id) +
                                     " is outside the vocabulary (" + std::to_string(config.vocab_size) + ")"));
      }
    }
    if (static_cast<int64_t>(prompts[i].size()) + f.max_tokens > config.max_position_embeddings) {
      return fail(invalid_argument("prompt " + std::to_string(i) + " (" + std::to_string(prompts[i].size()) +
                                   " tokens) + --max-tokens exceeds the model's max_position_embeddings (" +
                                   std::to_string(config.max_position_embeddings) + ")"));
    }
  }

  PagedRunnerOptions runner_options;
  int64_t needed = 0;
  for (const auto& p : prompts) needed += static_cast<int64_t>(p.size()) + f.max_tokens + runner_options.block_size;
  runner_options.max_num_tokens_cached = f.kv_cache_tokens > 0 ? f.kv_cache_tokens : needed;
  PagedRunner runner(**model, runner_options);
  std::vector<int32_t> stop_ids;
  if (!f.ignore_eos) {
    for (int64_t id : config.eos_token_ids) stop_ids.push_back(static_cast<int32_t>(id));
    if (have_tokenizer) {
      for (int32_t id : (*tokenizer)->eos_token_ids()) stop_ids.push_back(id);
    }
  }
  StatusOr<std::vector<std::vector<int32_t>>> outputs = greedy_generate(runner, prompts, f.max_tokens, stop_ids);
  if (!outputs.ok()) return fail(outputs.status());

  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::vector<int32_t>& out = (*outputs)[i];
    std::string text;
    if (have_tokenizer) text = (*tokenizer)->decode(out, /*skip_special_tokens=*/true);
    if (f.output == "json") {
      nlohmann::ordered_json j = {{"index", i}, {"prompt_token_ids", prompts[i]}, {"token_ids", out}};
      if (have_tokenizer) j["text"] = text;
      std::printf("%s\n", j.dump().c_str());
    } else if (have_tokenizer) {
      std::printf("%s\n", text.c_str());
    } else {
      for (size_t k = 0; k < out.size(); ++k) std::printf("%s%d", k ? " " : "", out[k]);
      std::printf("\n");
    }
  }
  return 0;
}

}  // namespace

LLMSERVE_REGISTER_COMMAND("generate", "generate text for prompts (greedy, paged KV cache)", run_generate);

}  // namespace llmserve::cli
