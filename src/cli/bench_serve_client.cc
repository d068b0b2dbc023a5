// HTTP/1.1 client of `llmserve bench serve` (see bench_serve_client.h). Every Beast/Asio call uses
// redirect_error, and the coroutine bodies catch what remains (nlohmann, bad_alloc), so nothing escapes.
#include "cli/bench_serve_client.h"  // first: it includes <utility> before any boost/asio header

#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <charconv>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>

#include "cli/bench_serve_sse.h"

namespace llmserve::cli {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using asio::ip::tcp;

namespace {

constexpr size_t kMaxErrorBodyBytes = 2048;  // of a non-200 response, quoted in the request's error

double seconds_since(HttpClient::Clock::time_point origin) {
  return std::chrono::duration<double>(HttpClient::Clock::now() - origin).count();
}

auto nothrow(beast::error_code& ec) { return asio::redirect_error(asio::use_awaitable, ec); }

Status unavailable(std::string message) { return Status(StatusCode::kUnavailable, std::move(message)); }

// A reused keep-alive connection may have been closed by the server while idle; these errors before any
// response byte mean "retry on a fresh connection", not "the request failed".
bool stale_connection_error(const beast::error_code& ec) {
  return ec == http::error::end_of_stream || ec == asio::error::eof || ec == asio::error::connection_reset ||
         ec == asio::error::broken_pipe;
}

}  // namespace

std::string BaseUrl::to_string() const { return "http://" + host + ":" + port + path_prefix; }

StatusOr<BaseUrl> parse_base_url(std::string_view url) {
  const std::string original(url);
  constexpr std::string_view kScheme = "http://";
  if (url.substr(0, kScheme.size()) != kScheme) {
    return invalid_argument("--base-url '" + original +
                            "': expected http://HOST[:PORT][/PATH] (https is not supported)");
  }
  url.remove_prefix(kScheme.size());
  BaseUrl out;
  const size_t slash = url.find('/');
  std::string_view authority = url.substr(0, slash);
  if (slash != std::string_view::npos) out.path_prefix = std::string(url.substr(slash));
  while (!out.path_prefix.empty() && out.path_prefix.back() == '/') out.path_prefix.pop_back();
  const size_t colon = authority.rfind(':');
  if (colon != std::string_view::npos && authority.find(']') == std::string_view::npos) {
    std::string_view port = authority.substr(colon + 1);
    int value = 0;
    auto [ptr, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
    if (port.empty() || ec != std::errc() || ptr != port.data() + port.size() || value < 1 || value > 65535) {
      return invalid_argument("--base-url '" + original + "': port must be a number in 1..65535");
    }
    out.port = std::string(port);
    authority = authority.substr(0, colon);
  }
  if (authority.empty()) return invalid_argument("--base-url '" + original + "': no host");
  out.host = std::string(authority);
  return out;
}

HttpClient::HttpClient(asio::any_io_executor executor, BaseUrl url, std::string api_key, std::chrono::seconds timeout)
    : executor_(std::move(executor)), url_(std::move(url)), api_key_(std::move(api_key)), timeout_(timeout) {}

asio::awaitable<StatusOr<std::unique_ptr<beast::tcp_stream>>> HttpClient::connect() {
  beast::error_code ec;
  if (endpoints_.empty()) {
    tcp::resolver resolver(executor_);
    endpoints_ = co_await resolver.async_resolve(url_.host, url_.port, nothrow(ec));
    if (ec) co_return unavailable("cannot resolve " + url_.to_string() + ": " + ec.message());
  }
  auto stream = std::make_unique<beast::tcp_stream>(executor_);
  stream->expires_after(timeout_);
  co_await stream->async_connect(endpoints_, nothrow(ec));
  if (ec) co_return unavailable("cannot connect to " + url_.to_string() + ": " + ec.message());
  stream->socket().set_option(tcp::no_delay(true), ec);  // best effort: small requests go out at once
  co_return std::move(stream);
}

asio::awaitable<StatusOr<HttpResponse>> HttpClient::get(std::string path) {
  const std::string url = url_.to_string() + path;
  try {
    StatusOr<std::unique_ptr<beast::tcp_stream>> conn = co_await connect();
    if (!conn.ok()) co_return conn.status();
    beast::tcp_stream& s = **conn;
    http::request<http::empty_body> req{http::verb::get, target_of(path), 11};
    req.set(http::field::host, url_.host);
    if (!api_key_.empty()) req.set(http::field::authorization, "Bearer " + api_key_);
    beast::error_code ec;
    s.expires_after(timeout_);
    co_await http::async_write(s, req, nothrow(ec));
    if (ec) co_return unavailable("GET " + url + ": " + ec.message());
    beast::flat_buffer buf;
    http::response<http::string_body> res;
    co_await http::async_read(s, buf, res, nothrow(ec));
    if (ec) co_return unavailable("GET " + url + ": " + ec.message());
    co_return HttpResponse{static_cast<int>(res.result_int()), std::string(res.reason()), std::move(res.body())};
  } catch (const std::exception& e) {
    co_return internal_error("GET " + url + ": " + e.what());
  }
}

bool apply_stream_payload(std::string_view payload, bool chat, double now_s, double* last_token_s, RequestOutput* out) {
  if (payload == "[DONE]") return true;
  nlohmann::json data = nlohmann::json::parse(payload, nullptr, /*allow_exceptions=*/false);
  if (data.is_discarded() || !data.is_object()) {
    out->error = "invalid JSON in the event stream: " + std::string(payload.substr(0, 200));
    return false;
  }
  if (auto it = data.find("error"); it != data.end() && !it->is_null()) {
    const nlohmann::json& err = *it;
    out->error =
        "error in the event stream: " + (err.is_object() && err.contains("message") && err["message"].is_string()
                                             ? err["message"].get<std::string>()
                                             : err.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    return false;
  }
  auto choices = data.find("choices");
  if (choices != data.end() && choices->is_array() && !choices->empty()) {
    if (out->num_chunks == 0) {
      out->ttft = now_s - out->start_time;
    } else {
      out->itl.push_back(now_s - *last_token_s);
    }
    *last_token_s = now_s;
    ++out->num_chunks;
    const nlohmann::json& choice = (*choices)[0];
    const nlohmann::json* text = nullptr;
    if (chat) {
      if (auto d = choice.find("delta"); d != choice.end() && d->is_object()) {
        if (auto c = d->find("content"); c != d->end()) text = &*c;
      }
    } else if (auto t = choice.find("text"); t != choice.end()) {
      text = &*t;
    }
    if (text != nullptr && text->is_string()) out->generated_text += text->get_ref<const std::string&>();
    return true;
  }
  if (auto usage = data.find("usage"); usage != data.end() && usage->is_object()) {
    if (auto c = usage->find("completion_tokens"); c != usage->end() && c->is_number_integer()) {
      out->output_tokens = c->get<int64_t>();
    }
    if (auto p = usage->find("prompt_tokens"); p != usage->end() && p->is_number_integer()) {
      out->prompt_len = p->get<int64_t>();
    }
  }
  return true;
}

asio::awaitable<void> HttpClient::stream(std::string path, std::string body, bool chat, Clock::time_point origin,
                                         RequestOutput* out) {
  try {
    http::request<http::string_body> req{http::verb::post, target_of(path), 11};
    req.set(http::field::host, url_.host);
    req.set(http::field::content_type, "application/json");
    if (!api_key_.empty()) req.set(http::field::authorization, "Bearer " + api_key_);
    req.keep_alive(true);
    req.body() = std::move(body);
    req.prepare_payload();

    out->start_time = seconds_since(origin);
    std::unique_ptr<beast::tcp_stream> conn;
    beast::flat_buffer buf;
    std::optional<http::response_parser<http::buffer_body>> parser;
    beast::error_code ec;
    // A pooled connection the server closed while idle fails before the response starts: retry once, fresh.
    for (int attempt = 0; attempt < 2; ++attempt) {
      const bool reused = attempt == 0 && !idle_.empty();  // the retry always uses a fresh connection
      if (reused) {
        conn = std::move(idle_.back());
        idle_.pop_back();
      } else {
        StatusOr<std::unique_ptr<beast::tcp_stream>> fresh = co_await connect();
        if (!fresh.ok()) {
          out->error = fresh.status().message();
          co_return;
        }
        conn = std::move(*fresh);
      }
      conn->expires_after(timeout_);
      co_await http::async_write(*conn, req, nothrow(ec));
      if (!ec) {
        parser.emplace();
        parser->body_limit(std::numeric_limits<std::uint64_t>::max());
        buf.clear();
        conn->expires_after(timeout_);
        co_await http::async_read_header(*conn, buf, *parser, nothrow(ec));
      }
      if (!ec) break;
      if (!(reused && (stale_connection_error(ec) || ec == asio::error::operation_aborted))) {
        out->error = "POST " + url_.to_string() + path + ": " + ec.message();
        co_return;
      }
    }
    if (ec) {
      out->error = "POST " + url_.to_string() + path + ": " + ec.message();
      co_return;
    }
    const int status = static_cast<int>(parser->get().result_int());
    std::string error_body;
    SseParser sse;
    double last_token_s = out->start_time;
    bool stream_ok = true;
    char chunk[16384];
    auto consume = [&](std::string_view bytes) {
      if (status != 200) {
        error_body.append(bytes.substr(0, kMaxErrorBodyBytes - std::min(kMaxErrorBodyBytes, error_body.size())));
        return;
      }
      for (const std::string& payload : sse.feed(bytes)) {
        if (stream_ok) stream_ok = apply_stream_payload(payload, chat, seconds_since(origin), &last_token_s, out);
      }
    };
    while (!parser->is_done()) {
      parser->get().body().data = chunk;
      parser->get().body().size = sizeof(chunk);
      conn->expires_after(timeout_);
      co_await http::async_read_some(*conn, buf, *parser, nothrow(ec));
      if (ec == http::error::need_buffer) ec = {};
      consume(std::string_view(chunk, sizeof(chunk) - parser->get().body().size));
      if (ec) break;
    }
    if (status != 200) {
      out->error = "HTTP " + std::to_string(status) + " " + std::string(parser->get().reason()) +
                   (error_body.empty() ? "" : ": " + error_body);
      co_return;
    }
    if (ec) {
      out->error = "POST " + url_.to_string() + path + ": stream ended early: " + ec.message();
      co_return;
    }
    for (const std::string& payload : sse.finish()) {
      if (stream_ok) stream_ok = apply_stream_payload(payload, chat, seconds_since(origin), &last_token_s, out);
    }
    if (!stream_ok) co_return;
    if (out->num_chunks == 0) {
      out->error = "the stream had no chunk with choices, so no TTFT: the request counts as failed";
      co_return;
    }
    out->latency = last_token_s - out->start_time;
    out->success = true;
    if (parser->get().keep_alive()) idle_.push_back(std::move(conn));
  } catch (const std::exception& e) {
    out->success = false;
    out->error = std::string("POST ") + url_.to_string() + path + ": " + e.what();
  }
}

}  // namespace llmserve::cli
