// The Hub cache without a network: model-id syntax, the cache folder's environment precedence (huggingface_hub's),
// and snapshot lookups through refs/ or a commit sha (downloads are tested end to end in tests/cli/test_hub.py).
#include "hub/hub_cache.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace llmserve::hub {
namespace {

namespace fs = std::filesystem;

TEST(HubCache, ModelIdsAsTheHubSpellsThem) {
  for (const char* ok : {"Qwen/Qwen3-8B", "gpt2", "meta-llama/Llama-3.2-1B-Instruct", "org_1/m.v2"}) {
    EXPECT_TRUE(is_repo_id(ok)) << ok;
  }
  for (const char* bad : {"", "/abs/path", "a/b/c", "a//b", "./model", "../x", "org/", "/name", "a/-b", "a/b.",
                          "a--b/c", "a/b..c", "with space/x", "tests/fixtures/models/llama_gqa_f32"}) {
    EXPECT_FALSE(is_repo_id(bad)) << bad;
  }
  EXPECT_FALSE(is_repo_id(std::string(97, 'a')));
  EXPECT_EQ(repo_folder("/c", "Qwen/Qwen3-8B"), "/c/models--Qwen--Qwen3-8B");
  EXPECT_EQ(repo_folder("/c", "gpt2"), "/c/models--gpt2");
  EXPECT_TRUE(is_commit_sha(std::string(40, 'a')));
  EXPECT_FALSE(is_commit_sha(std::string(40, 'A')));
  EXPECT_FALSE(is_commit_sha("main"));
}

TEST(HubCache, CacheFolderFollowsHuggingFaceHubsEnvironment) {
  setenv("HOME", "/home/u", 1);
  unsetenv("HF_HUB_CACHE");
  unsetenv("HF_HOME");
  unsetenv("XDG_CACHE_HOME");
  EXPECT_EQ(cache_dir(), "/home/u/.cache/huggingface/hub");
  setenv("XDG_CACHE_HOME", "/xdg", 1);
  EXPECT_EQ(cache_dir(), "/xdg/huggingface/hub");
  setenv("HF_HOME", "/hf", 1);
  EXPECT_EQ(cache_dir(), "/hf/hub");
  setenv("HF_HUB_CACHE", "/hub", 1);
  EXPECT_EQ(cache_dir(), "/hub");
}

TEST(HubCache, SnapshotsAreFoundThroughRefsOrTheirSha) {
  const fs::path cache = fs::temp_directory_path() / ("hub_cache_test_" + std::to_string(::getpid()));
  fs::remove_all(cache);
  const std::string sha(40, 'c'), other(40, 'd');
  const fs::path repo = repo_folder(cache.string(), "org/m");
  fs::create_directories(repo / "refs");
  fs::create_directories(repo / "snapshots" / sha);
  EXPECT_FALSE(cached_snapshot(cache.string(), "org/m", "main"));  // no ref yet
  std::ofstream(repo / "refs" / "main") << sha;                     // huggingface_hub writes no newline
  EXPECT_FALSE(cached_snapshot(cache.string(), "org/m", "main"));  // a snapshot without config.json
  std::ofstream(repo / "snapshots" / sha / "config.json") << "{}";
  EXPECT_EQ(cached_snapshot(cache.string(), "org/m", "main"), (repo / "snapshots" / sha).string());
  EXPECT_EQ(cached_snapshot(cache.string(), "org/m", sha), (repo / "snapshots" / sha).string());
  EXPECT_FALSE(cached_snapshot(cache.string(), "org/m", other));
  EXPECT_FALSE(cached_snapshot(cache.string(), "org/m", "v2"));
  std::ofstream(repo / "refs" / "v2") << "not a sha";
  EXPECT_FALSE(cached_snapshot(cache.string(), "org/m", "v2"));
  EXPECT_FALSE(cached_snapshot(cache.string(), "org/other", "main"));
  fs::remove_all(cache);
}

}  // namespace
}  // namespace llmserve::hub
