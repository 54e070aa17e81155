// ParseSimpleRequestHead: the request head nearly every client sends for a check, parsed in one pass
// (internal to node/server/; Session tries it before Beast's parser).
//
// The subset: a whole head already in the buffer, `METHOD SP target SP HTTP/1.1 CRLF`, header fields
// `name: value CRLF` with ASCII names and values (no obs-fold, no obs-text), and none of the fields that
// frame a body or the connection (Content-Length, Transfer-Encoding, Connection, Proxy-Connection,
// Upgrade). Such a request has no body and keeps its connection open. Anything else -- an incomplete
// head, HTTP/1.0, a body, an unknown method, a byte outside the subset, a head of max_head_bytes or more
// -- returns nullopt, and the same bytes go to Beast's parser, which accepts every head this accepts with
// the same method, target, version and fields (tests/fuzz: request_head).
#ifndef RINGLIMIT_NODE_SERVER_REQUEST_HEAD_H_
#define RINGLIMIT_NODE_SERVER_REQUEST_HEAD_H_

#include <cstddef>
#include <optional>
#include <string_view>

#include "node/http/handler.h"
#include "node/http/wire.h"

namespace ringlimit::node {

// A head within the subset, where it sits in the buffer.
struct SimpleRequestHead {
  RequestHead head;  // views into the bytes scanned
  size_t size = 0;   // the head's size in bytes (what to consume)
};

// Scans the request head at the start of `bytes`: the head when it is within the subset above, else nullopt.
std::optional<SimpleRequestHead> ScanSimpleRequestHead(std::string_view bytes, size_t max_head_bytes);

// Fills `request` (which must be default-constructed) with a scanned head's method, target, version (1.1)
// and fields.
void ToHttpRequest(const RequestHead& head, HttpRequest& request);

// Both: parses the request head at the start of `bytes` into `request` (which must be default-constructed).
// Returns the head's size in bytes when it is within the subset above, else nullopt (`request` is then
// unspecified).
std::optional<size_t> ParseSimpleRequestHead(std::string_view bytes, size_t max_head_bytes,
                                             HttpRequest& request);

}  // namespace ringlimit::node

#endif  // RINGLIMIT_NODE_SERVER_REQUEST_HEAD_H_
