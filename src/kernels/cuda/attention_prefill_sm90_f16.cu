// The SM90 prefill kernel's f16 instantiations (attention_prefill_sm90.cuh; the other dtype compiles beside).
#include "kernels/cuda/attention_prefill_sm90.cuh"

namespace llmserve::cuda {

template void launch_prefill_sm90<__half, 64>(const PagedAttentionParams&, cudaStream_t);
template void launch_prefill_sm90<__half, 128>(const PagedAttentionParams&, cudaStream_t);

}  // namespace llmserve::cuda
