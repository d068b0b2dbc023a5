// `llmserve bench serve` (vLLM's `vllm bench serve`), dispatched from `llmserve bench`; built only when Boost
// (Beast/Asio) is found, which LLMSERVE_WITH_BENCH_SERVE says.
#pragma once

#include <string>
#include <vector>

namespace llmserve::cli {

int run_bench_serve(const std::vector<std::string>& args);

}  // namespace llmserve::cli
