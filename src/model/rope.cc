// RoPE frequencies and the cos/sin cache. Each formula mirrors transformers' modeling_rope_utils.py operation by
// operation: float32 tensor arithmetic is done in float here too (Python scalars are doubles until they meet a
// float32 tensor), because at long positions one ulp of inv_freq moves the angle by far more than 1e-6.
#include "model/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/thread_pool.h"

namespace llmserve {

namespace {

// The default frequencies' denominators: base ** (arange(0, dim, 2).float() / dim), in float32.
std::vector<float> pos_freqs(double base, int64_t dim) {
  std::vector<float> out(static_cast<size_t>(dim / 2));
  const float fbase = static_cast<float>(base);
  for (int64_t i = 0; i < dim / 2; ++i) {
    float e = static_cast<float>(2 * i) / static_cast<float>(dim);
    out[static_cast<size_t>(i)] = static_cast<float>(std::pow(static_cast<double>(fbase), static_cast<double>(e)));
  }
  return out;
}

std::vector<float> default_inv_freq(double base, int64_t dim) {
  std::vector<float> inv = pos_freqs(base, dim);
  for (float& v : inv) v = 1.0f / v;
  return inv;
}

void apply_llama3(const RopeScaling& rs, std::vector<float>* inv_freq) {
  const float factor = static_cast<float>(rs.factor);
  const double old_context_len = static_cast<double>(rs.original_max_position_embeddings);
  const float low_freq_wavelen = static_cast<float>(old_context_len / rs.low_freq_factor);
  const float high_freq_wavelen = static_cast<float>(old_context_len / rs.high_freq_factor);
  const float two_pi = static_cast<float>(2 * std::numbers::pi);
  for (float& inv : *inv_freq) {
    const float wavelen = two_pi / inv;
    // Long wavelengths (low frequencies) are interpolated by `factor`, short ones kept, the band between blended.
    const float scaled = wavelen > low_freq_wavelen ? inv / factor : inv;
    const bool medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
    if (medium) {
      const float smooth = (static_cast<float>(old_context_len) / wavelen - static_cast<float>(rs.low_freq_factor)) /
                           static_cast<float>(rs.high_freq_factor - rs.low_freq_factor);
      inv = (1.0f - smooth) * scaled / factor + smooth * scaled;
    } else {
      inv = scaled;
    }
  }
}

double yarn_get_mscale(double scale, double mscale) { return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; }

// The dimension index whose wavelength fits `num_rotations` times into the original context.
double yarn_correction_dim(double num_rotations, int64_t dim, double base, double max_position) {
  return (static_cast<double>(dim) * std::log(max_position / (num_rotations * 2 * std::numbers::pi))) /
         (2 * std::log(base));
}

RopeFrequencies yarn_frequencies(const RopeScaling& rs, double base, int64_t dim) {
  RopeFrequencies out;
  const double factor = rs.factor;
  double attention_factor;
  if (rs.attention_factor) {
    attention_factor = *rs.attention_factor;
  } else if (rs.mscale.value_or(0) != 0 && rs.mscale_all_dim.value_or(0) != 0) {
    attention_factor = yarn_get_mscale(factor, *rs.mscale) / yarn_get_mscale(factor, *rs.mscale_all_dim);
  } else {
    attention_factor = yarn_get_mscale(factor, 1.0);
  }
  out.attention_factor = static_cast<float>(attention_factor);

  const double orig = static_cast<double>(rs.original_max_position_embeddings);
  double low = yarn_correction_dim(rs.beta_fast, dim, base, orig);
  double high = yarn_correction_dim(rs.beta_slow, dim, base, orig);
  if (rs.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;  // HF: prevents a zero-width ramp

  const std::vector<float> pf = pos_freqs(base, dim);
  const float ffactor = static_cast<float>(factor);
  const float flow = static_cast<float>(low);
  const float span = static_cast<float>(high - low);
  out.inv_freq.resize(pf.size());
  for (size_t i = 0; i < pf.size(); ++i) {
    const float extrapolation = 1.0f / pf[i];
    const float interpolation = 1.0f / (ffactor * pf[i]);
    const float ramp = std::clamp((static_cast<float>(i) - flow) / span, 0.0f, 1.0f);
    const float extrapolation_factor = 1.0f - ramp;  // 1 for high frequencies (kept), 0 for low (interpolated)
    out.inv_freq[i] = interpolation * (1.0f - extrapolation_factor) + extrapolation * extrapolation_factor;
  }
  return out;
}

}  // namespace

StatusOr<RopeFrequencies> compute_rope_frequencies(const ModelConfig& cfg) {
  const int64_t dim = cfg.head_dim;
  if (dim <= 0 || dim % 2 != 0)
    return invalid_argument("RoPE needs a positive even head_dim, got " + std::to_string(dim));
  if (!(cfg.rope_theta > 0)) return invalid_argument("RoPE needs rope_theta > 0");
  const RopeScaling& rs = cfg.rope_scaling;
  RopeFrequencies out;
  switch (rs.type) {
    case RopeType::kDefault:
      out.inv_freq = default_inv_freq(cfg.rope_theta, dim);
      break;
    case RopeType::kLinear:
      if (!(rs.factor > 0)) return invalid_argument("linear RoPE needs factor > 0");
      out.inv_freq = default_inv_freq(cfg.rope_theta, dim);
      for (float& v : out.inv_freq) v /= static_cast<float>(rs.factor);
      break;
    case RopeType::kLlama3:
      if (!(rs.factor > 0) || !(rs.high_freq_factor > rs.low_freq_factor) || rs.original_max_position_embeddings <= 0) {
        return invalid_argument(
            "llama3 RoPE needs factor > 0, high_freq_factor > low_freq_factor, "
            "original_max_position_embeddings > 0");
      }
      out.inv_freq = default_inv_freq(cfg.rope_theta, dim);
      apply_llama3(rs, &out.inv_freq);
      break;
    case RopeType::kYarn:
      if (!(rs.factor > 0) || rs.original_max_position_embeddings <= 0 || !(rs.beta_fast > 0) || !(rs.beta_slow > 0)) {
        return invalid_argument(
            "yarn RoPE needs factor > 0, beta_fast/beta_slow > 0, "
            "original_max_position_embeddings > 0");
      }
      out = yarn_frequencies(rs, cfg.rope_theta, dim);
      break;
  }
  // Extreme (corrupt) parameters can overflow float32; such a table would turn every activation into NaN.
  for (float v : out.inv_freq) {
    if (!std::isfinite(v) || !(v > 0)) {
      return invalid_argument("RoPE parameters give a non-finite or non-positive frequency (rope_theta " +
                              std::to_string(cfg.rope_theta) + ", scaling " + std::string(rope_type_name(rs.type)) +
                              ")");
    }
  }
  if (!std::isfinite(out.attention_factor) || !(out.attention_factor > 0)) {
    return invalid_argument("RoPE attention factor is not a positive finite number");
  }
  return out;
}

StatusOr<Tensor> build_rope_cos_sin_cache(const ModelConfig& cfg, int64_t max_position) {
  if (max_position <= 0 || max_position > (int64_t{1} << 24)) {  // positions must stay exact in float32
    return invalid_argument("RoPE cache: max_position must be in [1, 2^24], got " + std::to_string(max_position));
  }
  ASSIGN_OR_RETURN(RopeFrequencies f, compute_rope_frequencies(cfg));
  if (max_position * cfg.head_dim > (int64_t{1} << 32)) {  // 16 GiB of f32: a corrupt config, not a model
    return invalid_argument("RoPE cache of " + std::to_string(max_position) + " x " + std::to_string(cfg.head_dim) +
                            " is too large");
  }
  const int64_t half = cfg.head_dim / 2;
  Tensor cache = Tensor::empty({max_position, cfg.head_dim}, DType::kF32);
  float* data = cache.data<float>();
  parallel_for(max_position, 256, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      float* row = data + p * cfg.head_dim;
      for (int64_t i = 0; i < half; ++i) {
        // HF: freqs = inv_freq @ position (float32, one rounding), then cos/sin in float32, times the factor.
        const float angle = static_cast<float>(p) * f.inv_freq[static_cast<size_t>(i)];
        row[i] = static_cast<float>(std::cos(static_cast<double>(angle))) * f.attention_factor;
        row[half + i] = static_cast<float>(std::sin(static_cast<double>(angle))) * f.attention_factor;
      }
    }
  });
  return cache;
}

}  // namespace llmserve
