// PyEngine: loading and stepping for the Python LLM class (engine_binding.h).
// Invariant: every user value reaches a Status-returning check (the CLI's) before anything is built.
#include "engine_binding.h"

#include <utility>

#ifdef LLMSERVE_PY_CUDA
#include <cuda_runtime.h>
#endif

namespace llmserve::python {

StatusOr<std::unique_ptr<PyEngine>> PyEngine::create(const cli::ModelFlags &model, const cli::EngineFlags &engine) {
  RETURN_IF_ERROR(cli::check_engine_flags(engine));
  cli::ModelFlags flags = model;
  flags.device = resolve_device(model.device);
  ASSIGN_OR_RETURN(cli::LoadedModel loaded, cli::load_model_from_flags(flags, /*need_tokenizer=*/false));
  if (loaded.builtin_default && !model.tokenizer.empty()) {
    // The CLI's built-in default always brings its own tokenizer; here an explicit one replaces it.
    ASSIGN_OR_RETURN(loaded.tokenizer, Tokenizer::from_dir(model.tokenizer));
  }
  std::unique_ptr<PyEngine> out(new PyEngine(std::move(loaded)));
  out->device_ = flags.device;
  ASSIGN_OR_RETURN(out->engine_, LLMEngine::create(*out->loaded_.model, out->loaded_.tokenizer.get(),
                                                   cli::to_engine_args(engine, flags)));
  return out;
}

StatusOr<std::vector<RequestOutput>> PyEngine::step_finished() {
  ASSIGN_OR_RETURN(std::vector<RequestOutput> outputs, engine_->step());
  std::vector<RequestOutput> finished;
  for (RequestOutput &out : outputs) {
    if (out.finished) finished.push_back(std::move(out));
  }
  return finished;
}

int64_t PyEngine::vocab_size() const { return loaded_.model->config().vocab_size; }

std::string resolve_device(const std::string &device) {
  if (device != "auto") return device;
#ifdef LLMSERVE_PY_CUDA
  int count = 0;
  if (cudaGetDeviceCount(&count) == cudaSuccess && count > 0) return "cuda";
  cudaGetLastError();  // clear the sticky "no device" error
#endif
  return "cpu";
}

}  // namespace llmserve::python
