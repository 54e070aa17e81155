#include "node/service/policies.h"

#include <boost/json.hpp>
#include <fstream>
#include <sstream>
#include <utility>

#include "api.pb.h"
#include "node/service/api_json.h"

namespace ringlimit::node {

namespace json = boost::json;

namespace {

constexpr size_t kMaxNameBytes = 128;

bool IsValidName(std::string_view name) {
  if (name.empty() || name.size() > kMaxNameBytes) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                    c == '-' || c == '.' || c == ':';
    if (!ok) return false;
  }
  return true;
}

class Parser {
 public:
  // Records why the text is rejected ("<field>: <message>", or the message alone for the whole text).
  bool Fail(std::string_view field, std::string_view message) {
    status_ = Status::InvalidArgument(field, message);
    return false;
  }

  // Why the last Fail failed.
  [[nodiscard]] const Status& status() const { return status_; }

  // A policy's default limits. `mode` is the policy-level default mode (may be empty).
  bool ParseDefaults(const std::string& policy, const json::value& v, std::string_view mode, LimitList* out) {
    const std::string path = "policies." + policy + ".limits";
    if (!v.is_array() || v.get_array().empty()) return Fail(path, "must be a non-empty array of limits");
    const json::array& limits = v.get_array();
    for (size_t i = 0; i < limits.size(); ++i) {
      const std::string item = path + "[" + std::to_string(i) + "]";
      api::Check check;
      std::string_view name;
      if (!ParseLimit(item, limits[i], mode, &check)) return false;
      name = check.name();
      if (name.empty() && limits.size() > 1)
        return Fail(item + ".name", "required when a policy has several limits");
      if (!name.empty() && !IsValidName(name)) return Fail(item + ".name", NameRule());
      std::string state_name = name.empty() ? policy : policy + "/" + std::string(name);
      for (const auto& existing : *out) {
        if (existing.state_name == state_name) return Fail(item + ".name", "duplicate limit name");
      }
      limiter::LimitSpec spec;
      if (auto error = ApplyLimitFields(check, &spec)) return Fail(item, error->message);
      out->push_back(PolicyLimit{std::move(state_name), spec});
    }
    return true;
  }

  // An override: limits patched by name over `defaults` (fields not given are inherited), new names
  // appended. Accepts {"mode": ..., "limits": [...]}.
  bool ParseOverride(const std::string& policy, const std::string& path, const json::value& v,
                     std::string_view policy_mode, const LimitList& defaults, LimitList* out) {
    if (!v.is_object()) return Fail(path, "must be an object with \"limits\"");
    const json::object& o = v.get_object();
    std::string_view mode = policy_mode;
    for (const auto& [key, value] : o) {
      if (key == "mode") {
        if (!value.is_string()) return Fail(path + ".mode", "must be a string");
        mode = value.get_string();
      } else if (key != "limits") {
        return Fail(path + "." + std::string(key), "unknown field");
      }
    }
    const json::value* limits_value = o.if_contains("limits");
    if (!limits_value || !limits_value->is_array() || limits_value->get_array().empty()) {
      return Fail(path + ".limits", "must be a non-empty array of limits");
    }
    *out = defaults;
    const json::array& limits = limits_value->get_array();
    for (size_t i = 0; i < limits.size(); ++i) {
      const std::string item = path + ".limits[" + std::to_string(i) + "]";
      api::Check check;
      if (!ParseLimit(item, limits[i], mode, &check)) return false;
      const std::string& name = check.name();
      if (!name.empty() && !IsValidName(name)) return Fail(item + ".name", NameRule());
      if (name.empty() && defaults.size() > 1)
        return Fail(item + ".name", "required when a policy has several limits");
      const std::string state_name = name.empty() ? policy : policy + "/" + name;
      PolicyLimit* target = nullptr;
      for (auto& limit : *out) {
        if (limit.state_name == state_name) target = &limit;
      }
      if (target == nullptr) {
        out->push_back(PolicyLimit{state_name, limiter::LimitSpec{}});
        target = &out->back();
      }
      if (auto error = ApplyLimitFields(check, &target->spec)) return Fail(item, error->message);
    }
    return true;
  }

  static std::string NameRule() { return "must be 1..128 characters of A-Z a-z 0-9 _ - . :"; }

 private:
  bool ParseLimit(const std::string& path, const json::value& v, std::string_view mode, api::Check* check) {
    if (!v.is_object()) return Fail(path, "must be an object");
    if (!mode.empty()) check->set_mode(std::string(mode));
    if (auto error = CheckFromJson(v.get_object(), /*allow_target=*/false, check)) {
      return Fail(path, error->message);
    }
    return true;
  }

