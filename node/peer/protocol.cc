#include "node/peer/protocol.h"

#include <charconv>

namespace ringlimit::peer {

std::optional<HostPort> ParseHostPort(std::string_view address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return std::nullopt;
  std::string_view host = address.substr(0, colon);
  const std::string_view port = address.substr(colon + 1);
  if (host.front() == '[') {
    if (host.size() < 3 || host.back() != ']') return std::nullopt;
    host = host.substr(1, host.size() - 2);
  }
  unsigned value = 0;
  const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (ec != std::errc() || end != port.data() + port.size() || value == 0 || value > 65535)
    return std::nullopt;
  return HostPort{std::string(host), std::string(port)};
}

}  // namespace ringlimit::peer
