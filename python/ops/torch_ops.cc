// llmserve's kernels as PyTorch custom ops: a torch::Library "llmserve" defines every op of the registry
// (kernels/op_registry.h: ops::all_ops(), its schema verbatim) and IMPL libraries give each a CPU, a CUDA and
// a Meta kernel. One boxed kernel per op: the IValues on the stack become llmserve Tensors viewing the torch
// tensors' memory (no copy), the op's Params structs are rebuilt from their flattened fields, and the typed
// ops::Op is called (check, then the device's kernel); Meta runs the check alone (it writes nothing, DESIGN.md §2).
// A rejected argument raises RuntimeError with the check's message (never aborts the Python process).
// Invariant: every registry op is registered (kernels/op_list.h; the library refuses to load otherwise).
#include <ATen/ATen.h>
#include <torch/library.h>

#include <algorithm>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>

#include "core/logging.h"
#include "kernels/op_list.h"
#include "kernels/ops.h"

namespace llmserve::torch_ops {
namespace {

DType to_dtype(const at::Tensor &t) {
  switch (t.scalar_type()) {
    case at::kFloat:
      return DType::kF32;
    case at::kHalf:
      return DType::kF16;
    case at::kBFloat16:
      return DType::kBF16;
    case at::kInt:
      return DType::kI32;
    case at::kLong:
      return DType::kI64;
    case at::kByte:
      return DType::kU8;
    case at::kFloat8_e4m3fn:
      return DType::kFP8E4M3;
    case at::kChar:
      return DType::kI8;
    default:
      TORCH_CHECK(false, "llmserve ops: unsupported dtype ", t.scalar_type());
  }
}

// A llmserve view of a torch tensor's memory. Meta tensors (no memory: only the check runs on them) are seen as
// tensors on `meta_device` at a stand-in address that is never dereferenced: their storage object's address plus their
// byte offset, so views of one storage alias (as the checks' aliasing rules expect) and distinct storages do not.
Tensor view_of(const at::Tensor &t, Device meta_device) {
  static char empty alignas(64)[64];
  void *data = t.is_meta() ? static_cast<char *>(static_cast<void *>(t.storage().unsafeGetStorageImpl())) +
                                 t.storage_offset() * static_cast<int64_t>(t.element_size())
                           : t.data_ptr();
  if (data == nullptr) data = empty;  // an empty tensor: a kernel reads no element of it
  Device device = t.is_meta() ? meta_device : Device::cpu();
  if (t.is_cuda()) device = Device::cuda(t.get_device());
  TORCH_CHECK(t.is_cpu() || t.is_cuda() || t.is_meta(), "llmserve ops: tensors must be on cpu, cuda or meta");
  Shape shape(t.sizes().begin(), t.sizes().end()), strides(t.strides().begin(), t.strides().end());
  // The blob spans the view's first to last element, so a strided view (a column slice, a transposed [H, T, D] view
  // of a [T, H, D] activation) keeps its strides.
  int64_t extent = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 0) extent = 0;
    if (extent > 0) extent += (shape[i] - 1) * strides[i];
  }
  return Tensor::from_blob(data, {extent}, to_dtype(t), nullptr, device).as_strided(shape, strides);
}

// Reads the flattened schema arguments of one C++ parameter type off the IValue list, left to right.
struct Reader {
  const std::vector<c10::IValue> &args;
  Device meta_device;  // the device meta tensors stand for
  size_t next = 0;
  Tensor tensor() { return view_of(args[next++].toTensor(), meta_device); }
  std::optional<Tensor> optional_tensor() {
    const c10::IValue &v = args[next++];
    if (v.isNone()) return std::nullopt;
    return view_of(v.toTensor(), meta_device);
  }
  int64_t integer() { return args[next++].toInt(); }
  double real() { return args[next++].toDouble(); }
  ops::TokenLists token_lists() {
    ops::TokenLists l;
    l.offsets = tensor();
    l.token_ids = tensor();
    return l;
  }
};

