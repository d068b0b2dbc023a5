// DecoderOnlyLM: the embedding, final norm, LM head, rotary table and outer step buffers every architecture shares.
#include "model/decoder_only_lm.h"

#include "model/layers/quantized_linear_methods.h"
#include "model/rope.h"
#include "model/tensor_parallel.h"

namespace llmserve {
namespace {

LinearContext linear_context(const ModelConfig& c, const ModelLoadOptions& o, const LinearMethod* method) {
  Communicator* comm = o.communicator != nullptr ? o.communicator : &single_process_communicator();
  return {comm, method, resolve_weight_dtype(c, o)};
}

}  // namespace

DecoderOnlyLM::DecoderOnlyLM(const ModelConfig& c, const ModelLoadOptions& options)
    : config_(c),
      device_(options.device),
      act_(options.device.is_cpu() ? DType::kF32 : resolve_weight_dtype(c, options)),
      linear_method_(make_linear_method(c.quantization)),
      linear_(linear_context(c, options, linear_method_.get())),
      embed_tokens_(*linear_.comm, c.vocab_size, c.hidden_size, linear_.params_dtype),
      norm_(c.hidden_size, static_cast<float>(c.rms_norm_eps)),
      fold_moe_norms_(c.moe && fold_norm_into_moe_combine(options.device)),
      lm_head_(*linear_.comm, c.vocab_size, c.hidden_size, linear_.params_dtype) {}

Status DecoderOnlyLM::load_parameters_with(NamedParameters params, WeightSource& weights,
                                           const std::vector<StackedParamMapping>& stacked) {
  embed_tokens_.named_parameters("model.embed_tokens", params);
  norm_.named_parameters("model.norm", params);
  if (!config_.tie_word_embeddings) lm_head_.named_parameters("lm_head", params);
  return load_parameters(params, weights, stacked);
}

Status DecoderOnlyLM::finish_loading() {
  if (config_.tie_word_embeddings) lm_head_.tie_to(embed_tokens_);
  ASSIGN_OR_RETURN(cos_sin_cache_, build_rope_cos_sin_cache(config_, config_.max_position_embeddings));
  if (!device_.is_cpu()) cos_sin_cache_ = cos_sin_cache_.to(device_);
  return ok_status();
}

void DecoderOnlyLM::plan_outer_activations(const ActivationLimits& limits, ArenaPlanner& planner) {
  const int64_t T = limits.max_num_tokens, H = config_.hidden_size;
  hidden_ = planner.reserve("hidden", {T, H}, act_, "max_num_batched_tokens");
  residual_ = planner.reserve("residual", {T, H}, act_, "max_num_batched_tokens");
  selected_ = planner.reserve("lm_head.rows", {limits.max_num_logits, H}, act_, "max_num_logits");
  lm_head_act_ = lm_head_.plan_activations(limits.max_num_logits, planner);
}

std::pair<Tensor, Tensor> DecoderOnlyLM::embed(const ForwardBatch& batch) const {
  const int64_t T = batch.input_ids.size(0);
  CHECK_EQ(batch.positions.size(0), T);
  CHECK(arena_ != nullptr) << "forward before activation memory was bound (ActivationMemory)";
  Tensor x = arena_->view(hidden_, T);
  Tensor residual = arena_->view(residual_, T);
  // Into the residual sum, which the first layer normalises into x: no device copy of the embeddings per step.
  embed_tokens_.forward(residual, batch.input_ids);
  return {x, residual};
}

void DecoderOnlyLM::compute_logits(const ForwardBatch& batch, Tensor& x, Tensor& residual, Tensor& logits,
                                   bool normed) const {
  const int64_t num_logits = batch.logits_indices.size(0);
  CHECK(!logits.defined() || logits.shape() == (Shape{num_logits, config_.vocab_size}))
      << "logits " << logits.to_string();
  if (num_logits == 0) return;  // a step of partial prefill chunks only
  if (!normed) norm_.forward_with_residual(x, residual);
  // Only the requested rows go through the (large) vocabulary projection. The row gather is an embedding lookup
  // with x as the table (on the device, from the device's index buffer: no host round trip).
  Tensor selected = arena_->view(selected_, num_logits);
  ops::embedding(selected, batch.logits_indices, x);
  lm_head_.forward(logits, selected, arena_, lm_head_act_);
}

}  // namespace llmserve
