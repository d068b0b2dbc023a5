// Activation memory planned once: callers reserve named regions (a maximal shape and a dtype) on an ArenaPlanner,
// which lays them out 256-byte aligned in ONE allocation; a step then takes prefix views of its regions.
// Invariant: after allocate() nothing is allocated again; a view larger than its region is a CHECK naming the limit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace llmserve {

// A region reserved on an ArenaPlanner; valid in the Arena that planner allocates.
struct ArenaRegion {
  int32_t index = -1;
  bool valid() const { return index >= 0; }
};

class Arena;

class ArenaPlanner {
 public:
  static constexpr size_t kAlignment = 256;  // bytes; every region starts on this boundary

  // Reserves `max_shape` elements of `dtype` under `name`. `limit` names what bounds dim 0 (e.g.
  // "max_num_batched_tokens"), so an over-limit view says which setting to raise.
  ArenaRegion reserve(std::string name, Shape max_shape, DType dtype, std::string limit);
  // Bytes of the one allocation the planned regions need.
  size_t total_bytes() const { return total_bytes_; }
  // One allocation of total_bytes() on `device` holding every region.
  Arena allocate(Device device) const;

 private:
  friend class Arena;
  struct Region {
    std::string name;
    Shape max_shape;
    DType dtype;
    std::string limit;
    size_t offset = 0;  // bytes from the arena's start
  };
  std::vector<Region> regions_;
  size_t total_bytes_ = 0;
};

class Arena {
 public:
  Arena() = default;
  bool defined() const { return storage_ != nullptr; }
  Device device() const { return storage_->device(); }
  size_t total_bytes() const { return storage_ ? static_cast<size_t>(storage_->numel()) : 0; }

  // The region's first `rows` rows: a contiguous [rows, max_shape[1:]...] view. CHECKs rows <= max_shape[0],
  // naming the region and its limit.
  Tensor view(ArenaRegion region, int64_t rows) const;
  // A contiguous view of `shape` at the region's start: shape[0] <= max_shape[0] and the same trailing numel.
  Tensor view(ArenaRegion region, Shape shape) const;
  // Planned rows (max_shape[0]) of a region.
  int64_t max_rows(ArenaRegion region) const;

 private:
  friend class ArenaPlanner;
  std::vector<ArenaPlanner::Region> regions_;
  std::shared_ptr<Tensor> storage_;  // u8 [total_bytes]; views hold it alive
};

}  // namespace llmserve
