// The keys family: GET /v1/keys/{key} (every stored state of an entity with its current figures) and
// DELETE /v1/keys/{key}[?name=...] (reset).
//
// Thread safety: stateless functions over the thread-safe CheckService.
#ifndef RINGLIMIT_NODE_API_KEYS_HANDLERS_H_
#define RINGLIMIT_NODE_API_KEYS_HANDLERS_H_

#include <string_view>

#include "node/http/handler.h"

namespace ringlimit::node {

struct CheckService;

// `encoded_key` is the path remainder after "/v1/keys/", still percent-encoded.
[[nodiscard]] HttpResponse HandleKeysGet(const CheckService& context, std::string_view encoded_key);
[[nodiscard]] HttpResponse HandleKeysDelete(const CheckService& context, std::string_view encoded_key,
                                            std::string_view query);

}  // namespace ringlimit::node

#endif  // RINGLIMIT_NODE_API_KEYS_HANDLERS_H_
