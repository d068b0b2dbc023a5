// Shared flags of the engine-backed commands and their conversion to a model,
// tokenizer and SamplingParams.
#include "cli/engine_flags.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <utility>

#include "cli/builtin_default.h"
#include "core/logging.h"
#include "core/thread_pool.h"
#include "hub/model_resolver.h"
#include "model/model_registry.h"

namespace llmserve::cli {

int fail(const Status &status) {
  std::fprintf(stderr, "error: %s\n", status.message().c_str());
  return 1;
}

int usage_error(const Status &status) {
  std::fprintf(stderr, "error: %s\n", status.message().c_str());
  return 2;
}

Status check_model_flags(const ModelFlags &f) {
  LoadFormat format;
  std::optional<DType> dtype;
  Device device;
  if (!parse_load_format(f.load_format, &format)) {
    return invalid_argument("--load-format '" + f.load_format + "': expected auto, safetensors or dummy");
  }
  if (!parse_dtype_flag(f.dtype, &dtype)) {
    return invalid_argument("--dtype '" + f.dtype + "': expected auto, float32, bfloat16 or float16");
  }
  if (!parse_device_flag(f.device, &device)) {
    return invalid_argument("--device '" + f.device + "': expected cpu, cuda or cuda:N");
  }
  TokenizerPipeline pipeline;
  if (!parse_tokenizer_pipeline(f.tokenizer_pipeline, &pipeline)) {
    return invalid_argument("--tokenizer-pipeline '" + f.tokenizer_pipeline + "': expected transformers or tokenizers");
  }
  if (f.num_threads < 0) return invalid_argument("--num-threads must be at least 1 (default: every core)");
  if (!f.quantization.empty()) {  // the method names only; whether it fits the checkpoint is checked at load
    RETURN_IF_ERROR(resolve_quantization_flag(std::nullopt, f.quantization, /*dummy_weights=*/true).status());
  }
  return check_parallel_config(to_parallel_config(f), device);
}

ParallelConfig to_parallel_config(const ModelFlags &f) {
  ParallelConfig p;
  p.tensor_parallel_size = f.tensor_parallel_size;
  p.rendezvous.nnodes = f.nnodes;
  p.rendezvous.node_rank = f.node_rank;
  p.rendezvous.master_addr = f.master_addr;
  p.rendezvous.master_port = f.master_port;
  return p;
}

void add_model_flags(ArgParser &parser, ModelFlags *f) {
  parser.add_string("model", &f->model,
                    "Hugging Face model folder (config.json, *.safetensors, tokenizer.json) or model id ORG/NAME "
                    "(from the Hub cache, downloaded into it when absent)");
  parser.add_string("tokenizer", &f->tokenizer, "tokenizer directory or model id (default: the model's)");
  parser.add_string("revision", &f->revision,
                    "branch, tag or commit of a Hugging Face model id (default main; HF_HUB_CACHE, HF_ENDPOINT, "
                    "HF_TOKEN and HF_HUB_OFFLINE as huggingface_hub reads them)");
  parser.add_string("tokenizer-pipeline", &f->tokenizer_pipeline, kTokenizerPipelineHelp);
  parser.add_string("config", &f->config_file, "config.json to use with --load-format dummy (no weights needed)");
  parser.add_string("dtype", &f->dtype,
                    "weight (on cuda also activation) dtype: auto (the checkpoint's) | float32 | bfloat16 | float16");
  parser.add_string("device", &f->device, "cpu (default) | cuda | cuda:N");
  parser.add_string("load-format", &f->load_format, "auto | safetensors | dummy (random weights from config.json)");
  parser.add_int("seed", &f->seed,
                 "sampling seed of every request, and of --load-format dummy weights (default: none; dummy weights 0)");
  parser.add_int("num-threads", &f->num_threads, "CPU threads (default: all)");
  parser.add_int("tensor-parallel-size", &f->tensor_parallel_size,
                 "ranks the model is sharded over (-tp; default 1): cuda: one device each from --device's index, "
                 "NCCL between them; cpu: threads of this process");
  parser.add_short("-tp", "tensor-parallel-size");
  parser.add_int("nnodes", &f->nnodes, "nodes the ranks span (default 1; torchrun's --nnodes)");
  parser.add_int("node-rank", &f->node_rank, "this node's index in [0, --nnodes) (default 0)");
  parser.add_string("master-addr", &f->master_addr, "node 0's address for the NCCL id exchange (default 127.0.0.1)");
  parser.add_int("master-port", &f->master_port, "node 0's rendezvous TCP port (default 29500)");
  add_quantization_flag(parser, &f->quantization);
}

void add_quantization_flag(ArgParser &parser, std::string *quantization) {
  parser.add_string("quantization", quantization,
                    std::string("vLLM's flag: ") + quantization_flag_values() +
                        " (default: the checkpoint's quantization_config; fp8 on an unquantized checkpoint makes "
                        "per-channel fp8 weights at load; gptq / awq without one: dummy weights only)");
}

void add_engine_flags(ArgParser &parser, EngineFlags *f) {
  parser.add_int("max-model-len", &f->max_model_len, "prompt + output tokens at most (default: the model's)");
  parser.add_int("max-num-seqs", &f->max_num_seqs, "sequences running at once (default 256)");
  parser.add_int("max-num-batched-tokens", &f->max_num_batched_tokens, "token budget per step (default 4096)");
  parser.add_int("block-size", &f->block_size, "tokens per KV-cache block (default 16)");
  parser.add_int("kv-cache-tokens", &f->kv_cache_tokens,
                 "KV cache capacity in tokens (default: enough for the batch; on cuda what "
                 "--gpu-memory-utilization leaves)");
  parser.add_float("gpu-memory-utilization", &f->gpu_memory_utilization,
                   "cuda: fraction of device memory for weights, activations and the KV cache (default 0.9)");
  parser.add_bool("enable-prefix-caching", &f->enable_prefix_caching, "reuse cached prompt blocks (default on)");
  parser.add_string("scheduling-policy", &f->scheduling_policy,
                    "fcfs (default) | priority (a request's priority: lower is served earlier)");
  parser.add_bool("async-scheduling", &f->async_scheduling,
                  "schedule step N+1 while step N runs (default: on for cuda, off for cpu; --no-async-scheduling)");
  add_cuda_graph_flags(parser, f);
  VllmCompatFlags &v = f->vllm;
  parser.add_int("pipeline-parallel-size", &v.pipeline_parallel_size, "vLLM's flag: 1 only");
  parser.add_int("data-parallel-size", &v.data_parallel_size, "vLLM's flag: 1 only");
  parser.add_bool("trust-remote-code", &v.trust_remote_code,
                  "vLLM's flag, accepted: no code from a checkpoint ever runs here");
  parser.add_string("kv-cache-dtype", &v.kv_cache_dtype, "vLLM's flag: auto only (the model's dtype)");
  parser.add_bool("enable-auto-tool-choice", &v.enable_auto_tool_choice,
                  "vLLM's flag: tool calls are parsed by `llmserve serve` only (refused here)");
  parser.add_string("tool-call-parser", &v.tool_call_parser,
                    "vLLM's flag: tool calls are parsed by `llmserve serve` only (refused here)");
}

void add_cuda_graph_flags(ArgParser &parser, EngineFlags *f) {
  parser.add_string("cuda-graph-mode", &f->cuda_graph_mode,
                    "none | full | full_decode_only | full_and_piecewise (default): FULL graphs of uniform decode "
                    "batches; PIECEWISE is not built (prefill and mixed batches run eagerly; piecewise alone is "
                    "refused); ignored on cpu");
  parser.add_string("cuda-graph-capture-sizes", &f->cuda_graph_capture_sizes,
                    "decode batch sizes to capture, e.g. 1,2,4,8 (default: vLLM's list up to min(2 x "
                    "max-num-seqs, 512), capped by max-num-seqs and max-num-batched-tokens)");
  parser.add_string("compilation-config", &f->compilation_config,
                    "JSON: {\"cudagraph_mode\": \"...\", \"cudagraph_capture_sizes\": [...]} (other keys refused)");
  parser.add_bool("enforce-eager", &f->enforce_eager, "no CUDA graphs (= --cuda-graph-mode none)");
}

StatusOr<CudaGraphFlags> resolve_cuda_graph_flags(const EngineFlags &f) {
  CudaGraphFlags out;
  std::optional<CudaGraphMode> mode;
  if (!f.cuda_graph_mode.empty()) {
    ASSIGN_OR_RETURN(CudaGraphMode m, parse_cuda_graph_mode(f.cuda_graph_mode, "--cuda-graph-mode"));
    mode = m;
  }
  if (!f.cuda_graph_capture_sizes.empty()) {
    ASSIGN_OR_RETURN(out.capture_sizes, parse_capture_sizes(f.cuda_graph_capture_sizes, "--cuda-graph-capture-sizes"));
  }
  if (!f.compilation_config.empty()) {
    ASSIGN_OR_RETURN(CompilationConfig c, parse_compilation_config(f.compilation_config));
    if (c.has_mode) {
      if (mode && *mode != c.mode) {
        return invalid_argument("--compilation-config cudagraph_mode and --cuda-graph-mode disagree");
      }
      mode = c.mode;
    }
    if (!c.capture_sizes.empty()) {
      if (!out.capture_sizes.empty() && out.capture_sizes != c.capture_sizes) {
        return invalid_argument("--compilation-config cudagraph_capture_sizes and --cuda-graph-capture-sizes disagree");
      }
      out.capture_sizes = c.capture_sizes;
    }
  }
  if (f.enforce_eager) {
    if (mode && *mode != CudaGraphMode::kNone) {
      return invalid_argument("--enforce-eager contradicts cudagraph_mode " + std::string(cuda_graph_mode_name(*mode)));
    }
    mode = CudaGraphMode::kNone;
  }
  if (mode) out.mode = *mode;
  if (out.mode == CudaGraphMode::kPiecewise) {  // it would run everything eagerly: refused, not ignored
    return invalid_argument(
        "cudagraph_mode piecewise: PIECEWISE graphs (between attention calls) are not built yet; full_and_piecewise "
        "(the default) captures FULL graphs of uniform decode batches and runs other batches eagerly, none runs "
        "every batch eagerly");
  }
  return out;
}

void add_sampling_flags(ArgParser &parser, SamplingFlags *f, bool several_outputs) {
  parser.add_float("temperature", &f->temperature,
                   "0 = greedy (default: the model's generation_config.json, else 1.0, as vLLM)");
  parser.add_float("top-p", &f->top_p, "nucleus sampling mass, (0, 1] (default: generation_config.json, else 1)");
  parser.add_int("top-k", &f->top_k,
                 "keep the k most likely tokens, 0 or -1: all (default: generation_config.json, else all)");
  parser.add_float("min-p", &f->min_p,
                   "drop tokens below min-p x the top probability (default: generation_config.json, else 0)");
  parser.add_string("generation-config", &f->generation_config,
                    "auto (default: sampling defaults from the model's generation_config.json) | vllm (none) | a "
                    "folder");
  parser.add_int("max-tokens", &f->max_tokens, "tokens to generate per sequence (default 16)");
  parser.add_int("min-tokens", &f->min_tokens, "no EOS / stop token before this many tokens");
  parser.add_strings("stop", &f->stop, "stop string (repeatable); not included in the text");
  parser.add_strings("stop-token-ids", &f->stop_token_ids, "comma-separated token ids that stop generation");
  parser.add_bool("ignore-eos", &f->ignore_eos, "keep generating past end-of-sequence tokens");
  parser.add_bool("include-stop-str-in-output", &f->include_stop_str_in_output, "keep the stop string in the text");
  parser.add_bool("skip-special-tokens", &f->skip_special_tokens, "leave special tokens out of the text (default)");
  parser.add_bool("spaces-between-special-tokens", &f->spaces_between_special_tokens,
                  "put spaces around special tokens in the text (default)");
  parser.add_string("logit-bias", &f->logit_bias,
                    "JSON object {\"token id\": bias in [-100, 100], ...} added to the logits");
  parser.add_string("json-schema", &f->json_schema_file, "constrain the output to the JSON Schema in this file");
  parser.add_string("regex", &f->regex, "constrain the output to fullmatch this regular expression");
  parser.add_string("choice", &f->choice, "constrain the output to one of these comma-separated strings");
  parser.add_float("presence-penalty", &f->presence_penalty, "[-2, 2]");
  parser.add_float("frequency-penalty", &f->frequency_penalty, "[-2, 2]");
  parser.add_float("repetition-penalty", &f->repetition_penalty,
                   "> 0; 1 = off (default: generation_config.json, else 1)");
  if (several_outputs) {
    parser.add_int("n", &f->n, "sequences per prompt (default 1)");
    parser.add_int("logprobs", &f->logprobs, "top logprobs per generated token (json output)");
  }
}

void add_prompt_logprobs_flag(ArgParser &parser, SamplingFlags *f) {
  parser.add_int("prompt-logprobs", &f->prompt_logprobs,
                 "top logprobs per prompt token, in [0, 20] (json output; turns prefix-cache hits off for it)");
}

StatusOr<std::vector<int32_t>> parse_id_list(const std::string &text, const std::string &flag) {
  std::vector<int32_t> ids;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char *end = nullptr;
    long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < 0 || v > INT32_MAX) {
      return invalid_argument(flag + ": '" + item + "' is not a token id");
    }
    ids.push_back(static_cast<int32_t>(v));
  }
  if (ids.empty()) return invalid_argument(flag + " is empty");
  return ids;
}