  Status status_;
};

}  // namespace

const LimitList& Policy::Resolve(std::string_view key, std::string_view tier) const {
  if (!keys.empty()) {
    auto it = keys.find(key);
    if (it != keys.end()) return it->second;
  }
  if (!tier.empty()) {
    auto it = tiers.find(tier);
    if (it != tiers.end()) return it->second;
  }
  return limits;
}

Result<std::shared_ptr<const PolicySet>> PolicySet::Parse(std::string_view text) {
  Parser parser;
  boost::system::error_code ec;
  json::value root = json::parse(text, ec);
  if (ec) {
    parser.Fail("", "not valid JSON: " + ec.message());
    return parser.status();
  }
  if (!root.is_object()) {
    parser.Fail("", "must be a JSON object with \"policies\"");
    return parser.status();
  }
  for (const auto& [key, value] : root.get_object()) {
    if (key != "policies") {
      parser.Fail(std::string(key), "unknown field");
      return parser.status();
    }
  }
  const json::value* policies = root.get_object().if_contains("policies");
  if (policies == nullptr || !policies->is_object()) {
    parser.Fail("policies", "must be an object mapping policy names to policies");
    return parser.status();
  }
  auto set = std::make_shared<PolicySet>();
  for (const auto& [json_name, value] : policies->get_object()) {
    const std::string name(json_name);
    const std::string path = "policies." + name;
    if (!IsValidName(name)) {
      parser.Fail(path, "policy name " + Parser::NameRule());
      return parser.status();
    }
    if (!value.is_object()) {
      parser.Fail(path, "must be an object");
      return parser.status();
    }
    const json::object& o = value.get_object();
    std::string_view mode;
    for (const auto& [key, field] : o) {
      if (key == "mode") {
        if (!field.is_string()) {
          parser.Fail(path + ".mode", "must be a string");
          return parser.status();
        }
        mode = field.get_string();
      } else if (key != "limits" && key != "tiers" && key != "keys") {
        parser.Fail(path + "." + std::string(key), "unknown field");
        return parser.status();
      }
    }
    Policy policy;
    policy.name = name;
    const json::value* limits = o.if_contains("limits");
    if (limits == nullptr) {
      parser.Fail(path + ".limits", "required");
      return parser.status();
    }
    if (!parser.ParseDefaults(name, *limits, mode, &policy.limits)) return parser.status();
    for (const char* table : {"tiers", "keys"}) {
      const json::value* overrides = o.if_contains(table);
      if (overrides == nullptr) continue;
      const std::string table_path = path + "." + table;
      if (!overrides->is_object()) {
        parser.Fail(table_path, "must be an object");
        return parser.status();
      }
      auto& target = table[0] == 't' ? policy.tiers : policy.keys;
      for (const auto& [override_key, override_value] : overrides->get_object()) {
        LimitList list;
        if (!parser.ParseOverride(name, table_path + "." + std::string(override_key), override_value, mode,
                                  policy.limits, &list)) {
          return parser.status();
        }
        target.emplace(std::string(override_key), std::move(list));
      }
    }
    set->policies_.emplace(name, std::move(policy));
  }
  return set;
}

const Policy* PolicySet::Find(std::string_view name) const {
  auto it = policies_.find(name);
  return it == policies_.end() ? nullptr : &it->second;
}

const Policy* PolicySet::Owning(std::string_view state_name) const {
  if (policies_.empty()) return nullptr;
  if (const Policy* p = Find(state_name)) return p;
  for (size_t slash = state_name.find('/'); slash != std::string_view::npos;
       slash = state_name.find('/', slash + 1)) {
    if (const Policy* p = Find(state_name.substr(0, slash))) return p;
  }
  return nullptr;
}

Policies::Policies(std::string path) : path_(std::move(path)) {
  set_.Publish(std::make_shared<const PolicySet>());
}

Status Policies::Reload() {
  if (path_.empty()) return Status::OK();
  std::ifstream in(path_, std::ios::binary);
  if (!in) return Status::IOError(path_, "cannot open the policy file");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return Status::IOError(path_, "cannot read the policy file");
  return LoadJson(text.str());
}

Status Policies::LoadJson(std::string_view json_text) {
  Result<std::shared_ptr<const PolicySet>> set = PolicySet::Parse(json_text);
  if (!set.ok()) return std::move(set).status();
  set_.Publish(std::move(set).value());
  return Status::OK();
}

}  // namespace ringlimit::node
