// The op registry walked as ggml's test-backend-ops does: every op has a schema that matches its C++ signature
// and a kernel on every backend this build has; a bad shape dies in the op's check, a device without a kernel
// dies naming the op and the device.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>

#include "core/logging.h"
#include "kernels/op_list.h"
#include "kernels/ops.h"
#include "test_util.h"

namespace llmserve {
namespace {

using ops::OpBase;
using testing::random_tensor;

TEST(OpRegistryTest, EveryOpHasAValidSchemaAndAKernelOnEveryBuiltBackend) {
  const std::vector<const OpBase*> ops = ops::all_ops();
  EXPECT_GE(ops.size(), 20u);  // ops.h declares 20 ops
  std::set<std::string> names;
  for (const OpBase* op : ops) {
    SCOPED_TRACE(op->name());
    EXPECT_TRUE(names.insert(op->name()).second) << "duplicate op name";
    const Status valid = op->validate_schema();
    EXPECT_TRUE(valid.ok()) << valid.message();
    EXPECT_TRUE(op->has_kernel(DeviceType::kCPU));
    if (ops::backend_built(DeviceType::kCUDA)) {
      EXPECT_TRUE(op->has_kernel(DeviceType::kCUDA));
    }
  }
  for (const char* name : {"rms_norm", "linear", "paged_attention", "sample", "gather_token_logprobs"}) {
    EXPECT_TRUE(names.count(name)) << name << " is not in the registry";
  }
}

// The typed list (what the torch bindings register) names every registry op once: an op added to ops.h but not to
// op_list.h fails here, in CI, not at `import llmserve.ops` on a machine with torch.
TEST(OpRegistryTest, TypedOpListEqualsTheRegistry) {
  std::vector<std::string> listed, registered;
  ops::for_each_op([&](const OpBase& op) { listed.push_back(op.name()); });
  for (const OpBase* op : ops::all_ops()) registered.push_back(op->name());
  std::sort(listed.begin(), listed.end());
  std::sort(registered.begin(), registered.end());
  EXPECT_EQ(listed, registered);
}

// Under ScopedThrowOnFatal (the torch bindings hold one around each call), a rejected argument throws the check's
// message instead of aborting, and nothing was written.
TEST(OpRegistryTest, BadShapeThrowsUnderTheGuardNamingTheOp) {
  Tensor x = random_tensor({3, 16}, 1), w = random_tensor({15}, 2);
  Tensor out = Tensor::empty({3, 16}, DType::kF32);
  out.fill(7.0f);
  try {
    ScopedThrowOnFatal guard;
    ops::rms_norm(out, x, w, 1e-6f);
    FAIL() << "rms_norm accepted a weight of the wrong size";
  } catch (const FatalError& e) {
    EXPECT_NE(std::string(e.what()).find("rms_norm"), std::string::npos) << e.what();
  }
  for (int64_t i = 0; i < out.numel(); ++i) EXPECT_EQ(out.data<float>()[i], 7.0f);
}

TEST(OpRegistryTest, SchemaOfAWrittenArgumentSaysTensorBang) {
  EXPECT_EQ(ops::rms_norm.signature_arg_types(), "Tensor!, Tensor, Tensor, float");
  EXPECT_EQ(ops::linear.signature_arg_types(), "Tensor!, Tensor, Tensor, Tensor?");
  StatusOr<ops::Schema> schema = ops::parse_schema(ops::rms_norm.schema());
  ASSERT_TRUE(schema.ok()) << schema.status().message();
  EXPECT_EQ(schema->name, "rms_norm");
  ASSERT_EQ(schema->args.size(), 4u);
  EXPECT_EQ(schema->args[0].type, "Tensor!");
  EXPECT_EQ(schema->args[0].name, "out");
  EXPECT_EQ(schema->args[3].type, "float");
  EXPECT_EQ(schema->returns, "()");
}

TEST(OpRegistryTest, ParseSchemaRejectsMalformedText) {
  EXPECT_FALSE(ops::parse_schema("rms_norm(Tensor! out").ok());
  EXPECT_FALSE(ops::parse_schema("rms_norm(Tensor!out) -> ()").ok());
  EXPECT_FALSE(ops::parse_schema("rms_norm(Matrix out) -> ()").ok());
  EXPECT_FALSE(ops::parse_schema("(Tensor out) -> ()").ok());
  EXPECT_TRUE(ops::parse_schema("noop() -> ()").ok());
}

TEST(OpRegistryDeathTest, BadShapeDiesInTheCheckNamingTheOp) {
  Tensor x = random_tensor({3, 16}, 1), w = random_tensor({15}, 2);
  Tensor out = Tensor::empty({3, 16}, DType::kF32);
  EXPECT_DEATH(ops::rms_norm.check(out, x, w, 1e-5f), "rms_norm: weight");
  Tensor logits = random_tensor({2, 8}, 3), temperatures = random_tensor({3}, 4);
  EXPECT_DEATH(ops::apply_temperature(logits, temperatures), "apply_temperature: temperatures");
}

// A test-only op (not in the library) with a CPU kernel and none for CUDA.
void check_scale_by_two(Tensor& x) { CHECK(x.dtype() == DType::kF32) << "test_scale_by_two: x must be f32"; }
void scale_by_two_cpu(Tensor& x) {
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] *= 2.f;
}

TEST(OpRegistryDeathTest, DeviceWithoutAKernelDiesNamingOpAndDevice) {
  ops::Op<void(Tensor & x)> op("test_scale_by_two", "test_scale_by_two(Tensor! x) -> ()", check_scale_by_two);
  op.register_kernel(DeviceType::kCPU, scale_by_two_cpu);
  EXPECT_TRUE(op.validate_schema().ok());
  Tensor x = Tensor::from_f32({1.f, -3.f}, {2});
  op(x);
  EXPECT_EQ(x.data<float>()[1], -6.f);
  // Host memory labelled as a CUDA tensor: the dispatch must die before any kernel could touch it.
  float host[2] = {1.f, 2.f};
  Tensor on_cuda = Tensor::from_blob(host, {2}, DType::kF32, nullptr, Device::cuda());
  EXPECT_DEATH(op(on_cuda), "test_scale_by_two: no cuda kernel registered");
  EXPECT_DEATH(op.register_kernel(DeviceType::kCPU, scale_by_two_cpu),
               "test_scale_by_two: a cpu kernel is registered twice");
}

TEST(OpRegistryTest, TestOnlyOpLeavesTheRegistryWhenDestroyed) {
  const size_t before = ops::all_ops().size();
  {
    ops::Op<void(Tensor & x)> op("test_scoped", "test_scoped(Tensor! x) -> ()", check_scale_by_two);
    EXPECT_EQ(ops::all_ops().size(), before + 1);
  }
  EXPECT_EQ(ops::all_ops().size(), before);
}

}  // namespace
}  // namespace llmserve
