#include "node/gubernator/gubernator_handlers.h"

#include <google/protobuf/arena.h>

#include <boost/json.hpp>
#include <charconv>
#include <chrono>
#include <forward_list>
#include <functional>
#include <memory>
#include <optional>
#include <unordered_map>
#include <variant>

#include "gubernator/gubernator.pb.h"
#include "node/http/http_error.h"
#include "node/service/answer_once.h"
#include "node/service/api_json.h"
#include "node/service/check_engine.h"
#include "node/service/check_service.h"
#include "node/service/cluster_hooks.h"
#include "node/service/json_writer.h"

namespace ringlimit::node {

namespace http = boost::beast::http;
namespace json = boost::json;
namespace gpb = ::pb::gubernator;

namespace {

struct NamedValue {
  std::string_view name;
  int32_t value;
};
constexpr NamedValue kAlgorithms[] = {{"TOKEN_BUCKET", 0}, {"LEAKY_BUCKET", 1}};
constexpr NamedValue kBehaviors[] = {
    {"BATCHING", 0},        {"NO_BATCHING", 1},   {"GLOBAL", 2},           {"DURATION_IS_GREGORIAN", 4},
    {"RESET_REMAINING", 8}, {"MULTI_REGION", 16}, {"DRAIN_OVER_LIMIT", 32}};

// A Protobuf-JSON enum: its name, or its number.
template <size_t N>
std::optional<ApiError> ReadEnum(const json::value& v, std::string_view field, const NamedValue (&names)[N],
                                 bool any_number, int32_t* out) {
  if (v.is_string()) {
    for (const auto& nv : names) {
      if (nv.name == v.get_string()) {
        *out = nv.value;
        return std::nullopt;
      }
    }
  } else if (v.is_int64() || v.is_uint64()) {
    int64_t x = 0;
    if (!ReadInt(v, field, false, &x)) {
      for (const auto& nv : names) {
        if (nv.value == x || (any_number && x >= 0 && x <= INT32_MAX)) {
          *out = static_cast<int32_t>(x);
          return std::nullopt;
        }
      }
    }
  } else if (v.is_null()) {
    *out = 0;
    return std::nullopt;
  }
  return ApiError{ErrorKind::kInvalidField, std::string(field) + ": invalid enum value"};
}

std::optional<ApiError> ReadRateLimitReq(const json::object& o, gpb::RateLimitReq* req) {
  for (const auto& [json_key, value] : o) {
    const std::string_view key = json_key;
    std::optional<ApiError> error;
    std::string_view s;
    int64_t x = 0;
    int32_t e = 0;
    if (key == "name") {
      if (!(error = ReadString(value, key, &s))) req->set_name(s.data(), s.size());
    } else if (key == "unique_key" || key == "uniqueKey") {
      if (!(error = ReadString(value, key, &s))) req->set_unique_key(s.data(), s.size());
    } else if (key == "hits") {
      if (!(error = ReadInt(value, key, true, &x))) req->set_hits(x);
    } else if (key == "limit") {
      if (!(error = ReadInt(value, key, true, &x))) req->set_limit(x);
    } else if (key == "duration") {
      if (!(error = ReadInt(value, key, true, &x))) req->set_duration(x);
    } else if (key == "burst") {
      if (!(error = ReadInt(value, key, true, &x))) req->set_burst(x);
    } else if (key == "algorithm") {
      if (!(error = ReadEnum(value, key, kAlgorithms, false, &e))) {
        req->set_algorithm(static_cast<gpb::Algorithm>(e));
      }
    } else if (key == "behavior") {
      if (!(error = ReadEnum(value, key, kBehaviors, true, &e)))
        req->set_behavior(static_cast<gpb::Behavior>(e));
    } else if (key == "metadata") {
      if (!value.is_object() && !value.is_null())
        error = ApiError{ErrorKind::kInvalidField, "metadata: must be an object"};
      if (!error && value.is_object()) {
        for (const auto& [mk, mv] : value.get_object()) {
          if (!mv.is_string()) {
            error = ApiError{ErrorKind::kInvalidField, "metadata: values must be strings"};
            break;
          }
          (*req->mutable_metadata())[std::string(mk)] = std::string(mv.get_string());
        }
      }
    } else if (key == "created_at" || key == "createdAt") {
      if (!(error = ReadInt(value, key, true, &x))) req->set_created_at(x);
    }
    // Unknown fields are ignored, as Gubernator's gateway discards them.
    if (error) return error;
  }
  return std::nullopt;
}

// The limiter's algorithm for a Gubernator one; nullopt for a number with no enumerator (ReadEnum admits
// only the two names and their numbers, so none arrives from JSON).
std::optional<limiter::Algorithm> AlgorithmOf(gpb::Algorithm algorithm) {
  switch (algorithm) {
    case gpb::TOKEN_BUCKET:
      // Gubernator's token bucket is a window from the first hit: everything back at once at
      // created_at + duration, then a new window from the next hit.
      return limiter::Algorithm::kAnchoredWindow;
    case gpb::LEAKY_BUCKET:
      return limiter::Algorithm::kLeakyBucket;
    case gpb::Algorithm_INT_MIN_SENTINEL_DO_NOT_USE_:  // protoc's range markers, not values
    case gpb::Algorithm_INT_MAX_SENTINEL_DO_NOT_USE_:
      break;
  }
  return std::nullopt;
}

int64_t BurstOf(const gpb::RateLimitReq& req) { return req.burst() > 0 ? req.burst() : req.limit(); }

// A LEAKY_BUCKET item asking for more than the bucket holds: charged as a whole burst (it empties the
// bucket) and answered OVER_LIMIT with nothing left, as Gubernator does.
bool LeakyOverBurst(const gpb::RateLimitReq& req) {
  return req.algorithm() == gpb::LEAKY_BUCKET && req.hits() > BurstOf(req);
}

// Gubernator's calendar units: `duration` under DURATION_IS_GREGORIAN (GregorianMinutes .. GregorianYears).
enum Gregorian : int64_t { kMinutes = 0, kHours = 1, kDays = 2, kWeeks = 3, kMonths = 4, kYears = 5 };

struct Period {
  limiter::TimeNs start = 0;
  limiter::TimeNs end = 0;  // exclusive
};

// The UTC calendar period of `unit` that holds `now` (minutes, hours and days start at multiples of their
// length since the epoch; months and years at their first day). nullopt for weeks and unknown units.
std::optional<Period> GregorianPeriod(int64_t unit, limiter::TimeNs now) {
  using namespace std::chrono;
  auto fixed = [now](limiter::DurationNs length) {
    const limiter::TimeNs start = (now >= 0 ? now : now - length + 1) / length * length;
    return Period{start, start + length};
  };
  auto ns = [](sys_days day) { return duration_cast<nanoseconds>(day.time_since_epoch()).count(); };
  const year_month_day today{floor<days>(sys_time<nanoseconds>(nanoseconds(now)))};
  switch (unit) {
    case kMinutes:
      return fixed(60 * limiter::kSecond);
    case kHours:
      return fixed(3600 * limiter::kSecond);
    case kDays:
      return fixed(86400 * limiter::kSecond);
    case kMonths: {
      const year_month_day first = today.year() / today.month() / 1;
      return Period{ns(sys_days(first)), ns(sys_days(first + months(1)))};
    }
    case kYears:
      return Period{ns(sys_days(today.year() / January / 1)),
                    ns(sys_days((today.year() + years(1)) / January / 1))};
    default:
      return std::nullopt;
  }
}

bool IsGregorian(const gpb::RateLimitReq& req) { return (req.behavior() & gpb::DURATION_IS_GREGORIAN) != 0; }

// The item's duration in milliseconds at `now`: its calendar period's whole length under
// DURATION_IS_GREGORIAN (0 for a unit without one), else `duration`.
int64_t DurationMs(const gpb::RateLimitReq& req, limiter::TimeNs now) {
  if (!IsGregorian(req)) return req.duration();
  const std::optional<Period> period = GregorianPeriod(req.duration(), now);
  return period ? (period->end - period->start) / limiter::kMillisecond : 0;
}

// The key a DURATION_IS_GREGORIAN TOKEN_BUCKET over months or years counts under: unique_key and the
// period's first instant, so the next month (or year) starts a new counter; "" for every other item.
std::string GregorianKey(const gpb::RateLimitReq& req, limiter::TimeNs now) {
  if (!IsGregorian(req) || req.algorithm() != gpb::TOKEN_BUCKET || req.duration() < kMonths) return "";
  const std::optional<Period> period = GregorianPeriod(req.duration(), now);
  if (!period) return "";
  return req.unique_key() + (req.duration() == kMonths ? "\x1egregorian-month:" : "\x1egregorian-year:") +
         std::to_string(period->start / limiter::kSecond);
}

// The item's spec, or InvalidArgument for what Gubernator reports in RateLimitResp.error (not as an HTTP
// error). A spec with limit 0 is always over its limit and is not checked further.
Result<limiter::LimitSpec> ItemSpec(const gpb::RateLimitReq& req, limiter::TimeNs now) {
  limiter::LimitSpec spec;
  if (req.unique_key().empty()) return Status::InvalidArgument("field 'unique_key' cannot be empty");
  if (req.name().empty()) return Status::InvalidArgument("field 'namespace' cannot be empty");
  if (req.hits() < 0) return Status::InvalidArgument("field 'hits' cannot be negative");
  if (req.limit() < 0) return Status::InvalidArgument("field 'limit' cannot be negative");
  std::optional<Period> period;
  if (IsGregorian(req)) {
    // As Gubernator: `duration` names a calendar unit; TOKEN_BUCKET counts in that calendar period (UTC)
    // and resets at its end, LEAKY_BUCKET leaks `limit` per period.
    if (req.duration() == kWeeks)
      return Status::InvalidArgument("`Duration = GregorianWeeks` not yet supported; consider making a PR!`");
    period = GregorianPeriod(req.duration(), now);
    if (!period)
      return Status::InvalidArgument(
          "behavior DURATION_IS_GREGORIAN is set; but `Duration` is not a valid gregorian interval");
  } else if (req.duration() <= 0) {
    return Status::InvalidArgument("field 'duration' must be a positive number of milliseconds");
  }
  if (req.burst() < 0) return Status::InvalidArgument("field 'burst' cannot be negative");
  if (req.unique_key().size() > 1024)
    return Status::InvalidArgument("field 'unique_key' is longer than 1024 bytes");
  if (req.name().size() > 256) return Status::InvalidArgument("field 'name' is longer than 256 bytes");
  if (static_cast<uint64_t>(req.hits()) > limiter::kMaxCost)
    return Status::InvalidArgument("field 'hits' is too large");
  std::optional<limiter::Algorithm> algorithm = AlgorithmOf(req.algorithm());
  if (!algorithm) return Status::InvalidArgument("field 'algorithm': unknown value");
  spec.algorithm = *algorithm;
  spec.limit = static_cast<uint64_t>(req.limit());
  if (period) {
    spec.window = period->end - period->start;
    // A calendar TOKEN_BUCKET is a window that starts over at the period's end. Minutes, hours and days:
    // the epoch-aligned fixed window of the period's length (UTC periods are such windows). Months and
    // years are not multiples of one length: each period counts under its own key (GregorianKey) in an
    // anchored window as long as the period, which cannot end before the period does.
    if (*algorithm == limiter::Algorithm::kAnchoredWindow && req.duration() < kMonths) {
      spec.algorithm = limiter::Algorithm::kFixedWindow;
    }
  } else {
    if (req.duration() > limiter::kMaxWindow / limiter::kMillisecond)
      return Status::InvalidArgument("field 'duration' is too large");
    spec.window = req.duration() * limiter::kMillisecond;
  }
  spec.burst = static_cast<uint64_t>(req.burst());
  // DRAIN_OVER_LIMIT: an over-limit hit empties what is left (Gubernator sets remaining to 0): the
  // limiter's count_denied charges a denied request, and a bucket never holds less than nothing.
  spec.count_denied = (req.behavior() & gpb::DRAIN_OVER_LIMIT) != 0;
  // LEAKY_BUCKET asked for more than its burst: Gubernator answers the bucket empty and keeps it so (a new
  // bucket starts full of those hits), so a whole burst is charged, denied or not (LeakyOverBurst).
  if (LeakyOverBurst(req)) spec.count_denied = true;
  if (spec.limit == 0) return spec;  // always over the limit; no state needed
  if (auto invalid = limiter::Validate(spec)) {
    std::string field = invalid->field == "window" ? "duration" : invalid->field;
    return Status::InvalidArgument("field '" + field + "': " + invalid->message);
  }
  return spec;
}

void AppendQuoted(JsonWriter* w, std::string_view key, int64_t v) {
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  w->Field(key, std::string_view(buf, static_cast<size_t>(end - buf)));
}

// One RateLimitResp as Protobuf's JSON mapping writes it (proto names, int64 as strings, every field).
void WriteResp(JsonWriter* w, const gpb::RateLimitResp& resp) {
  w->BeginObject();
  w->Field("status", resp.status() == gpb::OVER_LIMIT ? "OVER_LIMIT" : "UNDER_LIMIT");
  AppendQuoted(w, "limit", resp.limit());
  AppendQuoted(w, "remaining", resp.remaining());
  AppendQuoted(w, "reset_time", resp.reset_time());
  w->Field("error", resp.error());
  w->Key("metadata");
  w->BeginObject();
  for (const auto& [k, v] : resp.metadata()) w->Field(k, v);
  w->EndObject();
  w->EndObject();
}

// A request being decided, kept alive until every decision is in; its items are independent, so they run
// in CheckRounds.
struct GubernatorJob {
  GubernatorJob(const CheckService& context_in, const gpb::GetRateLimitsReq& request_in,
                gpb::GetRateLimitsResp* response_in)
      : context(context_in), request(request_in), response(response_in), rounds(context_in) {}