// {"id": bias, ...} -> (id, bias) pairs; ranges are SamplingParams::validate's job (it knows the vocabulary).
StatusOr<std::vector<std::pair<int32_t, double>>> parse_logit_bias(const std::string &text) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return invalid_argument("--logit-bias: expected a JSON object such as {\"42\": -100}");
  }
  std::vector<std::pair<int32_t, double>> out;
  for (const auto &[key, value] : j.items()) {
    char *end = nullptr;
    const long id = std::strtol(key.c_str(), &end, 10);
    if (key.empty() || *end != '\0' || id < INT32_MIN || id > INT32_MAX) {
      return invalid_argument("--logit-bias: key '" + key + "' is not a token id");
    }
    if (!value.is_number()) return invalid_argument("--logit-bias: the bias of token " + key + " is not a number");
    out.emplace_back(static_cast<int32_t>(id), value.get<double>());
  }
  return out;
}

StatusOr<SamplingParams> generation_defaults(const std::string &generation_config, const std::string &model_dir) {
  SamplingParams p;
  if (generation_config == "vllm") return p;
  const std::string dir = generation_config == "auto" ? model_dir : generation_config;
  if (dir.empty()) return p;
  ASSIGN_OR_RETURN(GenerationConfig g, load_generation_config(dir));
  if (g.temperature) p.temperature = *g.temperature;
  if (g.top_p) p.top_p = *g.top_p;
  if (g.top_k) p.top_k = static_cast<int32_t>(*g.top_k);
  if (g.min_p) p.min_p = *g.min_p;
  if (g.repetition_penalty) p.repetition_penalty = *g.repetition_penalty;
  if (g.max_new_tokens) p.max_tokens = *g.max_new_tokens;
  return p;
}

