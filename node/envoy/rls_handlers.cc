#include "node/envoy/rls_handlers.h"

#include <algorithm>
#include <forward_list>
#include <limits>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "envoy/service/ratelimit/v3/rls.pb.h"
#include "node/envoy/rls_config.h"
#include "node/service/answer_once.h"
#include "node/service/check_engine.h"
#include "node/service/check_service.h"
#include "node/service/cluster_hooks.h"
#include "node/service/ratelimit_headers.h"

namespace ringlimit::node {

namespace {

namespace rlsv3 = envoy::service::ratelimit::v3;
using Entries = std::vector<std::pair<std::string_view, std::string_view>>;

// What one descriptor needs.
struct Item {
  enum class Kind : uint8_t {
    kNoRule,     // no rule applies (or unknown domain): OK, no current_limit
    kUnlimited,  // `unlimited: true`: OK, nothing counted
    kZero,       // requests_per_unit 0: always over, nothing counted
    kCheck,      // one check in rounds[round], at `index`
  };
  Kind kind = Kind::kNoRule;
  const rls::RlsLimit* limit = nullptr;
  const std::vector<std::string>* replaces = nullptr;  // the matched rule's rate_limit.replaces
  const std::string* key = nullptr;                    // the counter's key (kCheck)
  bool shadow = false;
  bool quota = false;
  int32_t round = -1;
  int32_t index = -1;
  DecisionCounters* counters = nullptr;  // the rule's series (kZero, kCheck)
};

// The state name of a limit: one per unit and algorithm, so a configuration change that changes
// either starts a new state instead of reinterpreting the old one.
std::string StateName(const rls::RlsLimit& limit) {
  return "rls/" + std::to_string(static_cast<int>(limit.unit)) + "/" +
         std::string(limiter::AlgorithmName(limit.spec.algorithm));
}

void AppendEscaped(std::string* out, std::string_view s) {
  for (char c : s) {
    if (c == '\\' || c == '|' || c == '=') out->push_back('\\');
    out->push_back(c);
  }
}

// A parsed request, kept alive until every decision is in. Descriptors are independent (as in
// envoyproxy/ratelimit), so repeated keys go into later rounds, run one after the other.
struct RlsJob {
  explicit RlsJob(const CheckService& context_in) : context(context_in), rounds(context_in) {}