  const CheckService& context;
  const gpb::GetRateLimitsReq& request;
  gpb::GetRateLimitsResp* response;
  std::vector<std::string> errors;                    // per item; "" when valid
  std::vector<std::pair<int32_t, int32_t>> check_of;  // item -> (round, check index); round -1: none
  limiter::TimeNs now = 0;  // the calendar periods' instant (DURATION_IS_GREGORIAN), read once in Prepare
  std::forward_list<std::string> keys;  // GregorianKey's keys (stable: the batches keep views)
  CheckRounds rounds;
};

// Every valid item with a positive limit becomes one check.
std::optional<ApiError> Prepare(GubernatorJob* job) {
  const gpb::GetRateLimitsReq& request = job->request;
  const size_t n = static_cast<size_t>(request.requests_size());
  if (n > job->context.options.max_checks) {
    return ApiError{ErrorKind::kTooManyChecks, "Requests.RateLimits list too large; max size is '" +
                                                   std::to_string(job->context.options.max_checks) + "'"};
  }
  job->errors.resize(n);
  job->now = job->context.clock();
  job->check_of.assign(n, {-1, -1});
  std::unordered_map<std::string_view, int32_t> rounds_of_key;  // key -> items seen so far
  const std::shared_ptr<const PolicySet> policies = job->context.policies.Current();
  for (size_t i = 0; i < n; ++i) {
    const gpb::RateLimitReq& req = request.requests(static_cast<int>(i));
    Result<limiter::LimitSpec> item = ItemSpec(req, job->now);
    if (!item.ok()) {
      job->errors[i] = item.status().message();
      continue;
    }
    if (const Policy* owner = policies->Owning(req.name())) {
      job->errors[i] = ReservedName(req.name(), *owner).message;
      continue;
    }
    const limiter::LimitSpec& spec = *item;
    if (spec.limit == 0) continue;
    std::string_view key = req.unique_key();
    if (std::string calendar = GregorianKey(req, job->now); !calendar.empty()) {
      key = job->keys.emplace_front(std::move(calendar));
    }
    const int32_t round = rounds_of_key[key]++;
    CheckBatch& batch = job->rounds.Round(static_cast<size_t>(round));
    job->check_of[i] = {round, static_cast<int32_t>(batch.checks().size())};
    // RESET_REMAINING starts the state over and ignores the hits, as Gubernator.
    const bool reset = (req.behavior() & gpb::RESET_REMAINING) != 0;
    const uint64_t hits = reset                 ? 0
                          : LeakyOverBurst(req) ? static_cast<uint64_t>(BurstOf(req))
                                                : static_cast<uint64_t>(req.hits());
    batch.AddInline(key, req.name(), spec, hits, reset, i);
  }
  return std::nullopt;
}

// Fills the response once every round has run.
void Finish(const GubernatorJob& job) {
  const int64_t now_ms = job.rounds.now() / limiter::kMillisecond;
  const int n = job.request.requests_size();
  gpb::GetRateLimitsResp* response = job.response;
  response->clear_responses();
  response->mutable_responses()->Reserve(n);
  // metadata.owner: the deciding node's address ("host:port"), as Gubernator reports its peers; the node
  // id where the address is not known (a node without a cluster).
  std::vector<std::pair<std::string_view, std::string>> addresses;
  auto address_of = [&](std::string_view owner) -> const std::string& {
    for (const auto& [id, address] : addresses) {
      if (id == owner) return address;
    }
    std::string address = job.context.cluster != nullptr ? job.context.cluster->HttpAddressOf(owner) : "";
    return addresses.emplace_back(owner, address.empty() ? std::string(owner) : std::move(address)).second;
  };
  for (int i = 0; i < n; ++i) {
    const gpb::RateLimitReq& req = job.request.requests(i);
    gpb::RateLimitResp* resp = response->add_responses();
    const auto [round, index] = job.check_of[static_cast<size_t>(i)];
    if (!job.errors[static_cast<size_t>(i)].empty()) {
      resp->set_error(job.errors[static_cast<size_t>(i)]);
      continue;
    }
    if (round < 0) {  // limit 0: nothing is ever admitted
      resp->set_status(req.hits() > 0 ? gpb::OVER_LIMIT : gpb::UNDER_LIMIT);
      resp->set_reset_time(now_ms + DurationMs(req, job.now));
      continue;
    }
    const CheckBatch& batch = job.rounds[static_cast<size_t>(round)];
    if (batch.unavailable(static_cast<size_t>(index))) {
      resp->set_error(batch.unavailable()->message);
      continue;
    }
    const limiter::Decision& d = batch.decisions()[static_cast<size_t>(index)];
    resp->set_status(d.allowed ? gpb::UNDER_LIMIT : gpb::OVER_LIMIT);
    resp->set_limit(static_cast<int64_t>(d.limit));
    resp->set_remaining(static_cast<int64_t>(d.remaining));
    if (LeakyOverBurst(req)) {
      // Answered empty, with the time the whole limit takes to leak.
      resp->set_status(gpb::OVER_LIMIT);
      resp->set_remaining(0);
      resp->set_reset_time(now_ms + DurationMs(req, job.now));
    } else if ((req.behavior() & gpb::RESET_REMAINING) != 0) {
      resp->set_reset_time(0);  // Gubernator answers a reset with no reset time
    } else if (IsGregorian(req) && req.algorithm() == gpb::TOKEN_BUCKET) {
      // The period's last millisecond, as Gubernator reports a calendar bucket's expiry.
      resp->set_reset_time(GregorianPeriod(req.duration(), job.now)->end / limiter::kMillisecond - 1);
    } else if (req.algorithm() == gpb::TOKEN_BUCKET && d.reset_after <= 0) {
      // Nothing counted yet (a peek, or hits over the limit, on a new bucket): Gubernator's new bucket
      // ends a duration from now.
      resp->set_reset_time(now_ms + req.duration());
    } else {
      // The reset instant in whole milliseconds, as Gubernator counts (a bucket's created_at in ms +
      // duration): the same reset_time on every hit of a window, whatever fraction of a millisecond each
      // was decided at.
      const limiter::TimeNs at = job.rounds.now() + std::max<limiter::DurationNs>(d.reset_after, 0);
      resp->set_reset_time(at / limiter::kMillisecond);
    }
    if (!batch.owners().empty()) {
      const std::string_view owner = batch.owners()[static_cast<size_t>(index)];
      (*resp->mutable_metadata())["owner"] = address_of(owner);
    }
  }
}

// grpc-gateway's HTTP status for a gRPC code.
http::status GatewayStatusOf(int code) {
  switch (code) {
    case 3:   // INVALID_ARGUMENT
    case 9:   // FAILED_PRECONDITION
    case 11:  // OUT_OF_RANGE
      return http::status::bad_request;
    case 5:  // NOT_FOUND
      return http::status::not_found;
    case 8:  // RESOURCE_EXHAUSTED
      return http::status::too_many_requests;
    case 12:  // UNIMPLEMENTED
      return http::status::not_implemented;
    case 14:  // UNAVAILABLE
      return http::status::service_unavailable;
    case 16:  // UNAUTHENTICATED
      return http::status::unauthorized;
    default:
      return http::status::internal_server_error;
  }
}

HttpResponse JsonOk(std::string body) {
  HttpResponse response{http::status::ok, 11};
  response.set(http::field::content_type, "application/json");
  response.body() = std::move(body);
  response.prepare_payload();
  return response;
}

HttpResponse GatewayJson(const gpb::GetRateLimitsResp& resp) {
  std::string body;
  body.reserve(64 + static_cast<size_t>(resp.responses_size()) * 144);
  JsonWriter w(&body);
  w.BeginObject();
  w.Key("responses");
  w.BeginArray();
  for (const gpb::RateLimitResp& r : resp.responses()) WriteResp(&w, r);
  w.EndArray();
  w.EndObject();
  return JsonOk(std::move(body));
}

// The HTTP request parsed into a job that owns its messages (on one arena).
struct HttpJob {
  google::protobuf::Arena arena;
  gpb::GetRateLimitsReq* request = google::protobuf::Arena::CreateMessage<gpb::GetRateLimitsReq>(&arena);
  gpb::GetRateLimitsResp* response = google::protobuf::Arena::CreateMessage<gpb::GetRateLimitsResp>(&arena);
};

std::optional<ApiError> ParseHttp(const CheckService& context, const HttpRequest& request, HttpJob* job) {
  json::value root;
  if (auto error = ParseJsonBody(request.body(), &root)) return error;
  if (!root.is_object()) return ApiError{ErrorKind::kInvalidField, "body: must be a JSON object"};
  const json::value* requests_value = root.get_object().if_contains("requests");
  if (requests_value == nullptr || requests_value->is_null()) return std::nullopt;
  if (!requests_value->is_array()) return ApiError{ErrorKind::kInvalidField, "requests: must be an array"};
  const json::array& requests = requests_value->get_array();
  if (requests.size() > context.options.max_checks) {
    return ApiError{ErrorKind::kTooManyChecks, "Requests.RateLimits list too large; max size is '" +
                                                   std::to_string(context.options.max_checks) + "'"};
  }
  for (size_t i = 0; i < requests.size(); ++i) {
    if (!requests[i].is_object()) {
      return ApiError{ErrorKind::kInvalidField, "requests[" + std::to_string(i) + "]: must be an object"};
    }
    if (auto error = ReadRateLimitReq(requests[i].get_object(), job->request->add_requests())) {
      return Prefixed("requests[" + std::to_string(i) + "].", std::move(*error));
    }
  }
  return std::nullopt;
}

}  // namespace

int GubernatorGrpcCode(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kBadJson:
    case ErrorKind::kInvalidField:
    case ErrorKind::kUnknownPolicy:
    case ErrorKind::kUnsupportedMediaType:
      return 3;  // INVALID_ARGUMENT
    case ErrorKind::kTooManyChecks:
      return 11;  // OUT_OF_RANGE
    case ErrorKind::kUnauthorized:
      return 16;  // UNAUTHENTICATED
    case ErrorKind::kNotFound:
      return 5;  // NOT_FOUND
    case ErrorKind::kMethodNotAllowed:
      return 12;  // UNIMPLEMENTED
    case ErrorKind::kNotReady:
    case ErrorKind::kUnavailable:
      return 14;  // UNAVAILABLE
    case ErrorKind::kInternal:
      break;
  }
  return 13;  // INTERNAL
}

