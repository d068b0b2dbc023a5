// Tensor views and copies; device allocation (CPU aligned; CUDA through the caching allocator when built with CUDA).
#include "core/tensor.h"

#include <cstdlib>
#include <sstream>

#ifdef LLMSERVE_WITH_CUDA
#include <cuda_runtime_api.h>

#include "core/cuda_allocator.h"
#include "core/cuda_stream.h"
#endif

namespace llmserve {

std::string Device::to_string() const { return type == DeviceType::kCPU ? "cpu" : "cuda:" + std::to_string(index); }

std::shared_ptr<void> allocate_bytes(Device device, size_t bytes) {
  size_t rounded = (bytes + 63) / 64 * 64;
  if (rounded == 0) rounded = 64;
  if (device.is_cpu()) {
    void* p = std::aligned_alloc(64, rounded);
    CHECK(p != nullptr) << "out of host memory allocating " << bytes << " bytes";
    return std::shared_ptr<void>(p, [](void* q) { std::free(q); });
  }
#ifdef LLMSERVE_WITH_CUDA
  return cuda::allocate_device(device.index, rounded);
#else
  LOG(FATAL) << "this build has no CUDA support; cannot allocate on " << device.to_string();
  return nullptr;
#endif
}

std::string shape_to_string(const Shape& shape) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << ']';
  return os.str();
}

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size());
  int64_t s = 1;
  for (int i = static_cast<int>(shape.size()) - 1; i >= 0; --i) {
    strides[i] = s;
    s *= shape[i];
  }
  return strides;
}

Tensor Tensor::empty(Shape shape, DType dtype, Device device) {
  Tensor t;
  t.dtype_ = dtype;
  t.device_ = device;
  t.shape_ = std::move(shape);
  t.strides_ = contiguous_strides(t.shape_);
  for (int64_t d : t.shape_) CHECK_GE(d, 0) << "negative dimension in " << shape_to_string(t.shape_);
  t.storage_ = allocate_bytes(device, t.nbytes());
  t.data_ = t.storage_.get();
  return t;
}

Tensor Tensor::zeros(Shape shape, DType dtype, Device device) {
  Tensor t = empty(std::move(shape), dtype, device);
  if (device.is_cpu()) {
    std::memset(t.data_, 0, t.nbytes());
    return t;
  }
#ifdef LLMSERVE_WITH_CUDA
  cuda::check_cuda(cudaMemsetAsync(t.data_, 0, t.nbytes(), cuda::current_stream()), "cudaMemsetAsync");
#endif
  return t;
}

Tensor Tensor::empty_pinned(Shape shape, DType dtype) {
#ifdef LLMSERVE_WITH_CUDA
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.strides_ = contiguous_strides(t.shape_);
  for (int64_t d : t.shape_) CHECK_GE(d, 0) << "negative dimension in " << shape_to_string(t.shape_);
  t.storage_ = cuda::allocate_pinned(t.nbytes());
  t.data_ = t.storage_.get();
  return t;
#else
  return empty(std::move(shape), dtype);
#endif
}

Tensor Tensor::from_blob(void* data, Shape shape, DType dtype, std::shared_ptr<void> keep_alive, Device device) {
  Tensor t;
  t.dtype_ = dtype;
  t.device_ = device;
  t.shape_ = std::move(shape);
  t.strides_ = contiguous_strides(t.shape_);
  t.storage_ = std::move(keep_alive);
  t.data_ = data;
  return t;
}

Tensor Tensor::from_f32(const std::vector<float>& values, Shape shape, DType dtype) {
  Tensor t = empty(std::move(shape), dtype);
  CHECK_EQ(static_cast<size_t>(t.numel()), values.size());
  if (!values.empty()) convert_elements(values.data(), DType::kF32, t.data_, dtype, values.size());
  return t;
}

