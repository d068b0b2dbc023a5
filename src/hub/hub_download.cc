// hub_download.h over libcurl (HTTP, redirects, Range) and OpenSSL's digests (the ETag checks).
#include "hub/hub_download.h"

#include <curl/curl.h>
#include <openssl/evp.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "hub/hub_cache.h"

namespace llmserve::hub {
namespace fs = std::filesystem;

bool download_supported() { return true; }

namespace {

struct Response {
  long status = 0;
  std::map<std::string, std::string> headers;  // lower-case names, last value wins
  std::string body;                            // unless written to a file
};

struct Transfer {
  Response* response;
  std::FILE* file = nullptr;  // the body goes here when set
  const std::string* label = nullptr;
  int64_t have = 0, total = 0;  // for the progress line
  std::chrono::steady_clock::time_point last_print;
};

size_t on_header(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  std::string line(data, size * n);
  if (line.rfind("HTTP/", 0) == 0) t->response->headers.clear();  // a redirect's headers are not the final ones
  const size_t colon = line.find(':');
  if (colon != std::string::npos) {
    std::string name = line.substr(0, colon), value = line.substr(colon + 1);
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    const size_t b = value.find_first_not_of(" \t"), e = value.find_last_not_of(" \t\r\n");
    t->response->headers[name] = b == std::string::npos ? "" : value.substr(b, e - b + 1);
  }
  return size * n;
}

size_t on_body(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t bytes = size * n;
  if (t->file == nullptr) {
    t->response->body.append(data, bytes);
    return bytes;
  }
  if (std::fwrite(data, 1, bytes, t->file) != bytes) return 0;  // a short write aborts the transfer
  t->have += static_cast<int64_t>(bytes);
  const auto now = std::chrono::steady_clock::now();
  if (t->label != nullptr && now - t->last_print > std::chrono::milliseconds(500)) {
    t->last_print = now;
    std::fprintf(stderr, "\rdownloading %s: %.1f / %.1f MB", t->label->c_str(), t->have / 1e6, t->total / 1e6);
  }
  return bytes;
}

class Http {
 public:
  explicit Http(const DownloadOptions& o) : options_(o) {}

