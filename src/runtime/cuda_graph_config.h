// CUDA-graph settings with vLLM's names (cudagraph_mode, cudagraph_capture_sizes) and the pure arithmetic on them:
// parsing, the capture-size list and the batch-size -> padded-size table. Invariant: no CUDA here (CI tests it).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace llmserve {

// vLLM's CUDAGraphMode. This engine builds FULL graphs for uniform decode batches only; PIECEWISE (graphs between
// attention calls) is not built, so prefill and mixed batches run eagerly in every mode (ModelRunner logs it once).
enum class CudaGraphMode { kNone, kPiecewise, kFull, kFullDecodeOnly, kFullAndPiecewise };

// "none" | "piecewise" | "full" | "full_decode_only" | "full_and_piecewise" (case-insensitive, as vLLM's enum names
// are upper case); InvalidArgument naming `flag` otherwise.
StatusOr<CudaGraphMode> parse_cuda_graph_mode(std::string_view text, std::string_view flag);
std::string_view cuda_graph_mode_name(CudaGraphMode mode);
// Whether `mode` asks for full graphs of uniform decode batches (full, full_decode_only, full_and_piecewise).
bool captures_full_decode(CudaGraphMode mode);

// vLLM's default sizes: [1, 2, 4] + multiples of 8 below 256 + multiples of 16 from 256 up to
// min(2 x max_num_seqs, 512); then, as for explicit sizes, capped by max_num_seqs and max_num_batched_tokens.
std::vector<int64_t> default_capture_sizes(int64_t max_num_seqs, int64_t max_num_batched_tokens);
// Sorted, deduplicated, without sizes above max_num_seqs / max_num_batched_tokens (a decode batch never has more
// rows). An empty `requested` means the defaults.
std::vector<int64_t> resolve_capture_sizes(const std::vector<int64_t> &requested, int64_t max_num_seqs,
                                           int64_t max_num_batched_tokens);
// "1,2,4" -> sizes; InvalidArgument naming `flag` for a non-number or a size < 1.
StatusOr<std::vector<int64_t>> parse_capture_sizes(std::string_view text, std::string_view flag);

// What --compilation-config's JSON may set (only these keys: any other is refused, naming it).
struct CompilationConfig {
  bool has_mode = false;
  CudaGraphMode mode = CudaGraphMode::kFullAndPiecewise;
  std::vector<int64_t> capture_sizes;  // empty: not given
};
StatusOr<CompilationConfig> parse_compilation_config(std::string_view json);

// Batch size -> the capture size it is padded up to (vLLM's bs_to_padded_graph_size): the smallest size >= n, or
// 0 when n is above the largest (the batch runs eagerly).
class CudaGraphPadding {
 public:
  explicit CudaGraphPadding(std::vector<int64_t> sorted_sizes);
  int64_t padded_size(int64_t n) const;
  const std::vector<int64_t> &sizes() const { return sizes_; }

 private:
  std::vector<int64_t> sizes_;  // ascending
  std::vector<int64_t> table_;  // [0, max]: padded size of each batch size
};

}  // namespace llmserve