std::optional<SamplingParams> start_sampling_command(ModelFlags *m, const EngineFlags &e, const SamplingFlags &s,
                                                     int *exit_code) {
  Status usage = check_model_flags(*m);
  if (usage.ok()) usage = check_engine_flags(e);
  if (usage.ok()) usage = to_sampling_params(s, *m, SamplingParams()).status();
  if (!usage.ok()) {
    *exit_code = usage_error(usage);
    return std::nullopt;
  }
  // The model id resolved (cached or downloaded) first: generation_config.json lives in its folder.
  if (Status resolved = resolve_model_flags(m); !resolved.ok()) {
    *exit_code = fail(resolved);
    return std::nullopt;
  }
  const bool builtin = m->model.empty() && m->config_file.empty();
  StatusOr<SamplingParams> defaults = generation_defaults(s.generation_config, builtin ? "" : m->model);
  StatusOr<SamplingParams> params =
      defaults.ok() ? to_sampling_params(s, *m, *defaults) : defaults.status().with_context("--generation-config");
  if (!params.ok()) {
    *exit_code = fail(params.status());
    return std::nullopt;
  }
  if (!s.temperature) {
    const bool from_model = params->temperature != SamplingParams().temperature;
    std::fprintf(stderr, "llmserve: sampling at temperature %g (%s); --temperature 0 for greedy\n",
                 params->temperature, from_model ? "the model's generation_config.json" : "vLLM's default");
  }
  return *params;
}

