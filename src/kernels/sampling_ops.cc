// ops.h sampling ops: the Params structs' check() (shapes, dtypes, devices against the logits), each op's schema
// and check, and the Op objects that dispatch to kernels/cpu/sampling.cc or kernels/cuda/sampling.cu.
// Kept apart from ops.cc so the sampling ops have one home; the same row-stride rule holds (dim 0 any stride).
#include <string>

#include "kernels/ops.h"

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

void check_scatter_sampled_ids(Tensor& input_ids, const Tensor& sampled_ids, const Tensor& index) {
  constexpr const char* op = "scatter_sampled_ids";
  for (const Tensor* t : {static_cast<const Tensor*>(&input_ids), &sampled_ids, &index}) {
    CHECK(t->defined() && t->is_contiguous() && t->dtype() == DType::kI32 && t->device() == input_ids.device())
        << op << ": " << (t->defined() ? t->to_string() : "undefined")
        << " must be a contiguous i32 tensor on the input ids' device " << input_ids.device().to_string();
  }
  CHECK(input_ids.dim() == 1 && sampled_ids.dim() == 1)
      << op << ": input_ids " << input_ids.to_string() << " and sampled_ids " << sampled_ids.to_string() << " are 1-D";
  CHECK(index.dim() == 2 && index.size(1) == 2) << op << ": index " << index.to_string() << " must be [n, 2]";
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

namespace {

// ---- each op's check (Op::Check: aborts naming the op) ----

void check_apply_penalties(Tensor& logits, const PenaltyParams& params) {
  constexpr const char* op = "apply_penalties";
  check_logits(logits, op);
  check_ok(params.check(logits), op);
}

void check_apply_logit_bias(Tensor& logits, const LogitBiasParams& params) {
  constexpr const char* op = "apply_logit_bias";
  check_logits(logits, op);
  check_ok(params.check(logits), op);
}

void check_mask_tokens(Tensor& logits, const TokenLists& tokens) {
  constexpr const char* op = "mask_tokens";
  check_logits(logits, op);
  check_ok(tokens.check(logits, "tokens"), op);
}

void check_apply_token_bitmask(Tensor& logits, const Tensor& bitmask) {
  constexpr const char* op = "apply_token_bitmask";
  check_logits(logits, op);
  CHECK(bitmask.defined() && bitmask.dim() == 2 && bitmask.size(0) == logits.size(0) && bitmask.size(1) >= 1 &&
        bitmask.is_contiguous() && bitmask.dtype() == DType::kI32 && bitmask.device() == logits.device())
      << op << ": bitmask " << (bitmask.defined() ? bitmask.to_string() : "undefined")
      << " must be a contiguous [num_reqs, words >= 1] i32 tensor on the device of logits " << logits.to_string();
}

void check_apply_temperature(Tensor& logits, const Tensor& temperatures) {
  constexpr const char* op = "apply_temperature";
  check_logits(logits, op);
  check_ok(check_vector(temperatures, DType::kF32, logits.size(0), logits, "temperatures"), op);
}

void check_apply_top_k_top_p_min_p(Tensor& logits, const SamplingFilterParams& params) {
  constexpr const char* op = "apply_top_k_top_p_min_p";
  check_logits(logits, op);
  check_ok(params.check(logits), op);
}

void check_sample(Tensor& out_ids, const Tensor& logits, const SampleParams& params) {
  constexpr const char* op = "sample";
  check_logits(logits, op);
  CHECK_GT(logits.size(1), 0) << op << ": logits " << logits.to_string() << " has an empty vocabulary";
  check_ok(params.check(logits), op);
  check_ok(check_vector(out_ids, DType::kI32, logits.size(0), logits, "out_ids"), op);
}

void check_gather_token_logprobs(Tensor& out_logprobs, Tensor& out_ranks, const Tensor& logprobs,
                                 const Tensor& token_ids) {
  constexpr const char* op = "gather_token_logprobs";
  check_logits(logprobs, op);
  const int64_t n = logprobs.size(0);
  check_ok(check_vector(token_ids, DType::kI32, n, logprobs, "token_ids"), op);
  check_ok(check_vector(out_logprobs, DType::kF32, n, logprobs, "out_logprobs"), op);
  check_ok(check_vector(out_ranks, DType::kI32, n, logprobs, "out_ranks"), op);
}

}  // namespace

// The sampling ops (types from ops.h); a Params struct is spelled as its flattened fields (SchemaArgTypes).
decltype(apply_penalties) apply_penalties(
    "apply_penalties",
    "apply_penalties(Tensor! logits, Tensor prompt_offsets, Tensor prompt_token_ids, Tensor output_offsets, "
    "Tensor output_token_ids, Tensor repetition_penalties, Tensor frequency_penalties, Tensor presence_penalties) "
    "-> ()",
    check_apply_penalties);
decltype(apply_logit_bias) apply_logit_bias(
    "apply_logit_bias", "apply_logit_bias(Tensor! logits, Tensor offsets, Tensor token_ids, Tensor values) -> ()",
    check_apply_logit_bias);
decltype(mask_tokens) mask_tokens("mask_tokens", "mask_tokens(Tensor! logits, Tensor offsets, Tensor token_ids) -> ()",
                                  check_mask_tokens);
decltype(apply_token_bitmask) apply_token_bitmask("apply_token_bitmask",
                                                  "apply_token_bitmask(Tensor! logits, Tensor bitmask) -> ()",
                                                  check_apply_token_bitmask);
decltype(apply_temperature) apply_temperature("apply_temperature",
                                              "apply_temperature(Tensor! logits, Tensor temperatures) -> ()",
                                              check_apply_temperature);
decltype(apply_top_k_top_p_min_p) apply_top_k_top_p_min_p(
    "apply_top_k_top_p_min_p",
    "apply_top_k_top_p_min_p(Tensor! logits, Tensor top_k, Tensor top_p, Tensor min_p) -> ()",
    check_apply_top_k_top_p_min_p);
decltype(sample) sample(
    "sample", "sample(Tensor! out_ids, Tensor logits, Tensor temperatures, Tensor seeds, Tensor offsets) -> ()",
    check_sample);
decltype(scatter_sampled_ids) scatter_sampled_ids(
    "scatter_sampled_ids", "scatter_sampled_ids(Tensor! input_ids, Tensor sampled_ids, Tensor index) -> ()",
    check_scatter_sampled_ids);
decltype(gather_token_logprobs) gather_token_logprobs(
    "gather_token_logprobs",
    "gather_token_logprobs(Tensor! out_logprobs, Tensor! out_ranks, Tensor logprobs, Tensor token_ids) -> ()",
    check_gather_token_logprobs);

}  // namespace llmserve::ops
