// llmserve._C: nanobind bindings of the frontend API — SamplingParams (validated by the C++ code), the output
// structs, the tokenizer (with its chat template) and PyEngine. Invariant: a non-OK Status becomes a Python
// exception carrying its message (ValueError for bad input), and the GIL is released for loading, every engine
// step and every tokenizer call that may take long.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/variant.h>
#include <nanobind/stl/vector.h>

#include <nlohmann/json.hpp>

#include "async_binding.h"
#include "cli/builtin_default.h"
#include "engine_binding.h"
#include "tokenizer/chat_template/chat_template.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace llmserve::python {
namespace {

// Raises the Python exception for a non-OK status: ValueError for bad input (the message names the field).
void raise_if_error(const Status &status) {
  if (status.ok()) return;
  switch (status.code()) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kAlreadyExists:
    case StatusCode::kOutOfRange:
      throw nb::value_error(status.message().c_str());
    case StatusCode::kNotFound:
      PyErr_SetString(PyExc_FileNotFoundError, status.message().c_str());
      throw nb::python_error();
    default:
      throw std::runtime_error(status.message());
  }
}

template <typename T>
T value_or_raise(StatusOr<T> result) {
  raise_if_error(result.status());
  return std::move(*result);
}

void bind_sampling_params(nb::module_ &m) {
  nb::class_<StructuredOutputsParams>(m, "StructuredOutputsParams")
      .def(nb::init<>())
      .def_rw("json", &StructuredOutputsParams::json)
      .def_rw("regex", &StructuredOutputsParams::regex)
      .def_rw("choice", &StructuredOutputsParams::choice)
      .def_rw("grammar", &StructuredOutputsParams::grammar)
      .def_rw("json_object", &StructuredOutputsParams::json_object);
  nb::class_<SamplingParams>(m, "SamplingParams")
      .def(nb::init<>())
      .def_rw("n", &SamplingParams::n)
      .def_rw("temperature", &SamplingParams::temperature)
      .def_rw("top_p", &SamplingParams::top_p)
      .def_rw("top_k", &SamplingParams::top_k)
      .def_rw("min_p", &SamplingParams::min_p)
      .def_rw("seed", &SamplingParams::seed)
      .def_rw("max_tokens", &SamplingParams::max_tokens)
      .def_rw("min_tokens", &SamplingParams::min_tokens)
      .def_rw("stop", &SamplingParams::stop)
      .def_rw("stop_token_ids", &SamplingParams::stop_token_ids)
      .def_rw("ignore_eos", &SamplingParams::ignore_eos)
      .def_rw("include_stop_str_in_output", &SamplingParams::include_stop_str_in_output)
      .def_rw("presence_penalty", &SamplingParams::presence_penalty)
      .def_rw("frequency_penalty", &SamplingParams::frequency_penalty)
      .def_rw("repetition_penalty", &SamplingParams::repetition_penalty)
      .def_rw("logit_bias", &SamplingParams::logit_bias)
      .def_rw("logprobs", &SamplingParams::logprobs)
      .def_rw("prompt_logprobs", &SamplingParams::prompt_logprobs)
      .def_rw("skip_special_tokens", &SamplingParams::skip_special_tokens)
      .def_rw("spaces_between_special_tokens", &SamplingParams::spaces_between_special_tokens)
      .def_rw("structured_outputs", &SamplingParams::structured_outputs)
      .def_ro_static("max_logprobs", &SamplingParams::kMaxLogprobs)
      .def(
          "validate", [](const SamplingParams &p, int64_t vocab_size) { raise_if_error(p.validate(vocab_size)); },
          "vocab_size"_a);
}

