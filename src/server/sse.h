// Server-sent events framing for the OpenAI streaming responses: each event is one `data: <json>\n\n` line
// pair and the stream ends with `data: [DONE]\n\n`. Invariant: an event never contains a raw newline inside its
// payload (JSON is dumped compactly, invalid UTF-8 replaced), so a client can split the stream on "\n\n".
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace llmserve::server {

inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

// Compact JSON that never throws (invalid UTF-8 becomes U+FFFD).
std::string dump_json(const nlohmann::json &j);
std::string dump_json(const nlohmann::ordered_json &j);

// One SSE event carrying `payload`.
std::string sse_event(const nlohmann::ordered_json &payload);

// Splits an SSE stream into the payloads of its `data:` events (for tests and clients); "[DONE]" is kept as is.
// Returns false if the stream is not a sequence of complete `data: ...\n\n` events.
bool parse_sse_stream(std::string_view stream, std::vector<std::string> *payloads);

}  // namespace llmserve::server
