// tokenizer_bench: encode throughput (MB/s of UTF-8 input) of llmserve's Tokenizer, one thread and the whole
// thread pool, on a corpus built from the test data (llama.cpp .inp strings + chat templates, repeated).
// bench/tokenizer_bench_hf.py runs this, measures HF `tokenizers` on the identical corpus and prints the ratio.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "tokenizer/tokenizer.h"

namespace fs = std::filesystem;
using llmserve::Tokenizer;

namespace {

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Documents: every llama.cpp test string, then every chat-template file, in path order; the list repeats
// until it holds at least min_bytes.
std::vector<std::string> build_corpus(const fs::path& testdata, size_t min_bytes) {
  std::vector<std::string> base;
  std::vector<fs::path> inps, templates;
  for (const auto& e : fs::directory_iterator(testdata / "llamacpp-vectors"))
    if (e.path().extension() == ".inp") inps.push_back(e.path());
  for (const auto& e : fs::recursive_directory_iterator(testdata / "chat-templates"))
    if (e.is_regular_file()) templates.push_back(e.path());
  std::sort(inps.begin(), inps.end());
  std::sort(templates.begin(), templates.end());
  const std::string sep = "\n__ggml_vocab_test__\n";
  for (const auto& p : inps) {
    std::string text = read_all(p);
    size_t prev = 0;
    for (size_t pos = text.find(sep);; pos = text.find(sep, prev)) {
      std::string doc = text.substr(prev, pos == std::string::npos ? std::string::npos : pos - prev);
      if (!doc.empty()) base.push_back(doc);
      if (pos == std::string::npos) break;
      prev = pos + sep.size();
    }
  }
  for (const auto& p : templates) base.push_back(read_all(p));
  std::vector<std::string> docs;
  size_t bytes = 0;
  while (bytes < min_bytes) {
    for (const auto& d : base) {
      docs.push_back(d);
      bytes += d.size();
    }
  }
  return docs;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  std::string testdata = "../shared/testdata", dump;
  std::vector<std::string> tokenizers;
  double min_mb = 4;
  int repeats = 3;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--testdata")
      testdata = next();
    else if (a == "--tokenizer")
      tokenizers.push_back(next());
    else if (a == "--min-mb")
      min_mb = std::atof(next().c_str());
    else if (a == "--repeats")
      repeats = std::atoi(next().c_str());
    else if (a == "--dump-corpus")
      dump = next();
    else {
      std::fprintf(stderr,
                   "usage: tokenizer_bench --tokenizer PATH [--tokenizer PATH ...] [--testdata DIR] "
                   "[--min-mb N] [--repeats N] [--dump-corpus FILE.jsonl]\n");
      return 2;
    }
  }
  auto docs = build_corpus(testdata, static_cast<size_t>(min_mb * 1e6));
  size_t bytes = 0;
  for (const auto& d : docs) bytes += d.size();
  if (!dump.empty()) {
    std::ofstream out(dump, std::ios::binary);
    for (const auto& d : docs) out << nlohmann::json(d).dump() << "\n";
  }
  int threads = llmserve::ThreadPool::global().num_threads();
  std::printf("corpus: %zu documents, %.2f MB; thread pool: %d threads\n", docs.size(), bytes / 1e6, threads);
  std::printf("%-28s %12s %14s %14s\n", "tokenizer", "tokens", "1-thread MB/s", "all MB/s");
  for (const auto& path : tokenizers) {
    auto tok = Tokenizer::from_dir(path);
    if (!tok.ok()) {
      std::fprintf(stderr, "%s: %s\n", path.c_str(), tok.status().to_string().c_str());
      return 1;
    }
    size_t num_tokens = 0;
    for (const auto& d : docs) num_tokens += (*tok)->encode(d, false).size();  // warm-up (and word caches)
    double best1 = 1e30, best_all = 1e30;
    for (int r = 0; r < repeats; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      size_t n = 0;
      for (const auto& d : docs) n += (*tok)->encode(d, false).size();
      best1 = std::min(best1, seconds_since(t0));
      if (n != num_tokens) return 3;
      t0 = std::chrono::steady_clock::now();
      auto batch = (*tok)->encode_batch(docs, false);
      best_all = std::min(best_all, seconds_since(t0));
    }
    std::string name = fs::path(path).filename().string();
    if (name == "tokenizer.json") name = fs::path(path).parent_path().filename().string();
    std::printf("%-28s %12zu %14.2f %14.2f\n", name.c_str(), num_tokens, bytes / 1e6 / best1, bytes / 1e6 / best_all);
  }
  return 0;
}