void bind_outputs(nb::module_ &m) {
  nb::class_<TokenLogprobs>(m, "TokenLogprobs")
      .def_ro("token_ids", &TokenLogprobs::token_ids)
      .def_ro("logprobs", &TokenLogprobs::logprobs)
      .def_ro("sampled_token_rank", &TokenLogprobs::sampled_token_rank);
  nb::class_<CompletionOutput>(m, "CompletionOutput")
      .def_ro("index", &CompletionOutput::index)
      .def_ro("text", &CompletionOutput::text)
      .def_ro("token_ids", &CompletionOutput::token_ids)
      .def_ro("logprobs", &CompletionOutput::logprobs)
      .def_ro("stop_reason", &CompletionOutput::stop_reason)
      .def_ro("delta_text", &CompletionOutput::delta_text)
      .def_ro("delta_token_ids", &CompletionOutput::delta_token_ids)
      .def_prop_ro("finish_reason", [](const CompletionOutput &c) -> std::optional<std::string> {
        if (!c.finish_reason) return std::nullopt;
        return std::string(finish_reason_name(*c.finish_reason));
      });
  nb::class_<RequestOutput>(m, "RequestOutput")
      .def_ro("request_id", &RequestOutput::request_id)
      .def_ro("prompt", &RequestOutput::prompt)
      .def_ro("prompt_token_ids", &RequestOutput::prompt_token_ids)
      .def_ro("prompt_logprobs", &RequestOutput::prompt_logprobs)
      .def_ro("outputs", &RequestOutput::outputs)
      .def_ro("num_cached_tokens", &RequestOutput::num_cached_tokens)
      .def_ro("finished", &RequestOutput::finished);
}

// Renders a chat template over a JSON context (messages, add_generation_prompt, ...), given as JSON text so key
// order survives (it shows in tojson output).
std::string render_chat(const std::string &source, const std::string &context_json) {
  const nlohmann::ordered_json context = nlohmann::ordered_json::parse(context_json, nullptr, false);
  if (context.is_discarded()) throw nb::value_error("conversation: not JSON-serializable");
  ChatTemplate tmpl = value_or_raise(ChatTemplate::parse(source));
  return value_or_raise(tmpl.render(context));
}

void bind_tokenizer(nb::module_ &m) {
  nb::class_<Tokenizer>(m, "Tokenizer")
      .def_static(
          "from_dir", [](const std::string &dir) { return value_or_raise(Tokenizer::from_dir(dir)); }, "path"_a)
      .def(
          "encode",
          [](const Tokenizer &t, const std::string &text, bool add_special_tokens) {
            nb::gil_scoped_release release;
            return t.encode(text, add_special_tokens);
          },
          "text"_a, "add_special_tokens"_a = true)
      .def(
          "decode",
          [](const Tokenizer &t, const std::vector<int32_t> &ids, bool skip_special_tokens) {
            for (int32_t id : ids) {
              if (id < 0 || id >= t.vocab_size()) {
                throw nb::value_error(("token_ids: " + std::to_string(id) + " is outside the vocabulary").c_str());
              }
            }
            nb::gil_scoped_release release;
            return t.decode(ids, skip_special_tokens);
          },
          "token_ids"_a, "skip_special_tokens"_a = false)
      .def("id_to_token", &Tokenizer::id_to_token, "id"_a)
      .def(
          "token_to_id", [](const Tokenizer &t, const std::string &s) { return t.token_to_id(s); }, "token"_a)
      .def_prop_ro("vocab_size", &Tokenizer::vocab_size)
      .def_prop_ro("bos_token", &Tokenizer::bos_token)
      .def_prop_ro("eos_token", &Tokenizer::eos_token)
      .def_prop_ro("bos_token_id", &Tokenizer::bos_token_id)
      .def_prop_ro("eos_token_id", &Tokenizer::eos_token_id)
      .def(
          "chat_template", [](const Tokenizer &t, const std::string &name) { return t.chat_template(name); },
          "name"_a = "default");
  m.def("render_chat_template", &render_chat, "source"_a, "context_json"_a);
}

// LLM / AsyncEngineArgs keywords -> the CLI's flag structs (cli/engine_flags.h), so both load as the CLI does.
std::pair<cli::ModelFlags, cli::EngineFlags> to_flags(const nb::kwargs &kw) {
  auto get = [&](const char *name) { return kw[name]; };
  // Field by field, by name: a flag struct that grows keeps its defaults for what Python does not set.
  cli::ModelFlags mf;
  mf.model = nb::cast<std::string>(get("model"));
  mf.tokenizer = nb::cast<std::string>(get("tokenizer"));
  mf.load_format = nb::cast<std::string>(get("load_format"));
  mf.dtype = nb::cast<std::string>(get("dtype"));
  mf.device = nb::cast<std::string>(get("device"));
  mf.seed = nb::cast<int64_t>(get("seed"));
  mf.num_threads = nb::cast<int64_t>(get("num_threads"));
  mf.tensor_parallel_size = nb::cast<int64_t>(get("tensor_parallel_size"));
  cli::EngineFlags ef;
  ef.max_model_len = nb::cast<int64_t>(get("max_model_len"));
  ef.max_num_seqs = nb::cast<int64_t>(get("max_num_seqs"));
  ef.max_num_batched_tokens = nb::cast<int64_t>(get("max_num_batched_tokens"));
  ef.block_size = nb::cast<int64_t>(get("block_size"));
  ef.kv_cache_tokens = nb::cast<int64_t>(get("kv_cache_tokens"));
  ef.gpu_memory_utilization = nb::cast<double>(get("gpu_memory_utilization"));
  ef.enable_prefix_caching = nb::cast<bool>(get("enable_prefix_caching"));
  ef.scheduling_policy = nb::cast<std::string>(get("scheduling_policy"));
  ef.enforce_eager = nb::cast<bool>(get("enforce_eager"));
  return {mf, ef};
}