HttpResponse GatewayErrorResponse(const ApiError& error) {
  const int code = GubernatorGrpcCode(error.kind);
  std::string body;
  JsonWriter w(&body);
  w.BeginObject();
  w.FieldInt("code", code);
  w.Field("message", error.message);
  w.Key("details");
  w.BeginArray();
  w.EndArray();
  w.EndObject();
  // A wrong method or media type keeps its own status (the gateway never sees such a request).
  const http::status status =
      error.kind == ErrorKind::kMethodNotAllowed || error.kind == ErrorKind::kUnsupportedMediaType
          ? StatusOf(error.kind)
          : GatewayStatusOf(code);
  HttpResponse response{status, 11};
  response.set(http::field::content_type, "application/json");
  response.body() = std::move(body);
  response.prepare_payload();
  return response;
}

void DecideGetRateLimits(const CheckService& context, CheckRouter* router,
                         const gpb::GetRateLimitsReq& request, gpb::GetRateLimitsResp* response,
                         GubernatorDone done) {
  auto job = std::make_shared<GubernatorJob>(context, request, response);
  if (auto error = Prepare(job.get())) return done(std::move(error));
  GubernatorJob* raw = job.get();
  raw->rounds.Run(router, job, [job, done](std::optional<ApiError> error) mutable {
    if (!error) Finish(*job);
    job.reset();  // the batches die here, after their last use
    done(std::move(error));
  });
}