// Holder<T>: the value a parameter of type T is built into; get() passes it to the op as T.
template <typename T>
struct Holder;
template <>
struct Holder<Tensor &> {
  Tensor value;
  explicit Holder(Reader &r) : value(r.tensor()) {}
  Tensor &get() { return value; }
};
template <>
struct Holder<const Tensor &> : Holder<Tensor &> {
  using Holder<Tensor &>::Holder;
};
template <>
struct Holder<const Tensor *> {
  std::optional<Tensor> value;
  explicit Holder(Reader &r) : value(r.optional_tensor()) {}
  const Tensor *get() { return value ? &*value : nullptr; }
};
template <>
struct Holder<float> {
  float value;
  explicit Holder(Reader &r) : value(static_cast<float>(r.real())) {}
  float get() { return value; }
};
template <>
struct Holder<int64_t> {
  int64_t value;
  explicit Holder(Reader &r) : value(r.integer()) {}
  int64_t get() { return value; }
};
template <>
struct Holder<const ops::AttentionMetadata &> {
  ops::AttentionMetadata value;
  explicit Holder(Reader &r) {
    value.query_start_loc = r.tensor();
    value.seq_lens = r.tensor();
    value.block_table = r.tensor();
    value.slot_mapping = r.tensor();
    value.num_reqs = r.integer();
    value.num_decode_tokens = r.integer();
    value.max_query_len = r.integer();
    value.max_seq_len = r.integer();
    if (auto w = r.optional_tensor()) value.workspace = *w;
  }
  const ops::AttentionMetadata &get() { return value; }
};
template <>
struct Holder<const ops::TokenLists &> {
  ops::TokenLists value;
  explicit Holder(Reader &r) : value(r.token_lists()) {}
  const ops::TokenLists &get() { return value; }
};
template <>
struct Holder<const ops::PenaltyParams &> {
  ops::PenaltyParams value;
  explicit Holder(Reader &r) {
    value.prompt_tokens = r.token_lists();
    value.output_tokens = r.token_lists();
    value.repetition_penalties = r.tensor();
    value.frequency_penalties = r.tensor();
    value.presence_penalties = r.tensor();
  }
  const ops::PenaltyParams &get() { return value; }
};
template <>
struct Holder<const ops::LogitBiasParams &> {
  ops::LogitBiasParams value;
  explicit Holder(Reader &r) {
    value.tokens = r.token_lists();
    value.values = r.tensor();
  }
  const ops::LogitBiasParams &get() { return value; }
};
template <>
struct Holder<const ops::SamplingFilterParams &> {
  ops::SamplingFilterParams value;
  explicit Holder(Reader &r) {
    value.top_k = r.tensor();
    value.top_p = r.tensor();
    value.min_p = r.tensor();
  }
  const ops::SamplingFilterParams &get() { return value; }
};
template <>
struct Holder<const ops::SampleParams &> {
  ops::SampleParams value;
  explicit Holder(Reader &r) {
    value.temperatures = r.tensor();
    value.seeds = r.tensor();
    value.offsets = r.tensor();
  }
  const ops::SampleParams &get() { return value; }
};

// The boxed kernel of one op: pops its arguments, runs the op (or, for Meta, its check). Outputs are the
// arguments written in place, so nothing is pushed back ("-> ()").
template <typename... Args>
class OpKernel final : public c10::OperatorKernel {
 public:
  OpKernel(const ops::Op<void(Args...)> &op, bool check_only) : op_(op), check_only_(check_only) {}

  void operator()(const c10::OperatorHandle &handle, c10::DispatchKeySet, torch::jit::Stack *stack) {
    const size_t num_args = handle.schema().arguments().size();
    std::vector<c10::IValue> args(stack->end() - static_cast<std::ptrdiff_t>(num_args), stack->end());
    torch::jit::drop(*stack, num_args);
    // The checks are C++ over concrete sizes: with symbolic ones (torch.compile's dynamic shapes) the Meta kernel
    // has nothing to compute (outputs are written arguments) and leaves the check to the real kernel's call.
    if (check_only_ && std::any_of(args.begin(), args.end(), [](const c10::IValue &v) {
          return v.isTensor() && v.toTensor().unsafeGetTensorImpl()->has_symbolic_sizes_strides();
        })) {
      return;
    }
    if (!check_only_) {
      run(args, Device::cpu());
      return;
    }
    // Meta (fake) tensors do not say which device they stand for, and some checks differ by device (16-bit
    // activations: CUDA only): a meta call passes when the check passes as a CPU or as a CUDA call.
    const std::optional<std::string> as_cpu = run(args, Device::cpu());
    if (!as_cpu) return;
    const std::optional<std::string> as_cuda = run(args, Device::cuda(0));
    TORCH_CHECK(!as_cuda, *as_cpu, " (as a CPU call; as a CUDA call: ", *as_cuda, ")");
  }

