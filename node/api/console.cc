#include "node/api/console.h"

#include <string_view>

namespace ringlimit::node {

namespace http = boost::beast::http;

namespace assets {
// The whole page: node/api/console/index.html, embedded at build time (cmake/embed_file.cmake). Every value
// from the API is put in the DOM with textContent or setAttribute, never as markup. Hooks the tests read:
// #members tr[data-member][data-state], #ring path.arc[data-owner], #owner, #preference li, #states tr,
// #handoffs .handoff, #events li, #status.
extern const std::string_view kConsolePage;
}  // namespace assets

HttpResponse HandleConsole() {
  HttpResponse response{http::status::ok, 11};
  response.set(http::field::content_type, "text/html; charset=utf-8");
  response.set(http::field::cache_control, "no-store");
  // The page may talk to the other members' read-only endpoints (their stats), nothing else.
  response.set(
      "Content-Security-Policy",
      "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src 'self' data:; "
      "connect-src *");
  response.body() = std::string(assets::kConsolePage);
  response.prepare_payload();
  return response;
}

}  // namespace ringlimit::node
