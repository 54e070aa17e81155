// JSON output of the CLI's --json: Boost.JSON values written with plain numbers (12345, 0.25) where
// boost::json::serialize would write doubles as 1.2345E4.
#ifndef RINGLIMIT_CLIENT_CLI_JSON_OUT_H_
#define RINGLIMIT_CLIENT_CLI_JSON_OUT_H_

#include <boost/json/value.hpp>
#include <string>

namespace ringlimit::cli {

// One line of JSON; doubles with up to 6 decimals, trailing zeros dropped (non-finite ones as null).
[[nodiscard]] std::string ToJson(const boost::json::value& value);

}  // namespace ringlimit::cli

#endif  // RINGLIMIT_CLIENT_CLI_JSON_OUT_H_
