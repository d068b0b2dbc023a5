// The greedy-sampling threshold, one home for the engine (SamplingParams::greedy) and the kernels
// (ops::kSamplingEps, its f32 view). Invariant: a temperature below kSamplingEps samples greedily everywhere.
#pragma once

namespace llmserve {

// Temperatures below this mean greedy sampling (argmax), vLLM's _SAMPLING_EPS.
inline constexpr double kSamplingEps = 1e-5;
// The kernels compare f32 temperatures with this value rounded to f32: exactly the literal 1e-5f.
static_assert(static_cast<float>(kSamplingEps) == 1e-5f);

}  // namespace llmserve
