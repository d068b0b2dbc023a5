// Safetensors checkpoints (single file, sharded index, or a directory of files) and dummy weights behind the
// WeightSource interface. A checkpoint is fully validated when it opens: every name it lists is in its file.
#include "model/weight_source.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/thread_pool.h"
#include "model/safetensors.h"

namespace llmserve {

namespace {

constexpr size_t kConvertBlock = 4096;          // elements staged through f32 at a time
constexpr int64_t kParallelMinChunk = 1 << 18;  // elements per parallel_for chunk

bool is_integer_dtype(DType d) { return !dtype_is_float(d); }

void to_f32(const void* src, DType st, float* out, size_t n) {
  switch (st) {
    case DType::kF32:
      std::memcpy(out, src, n * 4);
      return;
    case DType::kBF16: {
      auto* s = static_cast<const bf16_t*>(src);
      for (size_t i = 0; i < n; ++i) out[i] = bf16_to_f32(s[i]);
      return;
    }
    case DType::kF16: {
      auto* s = static_cast<const f16_t*>(src);
      for (size_t i = 0; i < n; ++i) out[i] = f16_to_f32(s[i]);
      return;
    }
    case DType::kFP8E4M3: {
      auto* s = static_cast<const fp8_e4m3_t*>(src);
      for (size_t i = 0; i < n; ++i) out[i] = fp8_e4m3_to_f32(s[i]);
      return;
    }
    default:
      convert_elements(src, st, out, DType::kF32, n);
      return;
  }
}

// f32_to_f16 with the normal-range case inlined (bit-identical; the rare cases go to the core function).
inline f16_t f32_to_f16_fast(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs >= 0x38800000u && abs < 0x477ff000u) {  // rounds to a normal f16
    const uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);
    return f16_t{static_cast<uint16_t>(((u >> 16) & 0x8000u) | ((rounded >> 13) - (112u << 10)))};
  }
  return f32_to_f16(f);
}

void from_f32(const float* in, DType dt, void* dst, size_t n) {
  switch (dt) {
    case DType::kF32:
      std::memcpy(dst, in, n * 4);
      return;
    case DType::kBF16: {
      auto* d = static_cast<bf16_t*>(dst);
      for (size_t i = 0; i < n; ++i) d[i] = f32_to_bf16(in[i]);
      return;
    }
    case DType::kF16: {
      auto* d = static_cast<f16_t*>(dst);
      for (size_t i = 0; i < n; ++i) d[i] = f32_to_f16_fast(in[i]);
      return;
    }
    case DType::kFP8E4M3: {
      auto* d = static_cast<fp8_e4m3_t*>(dst);
      for (size_t i = 0; i < n; ++i) d[i] = f32_to_fp8_e4m3(in[i]);
      return;
    }
    default:
      convert_elements(in, DType::kF32, dst, dt, n);
      return;
  }
}

// One serial chunk: direct when dtypes match or the pair has a tight loop in core, else staged through f32.
void convert_chunk(const uint8_t* src, DType st, uint8_t* dst, DType dt, size_t n) {
  if (st == dt) {
    std::memcpy(dst, src, n * dtype_size(st));
    return;
  }
  if (!dtype_is_float(st) || !dtype_is_float(dt) || dt == DType::kF32) {
    if (dt == DType::kF32) {
      to_f32(src, st, reinterpret_cast<float*>(dst), n);
    } else {
      convert_elements(src, st, dst, dt, n);
    }
    return;
  }
  float buf[kConvertBlock];
  for (size_t i = 0; i < n; i += kConvertBlock) {
    size_t m = std::min(kConvertBlock, n - i);
    to_f32(src + i * dtype_size(st), st, buf, m);
    from_f32(buf, dt, dst + i * dtype_size(dt), m);
  }
}

std::string join_shape(const Shape& s) { return shape_to_string(s); }

Status check_slice(const std::string& name, const Shape& shape, int dim, int64_t begin, int64_t end) {
  if (dim < 0 || dim >= static_cast<int>(shape.size()) || begin < 0 || begin > end || end > shape[dim]) {
    return invalid_argument("tensor '" + name + "': slice [" + std::to_string(begin) + ", " + std::to_string(end) +
                            ") of dim " + std::to_string(dim) + " is outside its shape " + join_shape(shape));
  }
  return ok_status();
}

// ---------------------------------------------------------------------------------------------------------------
// Safetensors checkpoint.

class SafetensorsCheckpoint : public WeightSource {
 public:
  SafetensorsCheckpoint(std::string description, std::vector<std::shared_ptr<SafetensorsFile>> files,
                        std::map<std::string, size_t> name_to_file)
      : description_(std::move(description)), files_(std::move(files)), name_to_file_(std::move(name_to_file)) {}