  const CheckService& context;
  std::shared_ptr<const rls::RlsConfig> config;
  std::vector<Item> items;  // per descriptor
  // At stable addresses (the batches keep views). Lists: an empty one allocates nothing (a std::deque
  // allocates on construction).
  std::forward_list<rls::RlsLimit> overrides;
  std::forward_list<std::string> keys;
  std::forward_list<std::string> names;
  CheckRounds rounds;
};

std::optional<ApiError> Invalid(std::string message) {
  return ApiError{ErrorKind::kInvalidField, std::move(message)};
}

// Resolves every descriptor into job->items (and the checks of the rounds).
std::optional<ApiError> Prepare(const rlsv3::RateLimitRequest& request, RlsJob* job) {
  const CheckService& context = job->context;
  if (request.domain().empty()) return Invalid("rate limit domain must not be empty");
  if (request.descriptors().empty()) return Invalid("rate limit descriptor list must not be empty");
  if (static_cast<size_t>(request.descriptors_size()) > context.options.max_checks) {
    return ApiError{ErrorKind::kTooManyChecks,
                    "more than " + std::to_string(context.options.max_checks) + " descriptors"};
  }
  const uint64_t cost = request.hits_addend() == 0 ? 1 : request.hits_addend();
  const bool known_domain = job->config->HasDomain(request.domain());
  job->items.resize(static_cast<size_t>(request.descriptors_size()));
  Entries entries;
  Entries counter;
  std::string metric_name;  // the rule's series name, built per descriptor in one buffer
  // First what applies to each descriptor, then (replaces needs them all) what is counted.
  for (int i = 0; i < request.descriptors_size(); ++i) {
    const auto& descriptor = request.descriptors(i);
    const std::string at = "descriptors[" + std::to_string(i) + "]";
    if (descriptor.entries().empty()) return Invalid(at + ": no entries");
    entries.clear();
    for (const auto& entry : descriptor.entries()) {
      if (entry.key().empty()) return Invalid(at + ": an entry has an empty key");
      entries.emplace_back(entry.key(), entry.value());
    }
    Item& item = job->items[static_cast<size_t>(i)];
    if (!known_domain) continue;  // Envoy's ratelimit answers OK for a domain it does not know
    if (descriptor.has_limit()) {
      const auto unit = static_cast<int>(descriptor.limit().unit());
      if (unit < static_cast<int>(rls::Unit::kSecond) || unit > static_cast<int>(rls::Unit::kWeek)) {
        return Invalid(at + ".limit.unit: must be SECOND, MINUTE, HOUR, DAY, WEEK, MONTH or YEAR");
      }
      rls::RlsLimit& limit = job->overrides.emplace_front();
      limit.requests_per_unit = descriptor.limit().requests_per_unit();
      limit.unit = static_cast<rls::Unit>(unit);
      limit.spec.algorithm = limiter::Algorithm::kFixedWindow;
      limit.spec.limit = limit.requests_per_unit;
      limit.spec.window = rls::UnitDuration(limit.unit);
      item.limit = &limit;
      item.key = &job->keys.emplace_front(RlsKey(request.domain(), entries));
      // A limit the request brings has no rule: its series is the domain and the entries' keys.
      metric_name.assign(request.domain());
      for (const auto& [key, value] : entries) metric_name.append(".").append(key);
      item.counters = context.metrics.ForRlsRule(metric_name);
    } else {
      const rls::RlsMatch match = job->config->Match(request.domain(), entries, &counter, &metric_name);
      if (match.rule == nullptr) continue;
      item.counters = context.metrics.ForRlsRule(metric_name);
      if (match.rule->limit) item.replaces = &match.rule->limit->replaces;
      if (match.rule->unlimited) {
        item.kind = Item::Kind::kUnlimited;
        continue;
      }
      item.limit = &*match.rule->limit;
      item.shadow = match.rule->shadow_mode;
      item.quota = match.rule->quota_mode;
      item.key = &job->keys.emplace_front(RlsKey(request.domain(), counter));
    }
    if (item.key->size() > context.options.max_key_bytes) {
      return Invalid(at + ": the rate limit key is longer than " +
                     std::to_string(context.options.max_key_bytes) + " bytes");
    }
  }

  // envoyproxy/ratelimit's replaces: a named limit that another matched limit of this request replaces
  // is not applied (its descriptor is answered as if no rule matched, and nothing is counted).
  std::unordered_set<std::string_view> replaced;
  for (const Item& item : job->items) {
    if (item.replaces != nullptr) replaced.insert(item.replaces->begin(), item.replaces->end());
  }

  std::unordered_map<std::string_view, int32_t> rounds_of_key;
  for (int i = 0; i < request.descriptors_size(); ++i) {
    Item& item = job->items[static_cast<size_t>(i)];
    if (item.limit == nullptr || item.kind == Item::Kind::kUnlimited) continue;
    if (!item.limit->name.empty() && replaced.contains(item.limit->name)) {
      item = Item{};
      continue;
    }
    if (item.limit->requests_per_unit == 0) {
      item.kind = Item::Kind::kZero;
      continue;
    }
    limiter::LimitSpec spec = item.limit->spec;
    if (item.shadow) spec.mode = limiter::Mode::kShadow;
    item.kind = Item::Kind::kCheck;
    const int32_t round = rounds_of_key[*item.key]++;
    CheckBatch& batch = job->rounds.Round(static_cast<size_t>(round));
    item.round = round;
    item.index = static_cast<int32_t>(batch.checks().size());
    const std::string& name = job->names.emplace_front(StateName(*item.limit));
    // A descriptor's own hits_addend (0 allowed: only checks) wins over the request's.
    const auto& descriptor = request.descriptors(i);
    const uint64_t hits = descriptor.has_hits_addend() ? descriptor.hits_addend().value() : cost;
    batch.AddInline(*item.key, name, spec, hits, /*reset=*/false, static_cast<size_t>(i), item.counters);
  }
  return std::nullopt;
}

void SetLimit(const rls::RlsLimit& limit, rlsv3::RateLimitResponse::DescriptorStatus* status) {
  auto* current = status->mutable_current_limit();
  current->set_requests_per_unit(limit.requests_per_unit);
  current->set_unit(static_cast<rlsv3::RateLimitResponse::RateLimit::Unit>(limit.unit));
  if (!limit.name.empty()) current->set_name(limit.name);
}

void SetDuration(limiter::DurationNs d, google::protobuf::Duration* out) {
  if (d < 0) d = 0;
  out->set_seconds(d / limiter::kSecond);
  out->set_nanos(static_cast<int32_t>(d % limiter::kSecond));
}

// The name of a descriptor's limit in the RateLimit headers: the rule's name, else its entries.
std::string HeaderName(const rls::RlsLimit& limit, const rlsv3::RateLimitRequest& request, size_t i) {
  if (!limit.name.empty()) return limit.name;
  std::string name;
  for (const auto& entry : request.descriptors(static_cast<int>(i)).entries()) {
    if (!name.empty()) name.push_back('|');
    name.append(entry.key()).append("=").append(entry.value());
  }
  return name;
}

void AddHeader(rlsv3::RateLimitResponse* response, std::string_view key, std::string_view value) {
  auto* header = response->add_response_headers_to_add();
  header->set_key(std::string(key));
  header->set_value(std::string(value));
}

// Fills the response once every round has run; an error when a key could not be decided. With
// ApiOptions::rls_response_headers, response_headers_to_add carries RateLimit-Policy and RateLimit
// (one member per descriptor with a limit) and X-RateLimit-Limit/-Remaining/-Reset of the binding one
// (over its limit, else the fewest units left).
std::optional<ApiError> Finish(const RlsJob& job, const rlsv3::RateLimitRequest& request,
                               rlsv3::RateLimitResponse* response) {
  const bool headers_wanted = job.context.options.rls_response_headers;
  RateLimitHeaders headers;
  struct Binding {
    bool over = false;
    int64_t limit = 0, remaining = 0, reset_seconds = 0;
  };
  std::optional<Binding> binding;
  auto add_to_headers = [&](size_t i, const Item& item, bool over, int64_t remaining,
                            limiter::DurationNs reset) {
    if (!headers_wanted || item.shadow) return;
    const int64_t reset_seconds = reset <= 0 ? 0 : (reset - 1) / limiter::kSecond + 1;
    const int64_t window_seconds = item.limit->spec.window / limiter::kSecond;
    const auto limit = static_cast<int64_t>(item.limit->requests_per_unit);
    headers.Add(HeaderName(*item.limit, request, i), limit, window_seconds, remaining, reset_seconds);
    const bool better =
        !binding || (over && !binding->over) || (over == binding->over && remaining < binding->remaining);
    if (better) binding = Binding{over, limit, remaining, reset_seconds};
  };
  // OVER_LIMIT when a descriptor not in quota mode is over, or when every quota-mode one is.
  bool over = false;
  size_t quota = 0, quota_over = 0;
  auto set_over = [&](const Item& item, rlsv3::RateLimitResponse::DescriptorStatus* status) {
    status->set_code(rlsv3::RateLimitResponse::OVER_LIMIT);
    if (item.quota) {
      ++quota_over;
    } else {
      over = true;
    }
  };
  for (size_t i = 0; i < job.items.size(); ++i) {
    const Item& item = job.items[i];
    auto* status = response->add_statuses();
    status->set_code(rlsv3::RateLimitResponse::OK);
    if (item.quota && (item.kind == Item::Kind::kZero || item.kind == Item::Kind::kCheck)) ++quota;
    switch (item.kind) {
      case Item::Kind::kNoRule:
        break;
      case Item::Kind::kUnlimited:
        status->set_limit_remaining(std::numeric_limits<uint32_t>::max());
        break;
      case Item::Kind::kZero: {
        SetLimit(*item.limit, status);
        (item.shadow ? item.counters->shadow_denied : item.counters->denied)
            .fetch_add(1, std::memory_order_relaxed);
        if (!item.shadow) set_over(item, status);
        const limiter::DurationNs window = item.limit->spec.window;
        SetDuration(window - job.rounds.now() % window, status->mutable_duration_until_reset());
        add_to_headers(i, item, true, 0, window - job.rounds.now() % window);
        break;
      }
      case Item::Kind::kCheck: {
        const CheckBatch& batch = job.rounds[static_cast<size_t>(item.round)];
        const auto index = static_cast<size_t>(item.index);
        if (batch.unavailable(index)) return *batch.unavailable();
        const limiter::Decision& d = batch.decisions()[index];
        SetLimit(*item.limit, status);
        if (!d.allowed) set_over(item, status);
        status->set_limit_remaining(
            static_cast<uint32_t>(std::min<uint64_t>(d.remaining, std::numeric_limits<uint32_t>::max())));
        SetDuration(d.reset_after, status->mutable_duration_until_reset());
        add_to_headers(i, item, !d.allowed, static_cast<int64_t>(d.remaining), d.reset_after);
        break;
      }
    }
  }
  if (quota > 0 && quota_over == quota) over = true;
  response->set_overall_code(over ? rlsv3::RateLimitResponse::OVER_LIMIT : rlsv3::RateLimitResponse::OK);
  if (binding) {
    AddHeader(response, "RateLimit-Policy", headers.policy());
    AddHeader(response, "RateLimit", headers.state());
    AddHeader(response, "X-RateLimit-Limit", std::to_string(binding->limit));
    AddHeader(response, "X-RateLimit-Remaining", std::to_string(binding->remaining));
    AddHeader(response, "X-RateLimit-Reset", std::to_string(binding->reset_seconds));
  }
  return std::nullopt;
}

}  // namespace

std::string RlsKey(std::string_view domain,
                   std::span<const std::pair<std::string_view, std::string_view>> entries) {
  std::string key = "rls:";
  AppendEscaped(&key, domain);
  for (const auto& [k, v] : entries) {
    key.push_back('|');
    AppendEscaped(&key, k);
    key.push_back('=');
    AppendEscaped(&key, v);
  }
  return key;
}

void HandleShouldRateLimit(const CheckService& context, CheckRouter* router,
                           std::shared_ptr<const rls::RlsConfig> config,
                           const rlsv3::RateLimitRequest& request, rlsv3::RateLimitResponse* response,
                           RlsDone done) {
  auto job = std::make_shared<RlsJob>(context);
  job->config = std::move(config);
  if (auto error = Prepare(request, job.get())) return done(std::move(error));
  RlsJob* raw = job.get();
  raw->rounds.Run(router, job, [job, &request, response, done](std::optional<ApiError> error) mutable {
    if (!error) error = Finish(*job, request, response);
    job.reset();  // the batches die here, after their last use
    done(std::move(error));
  });
}

void ShouldRateLimit(const CheckService& service, std::shared_ptr<const rls::RlsConfig> config,
                     const rlsv3::RateLimitRequest& request, rlsv3::RateLimitResponse* response,
                     RlsDone done) {
  AnswerOnce("ShouldRateLimit", std::move(done), [&](const RlsDone& answer) {
    HandleShouldRateLimit(service, service.router, std::move(config), request, response, answer);
  });
}

}  // namespace ringlimit::node
