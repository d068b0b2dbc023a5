// safetensors reader (mmap + full header validation) and writer. Every check runs before any tensor byte is
// touched, so a corrupt or hostile file yields a Status naming the file and tensor, never a crash.
#include "model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

namespace llmserve {

static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes a little-endian host");

namespace {

struct DTypeEntry {
  SafetensorsDType dtype;
  std::string_view name;
  int bits;
  bool supported;
  DType ours;
};

constexpr DTypeEntry kDTypeTable[] = {
    {SafetensorsDType::kBool, "BOOL", 8, false, DType::kU8},
    {SafetensorsDType::kU8, "U8", 8, true, DType::kU8},
    {SafetensorsDType::kI8, "I8", 8, true, DType::kI8},
    {SafetensorsDType::kI16, "I16", 16, false, DType::kU8},
    {SafetensorsDType::kU16, "U16", 16, false, DType::kU8},
    {SafetensorsDType::kF16, "F16", 16, true, DType::kF16},
    {SafetensorsDType::kBF16, "BF16", 16, true, DType::kBF16},
    {SafetensorsDType::kI32, "I32", 32, true, DType::kI32},
    {SafetensorsDType::kU32, "U32", 32, false, DType::kU8},
    {SafetensorsDType::kF32, "F32", 32, true, DType::kF32},
    {SafetensorsDType::kI64, "I64", 64, true, DType::kI64},
    {SafetensorsDType::kU64, "U64", 64, false, DType::kU8},
    {SafetensorsDType::kF64, "F64", 64, false, DType::kU8},
    {SafetensorsDType::kF8E4M3, "F8_E4M3", 8, true, DType::kFP8E4M3},
    {SafetensorsDType::kF8E5M2, "F8_E5M2", 8, false, DType::kU8},
    {SafetensorsDType::kF8E8M0, "F8_E8M0", 8, false, DType::kU8},
    {SafetensorsDType::kF4, "F4", 4, false, DType::kU8},
    {SafetensorsDType::kF6E2M3, "F6_E2M3", 6, false, DType::kU8},
    {SafetensorsDType::kF6E3M2, "F6_E3M2", 6, false, DType::kU8},
    {SafetensorsDType::kC64, "C64", 64, false, DType::kU8},
};

const DTypeEntry& entry_of(SafetensorsDType dtype) {
  for (const DTypeEntry& e : kDTypeTable) {
    if (e.dtype == dtype) return e;
  }
  return kDTypeTable[0];
}

std::string supported_dtype_list() {
  std::string out;
  for (const DTypeEntry& e : kDTypeTable) {
    if (!e.supported) continue;
    if (!out.empty()) out += ' ';
    out += e.name;
  }
  return out;
}

// Owns one mmap of a whole file.
struct Mapping {
  void* addr = nullptr;
  size_t size = 0;
  ~Mapping() {
    if (addr != nullptr) munmap(addr, size);
  }
};

// Rejects headers nested deeper than kMaxSafetensorsJsonDepth before the JSON parser recurses over them.
bool json_depth_ok(const char* p, uint64_t n) {
  int depth = 0;
  bool in_string = false;
  for (uint64_t i = 0; i < n; ++i) {
    char c = p[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > kMaxSafetensorsJsonDepth) return false;
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return true;
}

bool as_u64(const nlohmann::json& j, uint64_t* out) {
  if (!j.is_number_unsigned()) {
    if (!j.is_number_integer() || j.get<int64_t>() < 0) return false;
  }
  *out = j.get<uint64_t>();
  return true;
}

}  // namespace

std::string_view safetensors_dtype_name(SafetensorsDType dtype) { return entry_of(dtype).name; }
int safetensors_dtype_bits(SafetensorsDType dtype) { return entry_of(dtype).bits; }

std::string_view safetensors_name_of(DType dtype) {
  for (const DTypeEntry& e : kDTypeTable) {
    if (e.supported && e.ours == dtype) return e.name;
  }
  return "?";
}

StatusOr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    std::string msg = path + ": cannot open: " + std::strerror(err);
    return err == ENOENT ? not_found(msg) : invalid_argument(msg);
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return invalid_argument(path + ": not a regular file");
  }
  const uint64_t file_size = static_cast<uint64_t>(st.st_size);
  if (file_size < 8) {
    ::close(fd);
    return invalid_argument(path + ": file is " + std::to_string(file_size) +
                            " bytes, shorter than the 8-byte safetensors header length");
  }
  void* addr = mmap(nullptr, file_size, PROT_READ, MAP_PRIVATE, fd, 0);
  int map_err = errno;
  ::close(fd);  // the mapping stays valid after close
  if (addr == MAP_FAILED) return invalid_argument(path + ": mmap failed: " + std::strerror(map_err));
  auto mapping = std::make_shared<Mapping>();
  mapping->addr = addr;
  mapping->size = file_size;

