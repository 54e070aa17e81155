// Shared helpers of the single-node integration tests (tests/node/): a fixture that starts one real
// ringlimitd process per test, and small accessors for JSON responses.
#ifndef RINGLIMIT_TESTS_NODE_NODE_TEST_UTIL_H_
#define RINGLIMIT_TESTS_NODE_NODE_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <algorithm>
#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tests/support/http_client.h"
#include "tests/support/node_process.h"

namespace ringlimit::testing {

// The parsed JSON body of `response` (null if it is not JSON).
inline boost::json::value JsonBody(const ClientResponse& response) {
  boost::system::error_code ec;
  boost::json::value value = boost::json::parse(response.body(), ec);
  return ec ? boost::json::value() : value;
}

// error.code of a JSON error body, or "" when the body is not one.
inline std::string ErrorCode(const ClientResponse& response) {
  const auto body = JsonBody(response);
  if (!body.is_object()) return "";
  const auto* error = body.as_object().if_contains("error");
  if (error == nullptr || !error->is_object()) return "";
  const auto* code = error->as_object().if_contains("code");
  return code != nullptr && code->is_string() ? std::string(code->as_string()) : "";
}

// A header's value, or "" when absent.
inline std::string Header(const ClientResponse& response, std::string_view name) {
  auto it = response.find(name);
  return it == response.end() ? "" : std::string(it->value());
}

// The value of the sample `series` (its whole name with labels as /metrics writes them, e.g.
// `ringlimit_keys` or `ringlimit_config_reloads_total{file="policies",result="success"}`) in `client`'s
// node's GET /metrics; nullopt when the series (or /metrics) is not there.
inline std::optional<double> MetricValue(HttpClient& client, std::string_view series) {
  auto response = client.Get("/metrics");
  if (!response || response->result_int() != 200) return std::nullopt;
  const std::string& text = response->body();
  const std::string line_start = std::string(series) + " ";
  for (size_t at = 0; at < text.size();) {
    const size_t end = std::min(text.find('\n', at), text.size());
    std::string_view line(text.data() + at, end - at);
    if (line.starts_with(line_start)) return std::stod(std::string(line.substr(line_start.size())));
    at = end + 1;
  }
  return std::nullopt;
}

// Starts one ringlimitd per test with Args() (override to add flags).
class NodeTest : public ::testing::Test {
 protected:
  virtual std::vector<std::string> Args() { return {"--threads", "2"}; }

  void SetUp() override {
    NodeProcessOptions options;
    options.args = Args();
    auto node = NodeProcess::Start(std::move(options));
    ASSERT_TRUE(node) << node.error();
    node_ = std::move(*node);
    client_ = std::make_unique<HttpClient>(node_->http_port());
  }

  // Sends and asserts that a response came back (any status).
  ClientResponse Must(boost::system::result<ClientResponse> response) {
    EXPECT_TRUE(response) << response.error().message();
    return response ? std::move(*response) : ClientResponse{};
  }

  std::unique_ptr<NodeProcess> node_;
  std::unique_ptr<HttpClient> client_;
};

}  // namespace ringlimit::testing

#endif  // RINGLIMIT_TESTS_NODE_NODE_TEST_UTIL_H_
