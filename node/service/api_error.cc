#include "node/service/api_error.h"

namespace ringlimit::node {

std::string_view CodeOf(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kBadJson:
      return "bad_json";
    case ErrorKind::kInvalidField:
      return "invalid_field";
    case ErrorKind::kTooManyChecks:
      return "too_many_checks";
    case ErrorKind::kUnauthorized:
      return "unauthorized";
    case ErrorKind::kNotFound:
      return "not_found";
    case ErrorKind::kUnknownPolicy:
      return "unknown_policy";
    case ErrorKind::kMethodNotAllowed:
      return "method_not_allowed";
    case ErrorKind::kUnsupportedMediaType:
      return "unsupported_media_type";
    case ErrorKind::kNotReady:
      return "not_ready";
    case ErrorKind::kUnavailable:
      return "unavailable";
    case ErrorKind::kInternal:
      break;
  }
  return "internal";
}

ApiError ApiErrorFromStatus(const Status& status) {
  switch (status.code()) {
    case Status::Code::kInvalidArgument:
    case Status::Code::kAlreadyExists:
      return ApiError{ErrorKind::kInvalidField, status.message()};
    case Status::Code::kNotFound:
      return ApiError{ErrorKind::kNotFound, status.message()};
    case Status::Code::kUnavailable:
    case Status::Code::kTimeout:
      return ApiError{ErrorKind::kNotReady, status.message()};
    case Status::Code::kOk:  // a caller's bug: there is no error to report
    case Status::Code::kCorruption:
    case Status::Code::kIOError:
    case Status::Code::kInternal:
      break;
  }
  return ApiError{ErrorKind::kInternal, "internal error"};
}

}  // namespace ringlimit::node