Tensor Tensor::from_i32(const std::vector<int32_t>& values, Shape shape) {
  Tensor t = empty(std::move(shape), DType::kI32);
  CHECK_EQ(static_cast<size_t>(t.numel()), values.size());
  if (!values.empty()) std::memcpy(t.data_, values.data(), values.size() * 4);  // data() may be null
  return t;
}

Tensor Tensor::from_i64(const std::vector<int64_t>& values, Shape shape) {
  Tensor t = empty(std::move(shape), DType::kI64);
  CHECK_EQ(static_cast<size_t>(t.numel()), values.size());
  if (!values.empty()) std::memcpy(t.data_, values.data(), values.size() * 8);
  return t;
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape_) n *= d;
  return n;
}

bool Tensor::is_contiguous() const { return strides_ == contiguous_strides(shape_); }

int Tensor::normalize_dim(int i) const {
  int d = i < 0 ? i + dim() : i;
  CHECK(d >= 0 && d < dim()) << "dimension " << i << " out of range for " << to_string();
  return d;
}

Tensor Tensor::view(Shape shape) const {
  CHECK(is_contiguous()) << "view() of a non-contiguous " << to_string();
  int64_t known = 1;
  int infer = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      CHECK_EQ(infer, -1) << "view() with two -1 dimensions";
      infer = static_cast<int>(i);
    } else {
      known *= shape[i];
    }
  }
  if (infer >= 0) shape[infer] = known == 0 ? 0 : numel() / known;
  Tensor t = *this;
  t.shape_ = std::move(shape);
  t.strides_ = contiguous_strides(t.shape_);
  CHECK_EQ(t.numel(), numel()) << "view " << shape_to_string(t.shape_) << " of " << to_string();
  return t;
}

Tensor Tensor::slice(int d, int64_t start, int64_t end) const {
  int k = normalize_dim(d);
  CHECK(0 <= start && start <= end && end <= shape_[k]) << "slice [" << start << ", " << end << ") of " << to_string();
  Tensor t = *this;
  t.shape_[k] = end - start;
  t.data_ = static_cast<char*>(data_) + start * strides_[k] * static_cast<int64_t>(dtype_size(dtype_));
  return t;
}

Tensor Tensor::select(int d, int64_t index) const {
  int k = normalize_dim(d);
  Tensor t = slice(k, index, index + 1);
  t.shape_.erase(t.shape_.begin() + k);
  t.strides_.erase(t.strides_.begin() + k);
  return t;
}

Tensor Tensor::as_strided(Shape shape, Shape strides) const {
  CHECK_EQ(shape.size(), strides.size()) << "as_strided: shape " << shape_to_string(shape) << " vs strides "
                                         << shape_to_string(strides);
  int64_t last = 0;  // largest element offset the view reaches
  for (size_t i = 0; i < shape.size(); ++i) {
    CHECK(shape[i] >= 0 && strides[i] >= 0) << "as_strided: negative size or stride";
    if (shape[i] > 0) last += (shape[i] - 1) * strides[i];
  }
  int64_t own_last = 0;
  for (int i = 0; i < dim(); ++i) {
    if (shape_[i] > 0) own_last += (shape_[i] - 1) * strides_[i];
  }
  CHECK(numel() == 0 || last <= own_last) << "as_strided " << shape_to_string(shape) << " reaches past " << to_string();
  Tensor t = *this;
  t.shape_ = std::move(shape);
  t.strides_ = std::move(strides);
  return t;
}

Tensor Tensor::transpose(int d0, int d1) const {
  Tensor t = *this;
  int a = normalize_dim(d0), b = normalize_dim(d1);
  std::swap(t.shape_[a], t.shape_[b]);
  std::swap(t.strides_[a], t.strides_[b]);
  return t;
}

