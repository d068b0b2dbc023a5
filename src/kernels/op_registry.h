// The op registry (ggml's op table, PyTorch's TORCH_LIBRARY): every op of kernels/ops.h is one Op object that
// holds its name, its schema, its check and one kernel slot per DeviceType; a call runs the check, then the kernel
// of its first tensor's device. Invariant: no kernel runs unchecked; a device without a kernel is a fatal error.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"

namespace llmserve::ops {

// One kernel slot per DeviceType value (the table's second index).
inline constexpr int kNumDeviceTypes = 2;
static_assert(static_cast<int>(DeviceType::kCUDA) + 1 == kNumDeviceTypes, "a new DeviceType needs a kernel slot");

// "cpu" or "cuda" (the spelling of the fatal messages and of the registry listing).
const char* device_type_name(DeviceType type);

// Whether this build compiled the backend of `type`: CPU always, CUDA in LLMSERVE_WITH_CUDA builds. Every op has
// a kernel on every built backend (tests/kernels/op_registry_test.cc walks the registry to hold that).
bool backend_built(DeviceType type);

// The schema argument types a C++ parameter type stands for, comma-separated: `Tensor&` is written ("Tensor!"),
// `const Tensor&` read ("Tensor"), `const Tensor*` optional ("Tensor?"), float "float", int64_t "int". A struct
// parameter (ops.h's Params) expands to its fields in declaration order, flattened as TORCH_LIBRARY needs them;
// its specialisation sits next to the struct.
template <typename T>
struct SchemaArgTypes;
template <>
struct SchemaArgTypes<Tensor&> {
  static constexpr std::string_view kTypes = "Tensor!";
};
template <>
struct SchemaArgTypes<const Tensor&> {
  static constexpr std::string_view kTypes = "Tensor";
};
template <>
struct SchemaArgTypes<const Tensor*> {
  static constexpr std::string_view kTypes = "Tensor?";
};
template <>
struct SchemaArgTypes<float> {
  static constexpr std::string_view kTypes = "float";
};
template <>
struct SchemaArgTypes<int64_t> {
  static constexpr std::string_view kTypes = "int";
};

// A schema in TORCH_LIBRARY syntax, e.g. "rms_norm(Tensor! out, Tensor x, Tensor weight, float eps) -> ()".
struct SchemaArg {
  std::string type;  // "Tensor", "Tensor!", "Tensor?", "float", "int"
  std::string name;
};
struct Schema {
  std::string name;
  std::vector<SchemaArg> args;
  std::string returns;  // "()" for every op (outputs are written arguments)
};
// InvalidArgument naming what does not parse.
StatusOr<Schema> parse_schema(std::string_view text);

// What every op has, whatever its signature: the registry lists OpBase pointers.
class OpBase {
 public:
  OpBase(const OpBase&) = delete;
  OpBase& operator=(const OpBase&) = delete;

  const char* name() const { return name_; }
  const char* schema() const { return schema_; }
  // Whether a kernel for `type` is registered (registers the built backends first, once per process).
  bool has_kernel(DeviceType type) const;
  // The argument types the C++ signature implies, "Tensor!, Tensor, float" (SchemaArgTypes of each parameter).
  virtual std::string signature_arg_types() const = 0;
  // OK when the schema parses, names this op, returns "()" and its argument types equal signature_arg_types();
  // InvalidArgument naming the mismatch otherwise.
  Status validate_schema() const;

 protected:
  // Lists the op in the registry (all_ops()) until it is destroyed.
  OpBase(const char* name, const char* schema);
  virtual ~OpBase();

  using AnyKernel = void (*)();  // a kernel pointer with its type erased (the derived Op casts it back)
  void set_kernel(DeviceType type, AnyKernel kernel);
  AnyKernel kernel(DeviceType type) const { return kernels_[static_cast<int>(type)].load(std::memory_order_acquire); }
  // The slow path of a call whose slot is empty: registers the built backends (first call in the process) and
  // returns the kernel, or aborts naming the op and the device when none is registered.
  AnyKernel kernel_or_die(DeviceType type) const;

 private:
  const char* name_;
  const char* schema_;
  std::atomic<AnyKernel> kernels_[kNumDeviceTypes] = {};
};

template <typename Signature>
class Op;

// An op with the C++ signature void(Args...). Calling it runs check(args...) (CHECK on shape, dtype and device
// mismatches, naming the op), then the kernel registered for the device of its first argument, a Tensor. The
// hot path is one indexed atomic load and an indirect call: no lookup by name, no allocation.
template <typename... Args>
class Op<void(Args...)> final : public OpBase {
 public:
  using Kernel = void (*)(Args...);
  // The op's contract: aborts (CHECK, message "<op>: ...") on arguments no kernel may see; per-device dtype
  // rules branch on the tensors' device. Writes nothing, so it doubles as a shape-only (Meta) function.
  using Check = void (*)(Args...);

  Op(const char* name, const char* schema, Check check) : OpBase(name, schema), check_(check) {}

  void operator()(Args... args) const {
    check_(args...);
    const DeviceType type = first_tensor_device(args...);
    Kernel kernel = reinterpret_cast<Kernel>(OpBase::kernel(type));
    if (__builtin_expect(kernel == nullptr, 0)) {  // not [[unlikely]]: .cu files compile this header as C++17
      kernel = reinterpret_cast<Kernel>(kernel_or_die(type));
    }
    kernel(args...);
  }

  void check(Args... args) const { check_(args...); }

  // Called by the register_*_kernels() function at the end of each kernel file (kernels/cpu/*.cc,
  // kernels/cuda/*.cu); registering a device twice aborts.
  void register_kernel(DeviceType type, Kernel kernel) { set_kernel(type, reinterpret_cast<AnyKernel>(kernel)); }

  std::string signature_arg_types() const override {
    std::string types;
    ((types += (types.empty() ? "" : ", "), types += SchemaArgTypes<Args>::kTypes), ...);
    return types;
  }

 private:
  template <typename... Rest>
  static DeviceType first_tensor_device(const Tensor& first, const Rest&...) {
    return first.device().type;
  }

  Check check_;
};

// Every op in the process, in construction order (ops.cc, then sampling_ops.cc), with the built backends'
// kernels registered: the list a TORCH_LIBRARY registration or a backend test walks. Ops are static objects
// built before main: none may be called from another file's static initialiser.
std::vector<const OpBase*> all_ops();

}  // namespace llmserve::ops
