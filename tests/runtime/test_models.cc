// Test helpers: fixture discovery and model loading.
#include "test_models.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>

namespace llmserve::testing {

std::string fixtures_dir() { return "tests/fixtures/models"; }

std::vector<std::string> fixture_model_names() {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(fixtures_dir())) {
    if (std::filesystem::exists(entry.path() / "expected.json")) names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string testdata_dir() {
  const char* env = std::getenv("LLMSERVE_TESTDATA");
  return env != nullptr ? env : "../shared/testdata";
}

std::unique_ptr<CausalLM> load_model_or_die(const std::string& dir) {
  StatusOr<std::unique_ptr<CausalLM>> model = load_model(dir, ModelLoadOptions{});
  CHECK(model.ok()) << dir << ": " << model.status().to_string();
  return std::move(*model);
}

}  // namespace llmserve::testing