namespace {

// Rows of a row-strided tensor: (number of rows, bytes per row, row pitch in bytes). CHECKs the layout.
struct RowLayout {
  size_t rows, row_bytes, pitch;
};

RowLayout row_layout(const Tensor& t) {
  const size_t es = dtype_size(t.dtype());
  if (t.dim() == 0) return {1, es, es};
  int64_t inner = 1;
  for (int d = t.dim() - 1; d >= 1; --d) {
    CHECK(t.size(d) <= 1 || t.stride(d) == inner)
        << "device copy of " << t.to_string() << ": must be contiguous past its first dimension";
    inner *= t.size(d);
  }
  const size_t rows = static_cast<size_t>(t.size(0));
  const size_t pitch = rows <= 1 ? static_cast<size_t>(inner) * es : static_cast<size_t>(t.stride(0)) * es;
  return {rows, static_cast<size_t>(inner) * es, pitch};
}

}  // namespace

void Tensor::copy_from(const Tensor& src) {
  CHECK(shape_ == src.shape_) << "copy_from " << src.to_string() << " into " << to_string();
  if (!device_.is_cpu() || !src.device_.is_cpu()) {
#ifdef LLMSERVE_WITH_CUDA
    CHECK(dtype_ == src.dtype_) << "device copy_from " << src.to_string() << " into " << to_string()
                                << ": dtypes differ";
    if (numel() == 0) return;
    const RowLayout d = row_layout(*this), s = row_layout(src);
    cudaStream_t stream = cuda::current_stream();
    cuda::check_cuda(
        cudaMemcpy2DAsync(data_, d.pitch, src.data_, s.pitch, d.row_bytes, d.rows, cudaMemcpyDefault, stream),
        "cudaMemcpy2DAsync");
    if (device_.is_cpu()) cuda::check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    return;
#else
    LOG(FATAL) << "this build has no CUDA support; cannot copy " << src.to_string() << " into " << to_string();
#endif
  }
  if (is_contiguous() && src.is_contiguous()) {
    convert_elements(src.data_, src.dtype_, data_, dtype_, static_cast<size_t>(numel()));
    return;
  }
  // Generic strided walk, one element at a time over a multi-index.
  const int64_t n = numel();
  std::vector<int64_t> index(shape_.size(), 0);
  const size_t ss = dtype_size(src.dtype_), ds = dtype_size(dtype_);
  for (int64_t e = 0; e < n; ++e) {
    int64_t so = 0, doff = 0;
    for (size_t i = 0; i < index.size(); ++i) {
      so += index[i] * src.strides_[i];
      doff += index[i] * strides_[i];
    }
    convert_elements(static_cast<const char*>(src.data_) + so * ss, src.dtype_, static_cast<char*>(data_) + doff * ds,
                     dtype_, 1);
    for (int i = static_cast<int>(index.size()) - 1; i >= 0; --i) {
      if (++index[i] < shape_[i]) break;
      index[i] = 0;
    }
  }
}

Tensor Tensor::to(DType dtype) const {
  Tensor t = empty(shape_, dtype);
  t.copy_from(*this);
  return t;
}

Tensor Tensor::to(Device device) const {
  Tensor t = empty(shape_, dtype_, device);
  t.copy_from(*this);
  return t;
}

Tensor Tensor::contiguous() const { return is_contiguous() ? *this : clone(); }

void Tensor::fill(float value) {
  CHECK(device_.is_cpu() && is_contiguous()) << "fill on " << to_string();
  const int64_t n = numel();
  if (dtype_ == DType::kF32) {
    float* p = data<float>();
    for (int64_t i = 0; i < n; ++i) p[i] = value;
    return;
  }
  const size_t es = dtype_size(dtype_);
  for (int64_t i = 0; i < n; ++i) convert_elements(&value, DType::kF32, static_cast<char*>(data_) + i * es, dtype_, 1);
}

std::string Tensor::to_string() const {
  return "Tensor(" + std::string(dtype_name(dtype_)) + ", " + shape_to_string(shape_) + ", " + device_.to_string() +
         ")";
}

}  // namespace llmserve
