// The Hugging Face Hub cache as huggingface_hub lays it out (and transformers and vLLM read it):
// <cache>/models--ORG--NAME/{refs/<branch or tag> (a commit sha), snapshots/<sha>/<file> -> ../../blobs/<etag>}.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace llmserve::hub {

// $HF_HUB_CACHE, else $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub, else $HOME/.cache/huggingface/hub.
std::string cache_dir();

// "ORG/NAME" or "NAME" as the Hub spells model ids: letters, digits, '-', '_', '.', at most one '/', no "..", no
// '-' or '.' at either end of a part, at most 96 characters.
bool is_repo_id(std::string_view s);

// <cache>/models--ORG--NAME.
std::string repo_folder(const std::string& cache, const std::string& repo_id);

// A 40-hex-digit commit sha.
bool is_commit_sha(std::string_view s);

// The snapshot folder of `revision` (a branch or tag through refs/, or a commit sha) when it is in the cache and
// holds a config.json.
std::optional<std::string> cached_snapshot(const std::string& cache, const std::string& repo_id,
                                           const std::string& revision);

}  // namespace llmserve::hub