// --json-schema FILE / --regex / --choice: at most one; the schema must be a JSON object (or boolean) in the file.
StatusOr<std::optional<StructuredOutputsParams>> structured_outputs_from_flags(const SamplingFlags &f) {
  const int given = (f.json_schema_file.empty() ? 0 : 1) + (f.regex.empty() ? 0 : 1) + (f.choice.empty() ? 0 : 1);
  if (given == 0) return std::optional<StructuredOutputsParams>();
  if (given > 1) return invalid_argument("--json-schema, --regex, --choice: give at most one");
  StructuredOutputsParams so;
  if (!f.json_schema_file.empty()) {
    std::ifstream in(f.json_schema_file, std::ios::binary);
    if (!in) return invalid_argument("--json-schema " + f.json_schema_file + ": cannot open");
    std::stringstream text;
    text << in.rdbuf();
    nlohmann::json schema = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
    if (schema.is_discarded() || !(schema.is_object() || schema.is_boolean())) {
      return invalid_argument("--json-schema " + f.json_schema_file + ": not a JSON object");
    }
    so.json = schema.dump();
  } else if (!f.regex.empty()) {
    so.regex = f.regex;
  } else {
    so.choice.emplace();
    std::stringstream list(f.choice);
    for (std::string item; std::getline(list, item, ',');) so.choice->push_back(item);
    if (so.choice->empty()) return invalid_argument("--choice: give comma-separated choices");
  }
  return std::optional<StructuredOutputsParams>(std::move(so));
}

