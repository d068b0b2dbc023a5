// Helpers for runtime tests: locating the committed HF fixtures and the shared test data, loading models.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "model/model_registry.h"

namespace llmserve::testing {

// tests/fixtures/models (relative to the repo root, the tests' working directory).
std::string fixtures_dir();
// Names of the fixture models (sub-directories holding expected.json), sorted.
std::vector<std::string> fixture_model_names();
// $LLMSERVE_TESTDATA, else ../shared/testdata.
std::string testdata_dir();
// Loads a model directory (weights in the checkpoint dtype); aborts the test binary on error (the fixtures are ours).
std::unique_ptr<CausalLM> load_model_or_die(const std::string& dir);

}  // namespace llmserve::testing
