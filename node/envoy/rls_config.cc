#include "node/envoy/rls_config.h"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/mark.h>
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

// A scalar field as a string. Errors: InvalidArgument when it is not a scalar.
Result<std::string> Scalar(const YAML::Node& node, const std::string& where) {
  if (!node.IsScalar()) return Status::InvalidArgument(where + ": must be a scalar");
  return node.Scalar();
}

// A boolean field. Errors: InvalidArgument when it is not true or false.
Result<bool> Bool(const YAML::Node& node, const std::string& where) {
  bool b = false;
  if (!node.IsScalar() || !YAML::convert<bool>::decode(node, b))
    return Status::InvalidArgument(where + ": must be true or false");
  return b;
}

// rate_limit.replaces: a list of maps with a non-empty name, none the limit's own.
Status ParseReplaces(const YAML::Node& node, const std::string& where, std::vector<std::string>* replaces) {
  if (!node.IsSequence()) return Status::InvalidArgument(where + ": must be a list of {name: ...}");
  for (size_t i = 0; i < node.size(); ++i) {
    const std::string at = where + "[" + std::to_string(i) + "]";
    const YAML::Node entry = node[i];
    if (!entry.IsMap()) return Status::InvalidArgument(at + ": must be a map with a name");
    std::string name;
    for (const auto& field : entry) {
      if (field.first.as<std::string>() != "name")
        return Status::InvalidArgument(at + "." + field.first.as<std::string>() + ": unknown field");
      Result<std::string> s = Scalar(field.second, at + ".name");
      if (!s.ok()) return s.status();
      name = std::move(s).value();
    }
    if (name.empty()) return Status::InvalidArgument(at + ": should not have an empty replaces entry");
    replaces->push_back(std::move(name));
  }
  return Status::OK();
}

// rate_limit: sets rule->limit (and rule->unlimited for `unlimited: true`, envoyproxy/ratelimit's place
// for it; such a limit keeps only its name and replaces).
Status ParseRateLimit(const YAML::Node& node, const std::string& where, RlsRule* rule) {
  if (!node.IsMap()) return Status::InvalidArgument(where + ": must be a map");
  RlsLimit limit;
  limit.spec.algorithm = limiter::Algorithm::kFixedWindow;
  bool has_unit = false;
  bool has_requests = false;
  bool unlimited = false;
  for (const auto& field : node) {
    const std::string name = field.first.as<std::string>();
    const std::string at = where + "." + name;
    if (name == "unit") {
      Result<std::string> s = Scalar(field.second, at);
      if (!s.ok()) return s.status();
      std::optional<Unit> unit = ParseUnit(*s);
      if (!unit)
        return Status::InvalidArgument(at + ": unknown unit '" + *s +
                                       "' (second, minute, hour, day, week, month or year)");
      limit.unit = *unit;
      has_unit = true;
    } else if (name == "requests_per_unit") {
      uint64_t n = 0;
      if (!field.second.IsScalar() || !YAML::convert<uint64_t>::decode(field.second, n) || n > UINT32_MAX)
        return Status::InvalidArgument(at + ": must be an integer from 0 to 4294967295");
      limit.requests_per_unit = static_cast<uint32_t>(n);
      has_requests = true;
    } else if (name == "name") {
      Result<std::string> s = Scalar(field.second, at);
      if (!s.ok()) return s.status();
      limit.name = std::move(s).value();
    } else if (name == "algorithm") {
      Result<std::string> s = Scalar(field.second, at);
      if (!s.ok()) return s.status();
      std::optional<limiter::Algorithm> algorithm = limiter::ParseAlgorithm(*s);
      if (!algorithm) return Status::InvalidArgument(at + ": unknown algorithm '" + *s + "'");
      limit.spec.algorithm = *algorithm;
    } else if (name == "unlimited") {
      Result<bool> b = Bool(field.second, at);
      if (!b.ok()) return b.status();
      unlimited = *b;
    } else if (name == "replaces") {
      if (Status s = ParseReplaces(field.second, at, &limit.replaces); !s.ok()) return s;
    } else {
      return Status::InvalidArgument(at + ": unknown field");
    }
  }
  if (std::find(limit.replaces.begin(), limit.replaces.end(), limit.name) != limit.replaces.end())
    return Status::InvalidArgument(where + ".replaces: should not contain the name of the same descriptor");
  if (unlimited) {
    if (has_unit || has_requests)
      return Status::InvalidArgument(where + ": should not specify unit or requests_per_unit when unlimited");
    rule->unlimited = true;
    rule->limit = std::move(limit);
    return Status::OK();
  }
  if (!has_unit || !has_requests)
    return Status::InvalidArgument(where + ": needs unit and requests_per_unit");
  limit.spec.limit = limit.requests_per_unit;
  limit.spec.window = UnitDuration(limit.unit);
  if (limit.requests_per_unit > 0) {
    if (auto invalid = limiter::Validate(limit.spec))
      return Status::InvalidArgument(where + ": " + invalid->field + ": " + invalid->message);
  }
  rule->limit = std::move(limit);
  return Status::OK();
}