StatusOr<SamplingParams> to_sampling_params(const SamplingFlags &f, const ModelFlags &m,
                                            const SamplingParams &defaults) {
  SamplingParams p = defaults;
  if (f.temperature) p.temperature = *f.temperature;
  if (f.top_p) p.top_p = *f.top_p;
  if (f.top_k) p.top_k = static_cast<int32_t>(std::clamp<int64_t>(*f.top_k, INT32_MIN, INT32_MAX));
  if (f.min_p) p.min_p = *f.min_p;
  if (f.repetition_penalty) p.repetition_penalty = *f.repetition_penalty;
  if (m.seed >= 0) p.seed = m.seed;
  p.max_tokens = f.max_tokens;
  p.min_tokens = f.min_tokens;
  p.stop = f.stop;
  for (const std::string &s : f.stop_token_ids) {
    ASSIGN_OR_RETURN(std::vector<int32_t> ids, parse_id_list(s, "--stop-token-ids"));
    p.stop_token_ids.insert(p.stop_token_ids.end(), ids.begin(), ids.end());
  }
  p.ignore_eos = f.ignore_eos;
  p.include_stop_str_in_output = f.include_stop_str_in_output;
  p.skip_special_tokens = f.skip_special_tokens;
  p.spaces_between_special_tokens = f.spaces_between_special_tokens;
  if (!f.logit_bias.empty()) {
    ASSIGN_OR_RETURN(p.logit_bias, parse_logit_bias(f.logit_bias));
  }
  p.presence_penalty = f.presence_penalty;
  p.frequency_penalty = f.frequency_penalty;
  if (f.n < 1 || f.n > 1024) return invalid_argument("--n must be in [1, 1024]");
  p.n = static_cast<int32_t>(f.n);
  // Out-of-range values reach SamplingParams::validate (clamped into int32 so they stay out of range), which
  // names the field.
  auto to_int32 = [](int64_t v) { return static_cast<int32_t>(std::clamp<int64_t>(v, INT32_MIN, INT32_MAX)); };
  if (f.logprobs != SamplingFlags::kUnset) p.logprobs = to_int32(f.logprobs);
  if (f.prompt_logprobs != SamplingFlags::kUnset) p.prompt_logprobs = to_int32(f.prompt_logprobs);
  ASSIGN_OR_RETURN(p.structured_outputs, structured_outputs_from_flags(f));
  return p;
}

Status take_positional_model(const std::vector<std::string> &positional, const char *command, ModelFlags *f) {
  if (positional.size() > 1) return invalid_argument(std::string(command) + " takes one MODEL");
  if (positional.empty()) return ok_status();
  if (!f->model.empty()) return invalid_argument("give the model as MODEL or --model, not both");
  f->model = positional[0];
  return ok_status();
}

