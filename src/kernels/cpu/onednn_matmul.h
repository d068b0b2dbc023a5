// oneDNN matmul for `linear`: one primitive per (k, weight dtype), rows and columns given at run time, created
// on first use and kept for the process (a handful per model). f32 weights run in f32; bf16 weights run on bf16
// activations (x rounded to bf16, f32 accumulation: AMX / AVX512-BF16 where the CPU has them).
#pragma once

#include "core/tensor.h"

namespace llmserve::cpu {

// How the matmul is spread over cores. kPool: column slices of W on llmserve's ThreadPool, each slice one
// single-threaded oneDNN call (workers sleep when idle, so nothing spins against the other ops' threads).
// kOpenmp: one call threaded by oneDNN's OpenMP runtime (faster on an idle machine, collapses when the cores
// are oversubscribed: bench/RESULTS.md).
enum class OnednnThreading { kPool, kOpenmp };

// out[m, n] = x[m, k] @ weight[n, k]^T (no bias). Returns false, having written nothing, when oneDNN cannot run
// this case on this CPU (no engine, or no kernel for the dtype); the caller then uses its fallback.
bool onednn_linear(Tensor& out, const Tensor& x, const Tensor& weight, OnednnThreading threading);

}  // namespace llmserve::cpu
