// DeepGEMM's block-FP8 kernel (deep_gemm/fp8_gemm_impl.cuh) compiled by NVRTC per (n, k, tile config), the config
// chosen by DeepGEMM's own heuristic (get_best_gemm_config: fewest waves, then the fullest last wave), launched
// persistent over the SMs with TMA descriptors built here. Compiled kernels live for the process and on disk (the
// user's cache dir, keyed by everything the image depends on); the headers come embedded (deep_gemm_headers.cc,
// generated at build time), the CUDA headers NVRTC needs from the toolkit's include dir found at build time.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>
#include <nvrtc.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

// DeepGEMM's host-side heuristic and scheduler input (host-compilable parts of the wheel's headers).
#include <deep_gemm/jit_utils.cuh>

#include "core/cuda_stream.h"
#include "core/env.h"
#include "core/logging.h"
#include "kernels/cuda/deep_gemm_block_fp8.h"
#include "kernels/cuda/deep_gemm_headers.h"

namespace llmserve::cuda {

namespace {

constexpr uint32_t kBlockK = 128;  // the scale block: the kernel's k tile
constexpr uint32_t kNumTmaThreads = 128, kNumMathThreadsPerGroup = 128;

struct TileConfig {
  uint32_t block_m = 0, block_n = 0, num_stages = 0, multicast = 0, smem_bytes = 0;
};

// One specialisation: kernel null when compiling it failed.
struct CompiledKernel {
  cudaLibrary_t library = nullptr;
  cudaKernel_t kernel = nullptr;
  std::set<int> devices_with_smem_set;  // cudaFuncSetAttribute applies per device
};

using KernelKey = std::tuple<int64_t, int64_t, uint32_t, uint32_t, uint32_t, uint32_t>;  // n, k, m/n tile, stages, mc

TileConfig choose_config(int64_t m, int64_t n, int64_t k, int num_sms) {
  const auto [block_m, block_n, stages, multicast, smem] = deep_gemm::jit::get_best_gemm_config(
      static_cast<uint32_t>(m), static_cast<uint32_t>(n), static_cast<uint32_t>(k), 1, num_sms, false, false);
  return {static_cast<uint32_t>(block_m), static_cast<uint32_t>(block_n), static_cast<uint32_t>(stages),
          static_cast<uint32_t>(multicast), static_cast<uint32_t>(smem)};
}

// The kernel's template instance as a C++ expression (the NVRTC name expression that instantiates it).
std::string kernel_expression(int64_t n, int64_t k, const TileConfig& c) {
  const std::string shape = std::to_string(n) + ", " + std::to_string(k) + ", " + std::to_string(c.block_m) + ", " +
                            std::to_string(c.block_n) + ", " + std::to_string(kBlockK) + ", 1";
  return "&deep_gemm::fp8_gemm_kernel<" + shape + ", " + std::to_string(c.num_stages) + ", " +
         std::to_string(kNumTmaThreads) + ", " + std::to_string(kNumMathThreadsPerGroup) + ", " +
         std::to_string(c.multicast) + ", deep_gemm::SchedulerSelector<deep_gemm::GemmType::Normal, " + shape + ", " +
         std::to_string(c.multicast) + ">::type, deep_gemm::NormalSchedulerInput>";
}

constexpr const char* kKernelSource =
    "#define NVRTC_JIT_COMPILATION\n"
    "#include <deep_gemm/nvrtc_std.cuh>\n"
    "#include <cuda_bf16.h>\n"
    "#include <cuda_fp8.h>\n"
    "#include <deep_gemm/nvrtc_cutlass.cuh>\n"
    "#include <deep_gemm/fp8_gemm_impl.cuh>\n";

// TensorRT-LLM's NVRTC flags for this kernel, then the CUDA headers (cuda_fp8.h needs CCCL's <nv/target>).
std::vector<std::string> nvrtc_options() {
  const std::string include = std::string("-I") + LLMSERVE_CUDA_INCLUDE_DIR;
  return {"-std=c++17",
          "--gpu-architecture=sm_90a",
          "-default-device",
          "--ptxas-options=-allow-expensive-optimizations=true",
          "--ptxas-options=--register-usage-level=10",
          "--diag-suppress=161,174,177,940",
          "-D__FORCE_INCLUDE_CUDA_FP16_HPP_FROM_FP16_H__=1",
          "-D__FORCE_INCLUDE_CUDA_BF16_HPP_FROM_BF16_H__=1",
          include,
          include + "/cccl"};
}

// A compiled kernel image and its mangled name.
struct Cubin {
  std::string lowered_name;
  std::string image;
};

// NVRTC-compiles the instance `expression`; nullopt (the compiler's log logged) on failure.
std::optional<Cubin> nvrtc_compile(const std::string& expression, const std::string& what) {
  std::vector<const char*> header_texts, header_names;
  for (int i = 0; i < kNumDeepGemmHeaders; ++i) {
    header_texts.push_back(kDeepGemmHeaders[i].text);
    header_names.push_back(kDeepGemmHeaders[i].include_name);
  }
  nvrtcProgram program = nullptr;
  if (nvrtcCreateProgram(&program, kKernelSource, "deep_gemm_kernel.cu", kNumDeepGemmHeaders, header_texts.data(),
                         header_names.data()) != NVRTC_SUCCESS) {
    LOG(WARNING) << what << ": nvrtcCreateProgram failed";
    return std::nullopt;
  }
  const std::vector<std::string> options = nvrtc_options();
  std::vector<const char*> option_ptrs;
  for (const std::string& o : options) option_ptrs.push_back(o.c_str());
  const char* lowered = nullptr;
  size_t size = 0;
  Cubin cubin;
  bool ok = nvrtcAddNameExpression(program, expression.c_str()) == NVRTC_SUCCESS &&
            nvrtcCompileProgram(program, static_cast<int>(option_ptrs.size()), option_ptrs.data()) == NVRTC_SUCCESS &&
            nvrtcGetLoweredName(program, expression.c_str(), &lowered) == NVRTC_SUCCESS &&
            nvrtcGetCUBINSize(program, &size) == NVRTC_SUCCESS;
  if (ok) {
    cubin.lowered_name = lowered;
    cubin.image.resize(size);
    ok = nvrtcGetCUBIN(program, cubin.image.data()) == NVRTC_SUCCESS;
  }
  if (!ok) {
    size_t log_size = 0;
    std::string log;
    if (nvrtcGetProgramLogSize(program, &log_size) == NVRTC_SUCCESS && log_size > 1) {
      log.resize(log_size);
      nvrtcGetProgramLog(program, log.data());
    }
    LOG(WARNING) << what << ": NVRTC failed:\n" << log;
  }
  nvrtcDestroyProgram(&program);
  if (!ok) return std::nullopt;
  return cubin;
}

// Where a compiled instance is kept across processes: ${XDG_CACHE_HOME:-$HOME/.cache}/llmserve/deep_gemm/<key>.cubin,
// the key a hash of everything the image depends on (source, instance, flags, embedded headers, NVRTC's version), so
// a changed header or compiler never reuses a stale image. Empty when neither variable is set.
std::filesystem::path cache_file(const std::string& expression) {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  if ((xdg == nullptr || *xdg == '\0') && (home == nullptr || *home == '\0')) return {};
  const std::filesystem::path root =
      xdg != nullptr && *xdg != '\0' ? std::filesystem::path(xdg) : std::filesystem::path(home) / ".cache";
  uint64_t hash = 1469598103934665603ull;  // FNV-1a
  auto mix = [&hash](std::string_view text) {
    for (const char ch : text) hash = (hash ^ static_cast<unsigned char>(ch)) * 1099511628211ull;
    hash = (hash ^ 0xffu) * 1099511628211ull;  // a separator: "ab" + "c" differs from "a" + "bc"
  };
  int major = 0, minor = 0;
  nvrtcVersion(&major, &minor);
  mix(std::to_string(major) + "." + std::to_string(minor));
  mix(kKernelSource);
  mix(expression);
  for (const std::string& o : nvrtc_options()) mix(o);
  for (int i = 0; i < kNumDeepGemmHeaders; ++i) {
    mix(kDeepGemmHeaders[i].include_name);
    mix(kDeepGemmHeaders[i].text);
  }
  char name[32];
  std::snprintf(name, sizeof(name), "%016llx.cubin", static_cast<unsigned long long>(hash));
  return root / "llmserve" / "deep_gemm" / name;
}

// The cached image (first line: the mangled name, then the cubin), or nullopt when absent or unreadable.
std::optional<Cubin> read_cached(const std::filesystem::path& path) {
  if (path.empty()) return std::nullopt;
  std::ifstream in(path, std::ios::binary);
  Cubin cubin;
  if (!in || !std::getline(in, cubin.lowered_name) || cubin.lowered_name.empty()) return std::nullopt;
  cubin.image.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  if (cubin.image.empty()) return std::nullopt;
  return cubin;
}

// Writes the image beside its final name, then renames it (processes compiling the same kernel never see a partial
// file). A cache that cannot be written only costs the next process a compile.
void write_cached(const std::filesystem::path& path, const Cubin& cubin) {
  if (path.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(path.parent_path(), ec);
  const std::filesystem::path tmp = path.string() + ".tmp" + std::to_string(getpid());
  {
    std::ofstream out(tmp, std::ios::binary);
    out << cubin.lowered_name << '\n';
    out.write(cubin.image.data(), static_cast<std::streamsize>(cubin.image.size()));
    if (!out) return;
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) std::filesystem::remove(tmp, ec);
}

// One specialisation from the disk cache or NVRTC, loaded; a kernel-less entry (logged) when neither works.
CompiledKernel compile(int64_t n, int64_t k, const TileConfig& c) {
  const std::string expression = kernel_expression(n, k, c);
  const std::string what = "deep_gemm: n " + std::to_string(n) + " k " + std::to_string(k) + " tile " +
                           std::to_string(c.block_m) + "x" + std::to_string(c.block_n) + " stages " +
                           std::to_string(c.num_stages) + " multicast " + std::to_string(c.multicast);
  const auto start = std::chrono::steady_clock::now();
  const std::filesystem::path path = cache_file(expression);
  std::optional<Cubin> cubin = read_cached(path);
  const bool cached = cubin.has_value();
  if (!cached) cubin = nvrtc_compile(expression, what);
  CompiledKernel out;
  if (!cubin) {
    LOG(WARNING) << what << ": no kernel; CUTLASS takes these GEMMs";
    return out;
  }
  if (cudaLibraryLoadData(&out.library, cubin->image.data(), nullptr, nullptr, 0, nullptr, nullptr, 0) != cudaSuccess ||
      cudaLibraryGetKernel(&out.kernel, out.library, cubin->lowered_name.c_str()) != cudaSuccess) {
    (void)cudaGetLastError();  // a failed load must not surface at the next launch
    LOG(WARNING) << what << ": loading the " << (cached ? "cached (" + path.string() + ")" : "compiled")
                 << " kernel failed; CUTLASS takes these GEMMs";
    out.kernel = nullptr;
    return out;
  }
  if (!cached) write_cached(path, *cubin);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  LOG(INFO) << what << ": " << (cached ? "loaded from " + path.string() : "compiled by NVRTC") << " in "
            << static_cast<int>(ms) << " ms";
  return out;
}

// A 2-D TMA descriptor over a row-major [rows, cols] tensor of `elem_bytes`-wide elements, rows `row_bytes` apart,
// loading [box_rows, box_cols] boxes.
CUtensorMap tensor_map_2d(const void* base, CUtensorMapDataType type, uint64_t rows, uint64_t cols, uint64_t row_bytes,
                          uint32_t box_rows, uint32_t box_cols, CUtensorMapSwizzle swizzle) {
  static const auto encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found) ==
              cudaSuccess &&
          found == cudaDriverEntryPointSuccess)
        << "deep_gemm: cuTensorMapEncodeTiled not found in the driver";
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  CUtensorMap map{};
  const cuuint64_t dims[2] = {cols, rows};
  const cuuint64_t strides[1] = {row_bytes};
  const cuuint32_t box[2] = {box_cols, box_rows};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult r =
      encode(&map, type, 2, const_cast<void*>(base), dims, strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
             swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  CHECK(r == CUDA_SUCCESS) << "deep_gemm: cuTensorMapEncodeTiled failed (" << static_cast<int>(r) << ") for a [" << rows
                           << ", " << cols << "] tensor";
  return map;
}

struct DeviceInfo {
  bool sm90 = false;
  int num_sms = 0;
};

DeviceInfo device_info() {
  static std::mutex mu;
  static std::map<int, DeviceInfo> by_device;
  int device = 0;
  CHECK(cudaGetDevice(&device) == cudaSuccess) << "cudaGetDevice";
  std::lock_guard<std::mutex> lock(mu);
  auto [it, added] = by_device.try_emplace(device);
  if (added) {
    int major = 0, minor = 0;
    CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
          cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) == cudaSuccess &&
          cudaDeviceGetAttribute(&it->second.num_sms, cudaDevAttrMultiProcessorCount, device) == cudaSuccess)
        << "device attributes";
    it->second.sm90 = major == 9 && minor == 0;
  }
  return it->second;
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

const char* deep_gemm_block_fp8_rejects(const CutlassScaledMM& p) {
  // Read at every call: the benchmark and the tests switch it between calls.
  if (!switch_from_env_or_die("LLMSERVE_DEEP_GEMM", true)) return "LLMSERVE_DEEP_GEMM=0";
  if (!device_info().sm90) return "not an sm_90 device";
  if (p.m < 1 || p.m > INT32_MAX) return "no rows, or more than 2^31";
  if (p.out_f16) return "an f16 output (DeepGEMM writes bf16)";
  if (p.bias != nullptr) return "a bias (DeepGEMM's epilogue adds none)";
  if (p.n % 8 != 0 || p.k % kBlockK != 0) return "n not a multiple of 8 or k of 128";
  if (p.a_scales_ld % 4 != 0 || p.a_scales_ld < p.m) return "activation scale rows not padded to 4";
  if (!aligned16(p.a) || !aligned16(p.b) || !aligned16(p.out)) return "operands not 16-byte aligned";
  return nullptr;
}

bool deep_gemm_block_fp8(const CutlassScaledMM& p) {
  const DeviceInfo info = device_info();
  const TileConfig c = choose_config(p.m, p.n, p.k, info.num_sms);
  CHECK(c.num_stages > 0) << "deep_gemm: no stage count fits shared memory for k " << p.k;
  cudaStream_t stream = current_stream();
  static std::mutex mu;
  static std::map<KernelKey, std::unique_ptr<CompiledKernel>> kernels;
  cudaKernel_t kernel = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu);
    const KernelKey key{p.n, p.k, c.block_m, c.block_n, c.num_stages, c.multicast};
    auto it = kernels.find(key);
    if (it == kernels.end()) {
      cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
      CHECK(cudaStreamIsCapturing(stream, &capturing) == cudaSuccess) << "cudaStreamIsCapturing";
      if (capturing != cudaStreamCaptureStatusNone) return false;
      it = kernels.emplace(key, std::make_unique<CompiledKernel>(compile(p.n, p.k, c))).first;
    }
    CompiledKernel& compiled = *it->second;
    if (compiled.kernel == nullptr) return false;
    int device = 0;
    CHECK(cudaGetDevice(&device) == cudaSuccess) << "cudaGetDevice";
    if (compiled.devices_with_smem_set.insert(device).second) {
      CHECK(cudaFuncSetAttribute(reinterpret_cast<const void*>(compiled.kernel),
                                 cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 static_cast<int>(c.smem_bytes)) == cudaSuccess)
          << "deep_gemm: " << c.smem_bytes << " bytes of shared memory";
    }
    kernel = compiled.kernel;
  }
  const uint64_t m = p.m, n = p.n, k = p.k, groups = k / kBlockK;
  // The operands as the kernel's TMA copies read them (fp8 as bytes): a [m, k] and b [n, k] in 128 x 128-byte swizzled
  // tiles, the activation scales one f32 column of block_m rows per k group, out [m, n] bf16 in whole output tiles.
  const CUtensorMap map_a =
      tensor_map_2d(p.a, CU_TENSOR_MAP_DATA_TYPE_UINT8, m, k, k, c.block_m, kBlockK, CU_TENSOR_MAP_SWIZZLE_128B);
  const CUtensorMap map_b =
      tensor_map_2d(p.b, CU_TENSOR_MAP_DATA_TYPE_UINT8, n, k, k, c.block_n, kBlockK, CU_TENSOR_MAP_SWIZZLE_128B);
  const CUtensorMap map_scales_a =
      tensor_map_2d(p.a_scales, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, groups, p.a_scales_ld, p.a_scales_ld * sizeof(float),
                    1, c.block_m, CU_TENSOR_MAP_SWIZZLE_NONE);
  const CUtensorMap map_d =
      tensor_map_2d(p.out, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, m, n, n * 2, std::min<uint64_t>(c.block_m, m),
                    std::min<uint64_t>(c.block_n, n), CU_TENSOR_MAP_SWIZZLE_NONE);
  void* out = p.out;
  const float* scales_b = p.b_scales;
  deep_gemm::NormalSchedulerInput input{static_cast<uint32_t>(m), nullptr};
  void* args[] = {&out,
                  &scales_b,
                  &input,
                  const_cast<CUtensorMap*>(&map_a),
                  const_cast<CUtensorMap*>(&map_b),
                  const_cast<CUtensorMap*>(&map_scales_a),
                  const_cast<CUtensorMap*>(&map_d)};
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(info.num_sms));
  config.blockDim = dim3((c.block_m == 64 ? 1 : 2) * kNumMathThreadsPerGroup + kNumTmaThreads);
  config.dynamicSmemBytes = c.smem_bytes;
  config.stream = stream;
  cudaLaunchAttribute cluster{};
  cluster.id = cudaLaunchAttributeClusterDimension;
  cluster.val.clusterDim.x = c.multicast;
  cluster.val.clusterDim.y = cluster.val.clusterDim.z = 1;
  config.attrs = &cluster;
  config.numAttrs = 1;
  const cudaError_t err = cudaLaunchKernelExC(&config, reinterpret_cast<const void*>(kernel), args);
  CHECK(err == cudaSuccess) << "deep_gemm: launch failed: " << cudaGetErrorString(err);
  return true;
}

}  // namespace llmserve::cuda
