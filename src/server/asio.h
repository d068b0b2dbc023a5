// The one place the server includes Boost.Asio / Beast. Boost 1.74's asio/awaitable.hpp uses std::exchange
// without including <utility>, so <utility> must come first; every server file includes this header instead.
#pragma once

// clang-format off
#include <utility>  // must precede Boost 1.74's asio headers
// clang-format on

#include <boost/asio.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

namespace llmserve::server {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = boost::asio::ip::tcp;

}  // namespace llmserve::server
