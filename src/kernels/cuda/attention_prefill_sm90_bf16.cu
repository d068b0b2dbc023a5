// The SM90 prefill kernel's bf16 instantiations (attention_prefill_sm90.cuh; the other dtype compiles beside).
#include "kernels/cuda/attention_prefill_sm90.cuh"

namespace llmserve::cuda {

template void launch_prefill_sm90<__nv_bfloat16, 64>(const PagedAttentionParams&, cudaStream_t);
template void launch_prefill_sm90<__nv_bfloat16, 128>(const PagedAttentionParams&, cudaStream_t);

}  // namespace llmserve::cuda