Status resolve_model_flags(ModelFlags *f) {
  hub::ResolveOptions options;
  options.revision = f->revision;
  for (std::string *name : {&f->model, &f->tokenizer}) {
    StatusOr<std::string> path = hub::resolve_model_path(*name, options);
    if (!path.ok()) return path.status();
    *name = *path;
  }
  return ok_status();
}

namespace {

// ModelLoadOptions from checked flags (check_model_flags parsed the three).
ModelLoadOptions model_load_options(const ModelFlags &f) {
  ModelLoadOptions options;
  parse_load_format(f.load_format, &options.load_format);
  parse_dtype_flag(f.dtype, &options.weight_dtype);
  parse_device_flag(f.device, &options.device);
  options.seed = static_cast<uint64_t>(std::max<int64_t>(0, f.seed));
  options.quantization = f.quantization;
  return options;
}

}  // namespace

int run_follower_node(const ModelFlags &flags) {
  if (Status s = check_model_flags(flags); !s.ok()) return usage_error(s);
  ModelFlags f = flags;
  if (Status s = resolve_model_flags(&f); !s.ok()) return fail(s);
  if (f.num_threads > 0) ThreadPool::set_global_num_threads(static_cast<int>(f.num_threads));
  const ParallelConfig parallel = to_parallel_config(f);
  StatusOr<std::unique_ptr<CausalLM>> model = internal_error("not loaded");
  if (!f.config_file.empty()) {
    StatusOr<ModelConfig> config = load_model_config(f.config_file);
    if (!config.ok()) return fail(config.status());
    model = load_parallel_model(f.model, model_load_options(f), parallel, &*config);
  } else {
    model = load_parallel_model(f.model, model_load_options(f), parallel);
  }
  if (!model.ok()) return fail(model.status());
  const int64_t local = f.tensor_parallel_size / f.nnodes;
  std::fprintf(stderr, "llmserve: node %lld of %lld: ranks %lld..%lld loaded; following node 0 (%s:%lld)\n",
               static_cast<long long>(f.node_rank), static_cast<long long>(f.nnodes),
               static_cast<long long>(f.node_rank * local), static_cast<long long>((f.node_rank + 1) * local - 1),
               f.master_addr.c_str(), static_cast<long long>(f.master_port));
  if (Status s = serve_tensor_parallel_ranks(**model); !s.ok()) return fail(s);
  std::fprintf(stderr, "llmserve: node %lld: node 0's engine ended\n", static_cast<long long>(f.node_rank));
  return 0;
}

StatusOr<LoadedModel> load_model_from_flags(const ModelFlags &flags, bool need_tokenizer) {
  RETURN_IF_ERROR(check_model_flags(flags));
  if (flags.node_rank > 0) {
    return invalid_argument("--node-rank " + std::to_string(flags.node_rank) +
                            ": nodes other than 0 run `llmserve serve` (they follow node 0's engine)");
  }
  ModelFlags f = flags;
  RETURN_IF_ERROR(resolve_model_flags(&f));  // a no-op for local paths (and for flags resolved already)
  if (f.num_threads > 0) ThreadPool::set_global_num_threads(static_cast<int>(f.num_threads));
  const ModelLoadOptions options = model_load_options(f);
  LoadedModel out;
  if (f.model.empty() && f.config_file.empty()) {
    std::fprintf(stderr,
                 "llmserve: no --model given; running the built-in default (a "
                 "tiny Llama with random "
                 "weights and a byte-level tokenizer), so the text is noise\n");
    ASSIGN_OR_RETURN(ModelConfig config, parse_model_config(nlohmann::json::parse(builtin_default_config_json())));
    ModelLoadOptions dummy = options;
    dummy.load_format = LoadFormat::kDummy;
    ASSIGN_OR_RETURN(out.model, load_parallel_model("", dummy, to_parallel_config(f), &config));
    ASSIGN_OR_RETURN(out.tokenizer, Tokenizer::from_json(builtin_default_tokenizer_json()));
    out.builtin_default = true;
    return out;
  }
  if (!f.config_file.empty()) {
    ASSIGN_OR_RETURN(ModelConfig config, load_model_config(f.config_file));
    ASSIGN_OR_RETURN(out.model, load_parallel_model(f.model, options, to_parallel_config(f), &config));
  } else {
    ASSIGN_OR_RETURN(out.model, load_parallel_model(f.model, options, to_parallel_config(f)));
  }
  ASSIGN_OR_RETURN(out.tokenizer, load_tokenizer_from_flags(f, need_tokenizer));
  // Ids the tokenizer can produce must index the model's embedding: caught at load, not by every request.
  const int64_t vocab = out.model->config().vocab_size;
  if (out.tokenizer && out.tokenizer->vocab_size() > vocab) {
    return invalid_argument("the tokenizer" + (f.tokenizer.empty() ? std::string() : " " + f.tokenizer) +
                            " has ids up to " + std::to_string(out.tokenizer->vocab_size() - 1) +
                            ", beyond the model's vocab_size " + std::to_string(vocab) +
                            " (config.json): they belong to another model");
  }
  return out;
}

