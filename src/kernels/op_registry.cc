// The op registry's list of ops, its schema parser and its one-time backend registration. Invariant: the
// built backends register their kernels exactly once, before the first kernel lookup that finds an empty slot.
#include "kernels/op_registry.h"

#include <algorithm>
#include <cctype>
#include <mutex>

namespace llmserve {
// Each backend's registration function (kernels/cpu/register_kernels.cc, kernels/cuda/register_kernels.cc).
// Explicit calls instead of self-registering static objects: the linker drops an object file of a static library
// that nothing references, and with it such a static object; WHOLE_ARCHIVE would have to reach every program
// that links llmserve_kernels. An explicit call keeps every kernel file referenced through its registration.
namespace cpu {
void register_kernels();
}
namespace cuda {
void register_kernels();
}
}  // namespace llmserve

namespace llmserve::ops {
namespace {

struct OpList {
  std::mutex mutex;
  std::vector<const OpBase*> ops;
};

// Constructed by the first OpBase constructor, so destroyed after every static op.
OpList& op_list() {
  static OpList list;
  return list;
}

void register_backends_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    cpu::register_kernels();
#ifdef LLMSERVE_WITH_CUDA  // the one place that knows which backends this build has
    cuda::register_kernels();
#endif
  });
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

bool is_identifier(std::string_view s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s.front()))) return false;
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

}  // namespace

const char* device_type_name(DeviceType type) { return type == DeviceType::kCPU ? "cpu" : "cuda"; }

bool backend_built(DeviceType type) {
#ifdef LLMSERVE_WITH_CUDA
  return type == DeviceType::kCPU || type == DeviceType::kCUDA;
#else
  return type == DeviceType::kCPU;
#endif
}

StatusOr<Schema> parse_schema(std::string_view text) {
  const std::string quoted = "schema \"" + std::string(text) + "\"";
  const size_t open = text.find('(');
  const size_t close = open == std::string_view::npos ? open : text.find(')', open);
  const size_t arrow = close == std::string_view::npos ? close : text.find("->", close);
  if (arrow == std::string_view::npos || !trim(text.substr(close + 1, arrow - close - 1)).empty()) {
    return invalid_argument(quoted + " is not `name(args) -> returns`");
  }
  Schema schema;
  schema.name = std::string(trim(text.substr(0, open)));
  if (!is_identifier(schema.name)) return invalid_argument(quoted + ": bad op name");
  schema.returns = std::string(trim(text.substr(arrow + 2)));
  if (schema.returns.empty()) return invalid_argument(quoted + ": no return type");
  std::string_view args = trim(text.substr(open + 1, close - open - 1));
  while (!args.empty()) {
    const size_t comma = args.find(',');
    const std::string_view arg = trim(args.substr(0, comma));
    const size_t space = arg.rfind(' ');
    if (space == std::string_view::npos) return invalid_argument(quoted + ": argument \"" + std::string(arg) + "\"");
    SchemaArg parsed{std::string(trim(arg.substr(0, space))), std::string(arg.substr(space + 1))};
    static constexpr std::string_view kTypes[] = {"Tensor", "Tensor!", "Tensor?", "float", "int"};
    if (std::find(std::begin(kTypes), std::end(kTypes), parsed.type) == std::end(kTypes) ||
        !is_identifier(parsed.name)) {
      return invalid_argument(quoted + ": argument \"" + std::string(arg) + "\"");
    }
    schema.args.push_back(std::move(parsed));
    args = comma == std::string_view::npos ? std::string_view() : trim(args.substr(comma + 1));
  }
  return schema;
}

OpBase::OpBase(const char* name, const char* schema) : name_(name), schema_(schema) {
  OpList& list = op_list();
  std::lock_guard<std::mutex> lock(list.mutex);
  list.ops.push_back(this);
}

OpBase::~OpBase() {
  OpList& list = op_list();
  std::lock_guard<std::mutex> lock(list.mutex);
  list.ops.erase(std::remove(list.ops.begin(), list.ops.end(), this), list.ops.end());
}

bool OpBase::has_kernel(DeviceType type) const {
  register_backends_once();
  return kernel(type) != nullptr;
}

Status OpBase::validate_schema() const {
  StatusOr<Schema> parsed = parse_schema(schema_);
  if (!parsed.ok()) return parsed.status();
  if (parsed->name != name_) return invalid_argument(std::string(name_) + ": schema names " + parsed->name);
  if (parsed->returns != "()") return invalid_argument(std::string(name_) + ": returns " + parsed->returns);
  std::string types;
  for (const SchemaArg& arg : parsed->args) types += (types.empty() ? "" : ", ") + arg.type;
  if (types != signature_arg_types()) {
    return invalid_argument(std::string(name_) + ": schema argument types (" + types +
                            ") differ from the C++ signature's (" + signature_arg_types() + ")");
  }
  return ok_status();
}

void OpBase::set_kernel(DeviceType type, AnyKernel kernel) {
  CHECK(kernel != nullptr) << name_ << ": null " << device_type_name(type) << " kernel";
  AnyKernel expected = nullptr;
  CHECK(kernels_[static_cast<int>(type)].compare_exchange_strong(expected, kernel, std::memory_order_release))
      << name_ << ": a " << device_type_name(type) << " kernel is registered twice";
}

OpBase::AnyKernel OpBase::kernel_or_die(DeviceType type) const {
  register_backends_once();
  if (AnyKernel found = kernel(type)) return found;
  LOG(FATAL) << name_ << ": no " << device_type_name(type) << " kernel registered"
             << (backend_built(type) ? "" : " (this build has no such backend)");
  __builtin_unreachable();
}

std::vector<const OpBase*> all_ops() {
  register_backends_once();
  OpList& list = op_list();
  std::lock_guard<std::mutex> lock(list.mutex);
  return list.ops;
}

}  // namespace llmserve::ops
