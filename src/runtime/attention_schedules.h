// AttentionSchedules: the work lists of the Hopper attention kernels whose schedules the host plans
// (kernels/prefill_schedule.h for FlashInfer's SM90 prefill, kernels/mla_schedule.h for its SM90 MLA kernel), owned by
// a ModelRunner: page-locked host rows planned once per step from the step's lengths, copied to fixed device rows
// with the step's inputs, and bound into the step's AttentionMetadata. Because the device rows never move and every
// list is planned for the very batch that runs (a FULL graph's padded one too), a captured graph replays whatever
// the current step planned.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "kernels/ops.h"
#include "model/causal_lm.h"

namespace llmserve {

class AttentionSchedules {
 public:
  AttentionSchedules() = default;
  // Sizes the lists of the kernels that can run `model`'s attention on its device, for steps of up to
  // max_num_tokens tokens over max_num_reqs requests: none on the CPU, off SM90, for a tensor-parallel model (a
  // rank's heads differ from the config's; its calls run the portable kernels), or when a kernel's A/B switch is 0.
  // The MLA kernel's split-K partials live in `workspace` (the runner's zeroed attention workspace) past its
  // counters: a plan never splits more rows than fit there.
  AttentionSchedules(const CausalLM& model, int64_t max_num_tokens, int64_t max_num_reqs, const Tensor& workspace);

  bool plans_prefill() const { return prefill_.host.defined(); }
  bool plans_mla() const { return mla_.host.defined(); }

  // Plans the step from its host rows (query_start_loc [num_reqs + 1], seq_lens [num_reqs]; the first num_decode
  // requests decode one token): the prefill kernel's lists when some request prefills, the MLA kernel's for every
  // step with a request. The host rows may be rewritten only once the previous step's copy has read them (the
  // runner's inputs_copied_ event).
  void plan(const int32_t* query_start_loc, const int32_t* seq_lens, int64_t num_reqs, int64_t num_decode,
            int64_t block_table_stride);
  // Enqueues the copy of the planned lists' used columns on the current stream (before the step's kernels).
  void upload();
  // Points md at the planned lists (an undefined `rows` for a kernel with nothing planned: its call runs our own
  // kernels).
  void bind(ops::AttentionMetadata& md) const;

 private:
  struct Lists {
    Tensor host, device;  // i32 [rows, width]: page-locked / on the device
    int64_t used = 0;     // columns the current plan wrote (0: nothing planned)
  };
  static void copy_used(const Lists& lists);

  Lists prefill_, mla_;
  ops::PrefillSchedule prefill_plan_;  // what the step planned (rows unset: bind() sets them)
  ops::MlaSchedule mla_plan_;
  int64_t mla_partial_rows_ = 0;  // partial rows the workspace holds
};

}  // namespace llmserve