StatusOr<std::unique_ptr<Tokenizer>> load_tokenizer_from_flags(const ModelFlags &f, bool need_tokenizer) {
  if (f.model.empty() && f.config_file.empty()) return Tokenizer::from_json(builtin_default_tokenizer_json());
  const std::string tok_dir = f.tokenizer.empty() ? f.model : f.tokenizer;
  if (!tok_dir.empty() &&
      (need_tokenizer || std::filesystem::exists(std::filesystem::path(tok_dir) / "tokenizer.json"))) {
    TokenizerPipeline pipeline;
    if (!parse_tokenizer_pipeline(f.tokenizer_pipeline, &pipeline)) {
      return invalid_argument("--tokenizer-pipeline '" + f.tokenizer_pipeline +
                              "': expected transformers or tokenizers");
    }
    return Tokenizer::from_dir(tok_dir, pipeline);
  }
  if (need_tokenizer) return invalid_argument("--tokenizer: a tokenizer directory is needed for text prompts");
  return std::unique_ptr<Tokenizer>();
}

std::vector<std::string> to_args(const ModelFlags &f) {
  std::vector<std::string> a;
  // --name=value: a value such as "-1" must not read as a flag.
  auto add = [&a](const char *name, const std::string &value) {
    if (!value.empty()) a.push_back(std::string(name) + "=" + value);
  };
  add("--model", f.model);
  add("--tokenizer", f.tokenizer);
  add("--tokenizer-pipeline", f.tokenizer_pipeline);
  add("--config", f.config_file);
  add("--load-format", f.load_format);
  add("--dtype", f.dtype);
  add("--device", f.device);
  add("--seed", std::to_string(f.seed));
  add("--num-threads", std::to_string(f.num_threads));
  add("--quantization", f.quantization);
  add("--tensor-parallel-size", std::to_string(f.tensor_parallel_size));
  add("--nnodes", std::to_string(f.nnodes));
  add("--node-rank", std::to_string(f.node_rank));
  add("--master-addr", f.master_addr);
  add("--master-port", std::to_string(f.master_port));
  return a;
}

std::vector<std::string> to_args(const EngineFlags &f) {
  std::vector<std::string> a = {"--max-model-len=" + std::to_string(f.max_model_len),
                                "--max-num-seqs=" + std::to_string(f.max_num_seqs),
                                "--max-num-batched-tokens=" + std::to_string(f.max_num_batched_tokens),
                                "--block-size=" + std::to_string(f.block_size),
                                "--kv-cache-tokens=" + std::to_string(f.kv_cache_tokens),
                                "--gpu-memory-utilization=" + std::to_string(f.gpu_memory_utilization),
                                "--scheduling-policy=" + f.scheduling_policy,
                                f.enable_prefix_caching ? "--enable-prefix-caching" : "--no-enable-prefix-caching",
                                "--cuda-graph-mode=" + f.cuda_graph_mode,
                                "--cuda-graph-capture-sizes=" + f.cuda_graph_capture_sizes,
                                "--compilation-config=" + f.compilation_config,
                                f.enforce_eager ? "--enforce-eager" : "--no-enforce-eager"};
  if (f.async_scheduling) a.push_back(*f.async_scheduling ? "--async-scheduling" : "--no-async-scheduling");
  return a;
}