Status ParseRules(const YAML::Node& list, const std::string& where, std::vector<RlsRule>* rules) {
  if (!list.IsDefined() || list.IsNull()) return Status::OK();
  if (!list.IsSequence()) return Status::InvalidArgument(where + ": must be a list");
  std::set<std::pair<std::string, std::optional<std::string>>> seen;
  for (size_t i = 0; i < list.size(); ++i) {
    const YAML::Node node = list[i];
    const std::string at = where + "[" + std::to_string(i) + "]";
    if (!node.IsMap()) return Status::InvalidArgument(at + ": must be a map");
    RlsRule rule;
    bool has_key = false;
    bool descriptor_unlimited = false;  // `unlimited: true` next to key (ringlimit's first form)
    for (const auto& field : node) {
      const std::string name = field.first.as<std::string>();
      const std::string field_at = at + "." + name;
      if (name == "key") {
        Result<std::string> s = Scalar(field.second, field_at);
        if (!s.ok()) return s.status();
        rule.key = std::move(s).value();
        has_key = true;
      } else if (name == "value") {
        Result<std::string> s = Scalar(field.second, field_at);
        if (!s.ok()) return s.status();
        rule.value = std::move(s).value();
      } else if (name == "rate_limit") {
        if (Status s = ParseRateLimit(field.second, field_at, &rule); !s.ok()) return s;
      } else if (name == "shadow_mode" || name == "quota_mode" || name == "unlimited" ||
                 name == "share_threshold" || name == "detailed_metric" || name == "value_to_metric") {
        Result<bool> b = Bool(field.second, field_at);
        if (!b.ok()) return b.status();
        bool& flag = name == "shadow_mode"       ? rule.shadow_mode
                     : name == "quota_mode"      ? rule.quota_mode
                     : name == "unlimited"       ? descriptor_unlimited
                     : name == "detailed_metric" ? rule.detailed_metric
                     : name == "value_to_metric" ? rule.value_to_metric
                                                 : rule.share_threshold;
        flag = *b;
      } else if (name == "descriptors") {
        if (Status s = ParseRules(field.second, field_at, &rule.children); !s.ok()) return s;
      } else if (name == "metadata") {
        // Accepted for compatibility with envoyproxy/ratelimit files: response metadata, no effect here.
      } else {
        return Status::InvalidArgument(field_at + ": unknown field");
      }
    }
    if (!has_key || rule.key.empty()) return Status::InvalidArgument(at + ": needs a non-empty key");
    if (descriptor_unlimited) {
      if (rule.limit && !rule.unlimited)
        return Status::InvalidArgument(at + ": unlimited and a rate_limit exclude each other");
      rule.unlimited = true;
    }
    if (rule.value && rule.value->empty()) rule.value.reset();  // as envoyproxy/ratelimit: "" is no value
    rule.wildcard = rule.value && rule.value->find('*') != std::string::npos;
    if (rule.share_threshold && !rule.wildcard)
      return Status::InvalidArgument(at + ".share_threshold: only for a wildcard value (one with a '*')");
    if (!seen.emplace(rule.key, rule.value).second) {
      return Status::InvalidArgument(at + ": duplicate descriptor (key " + rule.key +
                                     (rule.value ? ", value " + *rule.value : "") + ")");
    }
    rules->push_back(std::move(rule));
  }
  return Status::OK();
}

// The rule of `rules` for one entry: the one with its key and value, else the first with its key and a
// wildcard value matching it, else the key-only one.
const RlsRule* Find(const std::vector<RlsRule>& rules, std::string_view key, std::string_view value) {
  const RlsRule* key_only = nullptr;
  const RlsRule* wildcard = nullptr;
  for (const RlsRule& rule : rules) {
    if (rule.key != key) continue;
    if (!rule.value) {
      key_only = &rule;
    } else if (*rule.value == value) {
      return &rule;
    } else if (rule.wildcard && wildcard == nullptr && WildcardMatch(*rule.value, value)) {
      wildcard = &rule;
    }
  }
  return wildcard != nullptr ? wildcard : key_only;
}

}  // namespace