  StatusOr<Tensor> get(const std::string& name, const Shape& shape, DType dtype) override {
    ASSIGN_OR_RETURN(const SafetensorsFile* file, find(name, shape, dtype));
    const TensorInfo& info = *file->info(name);
    if (info.dtype == dtype && file->is_aligned(info)) return file->view(name);
    const size_t n = info.end - info.begin == 0 ? 0 : (info.end - info.begin) / dtype_size(info.dtype);
    Tensor out = Tensor::empty(shape, dtype);
    convert_range(*file, info, 0, n, out.raw_data(), dtype);
    return out;
  }

  StatusOr<Tensor> get_slice(const std::string& name, const Shape& shape, DType dtype, int dim, int64_t begin,
                             int64_t end) override {
    ASSIGN_OR_RETURN(const SafetensorsFile* file, find(name, shape, dtype));
    RETURN_IF_ERROR(check_slice(name, shape, dim, begin, end));
    const TensorInfo& info = *file->info(name);
    if (info.dtype == dtype && file->is_aligned(info)) {
      ASSIGN_OR_RETURN(Tensor view, file->view(name));
      return view.slice(dim, begin, end).contiguous();  // dim 0: still the mapping's rows, no copy
    }
    // Row-major: the slice is `outer` runs of (end - begin) * inner contiguous elements.
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < dim; ++d) outer *= shape[d];
    for (size_t d = dim + 1; d < shape.size(); ++d) inner *= shape[d];
    Shape out_shape = shape;
    out_shape[dim] = end - begin;
    Tensor out = Tensor::empty(out_shape, dtype);
    const int64_t run = (end - begin) * inner;
    for (int64_t o = 0; o < outer; ++o) {
      const size_t first = static_cast<size_t>((o * shape[dim] + begin) * inner);
      convert_range(*file, info, first, static_cast<size_t>(run),
                    static_cast<char*>(out.raw_data()) + o * run * dtype_size(dtype), dtype);
    }
    return out;
  }

  bool contains(const std::string& name) const override { return name_to_file_.count(name) != 0; }

  std::vector<std::string> names() const override {
    std::vector<std::string> out;
    out.reserve(name_to_file_.size());
    for (const auto& kv : name_to_file_) out.push_back(kv.first);
    return out;
  }

 private:
  // The file holding `name`, after checking its shape and that its dtype converts to `dtype`.
  StatusOr<const SafetensorsFile*> find(const std::string& name, const Shape& shape, DType dtype) const {
    auto it = name_to_file_.find(name);
    if (it == name_to_file_.end()) {
      return not_found(description_ + ": no tensor '" + name + "' in the checkpoint (" +
                       std::to_string(name_to_file_.size()) + " tensors)");
    }
    const SafetensorsFile& file = *files_[it->second];
    const TensorInfo& info = *file.info(name);             // present: checked when the checkpoint opened
    if (!info.supported) return file.view(name).status();  // names the unsupported dtype
    if (info.shape != shape) {
      return invalid_argument(file.path() + ": tensor '" + name + "' has shape " + join_shape(info.shape) +
                              ", expected " + join_shape(shape));
    }
    if (info.dtype != dtype && is_integer_dtype(info.dtype) != is_integer_dtype(dtype)) {
      return invalid_argument(file.path() + ": tensor '" + name + "' is stored as " +
                              std::string(dtype_name(info.dtype)) + " and cannot be converted to " +
                              std::string(dtype_name(dtype)));
    }
    return &file;
  }

  // Elements [first, first + n) of the stored tensor, converted into dst as `dtype`.
  static void convert_range(const SafetensorsFile& file, const TensorInfo& info, size_t first, size_t n, void* dst,
                            DType dtype) {
    if (n == 0) return;
    const size_t esize = dtype_size(info.dtype);
    const uint8_t* src = file.bytes(info) + first * esize;
    Tensor staged;
    if (!file.is_aligned(info) && info.dtype != dtype) {  // typed loads need aligned sources
      staged = Tensor::empty({static_cast<int64_t>(n)}, info.dtype);
      std::memcpy(staged.raw_data(), src, n * esize);
      src = staged.data<uint8_t>();
    }
    convert_elements_parallel(src, info.dtype, dst, dtype, n);
  }

  std::string description_;
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::map<std::string, size_t> name_to_file_;
};

StatusOr<std::shared_ptr<SafetensorsFile>> open_shared(const std::string& path) {
  ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::open(path));
  return std::make_shared<SafetensorsFile>(std::move(f));
}

