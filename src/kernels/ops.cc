// The ops of ops.h except sampling: each one's schema and check (shapes, dtypes, devices; CHECK, since a mismatch
// is a caller bug), and the Op objects of the registry that dispatch to the registered CPU / CUDA kernels. CUDA
// takes f32, f16 or bf16 activations where the CPU takes f32 (the model runs in its dtype on the GPU).
// Every op accepts row-strided tensors (dimension 0 any stride, the rest contiguous) where it reads rows.
#include "kernels/ops.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <utility>

#include "kernels/cpu/cpu_ops.h"  // row_numel

namespace llmserve::ops {
namespace {

// Dimensions 1.. of t are laid out contiguously (dimension 0 may be strided, e.g. a column slice of a fused
// QKV output).
void check_rows(const Tensor& t, const char* op, const char* name) {
  CHECK(t.defined()) << op << ": " << name << " is undefined";
  CHECK_GE(t.dim(), 1) << op << ": " << name << " " << t.to_string();
  int64_t expect = 1;
  for (int d = t.dim() - 1; d >= 1; --d) {
    CHECK(t.size(d) <= 1 || t.stride(d) == expect)
        << op << ": " << name << " " << t.to_string() << " must be contiguous past its first dimension";
    expect *= t.size(d);
  }
}

void check_contiguous(const Tensor& t, const char* op, const char* name) {
  CHECK(t.defined()) << op << ": " << name << " is undefined";
  CHECK(t.is_contiguous()) << op << ": " << name << " " << t.to_string() << " must be contiguous";
}

void check_dtype(const Tensor& t, DType dtype, const char* op, const char* name) {
  CHECK(t.dtype() == dtype) << op << ": " << name << " " << t.to_string() << " must be " << dtype_name(dtype);
}

void check_f32_or_bf16(const Tensor& t, const char* op, const char* name) {
  CHECK(t.dtype() == DType::kF32 || t.dtype() == DType::kBF16)
      << op << ": " << name << " " << t.to_string() << " must be f32 or bf16";
}

// CUDA activations and weights: f32, f16 or bf16.
void check_float(const Tensor& t, const char* op, const char* name) {
  CHECK(t.dtype() == DType::kF32 || t.dtype() == DType::kF16 || t.dtype() == DType::kBF16)
      << op << ": " << name << " " << t.to_string() << " must be f32, f16 or bf16";
}

void check_same_device(const Tensor& a, const Tensor& b, const char* op) {
  CHECK(a.device() == b.device()) << op << ": tensors on different devices: " << a.to_string() << " and "
                                  << b.to_string();
}

// Normalisation operands: x, out [n, d] (activations f32 on CPU; f32 or bf16 on CUDA); weight [d].
// per_head_rows: x may also be [n, h, d] (rms_norm's per-head form), the weight [d].
void check_norm_operands(const Tensor& out, const Tensor& x, const Tensor& weight, const char* op,
                         bool per_head_rows = false) {
  check_rows(x, op, "x");
  check_rows(out, op, "out");
  check_contiguous(weight, op, "weight");
  CHECK(x.dim() == 2 || (per_head_rows && x.dim() == 3)) << op << ": x " << x.to_string();
  CHECK(out.shape() == x.shape()) << op << ": out " << out.to_string() << " vs x " << x.to_string();
  CHECK(weight.dim() == 1 && weight.size(0) == x.size(x.dim() - 1))
      << op << ": weight " << weight.to_string() << " for x " << x.to_string();
  check_same_device(x, out, op);
  check_same_device(x, weight, op);
  CHECK(out.dtype() == x.dtype()) << op << ": out " << out.to_string() << " vs x " << x.to_string();
  if (x.device().is_cpu()) {
    check_f32_or_bf16(weight, op, "weight");
    check_dtype(x, DType::kF32, op, "x");
  } else {
    check_float(weight, op, "weight");
    check_float(x, op, "x");
  }
}

// KV caches: f32 on CPU; f32, f16 or bf16 on CUDA; both the same dtype.
void check_cache(const Tensor& key_cache, const Tensor& value_cache, const char* op) {
  check_contiguous(key_cache, op, "key_cache");
  check_contiguous(value_cache, op, "value_cache");
  CHECK_EQ(key_cache.dim(), 4) << op << ": key_cache " << key_cache.to_string();
  CHECK(key_cache.shape() == value_cache.shape())
      << op << ": key_cache " << key_cache.to_string() << " vs value_cache " << value_cache.to_string();
  check_dtype(value_cache, key_cache.dtype(), op, "value_cache");
  if (key_cache.device().is_cpu()) {
    check_dtype(key_cache, DType::kF32, op, "key_cache");
  } else {
    const DType d = key_cache.dtype();
    CHECK(d == DType::kF32 || d == DType::kF16 || d == DType::kBF16)
        << op << ": key_cache " << key_cache.to_string() << " must be f32, f16 or bf16";
  }
  CHECK_GT(key_cache.size(1), 0) << op << ": block_size";
}

void check_rotary(const Tensor& positions, const Tensor& query, const Tensor& key, int64_t head_dim,
                  const Tensor& cos_sin_cache, const char* op) {
  check_contiguous(positions, op, "positions");
  check_rows(query, op, "query");
  check_rows(key, op, "key");
  check_contiguous(cos_sin_cache, op, "cos_sin_cache");
  check_dtype(positions, DType::kI64, op, "positions");
  if (query.device().is_cpu()) {
    check_dtype(query, DType::kF32, op, "query");
    check_dtype(key, DType::kF32, op, "key");
  } else {
    check_float(query, op, "query");
    CHECK(key.dtype() == query.dtype()) << op << ": key " << key.to_string() << " vs query " << query.to_string();
  }
  check_dtype(cos_sin_cache, DType::kF32, op, "cos_sin_cache");
  CHECK(head_dim > 0 && head_dim % 2 == 0) << op << ": head_dim " << head_dim << " must be even and positive";
  CHECK_EQ(positions.dim(), 1) << op << ": positions " << positions.to_string();
  const int64_t n = positions.size(0);
  CHECK(query.size(0) == n && key.size(0) == n)
      << op << ": query " << query.to_string() << ", key " << key.to_string() << " for " << n << " positions";
  CHECK(cpu::row_numel(query) % head_dim == 0 && cpu::row_numel(key) % head_dim == 0)
      << op << ": query " << query.to_string() << " / key " << key.to_string() << " not whole heads of " << head_dim;
  CHECK(cos_sin_cache.dim() == 2 && cos_sin_cache.size(1) == head_dim)
      << op << ": cos_sin_cache " << cos_sin_cache.to_string() << " for head_dim " << head_dim;
  check_same_device(positions, query, op);
  check_same_device(positions, key, op);
  check_same_device(positions, cos_sin_cache, op);
}

void check_cache_write(const Tensor& key, const Tensor& value, const Tensor& key_cache, const Tensor& value_cache,
                       const Tensor& slot_mapping, const char* op) {
  check_rows(key, op, "key");
  check_rows(value, op, "value");
  check_contiguous(slot_mapping, op, "slot_mapping");
  check_cache(key_cache, value_cache, op);
  CHECK(key.dim() == 3 && key.shape() == value.shape())
      << op << ": key " << key.to_string() << ", value " << value.to_string() << " (want [n, num_kv_heads, head_dim])";
  CHECK(key.size(1) == key_cache.size(2) && key.size(2) == key_cache.size(3))
      << op << ": key " << key.to_string() << " vs cache " << key_cache.to_string();
  CHECK(slot_mapping.dim() == 1 && slot_mapping.size(0) == key.size(0))
      << op << ": slot_mapping " << slot_mapping.to_string() << " for key " << key.to_string();
  check_dtype(slot_mapping, DType::kI64, op, "slot_mapping");
  check_dtype(key, key_cache.dtype(), op, "key");
  check_dtype(value, key_cache.dtype(), op, "value");
  for (const Tensor* t : std::initializer_list<const Tensor*>{&value, &key_cache, &value_cache, &slot_mapping})
    check_same_device(key, *t, op);
}

// ---- each op's check (Op::Check: aborts naming the op; branches on the device where CPU and CUDA differ) ----

void check_embedding(Tensor& out, const Tensor& ids, const Tensor& table) {
  constexpr const char* op = "embedding";
  check_contiguous(ids, op, "ids");
  check_contiguous(table, op, "table");
  check_rows(out, op, "out");
  check_dtype(ids, DType::kI32, op, "ids");
  CHECK(ids.dim() == 1 && table.dim() == 2) << op << ": ids " << ids.to_string() << ", table " << table.to_string();
  CHECK(out.dim() == 2 && out.size(0) == ids.size(0) && out.size(1) == table.size(1))
      << op << ": out " << out.to_string() << " for ids " << ids.to_string() << ", table " << table.to_string();
  CHECK(dtype_is_float(table.dtype()) && dtype_is_float(out.dtype())) << op << ": float table and out expected";
  check_same_device(out, ids, op);
  check_same_device(out, table, op);
  if (out.device().is_cpu()) return;
  check_float(table, op, "table");
  check_float(out, op, "out");
}

void check_masked_embedding(Tensor& out, const Tensor& ids, const Tensor& table, int64_t vocab_start) {
  CHECK(vocab_start >= 0) << "masked_embedding: vocab_start " << vocab_start << " < 0";
  check_embedding(out, ids, table);
}

void check_rms_norm(Tensor& out, const Tensor& x, const Tensor& weight, float /*eps*/) {
  check_norm_operands(out, x, weight, "rms_norm", /*per_head_rows=*/true);
}

void check_fused_add_rms_norm(Tensor& x, Tensor& residual, const Tensor& weight, float /*eps*/) {
  constexpr const char* op = "fused_add_rms_norm";
  check_norm_operands(residual, x, weight, op);
}

void check_silu_and_mul(Tensor& out, const Tensor& x) {
  constexpr const char* op = "silu_and_mul";
  check_rows(x, op, "x");
  check_rows(out, op, "out");
  CHECK(x.dim() == 2 && out.dim() == 2 && x.size(0) == out.size(0) && x.size(1) == 2 * out.size(1))
      << op << ": out " << out.to_string() << " for x " << x.to_string() << " (want out [n, d], x [n, 2d])";
  check_same_device(x, out, op);
  CHECK(out.dtype() == x.dtype()) << op << ": out " << out.to_string() << " vs x " << x.to_string();
  if (x.device().is_cpu()) {
    check_dtype(x, DType::kF32, op, "x");
    return;
  }
  check_float(x, op, "x");
}

void check_add(Tensor& a, const Tensor& b) {
  constexpr const char* op = "add";
  check_rows(a, op, "a");
  check_rows(b, op, "b");
  CHECK(a.shape() == b.shape()) << op << ": a " << a.to_string() << " vs b " << b.to_string();
  check_same_device(a, b, op);
  if (a.device().is_cpu()) {
    check_dtype(a, DType::kF32, op, "a");
    check_dtype(b, DType::kF32, op, "b");
    return;
  }
  check_float(a, op, "a");
  CHECK(b.dtype() == a.dtype()) << op << ": a " << a.to_string() << " vs b " << b.to_string();
}

void check_rotary_embedding(const Tensor& positions, Tensor& query, Tensor& key, int64_t head_dim,
                            const Tensor& cos_sin_cache) {
  constexpr const char* op = "rotary_embedding";
  check_rotary(positions, query, key, head_dim, cos_sin_cache, op);
}

void check_linear(Tensor& out, const Tensor& x, const Tensor& weight, const Tensor* bias) {
  constexpr const char* op = "linear";
  check_rows(x, op, "x");
  check_rows(out, op, "out");
  check_contiguous(weight, op, "weight");
  CHECK(x.dim() == 2 && weight.dim() == 2 && out.dim() == 2)
      << op << ": x " << x.to_string() << ", weight " << weight.to_string() << ", out " << out.to_string();
  CHECK_EQ(x.size(1), weight.size(1)) << op << ": x " << x.to_string() << " vs weight " << weight.to_string();
  CHECK(out.size(0) == x.size(0) && out.size(1) == weight.size(0))
      << op << ": out " << out.to_string() << " for x " << x.to_string() << ", weight " << weight.to_string();
  CHECK(out.raw_data() != x.raw_data() || out.numel() == 0) << op << ": out must not alias x";
  check_same_device(x, out, op);
  check_same_device(x, weight, op);
  if (bias != nullptr) {
    check_contiguous(*bias, op, "bias");
    CHECK(bias->dim() == 1 && bias->size(0) == weight.size(0))
        << op << ": bias " << bias->to_string() << " for weight " << weight.to_string();
    check_same_device(x, *bias, op);
  }
  if (!x.device().is_cpu()) {
    // CUDA: x and weight share a dtype (the runtime converts weights at load); out in x's dtype or f32 (logits);
    // bias in out's dtype or f32.
    check_float(x, op, "x");
    CHECK(weight.dtype() == x.dtype()) << op << ": weight " << weight.to_string() << " vs x " << x.to_string()
                                       << " (cuda wants one dtype)";
    CHECK(out.dtype() == x.dtype() || out.dtype() == DType::kF32)
        << op << ": out " << out.to_string() << " must be f32 or x's dtype " << dtype_name(x.dtype());
    CHECK(bias == nullptr || bias->dtype() == out.dtype() || bias->dtype() == DType::kF32)
        << op << ": bias " << bias->to_string() << " must be f32 or out's dtype " << dtype_name(out.dtype());
    return;
  }
  check_f32_or_bf16(weight, op, "weight");
  if (bias != nullptr) check_f32_or_bf16(*bias, op, "bias");
  check_dtype(x, DType::kF32, op, "x");
  check_dtype(out, DType::kF32, op, "out");
}

void check_reshape_and_cache(const Tensor& key, const Tensor& value, Tensor& key_cache, Tensor& value_cache,
                             const Tensor& slot_mapping) {
  constexpr const char* op = "reshape_and_cache";
  check_cache_write(key, value, key_cache, value_cache, slot_mapping, op);
}

void check_rotary_embedding_and_cache(const Tensor& positions, Tensor& query, Tensor& key, const Tensor& value,
                                      int64_t head_dim, const Tensor& cos_sin_cache, Tensor& key_cache,
                                      Tensor& value_cache, const Tensor& slot_mapping) {
  constexpr const char* op = "rotary_embedding_and_cache";
  check_rotary(positions, query, key, head_dim, cos_sin_cache, op);
  check_cache_write(key, value, key_cache, value_cache, slot_mapping, op);
  CHECK(query.dim() == 3 && query.size(2) == head_dim && key.size(2) == head_dim)
      << op << ": query " << query.to_string() << ", key " << key.to_string() << " for head_dim " << head_dim;
}

void check_qk_norm_rotary_embedding_and_cache(const Tensor& positions, Tensor& query, Tensor& key, const Tensor& value,
                                              int64_t head_dim, const Tensor& cos_sin_cache, const Tensor& q_weight,
                                              const Tensor& k_weight, float eps, Tensor& key_cache, Tensor& value_cache,
                                              const Tensor& slot_mapping) {
  constexpr const char* op = "qk_norm_rotary_embedding_and_cache";
  check_rotary(positions, query, key, head_dim, cos_sin_cache, op);
  check_cache_write(key, value, key_cache, value_cache, slot_mapping, op);
  CHECK(query.dim() == 3 && query.size(2) == head_dim && key.size(2) == head_dim)
      << op << ": query " << query.to_string() << ", key " << key.to_string() << " for head_dim " << head_dim;
  check_norm_operands(query, query, q_weight, op, /*per_head_rows=*/true);
  check_norm_operands(key, key, k_weight, op, /*per_head_rows=*/true);
  CHECK(eps >= 0.f) << op << ": eps " << eps;
}

// AttentionMetadata's tensors against the query (shapes, dtypes, devices); on CUDA also the counts, maxima and
// workspace (the CPU kernels read only query_start_loc, seq_lens and block_table).
void check_attention_metadata(const AttentionMetadata& md, const Tensor& query, const char* op) {
  CHECK_GE(md.num_reqs, 0) << op << ": num_reqs";
  check_contiguous(md.query_start_loc, op, "query_start_loc");
  check_contiguous(md.seq_lens, op, "seq_lens");
  check_rows(md.block_table, op, "block_table");
  check_dtype(md.query_start_loc, DType::kI32, op, "query_start_loc");
  check_dtype(md.seq_lens, DType::kI32, op, "seq_lens");
  check_dtype(md.block_table, DType::kI32, op, "block_table");
  CHECK(md.query_start_loc.dim() == 1 && md.query_start_loc.size(0) >= md.num_reqs + 1)
      << op << ": query_start_loc " << md.query_start_loc.to_string() << " for " << md.num_reqs << " requests";
  CHECK(md.seq_lens.dim() == 1 && md.seq_lens.size(0) >= md.num_reqs)
      << op << ": seq_lens " << md.seq_lens.to_string() << " for " << md.num_reqs << " requests";
  CHECK(md.block_table.dim() == 2 && md.block_table.size(0) >= md.num_reqs)
      << op << ": block_table " << md.block_table.to_string() << " for " << md.num_reqs << " requests";
  for (const Tensor* t : std::initializer_list<const Tensor*>{&md.query_start_loc, &md.seq_lens, &md.block_table}) {
    check_same_device(query, *t, op);
  }
  if (query.device().is_cpu()) return;  // the CPU kernels ignore the GPU hints and the workspace
  CHECK(md.num_decode_tokens >= 0 && md.num_decode_tokens <= md.num_reqs && md.num_decode_tokens <= query.size(0))
      << op << ": num_decode_tokens " << md.num_decode_tokens << " for " << md.num_reqs << " requests";
  CHECK(md.max_query_len >= 0 && md.max_seq_len >= 0) << op << ": max_query_len / max_seq_len negative";
  if (md.workspace.defined()) {
    check_contiguous(md.workspace, op, "workspace");
    check_dtype(md.workspace, DType::kF32, op, "workspace");
    check_same_device(query, md.workspace, op);
  }
}

void check_paged_attention(Tensor& out, const Tensor& query, const Tensor& key_cache, const Tensor& value_cache,
                           const AttentionMetadata& metadata, float scale, int64_t /*sliding_window*/) {
  constexpr const char* op = "paged_attention";
  check_rows(query, op, "query");
  check_rows(out, op, "out");
  check_cache(key_cache, value_cache, op);
  CHECK(query.dim() == 3 && out.shape() == query.shape())
      << op << ": query " << query.to_string() << ", out " << out.to_string() << " (want [n, num_heads, head_dim])";
  CHECK_EQ(query.size(2), key_cache.size(3))
      << op << ": head_dim of query " << query.to_string() << " vs cache " << key_cache.to_string();
  CHECK(key_cache.size(2) > 0 && query.size(1) % key_cache.size(2) == 0)
      << op << ": num_heads " << query.size(1) << " not a multiple of num_kv_heads " << key_cache.size(2);
  check_dtype(query, key_cache.dtype(), op, "query");
  check_dtype(out, key_cache.dtype(), op, "out");
  CHECK(std::isfinite(scale)) << op << ": scale " << scale;
  for (const Tensor* t : std::initializer_list<const Tensor*>{&out, &key_cache, &value_cache}) {
    check_same_device(query, *t, op);
  }
  check_attention_metadata(metadata, query, op);
}

// ---- multi-head latent attention ----

// A tensor whose last dimension is contiguous (the others any stride): MLA's per-head views.
void check_last_dim_contiguous(const Tensor& t, int dims, const char* op, const char* name) {
  CHECK(t.defined()) << op << ": " << name << " is undefined";
  CHECK_EQ(t.dim(), dims) << op << ": " << name << " " << t.to_string() << " must have " << dims << " dimensions";
  CHECK(t.size(dims - 1) <= 1 || t.stride(dims - 1) == 1)
      << op << ": " << name << " " << t.to_string() << " must be contiguous in its last dimension";
}

// The latent cache [num_blocks, block_size, L + R]: contiguous; f32 on CPU; f32, f16 or bf16 on CUDA.
void check_latent_cache(const Tensor& latent_cache, const char* op) {
  check_contiguous(latent_cache, op, "latent_cache");
  CHECK(latent_cache.dim() == 3 && latent_cache.size(1) > 0)
      << op << ": latent_cache " << latent_cache.to_string() << " (want [num_blocks, block_size, L + R])";
  if (latent_cache.device().is_cpu()) {
    check_dtype(latent_cache, DType::kF32, op, "latent_cache");
  } else {
    check_float(latent_cache, op, "latent_cache");
  }
}

// Whether the byte ranges two views span (first to last element) overlap.
bool spans_overlap(const Tensor& a, const Tensor& b) {
  if (a.numel() == 0 || b.numel() == 0) return false;
  const auto span = [](const Tensor& t) {
    int64_t last = 0;
    for (int d = 0; d < t.dim(); ++d) last += (t.size(d) - 1) * t.stride(d);
    const char* begin = static_cast<const char*>(t.raw_data());
    return std::pair<const char*, const char*>{begin, begin + (last + 1) * dtype_size(t.dtype())};
  };
  const auto [a0, a1] = span(a);
  const auto [b0, b1] = span(b);
  return a0 < b1 && b0 < a1;
}

void check_batched_linear(Tensor& out, const Tensor& x, const Tensor& weight) {
  constexpr const char* op = "batched_linear";
  check_last_dim_contiguous(x, 3, op, "x");
  check_last_dim_contiguous(out, 3, op, "out");
  check_contiguous(weight, op, "weight");
  CHECK_EQ(weight.dim(), 3) << op << ": weight " << weight.to_string() << " (want [B, n, k])";
  CHECK(x.size(0) == weight.size(0) && x.size(2) == weight.size(2))
      << op << ": x " << x.to_string() << " (want [B, m, k]) vs weight " << weight.to_string() << " (want [B, n, k])";
  CHECK(out.size(0) == x.size(0) && out.size(1) == x.size(1) && out.size(2) == weight.size(1))
      << op << ": out " << out.to_string() << " for x " << x.to_string() << ", weight " << weight.to_string()
      << " (want [B, m, n])";
  CHECK(!spans_overlap(out, x)) << op << ": out " << out.to_string() << " must not overlap x " << x.to_string();
  check_same_device(x, out, op);
  check_same_device(x, weight, op);
  if (x.device().is_cpu()) {
    check_dtype(x, DType::kF32, op, "x");
    check_dtype(out, DType::kF32, op, "out");
    check_f32_or_bf16(weight, op, "weight");
    return;
  }
  check_float(x, op, "x");
  check_dtype(weight, x.dtype(), op, "weight");
  check_dtype(out, x.dtype(), op, "out");
}

void check_mla_rotary_and_cache(const Tensor& positions, const Tensor& q_pe, Tensor& q_out, Tensor& k_pe,
                                const Tensor& kv_c, const Tensor& cos_sin_cache, int64_t interleaved,
                                Tensor& latent_cache, const Tensor& slot_mapping) {
  constexpr const char* op = "mla_rotary_and_cache";
  check_contiguous(positions, op, "positions");
  check_contiguous(slot_mapping, op, "slot_mapping");
  check_contiguous(cos_sin_cache, op, "cos_sin_cache");
  check_last_dim_contiguous(q_pe, 3, op, "q_pe");
  check_last_dim_contiguous(q_out, 3, op, "q_out");
  check_rows(k_pe, op, "k_pe");
  check_rows(kv_c, op, "kv_c");
  check_latent_cache(latent_cache, op);
  check_dtype(positions, DType::kI64, op, "positions");
  check_dtype(slot_mapping, DType::kI64, op, "slot_mapping");
  check_dtype(cos_sin_cache, DType::kF32, op, "cos_sin_cache");
  CHECK(interleaved == 0 || interleaved == 1) << op << ": interleaved " << interleaved << " must be 0 or 1";
  CHECK_EQ(positions.dim(), 1) << op << ": positions " << positions.to_string();
  const int64_t n = positions.size(0), rope = q_pe.size(2);
  CHECK(rope > 0 && rope % 2 == 0) << op << ": q_pe " << q_pe.to_string() << " rope dim must be even and positive";
  CHECK(q_pe.size(0) == n && q_out.shape() == q_pe.shape())
      << op << ": q_pe " << q_pe.to_string() << ", q_out " << q_out.to_string() << " for " << n << " positions";
  CHECK(k_pe.dim() == 2 && k_pe.size(0) == n && k_pe.size(1) == rope)
      << op << ": k_pe " << k_pe.to_string() << " (want [" << n << ", " << rope << "])";
  CHECK(kv_c.dim() == 2 && kv_c.size(0) == n) << op << ": kv_c " << kv_c.to_string() << " (want [" << n << ", L])";
  CHECK_EQ(latent_cache.size(2), kv_c.size(1) + rope)
      << op << ": latent_cache " << latent_cache.to_string() << " for kv_c " << kv_c.to_string() << " and k_pe "
      << k_pe.to_string() << " (want rows of L + R)";
  CHECK(slot_mapping.dim() == 1 && slot_mapping.size(0) == n)
      << op << ": slot_mapping " << slot_mapping.to_string() << " for " << n << " positions";
  CHECK(cos_sin_cache.dim() == 2 && cos_sin_cache.size(1) == rope)
      << op << ": cos_sin_cache " << cos_sin_cache.to_string() << " for rope dim " << rope;
  for (const auto& [t, name] : {std::pair<const Tensor*, const char*>{&q_out, "q_out"},
                                {&k_pe, "k_pe"},
                                {&kv_c, "kv_c"},
                                {&latent_cache, "latent_cache"}}) {
    check_dtype(*t, q_pe.dtype(), op, name);
  }
  for (const Tensor* t : std::initializer_list<const Tensor*>{&q_pe, &q_out, &k_pe, &kv_c, &cos_sin_cache,
                                                              &latent_cache, &slot_mapping}) {
    check_same_device(positions, *t, op);
  }
  CHECK(q_out.raw_data() == q_pe.raw_data() || !spans_overlap(q_out, q_pe))
      << op << ": q_out " << q_out.to_string() << " must be q_pe itself or not overlap it";
}

void check_mla_attention(Tensor& out, const Tensor& query, const Tensor& latent_cache,
                         const AttentionMetadata& metadata, float scale) {
  constexpr const char* op = "mla_attention";
  check_rows(query, op, "query");
  check_rows(out, op, "out");
  check_latent_cache(latent_cache, op);
  CHECK_EQ(query.dim(), 3) << op << ": query " << query.to_string() << " (want [n, H, L + R])";
  CHECK_EQ(out.dim(), 3) << op << ": out " << out.to_string() << " (want [n, H, L])";
  CHECK(out.size(0) == query.size(0) && out.size(1) == query.size(1))
      << op << ": out " << out.to_string() << " for query " << query.to_string();
  CHECK(query.size(2) == latent_cache.size(2)) << op << ": query " << query.to_string() << " vs latent_cache "
                                               << latent_cache.to_string() << " (both rows of L + R)";
  CHECK(out.size(2) > 0 && out.size(2) < latent_cache.size(2))
      << op << ": out " << out.to_string() << " (L) for latent_cache " << latent_cache.to_string() << " (L + R)";
  check_dtype(query, latent_cache.dtype(), op, "query");
  check_dtype(out, latent_cache.dtype(), op, "out");
  CHECK(std::isfinite(scale)) << op << ": scale " << scale;
  CHECK(!spans_overlap(out, query)) << op << ": out " << out.to_string() << " must not overlap query";
  check_same_device(query, out, op);
  check_same_device(query, latent_cache, op);
  check_attention_metadata(metadata, query, op);
  if (query.device().is_cpu()) return;
  const int64_t latent = out.size(2), rope = query.size(2) - latent;
  CHECK(latent % 16 == 0 && rope % 16 == 0 && latent + rope <= 1024)
      << op << ": L " << latent << " and R " << rope << " must be multiples of 16 with L + R <= 1024 on cuda";
}

void check_log_softmax(Tensor& out, const Tensor& logits) {
  constexpr const char* op = "log_softmax";
  check_rows(logits, op, "logits");
  check_rows(out, op, "out");
  CHECK(logits.dim() == 2 && out.shape() == logits.shape())
      << op << ": out " << out.to_string() << " vs logits " << logits.to_string();
  check_dtype(logits, DType::kF32, op, "logits");
  check_dtype(out, DType::kF32, op, "out");
  check_same_device(out, logits, op);
}

void check_top_k(Tensor& values, Tensor& ids, const Tensor& x, int64_t k) {
  constexpr const char* op = "top_k";
  check_rows(x, op, "x");
  check_rows(values, op, "values");
  check_rows(ids, op, "ids");
  CHECK_EQ(x.dim(), 2) << op << ": x " << x.to_string();
  CHECK(k >= 0 && k <= x.size(1)) << op << ": k " << k << " for x " << x.to_string();
  const Shape want{x.size(0), k};
  CHECK(values.shape() == want && ids.shape() == want) << op << ": values " << values.to_string() << ", ids "
                                                       << ids.to_string() << " for x " << x.to_string() << ", k " << k;
  check_dtype(x, DType::kF32, op, "x");
  check_dtype(values, DType::kF32, op, "values");
  check_dtype(ids, DType::kI32, op, "ids");
  check_same_device(x, values, op);
  check_same_device(x, ids, op);
}

void check_argmax(Tensor& out_ids, const Tensor& logits) {
  constexpr const char* op = "argmax";
  check_rows(logits, op, "logits");
  check_contiguous(out_ids, op, "out_ids");
  CHECK(logits.dim() == 2 && logits.size(1) > 0) << op << ": logits " << logits.to_string();
  CHECK(out_ids.dim() == 1 && out_ids.size(0) == logits.size(0))
      << op << ": out_ids " << out_ids.to_string() << " for logits " << logits.to_string();
  check_dtype(logits, DType::kF32, op, "logits");
  check_dtype(out_ids, DType::kI32, op, "out_ids");
  check_same_device(out_ids, logits, op);
}

void check_quantize_operands(const Tensor& out, const Tensor& x, const char* op) {
  check_contiguous(x, op, "x");
  check_contiguous(out, op, "out");
  CHECK(x.dim() == 2 && out.shape() == x.shape()) << op << ": out " << out.to_string() << " for x " << x.to_string();
  CHECK(out.dtype() == DType::kFP8E4M3 || out.dtype() == DType::kI8)
      << op << ": out " << out.to_string() << " must be fp8_e4m3 or i8";
  check_same_device(x, out, op);
  if (x.device().is_cpu()) {
    check_dtype(x, DType::kF32, op, "x");
  } else {
    check_float(x, op, "x");
  }
}

void check_dynamic_scaled_quantize(Tensor& out, Tensor& scales, const Tensor& x) {
  constexpr const char* op = "dynamic_scaled_quantize";
  check_quantize_operands(out, x, op);
  check_contiguous(scales, op, "scales");
  check_dtype(scales, DType::kF32, op, "scales");
  check_same_device(x, scales, op);
  CHECK(scales.dim() == 2 && scales.size(0) == x.size(0) && scales.size(1) >= 1 && x.size(1) % scales.size(1) == 0)
      << op << ": scales " << scales.to_string() << " for x " << x.to_string();
}

void check_static_scaled_quantize(Tensor& out, const Tensor& x, const Tensor& scale) {
  constexpr const char* op = "static_scaled_quantize";
  check_quantize_operands(out, x, op);
  check_contiguous(scale, op, "scale");
  check_dtype(scale, DType::kF32, op, "scale");
  check_same_device(x, scale, op);
  CHECK(scale.numel() == 1) << op << ": scale " << scale.to_string() << " must hold one value";
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
// The quantized output of the fused per-token ops: out [n, d] fp8_e4m3 or i8 and scales [n, G] f32 (G dividing d),
// both contiguous, on x's device.
void check_per_token_quant_out(const Tensor& out, const Tensor& scales, const Tensor& x, int64_t d, const char* op) {
  check_contiguous(out, op, "out");
  check_contiguous(scales, op, "scales");
  CHECK(out.dtype() == DType::kFP8E4M3 || out.dtype() == DType::kI8)
      << op << ": out " << out.to_string() << " must be fp8_e4m3 or i8";
  check_dtype(scales, DType::kF32, op, "scales");
  CHECK(out.dim() == 2 && out.size(0) == x.size(0) && out.size(1) == d)
      << op << ": out " << out.to_string() << " for x " << x.to_string();
  CHECK(scales.dim() == 2 && scales.size(0) == x.size(0) && scales.size(1) >= 1 && d % scales.size(1) == 0)
      << op << ": scales " << scales.to_string() << " for x " << x.to_string() << " (want [n, groups dividing " << d
      << "])";
  check_same_device(x, out, op);
  check_same_device(x, scales, op);
}

void check_rms_norm_quant(Tensor& out, Tensor& scales, const Tensor& x, const Tensor& weight, float /*eps*/) {
  constexpr const char* op = "rms_norm_quant";
  check_norm_operands(x, x, weight, op);
  check_per_token_quant_out(out, scales, x, x.size(1), op);
}

void check_fused_add_rms_norm_quant(Tensor& out, Tensor& scales, const Tensor& x, Tensor& residual,
                                    const Tensor& weight, float /*eps*/) {
  constexpr const char* op = "fused_add_rms_norm_quant";
  check_norm_operands(residual, x, weight, op);
  CHECK(residual.raw_data() != x.raw_data() || x.numel() == 0) << op << ": residual must not alias x";
  check_per_token_quant_out(out, scales, x, x.size(1), op);
}

void check_silu_and_mul_quant(Tensor& out, Tensor& scales, const Tensor& x) {
  constexpr const char* op = "silu_and_mul_quant";
  check_rows(x, op, "x");
  CHECK(x.dim() == 2 && x.size(1) % 2 == 0) << op << ": x " << x.to_string() << " (want [n, 2d])";
  if (x.device().is_cpu()) {
    check_dtype(x, DType::kF32, op, "x");
  } else {
    check_float(x, op, "x");
  }
  check_per_token_quant_out(out, scales, x, x.size(1) / 2, op);
}


void check_scaled_mm(Tensor& out, const Tensor& a, const Tensor& a_scales, const Tensor& b, const Tensor& b_scales,
                     const Tensor* bias) {
  constexpr const char* op = "scaled_mm";
  for (const auto& [t, name] : {std::pair<const Tensor*, const char*>{&a, "a"},
                                {&a_scales, "a_scales"},
                                {&b, "b"},
                                {&b_scales, "b_scales"},
                                {&out, "out"}}) {
    check_contiguous(*t, op, name);
    check_same_device(a, *t, op);
  }
  CHECK(a.dim() == 2 && b.dim() == 2 && out.dim() == 2 && a.size(1) == b.size(1) && out.size(0) == a.size(0) &&
        out.size(1) == b.size(0))
      << op << ": a " << a.to_string() << ", b " << b.to_string() << ", out " << out.to_string();
  CHECK((a.dtype() == DType::kFP8E4M3 || a.dtype() == DType::kI8) && b.dtype() == a.dtype())
      << op << ": a " << a.to_string() << " and b " << b.to_string() << " must both be fp8_e4m3 or both i8";
  check_dtype(a_scales, DType::kF32, op, "a_scales");
  check_dtype(b_scales, DType::kF32, op, "b_scales");
  const int64_t m = a.size(0), n = b.size(0), k = a.size(1);
  const bool a_tensor = a_scales.numel() == 1 && a_scales.dim() <= 1;
  const bool a_token = a_scales.dim() == 2 && a_scales.size(0) == m && a_scales.size(1) == 1;
  const bool a_group = a_scales.dim() == 2 && a_scales.size(0) == m && k % 128 == 0 && a_scales.size(1) == k / 128;
  const bool b_tensor = b_scales.numel() == 1 && b_scales.dim() <= 1;
  const bool b_channel = b_scales.dim() == 1 && b_scales.size(0) == n;
  const bool b_block =
      b_scales.dim() == 2 && b_scales.size(0) == ceil_div(n, 128) && b_scales.size(1) == ceil_div(k, 128);
  CHECK(a_tensor || a_token || a_group) << op << ": a_scales " << a_scales.to_string() << " for a " << a.to_string();
  CHECK(b_tensor || b_channel || b_block) << op << ": b_scales " << b_scales.to_string() << " for b " << b.to_string();
  CHECK(b_block ? a_group : !(a_group && !a_token))
      << op << ": 128-block weight scales go with per-token-group activation scales (a_scales " << a_scales.to_string()
      << ", b_scales " << b_scales.to_string() << ")";
  if (bias != nullptr) {
    check_contiguous(*bias, op, "bias");
    check_same_device(a, *bias, op);
    CHECK(bias->dim() == 1 && bias->size(0) == n) << op << ": bias " << bias->to_string();
    CHECK(bias->dtype() == DType::kF32 || bias->dtype() == out.dtype()) << op << ": bias " << bias->to_string();
  }
  if (a.device().is_cpu()) {
    check_dtype(out, DType::kF32, op, "out");
  } else {
    check_float(out, op, "out");
  }
}

// What both W4A16 ops check of their activations: x [m, k] and out [m, n] (not aliased), the act-order permutation
// perm [k] i32, bias [n] f32 or out's dtype; f32 on the CPU, bf16 / f16 (out in x's dtype) on CUDA.
void check_w4a16_activations(const Tensor& out, const Tensor& x, const Tensor* perm, const Tensor* bias,
                             const char* op) {
  CHECK(out.raw_data() != x.raw_data() || out.numel() == 0) << op << ": out must not alias x";
  if (perm != nullptr) {
    check_contiguous(*perm, op, "perm");
    check_same_device(x, *perm, op);
    check_dtype(*perm, DType::kI32, op, "perm");
    CHECK(perm->dim() == 1 && perm->size(0) == x.size(1)) << op << ": perm " << perm->to_string();
  }
  if (bias != nullptr) {
    check_contiguous(*bias, op, "bias");
    check_same_device(x, *bias, op);
    CHECK(bias->dim() == 1 && bias->size(0) == out.size(1)) << op << ": bias " << bias->to_string();
    CHECK(bias->dtype() == DType::kF32 || bias->dtype() == out.dtype()) << op << ": bias " << bias->to_string();
  }
  if (x.device().is_cpu()) {
    check_dtype(x, DType::kF32, op, "x");
    check_dtype(out, DType::kF32, op, "out");
  } else {
    CHECK(x.dtype() == DType::kBF16 || x.dtype() == DType::kF16)
        << op << ": x " << x.to_string() << " must be bf16 or f16";
    CHECK(out.dtype() == x.dtype()) << op << ": out " << out.to_string() << " vs x " << x.to_string();
  }
}

void check_w4a16_linear(Tensor& out, const Tensor& x, const Tensor& qweight, const Tensor& scales, const Tensor& zeros,
                        const Tensor* perm, const Tensor* bias) {
  constexpr const char* op = "w4a16_linear";
  check_rows(x, op, "x");
  check_rows(out, op, "out");
  for (const auto& [t, name] :
       {std::pair<const Tensor*, const char*>{&qweight, "qweight"}, {&scales, "scales"}, {&zeros, "zeros"}}) {
    check_contiguous(*t, op, name);
    check_same_device(x, *t, op);
  }
  check_same_device(x, out, op);
  check_dtype(qweight, DType::kU8, op, "qweight");
  check_dtype(scales, DType::kF32, op, "scales");
  check_dtype(zeros, DType::kU8, op, "zeros");
  CHECK(x.dim() == 2 && out.dim() == 2 && qweight.dim() == 2 && x.size(0) == out.size(0) &&
        qweight.size(0) == out.size(1) && qweight.size(1) * 2 == x.size(1))
      << op << ": x " << x.to_string() << ", qweight " << qweight.to_string() << ", out " << out.to_string();
  CHECK(scales.dim() == 2 && scales.size(0) == qweight.size(0) && scales.size(1) >= 1 &&
        x.size(1) % scales.size(1) == 0 && zeros.shape() == scales.shape())
      << op << ": scales " << scales.to_string() << ", zeros " << zeros.to_string() << " for x " << x.to_string();
  check_w4a16_activations(out, x, perm, bias, op);
}

void check_w4a16_gemm_pack(Tensor& packed, Tensor& gemm_scales, Tensor& gemm_zeros, const Tensor& qweight,
                           const Tensor& scales, const Tensor& zeros) {
  constexpr const char* op = "w4a16_gemm_pack";
  for (const auto& [t, name] : {std::pair<const Tensor*, const char*>{&packed, "packed"},
                                {&gemm_scales, "gemm_scales"},
                                {&gemm_zeros, "gemm_zeros"},
                                {&qweight, "qweight"},
                                {&scales, "scales"},
                                {&zeros, "zeros"}}) {
    check_contiguous(*t, op, name);
    check_same_device(qweight, *t, op);
  }
  check_dtype(packed, DType::kU8, op, "packed");
  check_dtype(qweight, DType::kU8, op, "qweight");
  check_dtype(scales, DType::kF32, op, "scales");
  check_dtype(zeros, DType::kU8, op, "zeros");
  CHECK(gemm_scales.dtype() == DType::kBF16 || gemm_scales.dtype() == DType::kF16)
      << op << ": gemm_scales " << gemm_scales.to_string() << " must be bf16 or f16";
  check_dtype(gemm_zeros, gemm_scales.dtype(), op, "gemm_zeros");
  CHECK(qweight.dim() == 2 && scales.dim() == 2 && zeros.shape() == scales.shape() &&
        scales.size(0) == qweight.size(0) && scales.size(1) >= 1 && (qweight.size(1) * 2) % scales.size(1) == 0)
      << op << ": qweight " << qweight.to_string() << ", scales " << scales.to_string() << ", zeros "
      << zeros.to_string();
  const int64_t n = qweight.size(0), k = qweight.size(1) * 2, groups = scales.size(1);
  CHECK(n % 16 == 0 && k % 16 == 0) << op << ": n " << n << " and k " << k << " must be multiples of 16";
  CHECK(packed.shape() == Shape({k / 16, 8 * n}))
      << op << ": packed " << packed.to_string() << " for n " << n << ", k " << k;
  CHECK(gemm_scales.shape() == Shape({groups, n}) && gemm_zeros.shape() == gemm_scales.shape())
      << op << ": gemm_scales " << gemm_scales.to_string() << ", gemm_zeros " << gemm_zeros.to_string();
}

void check_w4a16_gemm(Tensor& out, const Tensor& x, const Tensor& packed, const Tensor& gemm_scales,
                      const Tensor* gemm_zeros, const Tensor* perm, const Tensor* bias) {
  constexpr const char* op = "w4a16_gemm";
  check_rows(x, op, "x");
  check_rows(out, op, "out");
  check_rows(packed, op, "packed");
  check_rows(gemm_scales, op, "gemm_scales");
  check_same_device(x, out, op);
  check_same_device(x, packed, op);
  check_same_device(x, gemm_scales, op);
  check_dtype(packed, DType::kU8, op, "packed");
  CHECK(gemm_scales.dtype() == DType::kBF16 || gemm_scales.dtype() == DType::kF16)
      << op << ": gemm_scales " << gemm_scales.to_string() << " must be bf16 or f16";
  CHECK(x.dim() == 2 && out.dim() == 2 && packed.dim() == 2 && gemm_scales.dim() == 2 && x.size(0) == out.size(0))
      << op << ": x " << x.to_string() << ", out " << out.to_string();
  const int64_t n = out.size(1), k = x.size(1);
  CHECK(n % 16 == 0 && k % 16 == 0 && packed.size(0) == k / 16 && packed.size(1) == 8 * n)
      << op << ": packed " << packed.to_string() << " for x " << x.to_string() << ", out " << out.to_string();
  CHECK(gemm_scales.size(1) == n && gemm_scales.size(0) >= 1 && k % gemm_scales.size(0) == 0)
      << op << ": gemm_scales " << gemm_scales.to_string() << " for x " << x.to_string();
  if (gemm_zeros != nullptr) {
    check_rows(*gemm_zeros, op, "gemm_zeros");
    check_same_device(x, *gemm_zeros, op);
    CHECK(gemm_zeros->shape() == gemm_scales.shape() && gemm_zeros->dtype() == gemm_scales.dtype())
        << op << ": gemm_zeros " << gemm_zeros->to_string() << " vs gemm_scales " << gemm_scales.to_string();
  }
  check_w4a16_activations(out, x, perm, bias, op);
}

}  // namespace

// The ops (declared in ops.h, where each one's type comes from). Schemas in TORCH_LIBRARY syntax: `Tensor!` marks
// a written argument, a Params struct is spelled as its flattened fields (SchemaArgTypes in ops.h);
// tests/kernels/op_registry_test.cc holds every schema to its C++ signature.
decltype(embedding) embedding("embedding", "embedding(Tensor! out, Tensor ids, Tensor table) -> ()", check_embedding);
decltype(masked_embedding) masked_embedding(
    "masked_embedding", "masked_embedding(Tensor! out, Tensor ids, Tensor table, int vocab_start) -> ()",
    check_masked_embedding);
decltype(rms_norm) rms_norm("rms_norm", "rms_norm(Tensor! out, Tensor x, Tensor weight, float eps) -> ()",
                            check_rms_norm);
decltype(fused_add_rms_norm) fused_add_rms_norm(
    "fused_add_rms_norm", "fused_add_rms_norm(Tensor! x, Tensor! residual, Tensor weight, float eps) -> ()",
    check_fused_add_rms_norm);
decltype(silu_and_mul) silu_and_mul("silu_and_mul", "silu_and_mul(Tensor! out, Tensor x) -> ()", check_silu_and_mul);
decltype(add) add("add", "add(Tensor! a, Tensor b) -> ()", check_add);
decltype(rotary_embedding) rotary_embedding(
    "rotary_embedding",
    "rotary_embedding(Tensor positions, Tensor! query, Tensor! key, int head_dim, Tensor cos_sin_cache) -> ()",
    check_rotary_embedding);
decltype(linear) linear("linear", "linear(Tensor! out, Tensor x, Tensor weight, Tensor? bias) -> ()", check_linear);
decltype(dynamic_scaled_quantize) dynamic_scaled_quantize(
    "dynamic_scaled_quantize", "dynamic_scaled_quantize(Tensor! out, Tensor! scales, Tensor x) -> ()",
    check_dynamic_scaled_quantize);
decltype(static_scaled_quantize) static_scaled_quantize(
    "static_scaled_quantize", "static_scaled_quantize(Tensor! out, Tensor x, Tensor scale) -> ()",
    check_static_scaled_quantize);
decltype(rms_norm_quant) rms_norm_quant(
    "rms_norm_quant", "rms_norm_quant(Tensor! out, Tensor! scales, Tensor x, Tensor weight, float eps) -> ()",
    check_rms_norm_quant);
decltype(fused_add_rms_norm_quant) fused_add_rms_norm_quant(
    "fused_add_rms_norm_quant",
    "fused_add_rms_norm_quant(Tensor! out, Tensor! scales, Tensor x, Tensor! residual, Tensor weight, float eps) -> ()",
    check_fused_add_rms_norm_quant);
decltype(silu_and_mul_quant) silu_and_mul_quant("silu_and_mul_quant",
                                                "silu_and_mul_quant(Tensor! out, Tensor! scales, Tensor x) -> ()",
                                                check_silu_and_mul_quant);
decltype(scaled_mm) scaled_mm(
    "scaled_mm", "scaled_mm(Tensor! out, Tensor a, Tensor a_scales, Tensor b, Tensor b_scales, Tensor? bias) -> ()",
    check_scaled_mm);
decltype(w4a16_linear) w4a16_linear(
    "w4a16_linear",
    "w4a16_linear(Tensor! out, Tensor x, Tensor qweight, Tensor scales, Tensor zeros, Tensor? perm, Tensor? bias) "
    "-> ()",
    check_w4a16_linear);
decltype(w4a16_gemm_pack) w4a16_gemm_pack(
    "w4a16_gemm_pack",
    "w4a16_gemm_pack(Tensor! packed, Tensor! gemm_scales, Tensor! gemm_zeros, Tensor qweight, Tensor scales, "
    "Tensor zeros) -> ()",
    check_w4a16_gemm_pack);
decltype(w4a16_gemm) w4a16_gemm(
    "w4a16_gemm",
    "w4a16_gemm(Tensor! out, Tensor x, Tensor packed, Tensor gemm_scales, Tensor? gemm_zeros, Tensor? perm, "
    "Tensor? bias) -> ()",
    check_w4a16_gemm);
decltype(reshape_and_cache) reshape_and_cache(
    "reshape_and_cache",
    "reshape_and_cache(Tensor key, Tensor value, Tensor! key_cache, Tensor! value_cache, Tensor slot_mapping) -> ()",
    check_reshape_and_cache);
decltype(rotary_embedding_and_cache) rotary_embedding_and_cache(
    "rotary_embedding_and_cache",
    "rotary_embedding_and_cache(Tensor positions, Tensor! query, Tensor! key, Tensor value, int head_dim, "
    "Tensor cos_sin_cache, Tensor! key_cache, Tensor! value_cache, Tensor slot_mapping) -> ()",
    check_rotary_embedding_and_cache);
decltype(qk_norm_rotary_embedding_and_cache) qk_norm_rotary_embedding_and_cache(
    "qk_norm_rotary_embedding_and_cache",
    "qk_norm_rotary_embedding_and_cache(Tensor positions, Tensor! query, Tensor! key, Tensor value, int head_dim, "
    "Tensor cos_sin_cache, Tensor q_weight, Tensor k_weight, float eps, Tensor! key_cache, Tensor! value_cache, "
    "Tensor slot_mapping) -> ()",
    check_qk_norm_rotary_embedding_and_cache);
decltype(paged_attention) paged_attention(
    "paged_attention",
    "paged_attention(Tensor! out, Tensor query, Tensor key_cache, Tensor value_cache, Tensor query_start_loc, "
    "Tensor seq_lens, Tensor block_table, Tensor slot_mapping, int num_reqs, int num_decode_tokens, "
    "int max_query_len, int max_seq_len, Tensor? workspace, float scale, int sliding_window) -> ()",
    check_paged_attention);
decltype(batched_linear) batched_linear("batched_linear", "batched_linear(Tensor! out, Tensor x, Tensor weight) -> ()",
                                        check_batched_linear);
decltype(mla_rotary_and_cache) mla_rotary_and_cache(
    "mla_rotary_and_cache",
    "mla_rotary_and_cache(Tensor positions, Tensor q_pe, Tensor! q_out, Tensor! k_pe, Tensor kv_c, "
    "Tensor cos_sin_cache, int interleaved, Tensor! latent_cache, Tensor slot_mapping) -> ()",
    check_mla_rotary_and_cache);
decltype(mla_attention) mla_attention(
    "mla_attention",
    "mla_attention(Tensor! out, Tensor query, Tensor latent_cache, Tensor query_start_loc, Tensor seq_lens, "
    "Tensor block_table, Tensor slot_mapping, int num_reqs, int num_decode_tokens, int max_query_len, "
    "int max_seq_len, Tensor? workspace, float scale) -> ()",
    check_mla_attention);
decltype(log_softmax) log_softmax("log_softmax", "log_softmax(Tensor! out, Tensor logits) -> ()", check_log_softmax);
decltype(top_k) top_k("top_k", "top_k(Tensor! values, Tensor! ids, Tensor x, int k) -> ()", check_top_k);
decltype(argmax) argmax("argmax", "argmax(Tensor! out_ids, Tensor logits) -> ()", check_argmax);

int64_t paged_attention_workspace_elems(int64_t max_num_tokens, int64_t num_heads, int64_t head_dim,
                                        int64_t max_model_len) {
  // Split-K pays only while the batch has too few CTAs to fill the GPU (tens of decode tokens) and the
  // contexts are long; the decode kernel uses at most 32 splits of >= 32 keys (attention_decode.cu). Each split
  // keeps head_dim + 2 floats (unnormalised output, max, sum) per token and head; larger batches get fewer
  // splits or none. Mistral-7B shape, long contexts: 64 x 32 x 32 x 130 floats = 34 MB. The counters lead.
  constexpr int64_t kMaxSplitTokens = 64, kMaxSplits = 32, kMinKeysPerSplit = 32;
  CHECK(max_num_tokens >= 0 && num_heads > 0 && head_dim > 0 && max_model_len >= 0)
      << "paged_attention_workspace_elems: bad sizes";
  const int64_t splits = std::min(kMaxSplits, (max_model_len + kMinKeysPerSplit - 1) / kMinKeysPerSplit);
  if (splits <= 1 || max_num_tokens == 0) return 0;
  return kPagedAttentionWorkspaceCounters +
         std::min(max_num_tokens, kMaxSplitTokens) * num_heads * splits * (head_dim + 2);
}

}  // namespace llmserve::ops
