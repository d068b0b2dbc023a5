// Tensor: a typed, strided view (shape, strides in elements, byte offset) over shared storage on a device.
// Storage is owned (allocated here, freed with the last reference) or borrowed (caller keeps it alive,
// e.g. an mmapped safetensors file, expressed by a keep-alive handle).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/logging.h"

namespace llmserve {

enum class DeviceType : uint8_t { kCPU, kCUDA };

struct Device {
  DeviceType type = DeviceType::kCPU;
  int index = 0;

  static Device cpu() { return {DeviceType::kCPU, 0}; }
  static Device cuda(int index = 0) { return {DeviceType::kCUDA, index}; }
  bool is_cpu() const { return type == DeviceType::kCPU; }
  bool operator==(const Device& o) const { return type == o.type && index == o.index; }
  std::string to_string() const;
};

// Allocates `bytes` on `device` (64-byte aligned on CPU; on CUDA through the caching allocator of
// core/cuda_allocator.h, for use on the calling thread's current stream); aborts when memory is exhausted.
std::shared_ptr<void> allocate_bytes(Device device, size_t bytes);

using Shape = std::vector<int64_t>;
std::string shape_to_string(const Shape& shape);

class Tensor {
 public:
  Tensor() = default;

  // New contiguous tensor; contents uninitialised.
  static Tensor empty(Shape shape, DType dtype, Device device = Device::cpu());
  static Tensor zeros(Shape shape, DType dtype, Device device = Device::cpu());
  // New contiguous CPU tensor in page-locked memory (CUDA builds; plain memory otherwise): the source or
  // destination of asynchronous host<->device copies.
  static Tensor empty_pinned(Shape shape, DType dtype);
  // Borrowed contiguous view of `data`; `keep_alive` (may be null) is held as long as any view exists.
  static Tensor from_blob(void* data, Shape shape, DType dtype, std::shared_ptr<void> keep_alive = nullptr,
                          Device device = Device::cpu());
  // CPU tensor holding a copy of `values` converted to dtype.
  static Tensor from_f32(const std::vector<float>& values, Shape shape, DType dtype = DType::kF32);
  static Tensor from_i32(const std::vector<int32_t>& values, Shape shape);
  static Tensor from_i64(const std::vector<int64_t>& values, Shape shape);

  bool defined() const { return storage_ != nullptr || data_ != nullptr; }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  int dim() const { return static_cast<int>(shape_.size()); }
  // Size / stride of dimension i; negative i counts from the end.
  int64_t size(int i) const { return shape_[normalize_dim(i)]; }
  int64_t stride(int i) const { return strides_[normalize_dim(i)]; }
  int64_t numel() const;
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  bool is_contiguous() const;

  void* raw_data() const { return data_; }
  template <typename T>
  T* data() const {
    return static_cast<T*>(data_);
  }

  // Views sharing storage.
  Tensor view(Shape shape) const;                            // contiguous only; one dim may be -1
  Tensor slice(int dim, int64_t start, int64_t end) const;   // [start, end) along dim
  Tensor select(int dim, int64_t index) const;               // drops dim
  Tensor transpose(int d0, int d1) const;
  // A view with the given shape and strides (in elements) over the same data pointer; the caller guarantees that
  // it stays inside this tensor's elements (e.g. [n, heads, head_dim] over a column slice of a fused projection).
  Tensor as_strided(Shape shape, Shape strides) const;

  // Copies (always contiguous).
  Tensor contiguous() const;
  Tensor to(DType dtype) const;  // CPU: converted copy (copy even when dtype matches)
  // Same dtype on `device` (a copy even when already there). To the host it waits for the copy (the caller reads
  // the result next); to a device it is ordered on the current stream.
  Tensor to(Device device) const;
  Tensor clone() const { return device_.is_cpu() ? to(dtype_) : to(device_); }
  // Copies `src` (same shape) into this tensor. Both on CPU: any layouts, converting dtype. Otherwise (host<->
  // device or device<->device): same dtype, both row-strided (dimension 0 any stride, the rest contiguous), one
  // cudaMemcpy2DAsync on the current stream; when the destination is on the host the stream is synchronised.
  void copy_from(const Tensor& src);
  // Fills every element with `value` (CPU).
  void fill(float value);

  std::string to_string() const;  // "Tensor(bf16, [2, 3], cpu)"

 private:
  int normalize_dim(int i) const;

  std::shared_ptr<void> storage_;
  void* data_ = nullptr;
  DType dtype_ = DType::kF32;
  Device device_;
  Shape shape_;
  Shape strides_;
};

Shape contiguous_strides(const Shape& shape);

}  // namespace llmserve