  SafetensorsFile file;
  file.path_ = path;
  file.mapping_ = mapping;
  const auto* base = static_cast<const uint8_t*>(addr);
  uint64_t header_size;
  std::memcpy(&header_size, base, 8);
  if (header_size > kMaxSafetensorsHeaderBytes) {
    return invalid_argument(path + ": header length " + std::to_string(header_size) + " exceeds the limit of " +
                            std::to_string(kMaxSafetensorsHeaderBytes) + " bytes");
  }
  if (header_size > file_size - 8) {
    return invalid_argument(path + ": header length " + std::to_string(header_size) + " runs past the end of the " +
                            std::to_string(file_size) + "-byte file");
  }
  file.data_ = base + 8 + header_size;
  file.data_size_ = file_size - 8 - header_size;
  RETURN_IF_ERROR(file.parse_header(reinterpret_cast<const char*>(base + 8), header_size));
  return file;
}

Status SafetensorsFile::parse_header(const char* header, uint64_t header_size) {
  auto fail = [&](const std::string& what) { return invalid_argument(path_ + ": " + what); };
  if (header_size == 0 || header[0] != '{') return fail("header does not start with a JSON object '{'");
  if (!json_depth_ok(header, header_size)) {
    return fail("header JSON is nested deeper than " + std::to_string(kMaxSafetensorsJsonDepth) + " levels");
  }
  // nlohmann keeps the last of duplicate keys silently; the callback sees every key so duplicates are caught.
  std::vector<std::set<std::string>> open_objects;
  std::string duplicate;
  auto on_event = [&](int /*depth*/, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    using E = nlohmann::json::parse_event_t;
    if (event == E::object_start) {
      open_objects.emplace_back();
    } else if (event == E::object_end) {
      if (!open_objects.empty()) open_objects.pop_back();
    } else if (event == E::key && !open_objects.empty() && parsed.is_string() && duplicate.empty()) {
      const std::string& key = parsed.get_ref<const std::string&>();
      if (!open_objects.back().insert(key).second) {
        duplicate = open_objects.size() == 1 ? "tensor '" + key + "' appears twice" : "key '" + key + "' repeated";
      }
    }
    return true;
  };
  nlohmann::json root;
  try {
    root = nlohmann::json::parse(header, header + header_size, on_event);
  } catch (const nlohmann::json::exception& e) {
    return fail(std::string("header is not valid JSON: ") + e.what());
  }
  if (!duplicate.empty()) return fail("header: " + duplicate);
  if (!root.is_object()) return fail("header JSON is not an object");

  for (const auto& [name, value] : root.items()) {
    if (name == "__metadata__") {
      if (value.is_null()) continue;
      if (!value.is_object()) return fail("__metadata__ is not an object");
      for (const auto& [k, v] : value.items()) {
        if (!v.is_string()) return fail("__metadata__ value of '" + k + "' is not a string");
        metadata_[k] = v.get<std::string>();
      }
      continue;
    }
    auto bad = [&](const std::string& what) { return fail("tensor '" + name + "': " + what); };
    if (!value.is_object()) return bad("entry is not an object");
    auto dt = value.find("dtype");
    auto sh = value.find("shape");
    auto off = value.find("data_offsets");
    if (dt == value.end() || sh == value.end() || off == value.end()) {
      return bad("entry needs the keys dtype, shape and data_offsets");
    }
    if (!dt->is_string()) return bad("dtype is not a string");
    const std::string& dtype_name = dt->get_ref<const std::string&>();
    const DTypeEntry* entry = nullptr;
    for (const DTypeEntry& e : kDTypeTable) {
      if (e.name == dtype_name) entry = &e;
    }
    if (entry == nullptr) return bad("unknown dtype '" + dtype_name + "' (supported: " + supported_dtype_list() + ")");
    TensorInfo info;
    info.stored_dtype = entry->dtype;
    info.supported = entry->supported;
    info.dtype = entry->ours;
    if (!sh->is_array()) return bad("shape is not a list");
    uint64_t numel = 1;
    bool overflow = false;
    for (const nlohmann::json& d : *sh) {
      uint64_t v;
      if (!as_u64(d, &v) || v > static_cast<uint64_t>(INT64_MAX)) {
        return bad("shape " + sh->dump() + " is not a list of non-negative integers");
      }
      info.shape.push_back(static_cast<int64_t>(v));
      overflow |= __builtin_mul_overflow(numel, v, &numel);
    }
    if (!off->is_array() || off->size() != 2 || !as_u64((*off)[0], &info.begin) || !as_u64((*off)[1], &info.end)) {
      return bad("data_offsets " + off->dump() + " is not a pair [begin, end] of non-negative integers");
    }
    if (info.begin > info.end) return bad("data_offsets " + off->dump() + " has begin > end");
    if (info.end > data_size_) {
      return bad("data_offsets " + off->dump() + " run past the " + std::to_string(data_size_) + "-byte data buffer");
    }
    uint64_t bits = 0;
    overflow |= __builtin_mul_overflow(numel, static_cast<uint64_t>(entry->bits), &bits);
    if (overflow) return bad("shape " + sh->dump() + " overflows");
    if (bits % 8 != 0) return bad("shape " + sh->dump() + " of " + dtype_name + " is not a whole number of bytes");
    if (bits / 8 != info.end - info.begin) {
      return bad("byte size " + std::to_string(info.end - info.begin) + " does not match shape " + sh->dump() + " of " +
                 dtype_name + " (" + std::to_string(bits / 8) + " bytes)");
    }
    infos_.emplace(name, std::move(info));
  }

  // Overlap check over the non-empty byte ranges, in offset order.
  std::vector<std::pair<const TensorInfo*, const std::string*>> ranges;
  for (const auto& [name, info] : infos_) {
    if (info.end > info.begin) ranges.emplace_back(&info, &name);
  }
  std::sort(ranges.begin(), ranges.end(), [](const auto& a, const auto& b) { return a.first->begin < b.first->begin; });
  for (size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i].first->begin < ranges[i - 1].first->end) {
      return fail("tensor '" + *ranges[i].second + "' overlaps tensor '" + *ranges[i - 1].second + "'");
    }
  }
  return ok_status();
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  out.reserve(infos_.size());
  for (const auto& kv : infos_) out.push_back(kv.first);
  return out;
}

