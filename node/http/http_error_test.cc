// ApiError: error kinds to HTTP statuses and codes, and internal Status kinds to API kinds.
#include "node/http/http_error.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>

namespace ringlimit::node {
namespace {

namespace http = boost::beast::http;

TEST(ApiErrorTest, StatusKindsMapToApiKindsInOnePlace) {
  struct Case {
    Status status;
    ErrorKind kind;
    http::status http;
    bool keeps_message;
  };
  const Case cases[] = {
      {Status::InvalidArgument("limit: must be positive"), ErrorKind::kInvalidField,
       http::status::bad_request, true},
      {Status::AlreadyExists("duplicate id"), ErrorKind::kInvalidField, http::status::bad_request, true},
      {Status::NotFound("no such key"), ErrorKind::kNotFound, http::status::not_found, true},
      {Status::Unavailable("peer n2 down"), ErrorKind::kNotReady, http::status::service_unavailable, true},
      {Status::Timeout("no answer"), ErrorKind::kNotReady, http::status::service_unavailable, true},
      {Status::Corruption("row 7"), ErrorKind::kInternal, http::status::internal_server_error, false},
      {Status::IOError("disk full"), ErrorKind::kInternal, http::status::internal_server_error, false},
      {Status::Internal("bug"), ErrorKind::kInternal, http::status::internal_server_error, false},
      {Status::OK(), ErrorKind::kInternal, http::status::internal_server_error, false},
  };
  for (const Case& c : cases) {
    const ApiError error = ApiErrorFromStatus(c.status);
    EXPECT_EQ(error.kind, c.kind) << c.status.ToString();
    EXPECT_EQ(StatusOf(error.kind), c.http) << c.status.ToString();
    EXPECT_EQ(error.message, c.keeps_message ? c.status.message() : "internal error") << c.status.ToString();
  }
}

TEST(ApiErrorTest, ResponseBodyIsTheOneErrorShape) {
  const HttpResponse response =
      ToResponse(ApiErrorFromStatus(Status::InvalidArgument("window_ms", "too big")));
  EXPECT_EQ(response.result(), http::status::bad_request);
  EXPECT_EQ(response.body(), R"({"error":{"code":"invalid_field","message":"window_ms: too big"}})");
}

// Found by fuzz/http_check: the 404 of a path holding invalid UTF-8 quoted it in a body JSON parsers reject.
TEST(HttpErrorTest, ErrorBodyIsValidJsonWhateverTheMessage) {
  const HttpResponse response =
      ErrorResponse(boost::beast::http::status::not_found, "not_found", "no such endpoint: /v1/chec\x95\xC0");
  boost::system::error_code ec;
  const boost::json::value body = boost::json::parse(response.body(), ec);
  ASSERT_FALSE(ec) << response.body();
  EXPECT_EQ(body.at("error").at("message").as_string(), "no such endpoint: /v1/chec\xEF\xBF\xBD\xEF\xBF\xBD");
}

}  // namespace
}  // namespace ringlimit::node
