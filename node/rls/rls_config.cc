#include "node/rls/rls_config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <set>
#include <sstream>

namespace ringlimit::node::rls {

namespace {

std::string Lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

// A scalar field as a string; error message in `error` when it is not a scalar.
std::optional<std::string> Scalar(const YAML::Node& node, const std::string& where, std::string* error) {
  if (!node.IsScalar()) {
    *error = where + ": must be a scalar";
    return std::nullopt;
  }
  return node.Scalar();
}

std::optional<bool> Bool(const YAML::Node& node, const std::string& where, std::string* error) {
  bool b = false;
  if (!node.IsScalar() || !YAML::convert<bool>::decode(node, b)) {
    *error = where + ": must be true or false";
    return std::nullopt;
  }
  return b;
}

std::optional<RlsLimit> ParseRateLimit(const YAML::Node& node, const std::string& where, std::string* error) {
  if (!node.IsMap()) {
    *error = where + ": must be a map";
    return std::nullopt;
  }
  RlsLimit limit;
  limit.spec.algorithm = limiter::Algorithm::kFixedWindow;
  bool has_unit = false;
  bool has_requests = false;
  for (const auto& field : node) {
    const std::string name = field.first.as<std::string>();
    const std::string at = where + "." + name;
    if (name == "unit") {
      auto s = Scalar(field.second, at, error);
      if (!s) return std::nullopt;
      auto unit = ParseUnit(*s);
      if (!unit) {
        *error = at + ": unknown unit '" + *s + "' (second, minute, hour, day, week, month or year)";
        return std::nullopt;
      }
      limit.unit = *unit;
      has_unit = true;
    } else if (name == "requests_per_unit") {
      uint64_t n = 0;
      if (!field.second.IsScalar() || !YAML::convert<uint64_t>::decode(field.second, n) || n > UINT32_MAX) {
        *error = at + ": must be an integer from 0 to 4294967295";
        return std::nullopt;
      }
      limit.requests_per_unit = static_cast<uint32_t>(n);
      has_requests = true;
    } else if (name == "name") {
      auto s = Scalar(field.second, at, error);
      if (!s) return std::nullopt;
      limit.name = *s;
    } else if (name == "algorithm") {
      auto s = Scalar(field.second, at, error);
      if (!s) return std::nullopt;
      auto algorithm = limiter::ParseAlgorithm(*s);
      if (!algorithm) {
        *error = at + ": unknown algorithm '" + *s + "'";
        return std::nullopt;
      }
      limit.spec.algorithm = *algorithm;
    } else {
      *error = at + ": unknown field";
      return std::nullopt;
    }
  }
  if (!has_unit || !has_requests) {
    *error = where + ": needs unit and requests_per_unit";
    return std::nullopt;
  }
  limit.spec.limit = limit.requests_per_unit;
  limit.spec.window = UnitDuration(limit.unit);
  if (limit.requests_per_unit > 0) {
    if (auto invalid = limiter::Validate(limit.spec)) {
      *error = where + ": " + invalid->field + ": " + invalid->message;
      return std::nullopt;
    }
  }
  return limit;
}

bool ParseRules(const YAML::Node& list, const std::string& where, std::vector<RlsRule>* rules,
                std::string* error) {
  if (!list.IsDefined() || list.IsNull()) return true;
  if (!list.IsSequence()) {
    *error = where + ": must be a list";
    return false;
  }
  std::set<std::pair<std::string, std::optional<std::string>>> seen;
  for (size_t i = 0; i < list.size(); ++i) {
    const YAML::Node node = list[i];
    const std::string at = where + "[" + std::to_string(i) + "]";
    if (!node.IsMap()) {
      *error = at + ": must be a map";
      return false;
    }
    RlsRule rule;
    bool has_key = false;
    for (const auto& field : node) {
      const std::string name = field.first.as<std::string>();
      const std::string field_at = at + "." + name;
      if (name == "key") {
        auto s = Scalar(field.second, field_at, error);
        if (!s) return false;
        rule.key = *s;
        has_key = true;
      } else if (name == "value") {
        auto s = Scalar(field.second, field_at, error);
        if (!s) return false;
        rule.value = *s;
      } else if (name == "rate_limit") {
        auto limit = ParseRateLimit(field.second, field_at, error);
        if (!limit) return false;
        rule.limit = std::move(*limit);
      } else if (name == "shadow_mode") {
        auto b = Bool(field.second, field_at, error);
        if (!b) return false;
        rule.shadow_mode = *b;
      } else if (name == "unlimited") {
        auto b = Bool(field.second, field_at, error);
        if (!b) return false;
        rule.unlimited = *b;
      } else if (name == "descriptors") {
        if (!ParseRules(field.second, field_at, &rule.children, error)) return false;
      } else if (name == "detailed_metric" || name == "replaces") {
        // Accepted for compatibility with envoyproxy/ratelimit files; no effect here.
      } else {
        *error = field_at + ": unknown field";
        return false;
      }
    }
    if (!has_key || rule.key.empty()) {
      *error = at + ": needs a non-empty key";
      return false;
    }
    if (rule.unlimited && rule.limit && rule.limit->requests_per_unit > 0) {
      *error = at + ": unlimited and a rate_limit exclude each other";
      return false;
    }
    if (!seen.emplace(rule.key, rule.value).second) {
      *error =
          at + ": duplicate descriptor (key " + rule.key + (rule.value ? ", value " + *rule.value : "") + ")";
      return false;
    }
    rules->push_back(std::move(rule));
  }
  return true;
}

// The rule of `rules` for one entry: the one with its key and value, else the key-only one.
const RlsRule* Find(const std::vector<RlsRule>& rules, std::string_view key, std::string_view value) {
  const RlsRule* key_only = nullptr;
  for (const RlsRule& rule : rules) {
    if (rule.key != key) continue;
    if (!rule.value) {
      key_only = &rule;
    } else if (*rule.value == value) {
      return &rule;
    }
  }
  return key_only;
}

}  // namespace

std::optional<Unit> ParseUnit(std::string_view name) {
  const std::string lower = Lower(name);
  if (lower == "second") return Unit::kSecond;
  if (lower == "minute") return Unit::kMinute;
  if (lower == "hour") return Unit::kHour;
  if (lower == "day") return Unit::kDay;
  if (lower == "week") return Unit::kWeek;
  if (lower == "month") return Unit::kMonth;
  if (lower == "year") return Unit::kYear;
  return std::nullopt;
}

limiter::DurationNs UnitDuration(Unit unit) {
  switch (unit) {
    case Unit::kSecond:
      return limiter::kSecond;
    case Unit::kMinute:
      return 60 * limiter::kSecond;
    case Unit::kHour:
      return 3600 * limiter::kSecond;
    case Unit::kDay:
      return 86400 * limiter::kSecond;
    case Unit::kWeek:
      return 7 * 86400 * limiter::kSecond;
    case Unit::kMonth:
      return 30 * 86400 * limiter::kSecond;
    case Unit::kYear:
      return 365 * 86400 * limiter::kSecond;
  }
  return limiter::kSecond;
}

Result<std::shared_ptr<const RlsConfig>> RlsConfig::Parse(std::string_view yaml) {
  std::vector<YAML::Node> documents;
  try {
    documents = YAML::LoadAll(std::string(yaml));
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument("not valid YAML", e.what());
  }
  auto config = std::make_shared<RlsConfig>();
  for (size_t d = 0; d < documents.size(); ++d) {
    const YAML::Node& doc = documents[d];
    if (doc.IsNull()) continue;
    const std::string where = "document " + std::to_string(d + 1);
    if (!doc.IsMap()) return Status::InvalidArgument(where, "must be a map with domain and descriptors");
    std::string error;
    std::string domain;
    std::vector<RlsRule> rules;
    try {
      for (const auto& field : doc) {
        const std::string name = field.first.as<std::string>();
        if (name == "domain") {
          auto s = Scalar(field.second, where + ": domain", &error);
          if (!s) return Status::InvalidArgument(error);
          domain = *s;
        } else if (name != "descriptors") {
          return Status::InvalidArgument(where, name + ": unknown field");
        }
      }
      if (domain.empty()) return Status::InvalidArgument(where, "needs a non-empty domain");
      if (!ParseRules(doc["descriptors"], "descriptors", &rules, &error)) {
        return Status::InvalidArgument("domain " + domain, error);
      }
    } catch (const YAML::Exception& e) {
      return Status::InvalidArgument(where, e.what());
    }
    if (!config->domains_.emplace(domain, std::move(rules)).second) {
      return Status::InvalidArgument("domain " + domain, "defined twice");
    }
  }
  return std::shared_ptr<const RlsConfig>(std::move(config));
}

Result<std::shared_ptr<const RlsConfig>> RlsConfig::Load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::IOError(path, "cannot open the rate limit config");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return Status::IOError(path, "cannot read the rate limit config");
  Result<std::shared_ptr<const RlsConfig>> parsed = Parse(text.str());
  if (!parsed.ok()) return Status::InvalidArgument(path, parsed.status().message());
  return parsed;
}

RlsMatch RlsConfig::Match(std::string_view domain,
                          std::span<const std::pair<std::string_view, std::string_view>> entries) const {
  auto it = domains_.find(domain);
  if (it == domains_.end() || entries.empty()) return {};
  const std::vector<RlsRule>* level = &it->second;
  for (size_t i = 0; i < entries.size(); ++i) {
    const RlsRule* rule = Find(*level, entries[i].first, entries[i].second);
    if (rule == nullptr) return {};
    if (i + 1 == entries.size()) {
      if (rule->unlimited || rule->limit) return {rule};
      return {};
    }
    level = &rule->children;
  }
  return {};
}

RlsConfigHolder::RlsConfigHolder(std::string path) : path_(std::move(path)) {
  config_.Publish(std::make_shared<const RlsConfig>());
}

Status RlsConfigHolder::Reload() {
  if (path_.empty()) return Status::OK();
  Result<std::shared_ptr<const RlsConfig>> loaded = RlsConfig::Load(path_);
  if (!loaded.ok()) return loaded.status();
  config_.Publish(std::move(loaded).value());
  return Status::OK();
}

}  // namespace ringlimit::node::rls
