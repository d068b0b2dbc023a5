// WeightSource: how model code loads its weights, by name, checked against the shape it expects and returned in
// the dtype it wants. Implementations: a safetensors checkpoint (one file, sharded via an index, or several files)
// and deterministic dummy weights (--load-format dummy). Every returned Tensor is a CPU tensor that keeps its
// storage (possibly a file mapping) alive by itself.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"

namespace llmserve {

class WeightSource {
 public:
  virtual ~WeightSource() = default;
  // The tensor `name`, checked to have `shape`, as `dtype`: a zero-copy view when stored as dtype,
  // else a converted copy. NotFound / InvalidArgument errors name the file (or shard) and the tensor.
  virtual StatusOr<Tensor> get(const std::string& name, const Shape& shape, DType dtype) = 0;
  // Tensor parallelism: only [begin, end) along `dim` of the tensor `name` (checked to have the full `shape`), as
  // `dtype`, contiguous. Each rank reads and converts only its slice: a checkpoint converts just those elements
  // (a dim-0 slice in the stored dtype is a zero-copy view of its rows). Default: get() then a copy of the slice.
  virtual StatusOr<Tensor> get_slice(const std::string& name, const Shape& shape, DType dtype, int dim, int64_t begin,
                                     int64_t end);
  virtual bool contains(const std::string& name) const = 0;
  virtual std::vector<std::string> names() const = 0;  // sorted
};

// A HF model directory: model.safetensors, or model.safetensors.index.json (weight_map name -> shard file;
// every shard must exist and every mapped tensor must be in its shard), or a single *.safetensors file
// (model_dir may also be the path of a .safetensors file). A directory with several *.safetensors files and no
// index loads them all; a tensor name present in two of them is an error. Zero-copy views are read-only
// (the files are mapped PROT_READ). Float <-> integer conversions are refused (InvalidArgument).
StatusOr<std::unique_ptr<WeightSource>> open_safetensors_checkpoint(const std::string& model_dir);

// --load-format dummy: any name, any requested shape; deterministic random values from (seed, name);
// uniform in [-0.05, 0.05) except 1-D tensors whose name ends in "norm.weight", which are 1 + small noise,
// so that a dummy model produces finite, non-degenerate activations. Integer dtypes get values in [0, 16).
// contains() is true for every name; names() is empty.
std::unique_ptr<WeightSource> make_dummy_weight_source(uint64_t seed);

// Converts n contiguous elements between dtypes in parallel chunks (the loader's hot loop; exposed for tests
// and benchmarks).
void convert_elements_parallel(const void* src, DType src_dtype, void* dst, DType dst_dtype, size_t n);

}  // namespace llmserve