bool WildcardMatch(std::string_view pattern, std::string_view value) {
  size_t star = pattern.find('*');
  if (star == std::string_view::npos) return pattern == value;
  // The literal before the first `*` and after the last one anchor the ends; the literals between them
  // are found in order, each as early as it occurs (which never loses a match).
  const std::string_view head = pattern.substr(0, star);
  const size_t last_star = pattern.rfind('*');
  const std::string_view tail = pattern.substr(last_star + 1);
  if (value.size() < head.size() + tail.size() || !value.starts_with(head) || !value.ends_with(tail)) {
    return false;
  }
  std::string_view rest = value.substr(head.size(), value.size() - head.size() - tail.size());
  while (star < last_star) {
    const size_t next = pattern.find('*', star + 1);
    const std::string_view literal = pattern.substr(star + 1, next - star - 1);
    const size_t at = rest.find(literal);
    if (at == std::string_view::npos) return false;
    rest.remove_prefix(at + literal.size());
    star = next;
  }
  return true;
}

namespace {

// Records how far yaml-cpp's parser got (the furthest event position) while walking one document.
class Progress : public YAML::EventHandler {
 public:
  int furthest = -1;
  YAML::Mark at;

  void OnDocumentStart(const YAML::Mark& mark) override { Saw(mark); }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& mark, YAML::anchor_t) override { Saw(mark); }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t) override { Saw(mark); }
  void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t, const std::string&) override {
    Saw(mark);
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {
    Saw(mark);
  }
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {
    Saw(mark);
  }
  void OnMapEnd() override {}

 private:
  void Saw(const YAML::Mark& mark) {
    if (mark.pos > furthest) furthest = mark.pos;
    at = mark;
  }
};

// yaml-cpp 0.7's LoadAll never returns on some malformed text: a ',' where a document should start
// yields empty documents forever, none consuming it (and memory grows with each). Walking the documents
// with its parser first, text on which a document makes no progress is refused here (InvalidArgument
// naming the line and column), so that LoadAll is only given text it finishes. Throws what the parser
// throws for text it rejects itself.
Status RefuseNeverEnding(const std::string& text) {
  std::istringstream in(text);
  YAML::Parser parser(in);
  Progress progress;
  int before = -1;
  while (parser.HandleNextDocument(progress)) {
    if (progress.furthest <= before) {
      return Status::InvalidArgument("line " + std::to_string(progress.at.line + 1) + ", column " +
                                     std::to_string(progress.at.column + 1) +
                                     ": unexpected text where a document should start");
    }
    before = progress.furthest;
  }
  return Status::OK();
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
    const std::string text(yaml);
    if (Status stuck = RefuseNeverEnding(text); !stuck.ok())
      return Status::InvalidArgument("not valid YAML", stuck.message());
    documents = YAML::LoadAll(text);
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument("not valid YAML", e.what());
  }
  auto config = std::make_shared<RlsConfig>();
  for (size_t d = 0; d < documents.size(); ++d) {
    const YAML::Node& doc = documents[d];
    if (doc.IsNull()) continue;
    const std::string where = "document " + std::to_string(d + 1);
    if (!doc.IsMap()) return Status::InvalidArgument(where, "must be a map with domain and descriptors");
    std::string domain;
    std::vector<RlsRule> rules;
    try {
      for (const auto& field : doc) {
        const std::string name = field.first.as<std::string>();
        if (name == "domain") {
          Result<std::string> s = Scalar(field.second, where + ": domain");
          if (!s.ok()) return s.status();
          domain = std::move(s).value();
        } else if (name != "descriptors") {
          return Status::InvalidArgument(where, name + ": unknown field");
        }
      }
      if (domain.empty()) return Status::InvalidArgument(where, "needs a non-empty domain");
      if (Status s = ParseRules(doc["descriptors"], "descriptors", &rules); !s.ok())
        return Status::InvalidArgument("domain " + domain, s.message());
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
                          std::span<const std::pair<std::string_view, std::string_view>> entries,
                          std::vector<std::pair<std::string_view, std::string_view>>* counter,
                          std::string* metric_name) const {
  if (counter != nullptr) counter->assign(entries.begin(), entries.end());
  auto it = domains_.find(domain);
  if (it == domains_.end() || entries.empty()) return {};
  if (metric_name != nullptr) metric_name->assign(domain);
  const std::vector<RlsRule>* level = &it->second;
  for (size_t i = 0; i < entries.size(); ++i) {
    const RlsRule* rule = Find(*level, entries[i].first, entries[i].second);
    if (rule == nullptr) return {};
    if (rule->share_threshold && counter != nullptr) (*counter)[i].second = *rule->value;
    if (metric_name != nullptr) {
      metric_name->append(".").append(rule->key);
      if (rule->value_to_metric) {
        metric_name->append("_").append(entries[i].second);
      } else if (rule->value) {
        metric_name->append("_").append(*rule->value);
      }
    }
    if (i + 1 == entries.size()) {
      if (!rule->unlimited && !rule->limit) return {};
      if (rule->detailed_metric && metric_name != nullptr) {
        metric_name->assign(domain);
        for (const auto& [key, value] : entries)
          metric_name->append(".").append(key).append("_").append(value);
      }
      return {rule};
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
