// Fuzz target: the policy file decoder (node/service/policies.h: PolicySet::Parse, `--policies FILE`), and a
// check against what it accepted. The input is a policy file.
//
// Invariants, for every file Parse accepts: every policy of the file is found by its name; the limits
// in force for its default, every tier and every key are non-empty, valid (limiter::Validate), with
// distinct state names that Owning maps back to the policy; a GET /v1/check naming the policy (and
// each tier) through a real ApiHandler answers as ApiHarness::CheckResponse requires.
#include <boost/beast/http.hpp>
#include <boost/json.hpp>
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz/api_harness.h"
#include "node/service/policies.h"

namespace {

using ringlimit::node::LimitList;
using ringlimit::node::Policy;
using ringlimit::node::PolicySet;

void CheckList(const PolicySet& set, const Policy& policy, const LimitList& limits) {
  FUZZ_CHECK(!limits.empty(), "a policy resolves to no limit");
  std::set<std::string_view> names;
  for (const auto& limit : limits) {
    FUZZ_CHECK(!ringlimit::limiter::Validate(limit.spec).has_value(), "a policy holds an invalid spec");
    FUZZ_CHECK(names.insert(limit.state_name).second, "two limits of one policy share a state name");
    FUZZ_CHECK(set.Owning(limit.state_name) == &policy, "a state name Owning does not map to its policy");
  }
}

std::string PercentEncode(std::string_view in) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (const char c : in) {
    const auto u = static_cast<unsigned char>(c);
    if (std::isalnum(u) || c == '-' || c == '_' || c == '.' || c == ':') {
      out.push_back(c);
    } else {
      out += {'%', kHex[u >> 4], kHex[u & 15]};
    }
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  ringlimit::Result<std::shared_ptr<const PolicySet>> parsed = PolicySet::Parse(text);
  if (!parsed.ok()) {
    FUZZ_CHECK(!parsed.status().ToString().empty(), "an error without a message");
    return 0;
  }
  const PolicySet& set = **parsed;
  // Parse accepted it, so it is a JSON object with an object "policies".
  const boost::json::value root = boost::json::parse(text);
  const boost::json::object& policies = root.at("policies").as_object();
  FUZZ_CHECK(set.size() <= policies.size(), "more policies than the file names");
  for (const auto& [name, value] : policies) {
    const Policy* policy = set.Find(name);
    FUZZ_CHECK(policy != nullptr, "a policy of the file is not found by its name");
    CheckList(set, *policy, policy->limits);
    for (const auto& [tier, limits] : policy->tiers) CheckList(set, *policy, limits);
    for (const auto& [key, limits] : policy->keys) CheckList(set, *policy, limits);
  }

  // The first policy (and a few of its tiers) checked through the API, twice each.
  if (policies.empty()) return 0;
  ringlimit::node::Policies loaded;
  FUZZ_CHECK(loaded.LoadJson(text).ok(), "Policies::LoadJson refuses what PolicySet::Parse accepts");
  ringlimit::fuzz::ApiHarness harness(&loaded);
  const std::string name(policies.begin()->key());
  const std::string base = "/v1/check?key=k&policy=" + name;  // a valid name needs no escaping
  std::vector<std::string> targets = {base};
  for (const auto& [tier, limits] : set.Find(name)->tiers) {
    if (targets.size() == 3) break;
    targets.push_back(base + "&tier=" + PercentEncode(tier));
  }
  for (const std::string& target : targets) {
    for (int i = 0; i < 2; ++i) {
      ringlimit::node::HttpRequest request{boost::beast::http::verb::get, target, 11};
      const unsigned status = harness.Send(std::move(request)).result_int();
      FUZZ_CHECK(status == 200 || status == 429, "a check naming a loaded policy is not decided");
    }
  }
  return 0;
}