void bind_async_engine(nb::module_ &m) {
  nb::class_<PyAsyncEngine>(m, "AsyncEngine")
      .def_static("create",
                  [](const nb::kwargs &kw) {
                    auto [mf, ef] = to_flags(kw);
                    return value_or_raise([&] {
                      nb::gil_scoped_release release;
                      return PyAsyncEngine::create(mf, ef);
                    }());
                  })
      .def(
          "add_request",
          [](PyAsyncEngine &e, const std::string &id, const std::string &text, const std::vector<int32_t> &ids,
             const SamplingParams &params) {
            Status s;
            {
              nb::gil_scoped_release release;  // tokenizes the prompt
              s = e.add_request(id, PromptInput{text, ids}, params);
            }
            raise_if_error(s);
          },
          "request_id"_a, "prompt"_a, "prompt_token_ids"_a, "params"_a)
      .def("abort", &PyAsyncEngine::abort, "request_id"_a, nb::call_guard<nb::gil_scoped_release>())
      .def("fileno", &PyAsyncEngine::fileno)
      .def("drain", &PyAsyncEngine::drain)
      .def("shutdown", &PyAsyncEngine::shutdown, nb::call_guard<nb::gil_scoped_release>())
      .def_prop_ro("tokenizer", &PyAsyncEngine::tokenizer, nb::rv_policy::reference_internal);
}

void bind_engine(nb::module_ &m) {
  nb::class_<PyEngine>(m, "Engine")
      .def_static("create",
                  [](const nb::kwargs &kw) {
                    auto [mf, ef] = to_flags(kw);
                    return value_or_raise([&] {
                      nb::gil_scoped_release release;  // loading reads and converts the weights
                      return PyEngine::create(mf, ef);
                    }());
                  })
      .def(
          "add_request",
          [](PyEngine &e, const std::string &id, const std::string &text, const std::vector<int32_t> &ids,
             const SamplingParams &params) {
            raise_if_error(e.add_request(id, PromptInput{text, ids}, params));
          },
          "request_id"_a, "prompt"_a, "prompt_token_ids"_a, "params"_a)
      .def("step_finished",
           [](PyEngine &e) {
             return value_or_raise([&] {
               nb::gil_scoped_release release;
               return e.step_finished();
             }());
           })
      .def("abort", &PyEngine::abort, "request_id"_a)
      .def("has_unfinished", &PyEngine::has_unfinished)
      .def("num_unfinished", &PyEngine::num_unfinished)
      .def_prop_ro("tokenizer", &PyEngine::tokenizer, nb::rv_policy::reference_internal)
      .def_prop_ro("vocab_size", &PyEngine::vocab_size)
      .def_prop_ro("max_model_len", &PyEngine::max_model_len)
      .def_prop_ro("builtin_default", &PyEngine::builtin_default)
      .def_prop_ro("device", &PyEngine::device);
}

}  // namespace
}  // namespace llmserve::python

NB_MODULE(_C, m) {
  m.attr("__version__") = LLMSERVE_VERSION;
  // The built-in default model's tokenizer.json (tests build tokenizer directories around it).
  m.def("builtin_default_tokenizer_json", &llmserve::cli::builtin_default_tokenizer_json);
  llmserve::python::bind_sampling_params(m);
  llmserve::python::bind_outputs(m);
  llmserve::python::bind_tokenizer(m);
  llmserve::python::bind_engine(m);
  llmserve::python::bind_async_engine(m);
}