// Several files with disjoint names (a single file is the common case).
StatusOr<std::unique_ptr<WeightSource>> open_files(const std::string& description,
                                                   const std::vector<std::string>& paths) {
  std::vector<std::shared_ptr<SafetensorsFile>> files;
  std::map<std::string, size_t> name_to_file;
  for (const std::string& path : paths) {
    ASSIGN_OR_RETURN(auto file, open_shared(path));
    for (const auto& kv : file->infos()) {
      auto [it, inserted] = name_to_file.emplace(kv.first, files.size());
      if (!inserted) {
        return invalid_argument(description + ": tensor '" + kv.first + "' is in both " + files[it->second]->path() +
                                " and " + path);
      }
    }
    files.push_back(std::move(file));
  }
  return std::unique_ptr<WeightSource>(
      new SafetensorsCheckpoint(description, std::move(files), std::move(name_to_file)));
}

// True for a plain relative file name that stays inside the model directory.
bool is_safe_shard_name(const std::string& shard) {
  if (shard.empty() || shard[0] == '/') return false;
  std::filesystem::path p(shard);
  for (const auto& part : p) {
    if (part == "..") return false;
  }
  return true;
}

StatusOr<std::unique_ptr<WeightSource>> open_index(const std::string& dir, const std::string& index_path) {
  std::ifstream in(index_path, std::ios::binary);
  if (!in) return not_found(index_path + ": cannot read");
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json root;
  try {
    root = nlohmann::json::parse(ss.str());
  } catch (const nlohmann::json::exception& e) {
    return invalid_argument(index_path + ": not valid JSON: " + e.what());
  }
  auto wm = root.is_object() ? root.find("weight_map") : root.end();
  if (!root.is_object() || wm == root.end() || !wm->is_object()) {
    return invalid_argument(index_path + ": needs an object \"weight_map\" {tensor name: shard file}");
  }
  std::map<std::string, size_t> shard_index;  // shard file -> index into files
  std::vector<std::shared_ptr<SafetensorsFile>> files;
  std::map<std::string, size_t> name_to_file;
  for (const auto& [name, shard_json] : wm->items()) {
    if (!shard_json.is_string() || !is_safe_shard_name(shard_json.get<std::string>())) {
      return invalid_argument(index_path + ": tensor '" + name + "' maps to " + shard_json.dump() +
                              ", not a file name inside the model directory");
    }
    const std::string shard = shard_json.get<std::string>();
    auto it = shard_index.find(shard);
    if (it == shard_index.end()) {
      auto file = open_shared(dir + "/" + shard);
      if (!file.ok()) {
        return file.status().with_context(index_path + ": shard '" + shard + "' of tensor '" + name + "'");
      }
      it = shard_index.emplace(shard, files.size()).first;
      files.push_back(std::move(file).value());
    }
    if (!files[it->second]->contains(name)) {
      return invalid_argument(index_path + ": tensor '" + name + "' is mapped to shard " + files[it->second]->path() +
                              ", which does not contain it");
    }
    name_to_file[name] = it->second;
  }
  return std::unique_ptr<WeightSource>(new SafetensorsCheckpoint(dir, std::move(files), std::move(name_to_file)));
}

// ---------------------------------------------------------------------------------------------------------------
// Dummy weights.

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

class DummyWeightSource : public WeightSource {
 public:
  explicit DummyWeightSource(uint64_t seed) : seed_(seed) {}

  StatusOr<Tensor> get(const std::string& name, const Shape& shape, DType dtype) override {
    return get_slice(name, shape, dtype, 0, 0, shape.empty() ? 0 : shape[0]);
  }

