// CPU implementations of the sampling ops of kernels/ops.h (penalties, logit bias, token masks, temperature,
// min-p / top-k / top-p masks, the draw, logprob gathering). Arguments were checked by kernels/sampling_ops.cc;
// these CHECK only what depends on tensor contents (offsets well formed, ids in [0, vocab)).
#pragma once

#include "core/tensor.h"
#include "kernels/ops.h"

namespace llmserve::cpu {

void apply_penalties(Tensor& logits, const ops::PenaltyParams& params);
void apply_logit_bias(Tensor& logits, const ops::LogitBiasParams& params);
void mask_tokens(Tensor& logits, const ops::TokenLists& tokens);
void apply_temperature(Tensor& logits, const Tensor& temperatures);
void apply_top_k_top_p_min_p(Tensor& logits, const ops::SamplingFilterParams& params);
void sample(Tensor& out_ids, const Tensor& logits, const ops::SampleParams& params);
void gather_token_logprobs(Tensor& out_logprobs, Tensor& out_ranks, const Tensor& logprobs, const Tensor& token_ids);

}  // namespace llmserve::cpu