  // One request. `follow` follows redirects (the Authorization header is never sent to another host: curl's
  // default). `file` receives the body (appending at `resume_from` with a Range request when > 0).
  Status request(const std::string& url, bool head, bool follow, Response* out, std::FILE* file = nullptr,
                 int64_t resume_from = 0, const std::string* label = nullptr, int64_t total = 0) {
    std::unique_ptr<CURL, void (*)(CURL*)> curl(curl_easy_init(), curl_easy_cleanup);
    if (!curl) return internal_error("libcurl: cannot create a handle");
    Transfer t{out, file, label, resume_from, total, {}};
    struct curl_slist* headers = nullptr;
    headers = curl_slist_append(headers, "Accept-Encoding: identity");  // ETags are of the stored bytes
    headers = curl_slist_append(headers, "User-Agent: llmserve");
    if (!options_.token.empty()) headers = curl_slist_append(headers, ("Authorization: Bearer " + options_.token).c_str());
    std::unique_ptr<curl_slist, void (*)(curl_slist*)> header_list(headers, curl_slist_free_all);
    curl_easy_setopt(curl.get(), CURLOPT_URL, url.c_str());
    curl_easy_setopt(curl.get(), CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(curl.get(), CURLOPT_NOBODY, head ? 1L : 0L);
    curl_easy_setopt(curl.get(), CURLOPT_FOLLOWLOCATION, follow ? 1L : 0L);
    curl_easy_setopt(curl.get(), CURLOPT_MAXREDIRS, 10L);
    curl_easy_setopt(curl.get(), CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(curl.get(), CURLOPT_HEADERDATA, &t);
    curl_easy_setopt(curl.get(), CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(curl.get(), CURLOPT_WRITEDATA, &t);
    curl_easy_setopt(curl.get(), CURLOPT_CONNECTTIMEOUT, 30L);
    // A stalled transfer (under 1 KB/s for 60 s) fails, then resumes: never an endless hang.
    curl_easy_setopt(curl.get(), CURLOPT_LOW_SPEED_LIMIT, 1024L);
    curl_easy_setopt(curl.get(), CURLOPT_LOW_SPEED_TIME, 60L);
    if (resume_from > 0) curl_easy_setopt(curl.get(), CURLOPT_RESUME_FROM_LARGE, static_cast<curl_off_t>(resume_from));
    const CURLcode rc = curl_easy_perform(curl.get());
    curl_easy_getinfo(curl.get(), CURLINFO_RESPONSE_CODE, &out->status);
    if (label != nullptr && file != nullptr) std::fprintf(stderr, "\n");
    if (rc != CURLE_OK) {
      return Status(StatusCode::kUnavailable, url + ": " + curl_easy_strerror(rc));
    }
    return ok_status();
  }

 private:
  const DownloadOptions& options_;
};

std::string header(const Response& r, const char* name) {
  auto it = r.headers.find(name);
  return it == r.headers.end() ? "" : it->second;
}

// An ETag without W/ and quotes: the blob's name.
std::string clean_etag(std::string e) {
  if (e.rfind("W/", 0) == 0) e = e.substr(2);
  if (e.size() >= 2 && e.front() == '"' && e.back() == '"') e = e.substr(1, e.size() - 2);
  return e;
}

Status http_error(const std::string& what, const Response& r, const std::string& repo_id) {
  if (r.status == 401 || r.status == 403) {
    return Status(StatusCode::kUnauthenticated,
                  what + ": HTTP " + std::to_string(r.status) + " (" + repo_id +
                      " is gated or private: accept its terms on the Hub and set HF_TOKEN)");
  }
  if (r.status == 404) return not_found(what + ": not found on the Hub (HTTP 404)");
  return Status(StatusCode::kUnavailable, what + ": HTTP " + std::to_string(r.status));
}

// Hex digest of `path`: SHA-256, or git's blob SHA-1 ("blob <size>\0" + content) as the Hub's ETag of a file kept
// in git rather than LFS.
std::string file_digest(const fs::path& path, bool git_blob_sha1) {
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  EVP_DigestInit_ex(ctx.get(), git_blob_sha1 ? EVP_sha1() : EVP_sha256(), nullptr);
  if (git_blob_sha1) {
    const std::string prefix = "blob " + std::to_string(fs::file_size(path)) + std::string(1, '\0');
    EVP_DigestUpdate(ctx.get(), prefix.data(), prefix.size());
  }
  std::ifstream in(path, std::ios::binary);
  std::vector<char> buf(1 << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    EVP_DigestUpdate(ctx.get(), buf.data(), static_cast<size_t>(in.gcount()));
  }
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx.get(), md, &len);
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < len; ++i) {
    out += hex[md[i] >> 4];
    out += hex[md[i] & 15];
  }
  return out;
}

bool wanted(const std::string& name) {
  auto ends = [&](const char* s) {
    const std::string suffix(s);
    return name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  return ends(".json") || ends(".safetensors") || ends(".jinja");
}

// One file of the snapshot: its blob (downloaded, resumed, verified unless already there) and its snapshot link.
Status fetch_file(Http& http, const DownloadOptions& o, const std::string& repo_id, const std::string& sha,
                  const std::string& name, const fs::path& repo_dir) {
  const std::string url = o.endpoint + "/" + repo_id + "/resolve/" + sha + "/" + name;
  Response head;
  RETURN_IF_ERROR(http.request(url, /*head=*/true, /*follow=*/false, &head));
  if (head.status >= 400) return http_error(name, head, repo_id);
  // LFS files redirect to their storage and name their blob by X-Linked-Etag (the SHA-256 of the content).
  std::string etag = clean_etag(header(head, "x-linked-etag"));
  if (etag.empty()) etag = clean_etag(header(head, "etag"));
  const std::string size_text = !header(head, "x-linked-size").empty() ? header(head, "x-linked-size")
                                                                        : header(head, "content-length");
  if (etag.empty() || etag.find('/') != std::string::npos || etag.find("..") != std::string::npos) {
    return data_loss(name + ": the Hub sent no usable ETag");
  }
  char *end = nullptr;
  const long long parsed_size = size_text.empty() ? -1 : std::strtoll(size_text.c_str(), &end, 10);
  if (!size_text.empty() && (*end != '\0' || parsed_size < 0)) {
    return data_loss(name + ": the Hub sent a bad size '" + size_text + "'");
  }
  const int64_t size = parsed_size;
  const std::string location = head.status >= 300 && head.status < 400 ? header(head, "location") : "";
  std::string get_url = location.empty() ? url : location;
  if (!get_url.empty() && get_url.front() == '/') get_url = o.endpoint + get_url;  // a relative redirect

  const fs::path blob = repo_dir / "blobs" / etag;
  std::error_code ec;
  if (!fs::exists(blob, ec)) {
    fs::create_directories(blob.parent_path(), ec);
    const fs::path partial = blob.string() + ".incomplete";
    Status last = ok_status();
    for (int attempt = 0; attempt < 5; ++attempt) {  // a broken transfer resumes where it stopped
      const int64_t have = fs::exists(partial, ec) ? static_cast<int64_t>(fs::file_size(partial, ec)) : 0;
      if (size >= 0 && have >= size) break;  // complete already (stopped before its check): verified below
      std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(partial.c_str(), have > 0 ? "ab" : "wb"),
                                                         std::fclose);
      if (!f) return internal_error(partial.string() + ": cannot write");
      Response get;
      last = http.request(get_url, /*head=*/false, /*follow=*/true, &get, f.get(), have,
                          o.progress ? &name : nullptr, size);
      f.reset();
      if (last.ok() && get.status >= 400) return http_error(name, get, repo_id);
      if (last.ok() && have > 0 && get.status == 200) {  // the server ignored the Range: start over
        fs::remove(partial, ec);
        last = Status(StatusCode::kUnavailable, name + ": the server restarted the transfer");
        continue;
      }
      if (last.ok()) break;
    }
    if (!last.ok()) return last;
    const int64_t got = static_cast<int64_t>(fs::file_size(partial, ec));
    const bool sha256 = etag.size() == 64, sha1 = etag.size() == 40;
    if ((size >= 0 && got != size) ||
        ((sha256 || sha1) && file_digest(partial, /*git_blob_sha1=*/sha1) != etag)) {
      fs::remove(partial, ec);
      return data_loss(name + ": the downloaded bytes do not match the Hub's checksum " + etag + " (" +
                       std::to_string(got) + " bytes, " + std::to_string(size) + " expected); deleted");
    }
    fs::rename(partial, blob, ec);
    if (ec) return internal_error(blob.string() + ": " + ec.message());
  }
  // snapshots/<sha>/<name> -> ../../blobs/<etag>, one more ../ per folder in `name`.
  const fs::path link = repo_dir / "snapshots" / sha / name;
  fs::create_directories(link.parent_path(), ec);
  std::string target = "../../blobs/" + etag;
  for (char c : name) {
    if (c == '/') target = "../" + target;
  }
  fs::remove(link, ec);
  fs::create_symlink(target, link, ec);
  if (ec) return internal_error(link.string() + ": " + ec.message());
  return ok_status();
}

}  // namespace

StatusOr<std::string> download_snapshot(const std::string& repo_id, const std::string& revision,
                                        const DownloadOptions& o) {
  static const bool curl_ready = curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK;
  if (!curl_ready) return internal_error("libcurl: global initialisation failed");
  Http http(o);
  const std::string what = repo_id + " (revision " + revision + ")";
  Response info;
  RETURN_IF_ERROR(
      http.request(o.endpoint + "/api/models/" + repo_id + "/revision/" + revision, false, true, &info));
  if (info.status >= 400) return http_error(what, info, repo_id);
  const nlohmann::json j = nlohmann::json::parse(info.body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("sha") || !j["sha"].is_string() || !is_commit_sha(j["sha"].get<std::string>()) ||
      !j.contains("siblings") || !j["siblings"].is_array()) {
    return data_loss(what + ": the Hub's model info has no commit sha or file list");
  }
  const std::string sha = j["sha"].get<std::string>();
  std::vector<std::string> files;
  for (const nlohmann::json& s : j["siblings"]) {
    if (!s.is_object() || !s.contains("rfilename") || !s["rfilename"].is_string()) continue;
    const std::string name = s["rfilename"].get<std::string>();
    if (name.find("..") != std::string::npos || name.empty() || name.front() == '/') continue;
    if (wanted(name)) files.push_back(name);
  }
  if (std::find(files.begin(), files.end(), "config.json") == files.end()) {
    return not_found(what + ": the repo has no config.json (not a transformers model)");
  }
  const fs::path repo_dir = repo_folder(o.cache, repo_id);
  for (const std::string& name : files) RETURN_IF_ERROR(fetch_file(http, o, repo_id, sha, name, repo_dir));
  // The ref last: a snapshot is found through it only once every file is in place.
  std::error_code ec;
  if (!is_commit_sha(revision)) {
    fs::create_directories(repo_dir / "refs", ec);
    std::ofstream ref(repo_dir / "refs" / revision, std::ios::trunc);
    ref << sha;
    if (!ref) return internal_error((repo_dir / "refs" / revision).string() + ": cannot write");
  }
  return (repo_dir / "snapshots" / sha).string();
}

}  // namespace llmserve::hub
