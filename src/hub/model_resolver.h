// --model / --tokenizer as vLLM takes them: an existing local folder or file as it is; otherwise a Hugging Face
// model id, looked up in the Hub cache and, when absent and HF_HUB_OFFLINE is not set, downloaded into it.
#pragma once

#include <string>

#include "core/status.h"

namespace llmserve::hub {

struct ResolveOptions {
  std::string revision = "main";  // --revision: a branch, tag or commit sha
  bool progress = true;           // download progress on stderr
};

// The local folder (or file) for `name`. Environment: HF_HUB_CACHE / HF_HOME (the cache), HF_ENDPOINT,
// HF_TOKEN, HF_HUB_OFFLINE. NotFound names the path and the id looked for; download errors name the file.
StatusOr<std::string> resolve_model_path(const std::string& name, const ResolveOptions& options);

}  // namespace llmserve::hub
