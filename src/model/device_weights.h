// Weights straight to the GPU: a WeightSource decorator whose get() returns the inner source's tensor (a zero-copy
// view of the safetensors mapping, or a CPU conversion done on the fly) uploaded to a device. The bytes go through
// two page-locked staging buffers: the host fills one (reading the mapping, several threads) while the DMA engine
// drains the other, so file reads and host->device copies overlap. Invariant: a returned tensor is contiguous, on
// the device, and its copy is ordered on the current stream before anything that later runs there.
#pragma once

#include <memory>

#include "core/tensor.h"
#include "model/weight_source.h"

namespace llmserve {

// `inner` must outlive the returned source. On a CPU device, get() is the inner get().
std::unique_ptr<WeightSource> make_device_weight_source(WeightSource& inner, Device device);

// Copies a CPU tensor to `device` through pinned staging buffers (the upload of make_device_weight_source).
Tensor upload_to_device(const Tensor& host, Device device);

}  // namespace llmserve
