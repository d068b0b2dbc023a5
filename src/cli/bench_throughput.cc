// `llmserve bench throughput`: --num-prompts random prompts of --input-len
// tokens, each generating --output-len tokens, all submitted at once to one
// LLMEngine; prints requests/s, total tok/s and output tok/s measured from the
// first add_request to the last finished output (model loading excluded), as
// vLLM's throughput benchmark does; then the run's floor from rates measured after it (bench_floors.h) and the ratio.
// --json-schema FILE (or --regex / --choice) constrains every request (structured output), so the same run with and
// without it gives the cost of constrained decoding; the share of outputs that ended inside the constraint is printed.
#include "cli/bench_throughput.h"

#include <chrono>
#include <cstdio>
#include <random>
#include <string>

#include "cli/bench_floors.h"
#include "cli/command.h"
#include "cli/engine_flags.h"
#include "core/thread_pool.h"
#include "frontend/llm_engine.h"
#include "model/model_registry.h"

namespace llmserve::cli {

namespace {

// The run's floor (bench_floors.h), from rates measured on this machine after the run.
void print_floor(CausalLM &model, DType weight_dtype, const EngineArgs &a, int64_t num_prompts, int64_t input_len,
                 int64_t output_tokens, double seconds) {
  const ModelConfig &c = model.config();
  const int64_t step_tokens = std::min<int64_t>(a.max_num_batched_tokens, num_prompts * input_len);
  const MeasuredRates rates = measure_rates(model.device(), weight_dtype, c, step_tokens);
  const RunWork work{std::vector<int64_t>(num_prompts, input_len), output_tokens, a.max_num_seqs};
  const RunFloor floor = run_floor(c, weight_dtype, model.activation_dtype(), rates, work);
  std::printf("measured: %s\n", rates.description.c_str());
  std::printf("%s\n", describe_run_floor(floor, work, model.device().is_cpu(), seconds).c_str());
}

}  // namespace

int run_bench_throughput(const std::vector<std::string> &args) {
  ModelFlags m;
  EngineFlags e;
  std::string dataset_name = "random";
  int64_t num_prompts = 16, input_len = 128, output_len = 64;
  double temperature = 1.0;
  bool ignore_eos = false;
  std::vector<std::string> positional;
  ArgParser parser("bench throughput", "End-to-end output tokens/s of LLMEngine on random prompts.");
  parser.set_positional("[MODEL]", &positional);
  add_model_flags(parser, &m);
  add_engine_flags(parser, &e);
  parser.add_string("dataset-name", &dataset_name, "random (the only one: uniform random token ids, vLLM's name)");
  parser.add_int("num-prompts", &num_prompts,
                 "requests, all submitted at once (default 16); with --max-num-seqs N at most N run concurrently");
  parser.add_int("input-len", &input_len, "random prompt tokens per request (default 128)");
  parser.add_int("output-len", &output_len, "max_tokens per request (default 64)");
  parser.add_float("temperature", &temperature, "sampling temperature (default 1.0, as vLLM's benchmark)");
  parser.add_bool("ignore-eos", &ignore_eos,
                  "generate exactly --output-len tokens (a constrained output still ends "
                  "when its grammar is complete)");
  SamplingFlags constraint;  // only its structured-output flags are registered here
  parser.add_string("json-schema", &constraint.json_schema_file, "constrain every output to the JSON Schema in FILE");
  parser.add_string("regex", &constraint.regex, "constrain every output to fullmatch this regex");
  parser.add_string("choice", &constraint.choice, "constrain every output to one of these comma-separated strings");
  if (int code = parse_or_exit_code(parser, args); code >= 0) return code;
  if (Status s = take_positional_model(positional, "bench throughput", &m); !s.ok()) return usage_error(s);
  if (m.model.empty() && m.config_file.empty()) {
    return usage_error(invalid_argument("give MODEL (or --model), or --load-format dummy --config FILE"));
  }
  if (dataset_name != "random") {
    return usage_error(invalid_argument("--dataset-name '" + dataset_name + "': only 'random' is supported"));
  }
  if (num_prompts < 1 || input_len < 1 || output_len < 1) {
    return usage_error(invalid_argument("--num-prompts, --input-len and --output-len must be at least 1"));
  }
  if (Status s = check_model_flags(m); !s.ok()) return usage_error(s);
  if (Status s = check_engine_flags(e); !s.ok()) return usage_error(s);
  StatusOr<std::optional<StructuredOutputsParams>> structured = structured_outputs_from_flags(constraint);
  if (!structured.ok()) return usage_error(structured.status());
  // Grammars are compiled over the tokenizer's vocabulary: a constrained run needs one.
  StatusOr<LoadedModel> loaded = load_model_from_flags(m, /*need_tokenizer=*/structured->has_value());
  if (!loaded.ok()) return fail(loaded.status());
  CausalLM &model = *loaded->model;
  const ModelConfig &c = model.config();
  EngineArgs args_e = to_engine_args(e, m);
  if (args_e.max_model_len <= 0) args_e.max_model_len = std::min(c.max_position_embeddings, input_len + output_len);
  if (args_e.num_kv_cache_tokens <= 0 && model.device().is_cpu()) {  // on cuda: --gpu-memory-utilization
    args_e.num_kv_cache_tokens =
        std::min<int64_t>(num_prompts, args_e.max_num_seqs) * (input_len + output_len + args_e.block_size);
  }
  StatusOr<std::unique_ptr<LLMEngine>> engine =
      LLMEngine::create(model, structured->has_value() ? loaded->tokenizer.get() : nullptr, args_e);
  if (!engine.ok()) return fail(engine.status());

  std::mt19937 rng(static_cast<uint32_t>(std::max<int64_t>(0, m.seed)));
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(c.vocab_size - 1));
  std::vector<PromptInput> prompts(num_prompts);
  for (PromptInput &p : prompts) {
    p.token_ids.resize(input_len);
    for (int32_t &id : p.token_ids) id = token(rng);
  }
  SamplingParams params;
  params.temperature = temperature;
  params.max_tokens = output_len;
  params.ignore_eos = ignore_eos;
  params.structured_outputs = *structured;
  const auto start = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < num_prompts; ++i) {
    if (Status s = (*engine)->add_request(std::to_string(i), prompts[i], params); !s.ok()) return fail(s);
  }
  int64_t output_tokens = 0, num_complete = 0;
  while ((*engine)->has_unfinished()) {
    StatusOr<std::vector<RequestOutput>> outs = (*engine)->step();
    if (!outs.ok()) return fail(outs.status());
    for (const RequestOutput &o : *outs) {
      if (!o.finished) continue;
      output_tokens += static_cast<int64_t>(o.outputs[0].token_ids.size());
      num_complete += o.outputs[0].finish_reason == FinishReason::kStop ? 1 : 0;
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const int64_t total_tokens = output_tokens + num_prompts * input_len;
  std::printf(
      "model: %s (%s), %lld random prompts, input %lld, output %lld, "
      "max_num_seqs %d, %d threads\n",
      c.architecture.c_str(), m.model.empty() ? m.config_file.c_str() : m.model.c_str(),
      static_cast<long long>(num_prompts), static_cast<long long>(input_len), static_cast<long long>(output_len),
      args_e.max_num_seqs, ThreadPool::global().num_threads());
  std::printf("ignore_eos: %s, temperature: %.2f\n", ignore_eos ? "true" : "false", temperature);
  if (structured->has_value()) {
    std::printf(
        "structured output: every request constrained; %lld of %lld outputs complete (stopped), the rest "
        "cut by --output-len\n",
        static_cast<long long>(num_complete), static_cast<long long>(num_prompts));
  }
  std::printf("device: %s, KV cache: %d blocks x %d tokens = %lld tokens\n", model.device().to_string().c_str(),
              (*engine)->num_kv_blocks(), (*engine)->block_size(),
              static_cast<long long>((*engine)->num_kv_blocks()) * (*engine)->block_size());
  if (!(*engine)->kv_cache_summary().empty()) std::printf("%s\n", (*engine)->kv_cache_summary().c_str());
  std::printf("engine steps: %lld, preemptions: %lld, elapsed: %.2f s\n",
              static_cast<long long>((*engine)->totals().num_steps),
              static_cast<long long>((*engine)->totals().num_preemptions), seconds);
  std::printf(
      "Throughput: %.2f requests/s, %.1f total tokens/s, %.1f output "
      "tokens/s\n",
      num_prompts / seconds, total_tokens / seconds, output_tokens / seconds);
  ModelLoadOptions load_options;
  parse_dtype_flag(m.dtype, &load_options.weight_dtype);  // checked when the model was loaded
  print_floor(model, resolve_weight_dtype(c, load_options), args_e, num_prompts, input_len, output_tokens, seconds);
  return 0;
}

}  // namespace llmserve::cli