namespace {

Status check_vllm_compat_flags(const VllmCompatFlags &v) {
  const std::pair<const char *, const std::optional<int64_t> *> sizes[] = {
      {"pipeline-parallel-size", &v.pipeline_parallel_size}, {"data-parallel-size", &v.data_parallel_size}};
  for (const auto &[name, size] : sizes) {
    if (!*size) continue;
    if (**size < 1) return invalid_argument(std::string("--") + name + " must be at least 1");
    if (**size > 1) {
      return invalid_argument(std::string("--") + name + " " + std::to_string(**size) +
                              ": not built yet (--tensor-parallel-size spreads one engine over several devices)");
    }
  }
  if (v.kv_cache_dtype != "auto") {
    if (v.kv_cache_dtype.rfind("fp8", 0) == 0) {
      return invalid_argument("--kv-cache-dtype " + v.kv_cache_dtype +
                              ": an FP8 KV cache is not built yet (auto: the model's dtype)");
    }
    return invalid_argument("--kv-cache-dtype '" + v.kv_cache_dtype + "': expected auto");
  }
  if (v.enable_auto_tool_choice || !v.tool_call_parser.empty()) {
    const char *flag = v.enable_auto_tool_choice ? "--enable-auto-tool-choice" : "--tool-call-parser";
    return invalid_argument(std::string(flag) + ": tool calls are parsed by `llmserve serve` only; this command "
                            "does not parse them");
  }
  if (v.pipeline_parallel_size || v.data_parallel_size || v.trust_remote_code) {
    LOG(INFO) << "vLLM flags accepted, changing nothing here: parallel sizes of 1 are the only setting; "
                 "--trust-remote-code has nothing to trust (no checkpoint code runs)";
  }
  return ok_status();
}

}  // namespace

Status check_engine_flags(const EngineFlags &f) {
  if (f.max_model_len < 0) return invalid_argument("--max-model-len must be positive (default: the model's)");
  if (f.max_num_seqs < 1) return invalid_argument("--max-num-seqs must be at least 1");
  if (f.max_num_batched_tokens < 1) return invalid_argument("--max-num-batched-tokens must be at least 1");
  if (f.block_size < 1 || f.block_size > 256) return invalid_argument("--block-size must be in [1, 256]");
  if (f.kv_cache_tokens < 0) return invalid_argument("--kv-cache-tokens must be positive (default: sized by memory)");
  if (!(f.gpu_memory_utilization > 0 && f.gpu_memory_utilization <= 1)) {
    return invalid_argument("--gpu-memory-utilization must be in (0, 1]");
  }
  if (f.scheduling_policy != "fcfs" && f.scheduling_policy != "priority") {
    return invalid_argument("--scheduling-policy '" + f.scheduling_policy + "': expected fcfs or priority");
  }
  RETURN_IF_ERROR(check_vllm_compat_flags(f.vllm));
  return resolve_cuda_graph_flags(f).status();
}

EngineArgs to_engine_args(const EngineFlags &f, const ModelFlags &m) {
  EngineArgs a;
  a.max_model_len = f.max_model_len;
  a.max_num_seqs = static_cast<int32_t>(std::clamp<int64_t>(f.max_num_seqs, 0, INT32_MAX));
  a.max_num_batched_tokens = f.max_num_batched_tokens;
  a.block_size = static_cast<int32_t>(std::clamp<int64_t>(f.block_size, 0, INT32_MAX));
  a.num_kv_cache_tokens = f.kv_cache_tokens;
  a.gpu_memory_utilization = f.gpu_memory_utilization;
  a.enable_prefix_caching = f.enable_prefix_caching;
  a.scheduling_policy = f.scheduling_policy == "priority" ? SchedulingPolicy::kPriority : SchedulingPolicy::kFcfs;
  a.seed = static_cast<uint64_t>(std::max<int64_t>(0, m.seed));
  // check_engine_flags ran first; invalid CUDA-graph flags never get here.
  StatusOr<CudaGraphFlags> graphs = resolve_cuda_graph_flags(f);
  CHECK(graphs.ok()) << graphs.status().message();
  a.cuda_graph_mode = graphs->mode;
  a.cuda_graph_capture_sizes = graphs->capture_sizes;
  a.async_scheduling = f.async_scheduling;
  return a;
}

}  // namespace llmserve::cli
