// Downloads a model's files from the Hugging Face Hub (or any server speaking its HTTP API: HF_ENDPOINT) into the
// Hub cache, as huggingface_hub does: blobs named by their ETag, verified against it (SHA-256 for LFS files, git's
// blob SHA-1 for the rest), resumed with Range requests after a broken transfer, snapshot links and refs written last.
#pragma once

#include <string>

#include "core/status.h"

namespace llmserve::hub {

struct DownloadOptions {
  std::string endpoint = "https://huggingface.co";  // HF_ENDPOINT
  std::string token;                                // HF_TOKEN: "Authorization: Bearer" (gated and private repos)
  std::string cache;                                // cache_dir()
  bool progress = true;                             // a progress line per file on stderr
};

// Whether this build can download (libcurl and OpenSSL were found).
bool download_supported();

// The files a model needs (every *.json, *.safetensors and *.jinja of the revision) into the cache; returns the
// snapshot folder. NotFound for an unknown repo, revision or file; Unauthenticated for a gated or private repo
// without a valid token; DataLoss for a checksum mismatch; Unavailable for network failures.
StatusOr<std::string> download_snapshot(const std::string& repo_id, const std::string& revision,
                                        const DownloadOptions& options);

}  // namespace llmserve::hub
