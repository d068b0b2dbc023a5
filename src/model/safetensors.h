// The safetensors format: an 8-byte little-endian header length N, N bytes of JSON describing every tensor
// (dtype, shape, data_offsets into the data buffer), then the data buffer. A SafetensorsFile is fully
// validated when open() returns OK, so every TensorInfo it holds lies inside the mapping and never overlaps.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"

namespace llmserve {

// Element types named by the safetensors format. Only some map to a DType; the others are recognised (so their
// byte sizes are checked) but reading them is an InvalidArgument error.
enum class SafetensorsDType : uint8_t {
  kBool,
  kU8,
  kI8,
  kI16,
  kU16,
  kF16,
  kBF16,
  kI32,
  kU32,
  kF32,
  kI64,
  kU64,
  kF64,
  kF8E4M3,
  kF8E5M2,
  kF8E8M0,
  kF4,
  kF6E2M3,
  kF6E3M2,
  kC64,
};

// "F32", "BF16", ... as written in headers.
std::string_view safetensors_dtype_name(SafetensorsDType dtype);
// Bits per element (4 and 6 for the packed sub-byte types).
int safetensors_dtype_bits(SafetensorsDType dtype);
// The safetensors name of one of our dtypes ("F32", "F8_E4M3", ...).
std::string_view safetensors_name_of(DType dtype);

struct TensorInfo {
  SafetensorsDType stored_dtype = SafetensorsDType::kF32;
  bool supported = false;     // stored_dtype maps to a DType
  DType dtype = DType::kF32;  // valid when supported
  Shape shape;
  uint64_t begin = 0;  // byte offsets into the data buffer (after the header), begin <= end
  uint64_t end = 0;
};

// Limits that keep a hostile header from exhausting memory or stack.
constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;  // the reference implementation's limit
constexpr int kMaxSafetensorsJsonDepth = 16;

class SafetensorsFile {
 public:
  // Maps `path` read-only (MAP_PRIVATE) and validates the header and every tensor entry. Errors name the file
  // and, where one is at fault, the tensor: InvalidArgument for malformed files, NotFound when
  // the file is missing.
  static StatusOr<SafetensorsFile> open(const std::string& path);

  const std::string& path() const { return path_; }
  // Tensor names, sorted.
  std::vector<std::string> names() const;
  bool contains(const std::string& name) const { return infos_.count(name) != 0; }
  // nullptr when absent.
  const TensorInfo* info(const std::string& name) const;
  const std::map<std::string, TensorInfo>& infos() const { return infos_; }
  // The "__metadata__" map (empty when absent).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // A zero-copy CPU view of tensor `name` that keeps the mapping alive. NotFound when absent; InvalidArgument
  // when its dtype has no DType, or when its bytes are not aligned to the element size (so a typed view would
  // be undefined behaviour; use read_copy()).
  StatusOr<Tensor> view(const std::string& name) const;
  // True when view(name) can succeed for a present, supported tensor.
  bool is_aligned(const TensorInfo& info) const;
  // The raw bytes of a tensor, [info.begin, info.end) of the data buffer.
  const uint8_t* bytes(const TensorInfo& info) const { return data_ + info.begin; }
  // A keep-alive handle for views of this file's bytes.
  const std::shared_ptr<void>& mapping() const { return mapping_; }

  // The data buffer inside the mapping (for zero-copy checks).
  const uint8_t* data() const { return data_; }
  uint64_t data_size() const { return data_size_; }

 private:
  SafetensorsFile() = default;
  Status parse_header(const char* header, uint64_t header_size);

  std::string path_;
  std::shared_ptr<void> mapping_;  // owns the mmap; munmaps with the last reference (file or view)
  const uint8_t* data_ = nullptr;
  uint64_t data_size_ = 0;
  std::map<std::string, TensorInfo> infos_;
  std::map<std::string, std::string> metadata_;
};

// Writes `tensors` (CPU tensors, any layout) in the given order of names but laid out by decreasing element size
// so that every tensor is aligned to its element size; the header is padded with spaces to a multiple of 8
// bytes like the reference writer's. Duplicate names, "__metadata__" as a name, and I/O failures are errors.
Status write_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                         const std::map<std::string, std::string>& metadata = {});

}  // namespace llmserve
