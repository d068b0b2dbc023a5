// Parsing and arithmetic of the CUDA-graph settings (see cuda_graph_config.h).
#include "runtime/cuda_graph_config.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "core/logging.h"

namespace llmserve {
namespace {

struct ModeName {
  CudaGraphMode mode;
  std::string_view name;
};
constexpr ModeName kModeNames[] = {{CudaGraphMode::kNone, "none"},
                                   {CudaGraphMode::kPiecewise, "piecewise"},
                                   {CudaGraphMode::kFull, "full"},
                                   {CudaGraphMode::kFullDecodeOnly, "full_decode_only"},
                                   {CudaGraphMode::kFullAndPiecewise, "full_and_piecewise"}};

}  // namespace

StatusOr<CudaGraphMode> parse_cuda_graph_mode(std::string_view text, std::string_view flag) {
  std::string lower(text);
  for (char &c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const ModeName &m : kModeNames) {
    if (lower == m.name) return m.mode;
  }
  return invalid_argument(std::string(flag) + " '" + std::string(text) +
                          "': expected none, piecewise, full, full_decode_only or full_and_piecewise");
}

std::string_view cuda_graph_mode_name(CudaGraphMode mode) {
  for (const ModeName &m : kModeNames) {
    if (m.mode == mode) return m.name;
  }
  return "?";
}

bool captures_full_decode(CudaGraphMode mode) {
  return mode == CudaGraphMode::kFull || mode == CudaGraphMode::kFullDecodeOnly ||
         mode == CudaGraphMode::kFullAndPiecewise;
}

std::vector<int64_t> default_capture_sizes(int64_t max_num_seqs, int64_t max_num_batched_tokens) {
  const int64_t largest = std::min<int64_t>(2 * max_num_seqs, 512);
  std::vector<int64_t> sizes = {1, 2, 4};
  for (int64_t s = 8; s < 256; s += 8) sizes.push_back(s);
  for (int64_t s = 256; s <= largest; s += 16) sizes.push_back(s);
  return resolve_capture_sizes(sizes, max_num_seqs, max_num_batched_tokens);
}

std::vector<int64_t> resolve_capture_sizes(const std::vector<int64_t> &requested, int64_t max_num_seqs,
                                           int64_t max_num_batched_tokens) {
  if (requested.empty()) return default_capture_sizes(max_num_seqs, max_num_batched_tokens);
  const int64_t cap = std::min(max_num_seqs, max_num_batched_tokens);
  std::vector<int64_t> sizes;
  for (int64_t s : requested) {
    if (s >= 1 && s <= cap) sizes.push_back(s);
  }
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  return sizes;
}

StatusOr<std::vector<int64_t>> parse_capture_sizes(std::string_view text, std::string_view flag) {
  std::vector<int64_t> sizes;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string item(text.substr(start, comma - start));
    char *end = nullptr;
    const long long v = item.empty() ? 0 : std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < 1) {
      return invalid_argument(std::string(flag) + " '" + std::string(text) +
                              "': expected a comma-separated list of batch sizes >= 1");
    }
    sizes.push_back(v);
    start = comma + 1;
  }
  return sizes;
}

StatusOr<CompilationConfig> parse_compilation_config(std::string_view json) {
  const nlohmann::json j = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return invalid_argument("--compilation-config: expected a JSON object such as {\"cudagraph_mode\": \"full\"}");
  }
  CompilationConfig c;
  for (const auto &[key, value] : j.items()) {
    if (key == "cudagraph_mode") {
      if (!value.is_string()) return invalid_argument("--compilation-config: cudagraph_mode must be a string");
      ASSIGN_OR_RETURN(c.mode, parse_cuda_graph_mode(value.get<std::string>(), "--compilation-config cudagraph_mode"));
      c.has_mode = true;
    } else if (key == "cudagraph_capture_sizes") {
      if (!value.is_array()) return invalid_argument("--compilation-config: cudagraph_capture_sizes must be a list");
      for (const nlohmann::json &v : value) {
        if (!v.is_number_integer() || v.get<int64_t>() < 1) {
          return invalid_argument("--compilation-config: cudagraph_capture_sizes holds " + v.dump() +
                                  ", not a batch size >= 1");
        }
        c.capture_sizes.push_back(v.get<int64_t>());
      }
      if (c.capture_sizes.empty()) return invalid_argument("--compilation-config: cudagraph_capture_sizes is empty");
    } else {
      return invalid_argument("--compilation-config: unknown key '" + key +
                              "' (supported: cudagraph_mode, cudagraph_capture_sizes)");
    }
  }
  return c;
}

CudaGraphPadding::CudaGraphPadding(std::vector<int64_t> sorted_sizes) : sizes_(std::move(sorted_sizes)) {
  CHECK(std::is_sorted(sizes_.begin(), sizes_.end())) << "capture sizes must be ascending";
  const int64_t largest = sizes_.empty() ? 0 : sizes_.back();
  table_.assign(static_cast<size_t>(largest + 1), 0);
  size_t next = 0;
  for (int64_t n = 1; n <= largest; ++n) {
    while (sizes_[next] < n) ++next;
    table_[static_cast<size_t>(n)] = sizes_[next];
  }
}

int64_t CudaGraphPadding::padded_size(int64_t n) const {
  return n >= 1 && n < static_cast<int64_t>(table_.size()) ? table_[static_cast<size_t>(n)] : 0;
}

}  // namespace llmserve