void FillHealthCheck(const CheckService& context, gpb::HealthCheckResp* response) {
  response->set_status("healthy");
  response->set_peer_count(1);
  if (!context.ready.load(std::memory_order_acquire)) {
    response->set_status("unhealthy");
    response->set_message("the node is not ready to serve (starting or draining)");
  }
  if (context.cluster == nullptr) return;
  const ClusterView view = context.cluster->Describe();
  int32_t alive = 0;
  for (const ClusterMemberView& m : view.members) {
    if (m.state == "alive") ++alive;
    if (m.id == view.node_id) response->set_advertise_address(m.http_address);
  }
  response->set_peer_count(alive);
  if (response->status() == "healthy" && !context.cluster->ready()) {
    response->set_status("unhealthy");
    response->set_message("the node has not joined the cluster (or is leaving)");
  }
}

HttpResponse HandleGetRateLimits(const CheckService& context, const HttpRequest& request) {
  HttpJob job;
  if (auto error = ParseHttp(context, request, &job)) return GatewayErrorResponse(*error);
  std::optional<ApiError> failed;
  // Without a router every round runs before DecideGetRateLimits returns.
  DecideGetRateLimits(context, nullptr, *job.request, job.response,
                      [&failed](std::optional<ApiError> error) { failed = std::move(error); });
  if (failed) return GatewayErrorResponse(*failed);
  return GatewayJson(*job.response);
}

