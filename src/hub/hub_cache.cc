// Cache paths and lookups of hub_cache.h; nothing here touches the network.
#include "hub/hub_cache.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace llmserve::hub {
namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}

bool is_part(std::string_view p) {
  if (p.empty() || p.front() == '-' || p.front() == '.' || p.back() == '-' || p.back() == '.') return false;
  if (p.find("..") != std::string_view::npos || p.find("--") != std::string_view::npos) return false;
  for (char c : p) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
                    c == '_' || c == '.';
    if (!ok) return false;
  }
  return true;
}

}  // namespace

std::string cache_dir() {
  if (std::string v = env("HF_HUB_CACHE"); !v.empty()) return v;
  if (std::string v = env("HF_HOME"); !v.empty()) return v + "/hub";
  if (std::string v = env("XDG_CACHE_HOME"); !v.empty()) return v + "/huggingface/hub";
  return env("HOME") + "/.cache/huggingface/hub";
}

bool is_repo_id(std::string_view s) {
  if (s.empty() || s.size() > 96) return false;
  const size_t slash = s.find('/');
  if (slash == std::string_view::npos) return is_part(s);
  return s.find('/', slash + 1) == std::string_view::npos && is_part(s.substr(0, slash)) &&
         is_part(s.substr(slash + 1));
}

std::string repo_folder(const std::string& cache, const std::string& repo_id) {
  std::string name = "models--" + repo_id;
  for (size_t p = name.find('/'); p != std::string::npos; p = name.find('/', p + 2)) name.replace(p, 1, "--");
  return cache + "/" + name;
}

bool is_commit_sha(std::string_view s) {
  if (s.size() != 40) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

std::optional<std::string> cached_snapshot(const std::string& cache, const std::string& repo_id,
                                           const std::string& revision) {
  const std::string repo = repo_folder(cache, repo_id);
  std::string sha = revision;
  if (!is_commit_sha(revision)) {
    std::ifstream ref(repo + "/refs/" + revision);
    if (!ref || !std::getline(ref, sha) || !is_commit_sha(sha)) return std::nullopt;
  }
  const std::string snapshot = repo + "/snapshots/" + sha;
  std::error_code ec;
  if (!std::filesystem::exists(snapshot + "/config.json", ec)) return std::nullopt;
  return snapshot;
}

}  // namespace llmserve::hub
