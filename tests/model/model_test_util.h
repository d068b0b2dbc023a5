// Helpers shared by the model-layer tests: a self-deleting temporary directory, raw file I/O, a hand-rolled
// safetensors writer independent of write_safetensors (so reader tests do not trust our own writer), test data.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace llmserve::testing {

class TempDir {
 public:
  // Under `base` (default: the system temp directory).
  explicit TempDir(std::string base = "") {
    if (base.empty()) base = std::filesystem::temp_directory_path().string();
    std::string tmpl = base + "/llmserve_model_XXXXXX";
    char* p = mkdtemp(tmpl.data());
    EXPECT_NE(p, nullptr);
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// A RAM-backed directory when the machine has one (fast file churn for the fuzz test), else the temp directory.
inline std::string ram_temp_base() {
  std::error_code ec;
  return std::filesystem::is_directory("/dev/shm", ec) && access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "";
}

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// 8-byte little-endian length, the header text as given (no padding), then `data`.
inline std::string raw_safetensors(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  return out + header + data;
}

inline std::string testdata_dir() {
  const char* env = std::getenv("LLMSERVE_TESTDATA");
  return env != nullptr ? env : "../shared/testdata";
}

}  // namespace llmserve::testing
