// Errors of the ringlimit client, as values.
//
// Every client call returns a Result<T>: either the value or an Error with a named kind. Nothing the
// server, the network or the caller's input does makes a client call throw or crash. "Denied" is a
// decision (CheckResponse::allowed == false), never an Error.
#ifndef RINGLIMIT_CLIENT_ERROR_H_
#define RINGLIMIT_CLIENT_ERROR_H_

#include <boost/system/result.hpp>
#include <cstdint>
#include <string>

namespace ringlimit::client {

struct Error {
  enum class Kind : uint8_t {
    kInvalidArgument = 1,  // the call's input was rejected before anything was sent
    kConnect = 2,          // could not connect, or the connection broke before a response arrived
    kTimeout = 3,          // no complete response within the call's timeout
    kProtocol = 4,         // the response was not the documented HTTP/JSON shape
    kServer = 5,           // the server answered with an error status (http_status, code, message)
    kUnavailable = 6,      // no node left to try (every attempt failed; message says why)
  };

  Kind kind = Kind::kProtocol;
  int http_status = 0;    // kServer: the HTTP status (400, 401, 404, 503...); else 0
  std::string code{};     // kServer: the server's error.code ("invalid_field"...); else a client code
  std::string message{};  // human-readable; kServer: the server's error.message
  std::string node{};     // address of the node that failed or answered, if any

  // "invalid_field (HTTP 400 from 127.0.0.1:7001): checks[0].limit: ..." -- for logs and the CLI.
  [[nodiscard]] std::string ToString() const;
  // True for failures another node may not have (connect, timeout, 5xx): worth a retry elsewhere.
  [[nodiscard]] bool Retryable() const;
};

[[nodiscard]] const char* ErrorKindName(Error::Kind kind);

template <class T>
using Result = boost::system::result<T, Error>;

}  // namespace ringlimit::client

#endif  // RINGLIMIT_CLIENT_ERROR_H_