const TensorInfo* SafetensorsFile::info(const std::string& name) const {
  auto it = infos_.find(name);
  return it == infos_.end() ? nullptr : &it->second;
}

bool SafetensorsFile::is_aligned(const TensorInfo& info) const {
  if (!info.supported) return false;
  return reinterpret_cast<uintptr_t>(data_ + info.begin) % dtype_size(info.dtype) == 0;
}

StatusOr<Tensor> SafetensorsFile::view(const std::string& name) const {
  const TensorInfo* ti = info(name);
  if (ti == nullptr) return not_found(path_ + ": no tensor '" + name + "'");
  if (!ti->supported) {
    return invalid_argument(path_ + ": tensor '" + name + "' has dtype " +
                            std::string(safetensors_dtype_name(ti->stored_dtype)) +
                            ", which is not supported (supported: " + supported_dtype_list() + ")");
  }
  if (!is_aligned(*ti)) {
    return invalid_argument(path_ + ": tensor '" + name + "' is not aligned to its element size");
  }
  return Tensor::from_blob(const_cast<uint8_t*>(data_ + ti->begin), ti->shape, ti->dtype, mapping_);
}

Status write_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                         const std::map<std::string, std::string>& metadata) {
  std::set<std::string> seen;
  std::vector<size_t> order(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& [name, t] = tensors[i];
    if (name == "__metadata__") return invalid_argument(path + ": '__metadata__' cannot name a tensor");
    if (!seen.insert(name).second) return invalid_argument(path + ": tensor '" + name + "' given twice");
    if (!t.defined() || !t.device().is_cpu()) {
      return invalid_argument(path + ": tensor '" + name + "' is not a defined CPU tensor");
    }
    order[i] = i;
  }
  // Larger elements first: every offset stays a multiple of each later tensor's element size.
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return dtype_size(tensors[a].second.dtype()) > dtype_size(tensors[b].second.dtype());
  });
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (size_t i : order) {
    const Tensor& t = tensors[i].second;
    nlohmann::ordered_json entry;
    entry["dtype"] = safetensors_name_of(t.dtype());
    entry["shape"] = t.shape();
    entry["data_offsets"] = {offset, offset + t.nbytes()};
    header[tensors[i].first] = std::move(entry);
    offset += t.nbytes();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return invalid_argument(path + ": cannot create: " + std::strerror(errno));
  uint64_t n = text.size();
  bool ok = std::fwrite(&n, 8, 1, f) == 1 && std::fwrite(text.data(), 1, text.size(), f) == text.size();
  for (size_t i : order) {
    if (!ok) break;
    Tensor c = tensors[i].second.contiguous();
    ok = c.nbytes() == 0 || std::fwrite(c.raw_data(), 1, c.nbytes(), f) == c.nbytes();
  }
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) return internal_error(path + ": write failed: " + std::strerror(errno));
  return ok_status();
}

}  // namespace llmserve
