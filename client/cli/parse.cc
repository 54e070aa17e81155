#include "client/cli/parse.h"

#include <charconv>
#include <cmath>

namespace ringlimit::cli {

std::optional<std::chrono::milliseconds> ParseDuration(std::string_view text) {
  size_t unit_at = 0;
  while (unit_at < text.size() && ((text[unit_at] >= '0' && text[unit_at] <= '9') || text[unit_at] == '.')) {
    ++unit_at;
  }
  if (unit_at == 0) return std::nullopt;
  const std::string number(text.substr(0, unit_at));
  const std::string_view unit = text.substr(unit_at);
  double value = 0;
  try {
    size_t used = 0;
    value = std::stod(number, &used);
    if (used != number.size()) return std::nullopt;
  } catch (...) {
    return std::nullopt;
  }
  double ms_per_unit = 0;
  if (unit.empty() || unit == "ms") {
    ms_per_unit = 1;
  } else if (unit == "s") {
    ms_per_unit = 1000;
  } else if (unit == "m" || unit == "min") {
    ms_per_unit = 60'000;
  } else if (unit == "h") {
    ms_per_unit = 3'600'000;
  } else if (unit == "d") {
    ms_per_unit = 86'400'000;
  } else {
    return std::nullopt;
  }
  const double ms = value * ms_per_unit;
  if (!std::isfinite(ms) || ms < 0 || ms > 366.0 * 86'400'000) return std::nullopt;
  return std::chrono::milliseconds(static_cast<int64_t>(std::llround(ms)));
}

std::vector<std::string> SplitList(std::string_view text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string_view::npos) comma = text.size();
    if (comma > start) out.emplace_back(text.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

std::optional<std::vector<uint64_t>> ParseUintList(std::string_view text) {
  std::vector<uint64_t> out;
  for (const std::string& item : SplitList(text)) {
    uint64_t v = 0;
    auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (ec != std::errc() || end != item.data() + item.size()) return std::nullopt;
    out.push_back(v);
  }
  if (out.empty()) return std::nullopt;
  return out;
}

std::optional<KeyDistribution> ParseKeyDistribution(std::string_view text) {
  if (text == "uniform") return KeyDistribution::kUniform;
  if (text == "zipf") return KeyDistribution::kZipf;
  return std::nullopt;
}

std::optional<BenchMethod> ParseBenchMethod(std::string_view text) {
  if (text == "post") return BenchMethod::kPost;
  if (text == "get") return BenchMethod::kGet;
  return std::nullopt;
}

}  // namespace ringlimit::cli