  // Counter-based: element i of the full tensor depends only on (key, i), so a slice holds exactly the values the
  // whole tensor has there, whatever the chunking or the rank reading it.
  StatusOr<Tensor> get_slice(const std::string& name, const Shape& shape, DType dtype, int dim, int64_t begin,
                             int64_t end) override {
    int64_t numel = 1;
    for (int64_t d : shape) {
      if (d < 0 || (d > 0 && numel > (int64_t{1} << 40) / d)) {
        return invalid_argument("dummy weights: tensor '" + name + "' has invalid shape " + join_shape(shape));
      }
      numel *= d;
    }
    if (shape.empty()) return generate(name, shape, dtype, 0, 1, 1, 1);
    RETURN_IF_ERROR(check_slice(name, shape, dim, begin, end));
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < dim; ++d) outer *= shape[d];
    for (size_t d = dim + 1; d < shape.size(); ++d) inner *= shape[d];
    Shape out_shape = shape;
    out_shape[dim] = end - begin;
    // Output run o (of `run` elements) starts at full index o * shape[dim] * inner + begin * inner.
    return generate(name, out_shape, dtype, begin * inner, shape[dim] * inner, (end - begin) * inner, outer);
  }

  bool contains(const std::string&) const override { return true; }
  std::vector<std::string> names() const override { return {}; }

 private:
  // `num_runs` runs of `run` elements; run o holds full-tensor elements [first + o * run_stride, ... + run).
  Tensor generate(const std::string& name, const Shape& out_shape, DType dtype, int64_t first, int64_t run_stride,
                  int64_t run, int64_t num_runs) const {
    const bool is_norm = out_shape.size() == 1 && name.size() >= 11 && name.ends_with("norm.weight");
    const uint64_t key = splitmix64(seed_ ^ splitmix64(fnv1a(name)));
    Tensor out = Tensor::empty(out_shape, dtype);
    auto* dst = static_cast<uint8_t*>(out.raw_data());
    const size_t esize = dtype_size(dtype);
    parallel_for(num_runs * run, kParallelMinChunk, [&](int64_t begin, int64_t end) {
      float buf[kConvertBlock];
      for (int64_t i = begin; i < end; i += static_cast<int64_t>(kConvertBlock)) {
        size_t m = static_cast<size_t>(std::min<int64_t>(kConvertBlock, end - i));
        for (size_t j = 0; j < m; ++j) {
          const int64_t out_index = i + static_cast<int64_t>(j);
          const int64_t full_index = first + (out_index / run) * run_stride + out_index % run;
          uint64_t r = splitmix64(key + static_cast<uint64_t>(full_index));
          float u = static_cast<float>(r >> 40) * (1.0f / 16777216.0f);  // [0, 1)
          if (!dtype_is_float(dtype))
            buf[j] = static_cast<float>(r >> 60);
          else
            buf[j] = is_norm ? 1.0f + 0.1f * (u - 0.5f) : 0.1f * u - 0.05f;
        }
        from_f32(buf, dtype, dst + static_cast<size_t>(i) * esize, m);
      }
    });
    return out;
  }

  uint64_t seed_;
};

}  // namespace

StatusOr<Tensor> WeightSource::get_slice(const std::string& name, const Shape& shape, DType dtype, int dim,
                                         int64_t begin, int64_t end) {
  RETURN_IF_ERROR(check_slice(name, shape, dim, begin, end));
  ASSIGN_OR_RETURN(Tensor whole, get(name, shape, dtype));
  return whole.slice(dim, begin, end).contiguous();
}

void convert_elements_parallel(const void* src, DType src_dtype, void* dst, DType dst_dtype, size_t n) {
  const auto* s = static_cast<const uint8_t*>(src);
  auto* d = static_cast<uint8_t*>(dst);
  const size_t ss = dtype_size(src_dtype), ds = dtype_size(dst_dtype);
  parallel_for(static_cast<int64_t>(n), kParallelMinChunk, [&](int64_t begin, int64_t end) {
    convert_chunk(s + begin * ss, src_dtype, d + begin * ds, dst_dtype, static_cast<size_t>(end - begin));
  });
}

StatusOr<std::unique_ptr<WeightSource>> open_safetensors_checkpoint(const std::string& model_dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_regular_file(model_dir, ec)) {
    if (!model_dir.ends_with(".safetensors")) {
      return invalid_argument(model_dir + ": not a .safetensors file or a model directory");
    }
    return open_files(model_dir, {model_dir});
  }
  if (!fs::is_directory(model_dir, ec)) return not_found(model_dir + ": no such model directory or file");
  const std::string single = model_dir + "/model.safetensors";
  if (fs::is_regular_file(single, ec)) return open_files(model_dir, {single});
  const std::string index = model_dir + "/model.safetensors.index.json";
  if (fs::is_regular_file(index, ec)) return open_index(model_dir, index);
  std::vector<std::string> paths;
  for (const auto& entry : fs::directory_iterator(model_dir, ec)) {
    const std::string p = entry.path().string();
    if (p.ends_with(".safetensors") && entry.is_regular_file(ec)) paths.push_back(p);
  }
  if (paths.empty()) {
    return not_found(model_dir + ": no model.safetensors, model.safetensors.index.json or *.safetensors file");
  }
  std::sort(paths.begin(), paths.end());
  return open_files(model_dir, paths);
}

std::unique_ptr<WeightSource> make_dummy_weight_source(uint64_t seed) {
  return std::make_unique<DummyWeightSource>(seed);
}

}  // namespace llmserve
