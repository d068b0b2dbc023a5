// Flags shared by the engine-backed commands (generate, chat, bench
// throughput): model loading, engine sizing and vLLM-named SamplingParams
// flags, and turning them into a loaded model, tokenizer and SamplingParams.
// Invariant: every user value goes through Status-returning checks before an
// engine is built.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli/command.h"
#include "engine/sampling_params.h"
#include "frontend/llm_engine.h"
#include "model/causal_lm.h"
#include "runtime/cuda_graph_config.h"
#include "runtime/tensor_parallel_model.h"
#include "tokenizer/tokenizer.h"

namespace llmserve::cli {

struct ModelFlags {
  // model / tokenizer: a local folder, or a Hugging Face model id (resolve_model_flags) at `revision`.
  std::string model, tokenizer, config_file, load_format = "auto", dtype = "auto", device = "cpu", revision = "main";
  std::string tokenizer_pipeline = "transformers";  // transformers | tokenizers (TokenizerPipeline)
  int64_t seed = -1;                                // sampling seed when >= 0; also seeds dummy weights (0 when unset)
  int64_t num_threads = 0;
  std::string quantization;  // vLLM's --quantization (empty: the checkpoint's quantization_config, if any)
  // Tensor parallelism (runtime/tensor_parallel_model.h): ranks in all, and the torchrun-style multi-node bootstrap.
  int64_t tensor_parallel_size = 1, nnodes = 1, node_rank = 0, master_port = 29500;
  std::string master_addr = "127.0.0.1";
};
// The ParallelConfig the flags ask for (checked by check_model_flags).
ParallelConfig to_parallel_config(const ModelFlags &f);
// --tokenizer-pipeline's help (vLLM's --tokenizer-mode picks a tokenizer implementation; this picks whose
// pipeline ours reproduces, hence another name).
inline constexpr const char *kTokenizerPipelineHelp =
    "transformers (default: as transformers 5's AutoTokenizer, what vLLM uses) | tokenizers (tokenizer.json "
    "exactly as the HF `tokenizers` library runs it)";
void add_model_flags(ArgParser &parser, ModelFlags *f);
// --quantization alone (add_model_flags registers it too; bench latency uses this).
void add_quantization_flag(ArgParser &parser, std::string *quantization);

// vLLM's serving flags whose accepted values change nothing here (check_engine_flags logs one line for each given);
// a value that needs a feature llmserve lacks is refused, naming the feature. Not forwarded to an engine process.
struct VllmCompatFlags {
  std::optional<int64_t> pipeline_parallel_size, data_parallel_size;  // 1 only
  bool trust_remote_code = false;  // nothing to trust: no checkpoint code runs
  bool enable_auto_tool_choice = false;
  std::string kv_cache_dtype = "auto", tool_call_parser;
};

struct EngineFlags {
  int64_t max_model_len = 0, max_num_seqs = 256, max_num_batched_tokens = 4096, block_size = 16;
  int64_t kv_cache_tokens = 0;
  double gpu_memory_utilization = 0.9;
  bool enable_prefix_caching = true;
  std::string scheduling_policy = "fcfs";  // fcfs | priority (checked by check_engine_flags)
  // CUDA graphs, vLLM's flags (checked by check_engine_flags; empty: not given).
  std::string cuda_graph_mode, cuda_graph_capture_sizes, compilation_config;
  bool enforce_eager = false;
  std::optional<bool> async_scheduling;    // unset: on for cuda, off for cpu (EngineArgs)
  VllmCompatFlags vllm;
};
// The CUDA-graph mode and capture sizes the flags ask for (full_and_piecewise and vLLM's sizes when none is given).
// InvalidArgument naming the flag for a bad value, an unknown --compilation-config key, or flags that disagree.
struct CudaGraphFlags {
  CudaGraphMode mode = CudaGraphMode::kFullAndPiecewise;
  std::vector<int64_t> capture_sizes;
};
StatusOr<CudaGraphFlags> resolve_cuda_graph_flags(const EngineFlags &f);
// The four CUDA-graph flags alone (add_engine_flags registers them too; bench latency only these).
void add_cuda_graph_flags(ArgParser &parser, EngineFlags *f);
// InvalidArgument naming the flag for values the parser cannot check: ranges, --scheduling-policy, the CUDA-graph
// flags, vLLM's compatibility flags.
Status check_engine_flags(const EngineFlags &f);
void add_engine_flags(ArgParser &parser, EngineFlags *f);

struct SamplingFlags {
  static constexpr int64_t kUnset = INT64_MIN;  // an int flag not given (so a negative value can be rejected)
  // Unset: the model's generation_config.json (--generation-config auto), else vLLM's SamplingParams defaults.
  std::optional<double> temperature, top_p, min_p, repetition_penalty;
  std::optional<int64_t> top_k;
  double presence_penalty = 0.0, frequency_penalty = 0.0;
  std::string generation_config = "auto";  // auto | vllm | a folder (vLLM's --generation-config)
  int64_t max_tokens = 16, min_tokens = 0, n = 1, logprobs = kUnset;
  int64_t prompt_logprobs = kUnset;  // registered by generate only (add_prompt_logprobs_flag)
  std::vector<std::string> stop, stop_token_ids;
  std::string logit_bias;  // JSON object {"token id": bias, ...} (OpenAI's logit_bias)
  bool ignore_eos = false, include_stop_str_in_output = false, skip_special_tokens = true;
  bool spaces_between_special_tokens = true;
  // Structured output (SamplingParams::structured_outputs), at most one: a JSON Schema file, a regex, choices
  // "a,b,c".
  std::string json_schema_file, regex, choice;
};
// `several_outputs`: --n and --logprobs too (generate; chat shows one reply and no logprobs, so it has neither).
void add_sampling_flags(ArgParser &parser, SamplingFlags *f, bool several_outputs = true);
void add_prompt_logprobs_flag(ArgParser &parser, SamplingFlags *f);
// The sampling defaults vLLM starts a request from: SamplingParams' own (temperature 1.0, ...), over which
// `generation_config` "auto" lays the model folder's generation_config.json (temperature, top_p, top_k, min_p,
// repetition_penalty, max_new_tokens), a folder that folder's, and "vllm" nothing.
StatusOr<SamplingParams> generation_defaults(const std::string &generation_config, const std::string &model_dir);
// SamplingParams from the flags over `defaults` (validated later by LLMEngine::add_request, which names the
// field). InvalidArgument names a malformed flag (--stop-token-ids, --logit-bias, --n).
// --json-schema FILE / --regex / --choice as SamplingParams::structured_outputs (nullopt: none given);
// InvalidArgument naming the flag (two given, a file that is not a JSON schema).
StatusOr<std::optional<StructuredOutputsParams>> structured_outputs_from_flags(const SamplingFlags &f);
StatusOr<SamplingParams> to_sampling_params(const SamplingFlags &f, const ModelFlags &m,
                                            const SamplingParams &defaults);
// The start generate and chat share: the command line checked (a usage error: exit 2), then the model id resolved
// and the SamplingParams built over generation_defaults (a failure: exit 1), with one line on stderr when the
// temperature is not given, saying where it comes from (vLLM samples at 1.0 unless told). nullopt: *exit_code is
// set and the error printed.
std::optional<SamplingParams> start_sampling_command(ModelFlags *m, const EngineFlags &e, const SamplingFlags &s,
                                                     int *exit_code);

struct LoadedModel {
  std::unique_ptr<CausalLM> model;
  std::unique_ptr<Tokenizer> tokenizer;  // null when the model directory has none and none was needed
  bool builtin_default = false;
};
// Loads --model (or, without it, the built-in default: tiny random Llama + byte
// tokenizer, announced on stderr; or --config FILE with --load-format dummy).
// Sets the thread count. Errors name the flag or file.
StatusOr<LoadedModel> load_model_from_flags(const ModelFlags &f, bool need_tokenizer);

// A node other than 0 (--node-rank > 0, `serve` only): loads its ranks' shards, joins node 0 (TCP rendezvous, NCCL)
// and runs its share of every step of node 0's engine until that engine ends. Returns the exit code (0, or 1 with the
// error printed).
int run_follower_node(const ModelFlags &f);

// The tokenizer alone (what a process whose engine core runs elsewhere needs): the built-in default's without
// --model / --config, else --tokenizer or the model directory's (null if there is none and none was needed).
StatusOr<std::unique_ptr<Tokenizer>> load_tokenizer_from_flags(const ModelFlags &f, bool need_tokenizer);

// The flags back as arguments (for the engine-core child process, which parses them with these same
// add_*_flags): `parse(to_args(f))` gives `f` again.
std::vector<std::string> to_args(const ModelFlags &f);
std::vector<std::string> to_args(const EngineFlags &f);

// EngineArgs from the flags (0 = the engine's defaults).
EngineArgs to_engine_args(const EngineFlags &f, const ModelFlags &m);

// Parses "1,2,3" into ids; `flag` names the flag in errors.
StatusOr<std::vector<int32_t>> parse_id_list(const std::string &text, const std::string &flag);

// The model as a positional argument (`llmserve serve|generate|chat MODEL`, as `vllm serve MODEL`): at most one,
// and not together with --model.
Status take_positional_model(const std::vector<std::string> &positional, const char *command, ModelFlags *f);

// Replaces a Hugging Face model id in --model / --tokenizer by its local snapshot folder: from the Hub cache, or
// downloaded into it (hub/model_resolver.h). Local paths stay as they are. Errors name the id and what failed.
Status resolve_model_flags(ModelFlags *f);

// Exit codes of the engine commands (README): 2 for a wrong command line — a flag, a value out of its range or
// choices, or flags that disagree, found before anything is printed or loaded — and 1 for a run that failed (a
// model, tokenizer or input file that cannot be loaded, a rejected prompt). Both print "error: <message>".
int fail(const Status &status);         // returns 1
int usage_error(const Status &status);  // returns 2

// InvalidArgument naming the flag for --load-format, --dtype, --device, --tokenizer-pipeline, --num-threads and the
// parallelism flags (--tensor-parallel-size, --nnodes, ...) values no load could accept (load_model_from_flags checks
// them too).
Status check_model_flags(const ModelFlags &f);

}  // namespace llmserve::cli
