// The Hopper attention kernels' per-step work lists (see attention_schedules.h): sized once, planned per step on
// the host, copied with the step's inputs.
#include "runtime/attention_schedules.h"

#include <algorithm>

#include "core/logging.h"
#include "kernels/mla_schedule.h"
#include "kernels/prefill_schedule.h"

namespace llmserve {
namespace {

// FlashInfer's MLA kernel is built for bf16 over a 512-wide latent with 64 rotary dims (DeepSeek-V2 / V3): other
// MLA models never take it, so planning for them would be wasted host time.
bool mla_kernel_takes(const CausalLM& model) {
  const ModelConfig& c = model.config();
  return c.mla && c.mla->kv_lora_rank == 512 && c.mla->qk_rope_head_dim == 64 &&
         model.activation_dtype() == DType::kBF16;
}

}  // namespace

AttentionSchedules::AttentionSchedules(const CausalLM& model, int64_t max_num_tokens, int64_t max_num_reqs,
                                       const Tensor& workspace) {
  const Device device = model.device();
  if (device.is_cpu() || !model.cuda_graph_capturable()) return;
  const ModelConfig& c = model.config();
  auto allocate = [&](Lists& lists, int64_t rows, int64_t width) {
    lists.host = Tensor::empty_pinned({rows, width}, DType::kI32);
    lists.device = Tensor::empty({rows, width}, DType::kI32, device);
  };
  // The prefill kernel reads a key and a value cache at a head size it has.
  if (const int64_t ctas = ops::sm90_prefill_ctas(device);
      ctas > 0 && model.kv_cache_spec().has_value && ops::prefill_schedule_tile(c.head_dim) > 0) {
    allocate(prefill_, ops::kPrefillScheduleRows,
             ops::prefill_schedule_width(max_num_tokens, max_num_reqs, c.num_attention_heads, c.head_dim, ctas));
    prefill_plan_.num_heads = c.num_attention_heads;
    prefill_plan_.head_dim = c.head_dim;
    prefill_plan_.num_ctas = ctas;
  }
  if (const int64_t ctas = ops::sm90_mla_ctas(device); ctas > 0 && mla_kernel_takes(model) && workspace.defined()) {
    allocate(mla_, ops::kMlaScheduleRows,
             ops::mla_schedule_width(max_num_tokens, max_num_reqs, c.num_attention_heads, ctas));
    const int64_t scratch_bytes = (workspace.numel() - ops::kPagedAttentionWorkspaceCounters) * 4;
    mla_partial_rows_ = ops::mla_partial_capacity(scratch_bytes, c.mla->kv_lora_rank, 2);
    mla_plan_.num_heads = c.num_attention_heads;
    mla_plan_.num_ctas = ctas;
  }
}

void AttentionSchedules::plan(const int32_t* query_start_loc, const int32_t* seq_lens, int64_t num_reqs,
                              int64_t num_decode, int64_t block_table_stride) {
  prefill_plan_.num_works = 0;
  prefill_.used = 0;
  if (plans_prefill() && num_decode < num_reqs) {
    prefill_plan_.num_works = ops::plan_prefill_schedule(
        prefill_.host.data<int32_t>(), prefill_.host.size(1), query_start_loc, seq_lens, num_reqs, num_decode,
        block_table_stride, prefill_plan_.num_heads, prefill_plan_.head_dim, prefill_plan_.num_ctas);
    // Per work columns, and the CTAs' work_indptr.
    if (prefill_plan_.num_works > 0) prefill_.used = std::max(prefill_plan_.num_works, prefill_plan_.num_ctas + 1);
  }
  mla_.used = 0;
  if (plans_mla()) {
    const int64_t heads = mla_plan_.num_heads, ctas = mla_plan_.num_ctas;
    mla_plan_ = ops::plan_mla_schedule(mla_.host.data<int32_t>(), mla_.host.size(1), query_start_loc, seq_lens,
                                       num_reqs, block_table_stride, heads, ctas, mla_partial_rows_);
    // Per work columns, and the per-CTA / per-group ones (at most num_ctas + 1).
    if (mla_plan_.num_works > 0) mla_.used = std::max(mla_plan_.num_works, ctas + 1);
  }
}

void AttentionSchedules::copy_used(const Lists& lists) {
  if (lists.used == 0) return;
  const int64_t rows = lists.host.size(0), width = lists.host.size(1);
  lists.device.as_strided({rows, lists.used}, {width, 1})
      .copy_from(lists.host.as_strided({rows, lists.used}, {width, 1}));
}

void AttentionSchedules::upload() {
  copy_used(prefill_);
  copy_used(mla_);
}

void AttentionSchedules::bind(ops::AttentionMetadata& md) const {
  md.prefill_schedule = prefill_plan_;
  md.prefill_schedule.rows = prefill_.used > 0 ? prefill_.device : Tensor();
  md.mla_schedule = mla_plan_;
  md.mla_schedule.rows = mla_.used > 0 ? mla_.device : Tensor();
}

}  // namespace llmserve
