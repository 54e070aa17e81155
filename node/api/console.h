// GET /ui: the live web console -- one self-contained page (HTML, CSS and plain JavaScript in
// node/api/console/index.html, embedded in the binary at build time; nothing fetched from elsewhere) that
// polls this node's read-only JSON endpoints every second: GET /v1/cluster (members, clock offsets,
// handoffs), GET /v1/ring/arcs (the ring), GET /v1/stats of every member (decisions, latency), GET
// /v1/ring?key= and GET /v1/keys/{key} (key lookup). It holds no logic the API does not expose, and changes
// nothing.
//
// Thread safety: a stateless function.
#ifndef RINGLIMIT_NODE_API_CONSOLE_H_
#define RINGLIMIT_NODE_API_CONSOLE_H_

#include "node/http/handler.h"

namespace ringlimit::node {

// 200 text/html: the console page.
[[nodiscard]] HttpResponse HandleConsole();

}  // namespace ringlimit::node

#endif  // RINGLIMIT_NODE_API_CONSOLE_H_
