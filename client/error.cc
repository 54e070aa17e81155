#include "client/error.h"

namespace ringlimit::client {

const char* ErrorKindName(Error::Kind kind) {
  switch (kind) {
    case Error::Kind::kInvalidArgument:
      return "invalid_argument";
    case Error::Kind::kConnect:
      return "connect";
    case Error::Kind::kTimeout:
      return "timeout";
    case Error::Kind::kProtocol:
      return "protocol";
    case Error::Kind::kServer:
      return "server";
    case Error::Kind::kUnavailable:
      return "unavailable";
  }
  return "unknown";
}

std::string Error::ToString() const {
  std::string s = code.empty() ? ErrorKindName(kind) : code;
  if (http_status != 0 || !node.empty()) {
    s += " (";
    if (http_status != 0) s += "HTTP " + std::to_string(http_status);
    if (http_status != 0 && !node.empty()) s += " from ";
    s += node + ")";
  }
  if (!message.empty()) s += ": " + message;
  return s;
}

bool Error::Retryable() const {
  switch (kind) {
    case Kind::kConnect:
    case Kind::kTimeout:
      return true;
    case Kind::kServer:
      return http_status >= 500;
    default:
      return false;
  }
}

}  // namespace ringlimit::client
