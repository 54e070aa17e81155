// Small parsers for the `ringlimit` command line: durations and enums given as flags.
//
// Thread safety: pure functions.
#ifndef RINGLIMIT_CLIENT_CLI_PARSE_H_
#define RINGLIMIT_CLIENT_CLI_PARSE_H_

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ringlimit::cli {

// "250ms", "60s", "5m", "1h", "1d", "1.5s"; a bare number is milliseconds. nullopt if malformed, negative
// or above 366 days.
[[nodiscard]] std::optional<std::chrono::milliseconds> ParseDuration(std::string_view text);

// "1,2,5" -> {1,2,5}; nullopt if any element is not a non-negative integer or the list is empty.
[[nodiscard]] std::optional<std::vector<uint64_t>> ParseUintList(std::string_view text);

// "a,b" -> {"a","b"} (empty elements dropped).
[[nodiscard]] std::vector<std::string> SplitList(std::string_view text);

enum class KeyDistribution : uint8_t { kUniform, kZipf };
[[nodiscard]] std::optional<KeyDistribution> ParseKeyDistribution(std::string_view text);

enum class BenchMethod : uint8_t { kPost, kGet };
[[nodiscard]] std::optional<BenchMethod> ParseBenchMethod(std::string_view text);

}  // namespace ringlimit::cli

#endif  // RINGLIMIT_CLIENT_CLI_PARSE_H_