void HandleGetRateLimitsRouted(const CheckService& context, CheckRouter& router, const HttpRequest& request,
                               std::function<void(HttpResponse&&)> respond) {
  auto job = std::make_shared<HttpJob>();
  if (auto error = ParseHttp(context, request, job.get())) return respond(GatewayErrorResponse(*error));
  HttpJob* raw = job.get();
  DecideGetRateLimits(
      context, &router, *raw->request, raw->response, [job, respond](std::optional<ApiError> error) mutable {
        HttpResponse response = error ? GatewayErrorResponse(*error) : GatewayJson(*job->response);
        job.reset();
        respond(std::move(response));
      });
}

HttpResponse HandleHealthCheck(const CheckService& context) {
  gpb::HealthCheckResp resp;
  FillHealthCheck(context, &resp);
  std::string body;
  JsonWriter w(&body);
  w.BeginObject();
  w.Field("status", resp.status());
  w.Field("message", resp.message());
  w.FieldInt("peer_count", resp.peer_count());
  w.Field("advertise_address", resp.advertise_address());
  w.EndObject();
  return JsonOk(std::move(body));
}

HttpResponse HandleLiveCheck() { return JsonOk("{}"); }

void GetRateLimits(const CheckService& service, const gpb::GetRateLimitsReq& request,
                   gpb::GetRateLimitsResp* response, GubernatorDone done) {
  AnswerOnce("GetRateLimits (gRPC)", std::move(done), [&](const GubernatorDone& answer) {
    DecideGetRateLimits(service, service.router, request, response, answer);
  });
}

