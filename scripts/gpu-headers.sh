# Sourced by scripts/gpu-check and scripts/gpu-ab on the GPU machine: the CUDA build's header-only packages travel in
# .whl (scripts/gpu-debs puts them there: CUTLASS's and nvml.h's wheels, FlashInfer's include dir and DeepGEMM's
# headers as a tarball); unpacks each once and sets header_flags, the CMake flags that point the build at them.
header_flags=()
cutlass_whl=$(compgen -G ".whl/nvidia_cutlass-*.whl" | head -1 || true)
if [ -n "$cutlass_whl" ]; then
  [ -d /tmp/cutlass/cutlass_library ] || python3 -m zipfile -e "$cutlass_whl" /tmp/cutlass
  header_flags+=(-DLLMSERVE_CUTLASS_DIR=/tmp/cutlass/cutlass_library/source/include)
fi
flashinfer_tgz=$(compgen -G ".whl/flashinfer-include-*.tar.gz" | head -1 || true)
if [ -n "$flashinfer_tgz" ]; then
  [ -d /tmp/flashinfer/include ] || { mkdir -p /tmp/flashinfer && tar xzf "$flashinfer_tgz" -C /tmp/flashinfer; }
  header_flags+=(-DLLMSERVE_FLASHINFER_DIR=/tmp/flashinfer/include)
fi
nvml_whl=$(compgen -G ".whl/nvidia_nvml_dev-*.whl" | head -1 || true)
if [ -n "$nvml_whl" ]; then
  [ -f /tmp/nvml/nvidia/cu13/include/nvml.h ] || python3 -m zipfile -e "$nvml_whl" /tmp/nvml
  header_flags+=(-DLLMSERVE_NVML_DIR=/tmp/nvml/nvidia/cu13/include)
fi
