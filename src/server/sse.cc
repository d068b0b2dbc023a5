// SSE framing and never-throwing JSON dumps.
#include "server/sse.h"

namespace llmserve::server {

std::string dump_json(const nlohmann::json &j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string dump_json(const nlohmann::ordered_json &j) {
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

std::string sse_event(const nlohmann::ordered_json &payload) {
  std::string out = "data: ";
  out += dump_json(payload);
  out += "\n\n";
  return out;
}

bool parse_sse_stream(std::string_view stream, std::vector<std::string> *payloads) {
  payloads->clear();
  constexpr std::string_view kPrefix = "data: ";
  while (!stream.empty()) {
    const size_t end = stream.find("\n\n");
    if (end == std::string_view::npos) return false;
    std::string_view event = stream.substr(0, end);
    if (event.substr(0, kPrefix.size()) != kPrefix || event.find('\n') != std::string_view::npos) return false;
    payloads->emplace_back(event.substr(kPrefix.size()));
    stream.remove_prefix(end + 2);
  }
  return true;
}

}  // namespace llmserve::server
