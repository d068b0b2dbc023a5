// `llmserve bench throughput`: end-to-end offline throughput through LLMEngine
// (vLLM's benchmark_throughput).
#pragma once

#include <string>
#include <vector>

namespace llmserve::cli {

int run_bench_throughput(const std::vector<std::string> &args);

}  // namespace llmserve::cli