 private:
  // Runs the op (or its check) on the arguments, meta tensors seen on `meta_device`; a failed check is an error
  // (a real call) or returned as its text (a meta call).
  std::optional<std::string> run(const std::vector<c10::IValue> &args, Device meta_device) const {
    Reader reader{args, meta_device};
    // Braced initialisation evaluates left to right: the holders read the arguments in schema order.
    std::tuple<Holder<Args>...> holders{Holder<Args>(reader)...};
    TORCH_CHECK(reader.next == args.size(), op_.name(), ": schema and C++ signature disagree");
    try {
      // The op's CHECKs run before it writes anything: under the guard a failed one throws instead of aborting.
      ScopedThrowOnFatal throw_on_fatal;
      std::apply([this](auto &...h) { check_only_ ? op_.check(h.get()...) : op_(h.get()...); }, holders);
    } catch (const FatalError &e) {
      TORCH_CHECK(check_only_, e.what());
      return std::string(e.what());
    }
    return std::nullopt;
  }

  const ops::Op<void(Args...)> &op_;
  bool check_only_;
};

template <typename... Args>
void impl(torch::Library &m, const ops::Op<void(Args...)> &op, bool check_only) {
  m.impl(op.name(), torch::CppFunction::makeFromBoxedFunctor(std::make_unique<OpKernel<Args...>>(op, check_only)));
}

void register_impls(torch::Library &m, bool check_only, DeviceType device) {
  ops::for_each_op([&](const auto &op) {
    if (check_only || op.has_kernel(device)) impl(m, op, check_only);
  });
}

}  // namespace

// Registers the library; llmserve.ops calls it once after loading this file. Not TORCH_LIBRARY's static
// initialisers: the op objects are themselves static objects of another file, not yet built when those would run.
void register_library() {
  static std::vector<std::unique_ptr<torch::Library>> libraries;
  if (!libraries.empty()) return;
  auto def = std::make_unique<torch::Library>(torch::Library::DEF, "llmserve", std::nullopt, __FILE__, __LINE__);
  std::set<std::string> listed;
  ops::for_each_op([&](const auto &op) { listed.insert(op.name()); });
  for (const ops::OpBase *op : ops::all_ops()) {
    TORCH_CHECK(listed.count(op->name()), "llmserve ops: registry op '", op->name(),
                "' is missing from kernels/op_list.h's for_each_op");
    def->def(op->schema());
  }
  libraries.push_back(std::move(def));
  const std::pair<c10::DispatchKey, DeviceType> backends[] = {{c10::DispatchKey::CPU, DeviceType::kCPU},
                                                              {c10::DispatchKey::CUDA, DeviceType::kCUDA},
                                                              {c10::DispatchKey::Meta, DeviceType::kCPU}};
  for (const auto &[key, device] : backends) {
    auto lib = std::make_unique<torch::Library>(torch::Library::IMPL, "llmserve", key, __FILE__, __LINE__);
    register_impls(*lib, /*check_only=*/key == c10::DispatchKey::Meta, device);
    libraries.push_back(std::move(lib));
  }
}

}  // namespace llmserve::torch_ops

// Returns null on success, else the error's text (static storage): llmserve.ops raises it as ImportError. No
// exception may cross this C boundary (ctypes would abort the process).
extern "C" __attribute__((visibility("default"))) const char *llmserve_register_torch_ops() {
  static std::string error;
  try {
    llmserve::torch_ops::register_library();
    return nullptr;
  } catch (const std::exception &e) {
    error = e.what();
    return error.c_str();
  }
}