std::vector<HttpRoute> GatewayRoutes(const CheckService& service) {
  namespace http = boost::beast::http;
  const CheckService* s = &service;
  std::vector<HttpRoute> routes;
  routes.push_back(HttpRoute{
      .path = "/v1/GetRateLimits",
      .method = http::verb::post,
      .endpoint = Endpoint::kGetRateLimits,
      .now = [s](const HttpRequest& request) { return HandleGetRateLimits(*s, request); },
      .routed = [s](CheckRouter& router, const HttpRequest& request,
                    Respond respond) { HandleGetRateLimitsRouted(*s, router, request, std::move(respond)); },
      .error = [](const ApiError& error) { return GatewayErrorResponse(error); }});
  routes.push_back(HttpRoute{.path = "/v1/HealthCheck",
                             .method = http::verb::get,
                             .endpoint = Endpoint::kGubernatorHealth,
                             .now = [s](const HttpRequest&) { return HandleHealthCheck(*s); },
                             .routed = {},
                             .error = {}});
  routes.push_back(HttpRoute{.path = "/v1/LiveCheck",
                             .method = http::verb::get,
                             .endpoint = Endpoint::kGubernatorHealth,
                             .now = [](const HttpRequest&) { return HandleLiveCheck(); },
                             .routed = {},
                             .error = {}});
  return routes;
}

}  // namespace ringlimit::node
