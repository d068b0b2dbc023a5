// ArenaPlanner / Arena: region layout (256-byte aligned, in reservation order) and prefix views.
#include "core/arena.h"

#include <algorithm>

#include "core/logging.h"

namespace llmserve {
namespace {

int64_t trailing_numel(const Shape& shape) {
  int64_t n = 1;
  for (size_t i = 1; i < shape.size(); ++i) n *= shape[i];
  return n;
}

}  // namespace

ArenaRegion ArenaPlanner::reserve(std::string name, Shape max_shape, DType dtype, std::string limit) {
  CHECK(!max_shape.empty()) << "arena region '" << name << "' needs a shape";
  int64_t numel = 1;
  for (int64_t d : max_shape) {
    CHECK_GE(d, 0) << "arena region '" << name << "'";
    numel *= d;
  }
  Region r{std::move(name), std::move(max_shape), dtype, std::move(limit), total_bytes_};
  const size_t bytes = static_cast<size_t>(numel) * dtype_size(dtype);
  total_bytes_ += (bytes + kAlignment - 1) / kAlignment * kAlignment;
  regions_.push_back(std::move(r));
  return ArenaRegion{static_cast<int32_t>(regions_.size() - 1)};
}

Arena ArenaPlanner::allocate(Device device) const {
  Arena arena;
  arena.regions_ = regions_;
  // Tensor storage is at least 256-byte aligned on CUDA (cudaMalloc) and 64-byte on the CPU; over-allocate so the
  // first region can start on a kAlignment boundary either way.
  const int64_t bytes = static_cast<int64_t>(std::max<size_t>(total_bytes_, 1) + kAlignment);
  Tensor raw = Tensor::empty({bytes}, DType::kU8, device);
  const auto base = reinterpret_cast<uintptr_t>(raw.raw_data());
  const size_t pad = (kAlignment - base % kAlignment) % kAlignment;
  arena.storage_ =
      std::make_shared<Tensor>(raw.slice(0, static_cast<int64_t>(pad), static_cast<int64_t>(pad + total_bytes_)));
  return arena;
}

int64_t Arena::max_rows(ArenaRegion region) const {
  CHECK(region.valid() && region.index < static_cast<int32_t>(regions_.size())) << "arena region not planned here";
  return regions_[region.index].max_shape[0];
}

Tensor Arena::view(ArenaRegion region, int64_t rows) const {
  CHECK(defined()) << "activation arena used before it was allocated";
  CHECK(region.valid() && region.index < static_cast<int32_t>(regions_.size())) << "arena region not planned here";
  Shape shape = regions_[region.index].max_shape;
  shape[0] = rows;
  return view(region, std::move(shape));
}

Tensor Arena::view(ArenaRegion region, Shape shape) const {
  CHECK(defined()) << "activation arena used before it was allocated";
  CHECK(region.valid() && region.index < static_cast<int32_t>(regions_.size())) << "arena region not planned here";
  const ArenaPlanner::Region& r = regions_[region.index];
  CHECK(!shape.empty() && trailing_numel(shape) == trailing_numel(r.max_shape))
      << "arena region '" << r.name << "': view " << shape_to_string(shape) << " does not match planned "
      << shape_to_string(r.max_shape);
  CHECK(shape[0] >= 0 && shape[0] <= r.max_shape[0])
      << "arena region '" << r.name << "' was planned for " << r.max_shape[0] << " rows (" << r.limit
      << "); this step needs " << shape[0];
  uint8_t* base = static_cast<uint8_t*>(storage_->raw_data()) + r.offset;
  // The arena's storage stays alive as long as any view does.
  return Tensor::from_blob(base, std::move(shape), r.dtype, storage_, storage_->device());
}

}  // namespace llmserve
