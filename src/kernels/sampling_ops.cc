// ops.h sampling entry points: the Params structs' check() (shapes, dtypes, devices against the logits) and the
// dispatch to the CPU kernels (kernels/cpu/sampling.cc) or the CUDA ones (kernels/cuda/sampling.cu).
// Kept apart from ops.cc so the sampling ops have one home; the same row-stride rule holds (dim 0 any stride).
#include <string>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/sampling.h"
#include "kernels/ops.h"
#ifdef LLMSERVE_WITH_CUDA
#include "kernels/cuda/cuda_ops.h"
#endif

namespace llmserve::ops {
namespace {

// Logits [num_reqs, vocab] f32 with contiguous rows.
void check_logits(const Tensor& logits, const char* op) {
  CHECK(logits.defined()) << op << ": logits is undefined";
  CHECK(logits.dim() == 2 && (logits.size(1) <= 1 || logits.stride(1) == 1))
      << op << ": logits " << logits.to_string() << " must be [num_reqs, vocab] with contiguous rows";
  CHECK(logits.dtype() == DType::kF32) << op << ": logits " << logits.to_string() << " must be f32";
}

// A contiguous 1-D tensor of `size` elements of `dtype` on the logits' device.
Status check_vector(const Tensor& t, DType dtype, int64_t size, const Tensor& logits, const std::string& name) {
  if (!t.defined()) return invalid_argument(name + " is undefined");
  if (t.dim() != 1 || t.size(0) != size || !t.is_contiguous() || t.dtype() != dtype) {
    return invalid_argument(name + " " + t.to_string() + " must be a contiguous [" + std::to_string(size) + "] " +
                            std::string(dtype_name(dtype)) + " tensor for logits " + logits.to_string());
  }
  if (!(t.device() == logits.device())) {
    return invalid_argument(name + " " + t.to_string() + " is not on the logits' device " + logits.to_string());
  }
  return ok_status();
}

void check_ok(const Status& status, const char* op) { CHECK(status.ok()) << op << ": " << status.message(); }

[[maybe_unused]] [[noreturn]] void not_on_cuda(const char* op) {
  LOG(FATAL) << op << ": not implemented on cuda yet";
  __builtin_unreachable();
}

}  // namespace

Status TokenLists::check(const Tensor& logits, const char* name) const {
  const std::string prefix(name);
  RETURN_IF_ERROR(check_vector(offsets, DType::kI32, logits.size(0) + 1, logits, prefix + ".offsets"));
  if (!token_ids.defined() || token_ids.dim() != 1 || !token_ids.is_contiguous() || token_ids.dtype() != DType::kI32 ||
      !(token_ids.device() == logits.device())) {
    return invalid_argument(prefix + ".token_ids " + (token_ids.defined() ? token_ids.to_string() : "undefined") +
                            " must be a contiguous 1-D i32 tensor on the logits' device");
  }
  return ok_status();
}

Status PenaltyParams::check(const Tensor& logits) const {
  const int64_t n = logits.size(0);
  RETURN_IF_ERROR(prompt_tokens.check(logits, "prompt_tokens"));
  RETURN_IF_ERROR(output_tokens.check(logits, "output_tokens"));
  RETURN_IF_ERROR(check_vector(repetition_penalties, DType::kF32, n, logits, "repetition_penalties"));
  RETURN_IF_ERROR(check_vector(frequency_penalties, DType::kF32, n, logits, "frequency_penalties"));
  return check_vector(presence_penalties, DType::kF32, n, logits, "presence_penalties");
}

Status LogitBiasParams::check(const Tensor& logits) const {
  RETURN_IF_ERROR(tokens.check(logits, "logit_bias"));
  return check_vector(values, DType::kF32, tokens.token_ids.size(0), logits, "logit_bias.values");
}

Status SamplingFilterParams::check(const Tensor& logits) const {
  const int64_t n = logits.size(0);
  RETURN_IF_ERROR(check_vector(top_k, DType::kI32, n, logits, "top_k"));
  RETURN_IF_ERROR(check_vector(top_p, DType::kF32, n, logits, "top_p"));
  return check_vector(min_p, DType::kF32, n, logits, "min_p");
}

Status SampleParams::check(const Tensor& logits) const {
  const int64_t n = logits.size(0);
  RETURN_IF_ERROR(check_vector(temperatures, DType::kF32, n, logits, "temperatures"));
  RETURN_IF_ERROR(check_vector(seeds, DType::kI64, n, logits, "seeds"));
  return check_vector(offsets, DType::kI64, n, logits, "offsets");
}

void apply_penalties(Tensor& logits, const PenaltyParams& params) {
  constexpr const char* op = "apply_penalties";
  check_logits(logits, op);
  check_ok(params.check(logits), op);
  if (logits.device().is_cpu()) return cpu::apply_penalties(logits, params);
#ifdef LLMSERVE_WITH_CUDA
  cuda::apply_penalties(logits, params);
#else
  not_on_cuda(op);
#endif
}

void apply_logit_bias(Tensor& logits, const LogitBiasParams& params) {
  constexpr const char* op = "apply_logit_bias";
  check_logits(logits, op);
  check_ok(params.check(logits), op);
  if (logits.device().is_cpu()) return cpu::apply_logit_bias(logits, params);
#ifdef LLMSERVE_WITH_CUDA
  cuda::apply_logit_bias(logits, params);
#else
  not_on_cuda(op);
#endif
}

void mask_tokens(Tensor& logits, const TokenLists& tokens) {
  constexpr const char* op = "mask_tokens";
  check_logits(logits, op);
  check_ok(tokens.check(logits, "tokens"), op);
  if (logits.device().is_cpu()) return cpu::mask_tokens(logits, tokens);
#ifdef LLMSERVE_WITH_CUDA
  cuda::mask_tokens(logits, tokens);
#else
  not_on_cuda(op);
#endif
}

void apply_temperature(Tensor& logits, const Tensor& temperatures) {
  constexpr const char* op = "apply_temperature";
  check_logits(logits, op);
  check_ok(check_vector(temperatures, DType::kF32, logits.size(0), logits, "temperatures"), op);
  if (logits.device().is_cpu()) return cpu::apply_temperature(logits, temperatures);
#ifdef LLMSERVE_WITH_CUDA
  cuda::apply_temperature(logits, temperatures);
#else
  not_on_cuda(op);
#endif
}

void apply_top_k_top_p_min_p(Tensor& logits, const SamplingFilterParams& params) {
  constexpr const char* op = "apply_top_k_top_p_min_p";
  check_logits(logits, op);
  check_ok(params.check(logits), op);
  if (logits.device().is_cpu()) return cpu::apply_top_k_top_p_min_p(logits, params);
#ifdef LLMSERVE_WITH_CUDA
  cuda::apply_top_k_top_p_min_p(logits, params);
#else
  not_on_cuda(op);
#endif
}

void sample(Tensor& out_ids, const Tensor& logits, const SampleParams& params) {
  constexpr const char* op = "sample";
  check_logits(logits, op);
  CHECK_GT(logits.size(1), 0) << op << ": logits " << logits.to_string() << " has an empty vocabulary";
  check_ok(params.check(logits), op);
  check_ok(check_vector(out_ids, DType::kI32, logits.size(0), logits, "out_ids"), op);
  if (logits.device().is_cpu()) return cpu::sample(out_ids, logits, params);
#ifdef LLMSERVE_WITH_CUDA
  cuda::sample(out_ids, logits, params);
#else
  not_on_cuda(op);
#endif
}

void gather_token_logprobs(Tensor& out_logprobs, Tensor& out_ranks, const Tensor& logprobs, const Tensor& token_ids) {
  constexpr const char* op = "gather_token_logprobs";
  check_logits(logprobs, op);
  const int64_t n = logprobs.size(0);
  check_ok(check_vector(token_ids, DType::kI32, n, logprobs, "token_ids"), op);
  check_ok(check_vector(out_logprobs, DType::kF32, n, logprobs, "out_logprobs"), op);
  check_ok(check_vector(out_ranks, DType::kI32, n, logprobs, "out_ranks"), op);
  if (logprobs.device().is_cpu()) return cpu::gather_token_logprobs(out_logprobs, out_ranks, logprobs, token_ids);
#ifdef LLMSERVE_WITH_CUDA
  cuda::gather_token_logprobs(out_logprobs, out_ranks, logprobs, token_ids);
#else
  not_on_cuda(op);
#endif
}

}  // namespace llmserve::ops
