// resolve_model_path: local path, then the Hub cache, then a download (hub_download.h, when this build has it).
#include "hub/model_resolver.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "hub/hub_cache.h"
#include "hub/hub_download.h"

namespace llmserve::hub {
namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}

bool offline() {
  const std::string v = env("HF_HUB_OFFLINE");
  return !v.empty() && v != "0" && v != "false" && v != "False";
}

bool valid_revision(const std::string& r) {
  if (r.empty() || r.find("..") != std::string::npos || r.front() == '/') return false;
  for (char c : r) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
                    c == '_' || c == '.' || c == '/';
    if (!ok) return false;
  }
  return true;
}

}  // namespace

#ifndef LLMSERVE_WITH_HUB_DOWNLOAD
bool download_supported() { return false; }
StatusOr<std::string> download_snapshot(const std::string& repo_id, const std::string&, const DownloadOptions&) {
  return unimplemented(repo_id + " is not in the Hub cache, and this build cannot download (no libcurl)");
}
#endif

StatusOr<std::string> resolve_model_path(const std::string& name, const ResolveOptions& options) {
  std::error_code ec;
  if (name.empty() || std::filesystem::exists(name, ec)) return name;
  if (!is_repo_id(name)) return not_found(name + ": no such file or folder (nor a Hugging Face model id)");
  if (!valid_revision(options.revision)) return invalid_argument("--revision '" + options.revision + "': not a revision");
  const std::string cache = cache_dir();
  if (std::optional<std::string> snapshot = cached_snapshot(cache, name, options.revision)) return *snapshot;
  if (offline()) {
    return not_found(name + " (revision " + options.revision + ") is not in the Hub cache " + cache +
                     ", and HF_HUB_OFFLINE forbids downloading it");
  }
  DownloadOptions d;
  if (std::string e = env("HF_ENDPOINT"); !e.empty()) d.endpoint = e;
  while (!d.endpoint.empty() && d.endpoint.back() == '/') d.endpoint.pop_back();
  d.token = env("HF_TOKEN");
  d.cache = cache;
  d.progress = options.progress;
  if (options.progress && download_supported()) {
    std::fprintf(stderr, "llmserve: downloading %s (revision %s) from %s into %s\n", name.c_str(),
                 options.revision.c_str(), d.endpoint.c_str(), cache.c_str());
  }
  StatusOr<std::string> snapshot = download_snapshot(name, options.revision, d);
  if (!snapshot.ok()) return snapshot.status().with_context(name);
  return snapshot;
}

}  // namespace llmserve::hub
