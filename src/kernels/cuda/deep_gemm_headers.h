// The DeepGEMM headers that deep_gemm_block_fp8.cu hands to NVRTC, embedded at build time: the array is defined in
// deep_gemm_headers.cc, which src/kernels/CMakeLists.txt generates from the flashinfer-python wheel's copies.
#pragma once

namespace llmserve::cuda {

// One header, under the name its #include directives spell (the kernel source's <deep_gemm/...>, or the quoted
// names fp8_gemm_impl.cuh uses for its siblings).
struct DeepGemmHeader {
  const char* include_name;
  const char* text;
};
extern const DeepGemmHeader kDeepGemmHeaders[];
extern const int kNumDeepGemmHeaders;

}  // namespace llmserve::cuda
