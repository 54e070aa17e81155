#include "node/http/http_error.h"

#include <boost/beast/http/field.hpp>

#include "node/service/json_writer.h"

namespace ringlimit::node {

namespace http = boost::beast::http;

http::status StatusOf(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kBadJson:
    case ErrorKind::kInvalidField:
    case ErrorKind::kTooManyChecks:
      return http::status::bad_request;
    case ErrorKind::kUnauthorized:
      return http::status::unauthorized;
    case ErrorKind::kNotFound:
    case ErrorKind::kUnknownPolicy:
      return http::status::not_found;
    case ErrorKind::kMethodNotAllowed:
      return http::status::method_not_allowed;
    case ErrorKind::kUnsupportedMediaType:
      return http::status::unsupported_media_type;
    case ErrorKind::kNotReady:
    case ErrorKind::kUnavailable:
      return http::status::service_unavailable;
    case ErrorKind::kInternal:
      break;
  }
  return http::status::internal_server_error;
}

HttpResponse ToResponse(const ApiError& error) {
  HttpResponse response = ErrorResponse(StatusOf(error.kind), CodeOf(error.kind), error.message);
  if (error.kind == ErrorKind::kUnauthorized) response.set(http::field::www_authenticate, "Bearer");
  return response;
}

HttpResponse ErrorResponse(http::status status, std::string_view code, std::string_view message) {
  HttpResponse response{status, 11};
  response.set(http::field::content_type, "application/json");
  std::string& body = response.body();
  body.reserve(48 + code.size() + message.size());
  JsonWriter w(&body);
  w.BeginObject();
  w.Key("error");
  w.BeginObject();
  w.Field("code", code);
  // Messages may quote the request (a path, a query value); JSON needs them as valid UTF-8.
  if (IsValidUtf8(message)) {
    w.Field("message", message);
  } else {
    w.Field("message", ToValidUtf8(message));
  }
  w.EndObject();
  w.EndObject();
  response.prepare_payload();
  return response;
}

}  // namespace ringlimit::node
