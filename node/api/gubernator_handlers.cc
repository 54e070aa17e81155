#include "node/api/gubernator_handlers.h"

#include <google/protobuf/arena.h>

#include <boost/json.hpp>
#include <charconv>
#include <functional>
#include <memory>
#include <unordered_map>
#include <variant>

#include "node/api/api_context.h"
#include "node/api/api_json.h"
#include "node/api/check_engine.h"
#include "node/api/cluster_hooks.h"
#include "node/api/json_writer.h"

namespace ringlimit::node {

namespace http = boost::beast::http;
namespace json = boost::json;

namespace {

// Gubernator's Behavior flags.
constexpr int32_t kDurationIsGregorian = 4;
constexpr int32_t kResetRemaining = 8;

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

std::optional<ApiError> ReadRateLimitReq(const json::object& o, api::RateLimitReq* req) {
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
        req->set_algorithm(static_cast<api::GubernatorAlgorithm>(e));
      }
    } else if (key == "behavior") {
      if (!(error = ReadEnum(value, key, kBehaviors, true, &e))) req->set_behavior(e);
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
    }
    // Other fields (created_at, ...) are ignored, as Gubernator's gateway discards unknown fields.
    if (error) return error;
  }
  return std::nullopt;
}

// The limiter's algorithm for a Gubernator one; nullopt for a number with no enumerator (ReadEnum admits
// only the two names and their numbers, so none arrives from JSON).
std::optional<limiter::Algorithm> AlgorithmOf(api::GubernatorAlgorithm algorithm) {
  switch (algorithm) {
    case api::TOKEN_BUCKET:
      return limiter::Algorithm::kTokenBucket;
    case api::LEAKY_BUCKET:
      return limiter::Algorithm::kLeakyBucket;
    case api::GubernatorAlgorithm_INT_MIN_SENTINEL_DO_NOT_USE_:  // protoc's range markers, not values
    case api::GubernatorAlgorithm_INT_MAX_SENTINEL_DO_NOT_USE_:
      break;
  }
  return std::nullopt;
}

// The per-item semantic checks Gubernator reports in RateLimitResp.error (not as an HTTP error).
std::string ItemError(const api::RateLimitReq& req, limiter::LimitSpec* spec) {
  if (req.unique_key().empty()) return "field 'unique_key' cannot be empty";
  if (req.name().empty()) return "field 'namespace' cannot be empty";
  if (req.hits() < 0) return "field 'hits' cannot be negative";
  if (req.limit() < 0) return "field 'limit' cannot be negative";
  if (req.duration() <= 0) return "field 'duration' must be a positive number of milliseconds";
  if (req.burst() < 0) return "field 'burst' cannot be negative";
  if (req.behavior() & kDurationIsGregorian) return "behavior DURATION_IS_GREGORIAN is not supported";
  if (req.unique_key().size() > 1024) return "field 'unique_key' is longer than 1024 bytes";
  if (req.name().size() > 256) return "field 'name' is longer than 256 bytes";
  if (static_cast<uint64_t>(req.hits()) > limiter::kMaxCost) return "field 'hits' is too large";
  std::optional<limiter::Algorithm> algorithm = AlgorithmOf(req.algorithm());
  if (!algorithm) return "field 'algorithm': unknown value";
  spec->algorithm = *algorithm;
  spec->limit = static_cast<uint64_t>(req.limit());
  if (req.duration() > limiter::kMaxWindow / limiter::kMillisecond) return "field 'duration' is too large";
  spec->window = req.duration() * limiter::kMillisecond;
  spec->burst = static_cast<uint64_t>(req.burst());
  if (spec->limit == 0) return "";  // always over the limit; no state needed
  if (auto invalid = limiter::Validate(*spec)) {
    std::string field = invalid->field == "window" ? "duration" : invalid->field;
    return "field '" + field + "': " + invalid->message;
  }
  return "";
}

void AppendQuoted(JsonWriter* w, std::string_view key, int64_t v) {
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  w->Field(key, std::string_view(buf, static_cast<size_t>(end - buf)));
}

// One RateLimitResp as Protobuf's JSON mapping writes it (proto names, int64 as strings, every field).
// `owner` (the node that decided it, "" when not in a cluster) goes into metadata, where Gubernator
// reports its own owner.
void WriteResp(JsonWriter* w, bool over, int64_t limit, int64_t remaining, int64_t reset_time,
               std::string_view error, std::string_view owner = {}) {
  w->BeginObject();
  w->Field("status", over ? "OVER_LIMIT" : "UNDER_LIMIT");
  AppendQuoted(w, "limit", limit);
  AppendQuoted(w, "remaining", remaining);
  AppendQuoted(w, "reset_time", reset_time);
  w->Field("error", error);
  w->Key("metadata");
  w->BeginObject();
  if (!owner.empty()) w->Field("owner", owner);
  w->EndObject();
  w->EndObject();
}

// A parsed GetRateLimits request, kept alive (with the arena its strings live in) until every decision
// is in. Items are independent (not all-or-nothing, unlike /v1/check), so a routed request runs in
// rounds: round r holds the r-th item of every key, one check per key, and rounds run one after the
// other, so the items of one key are charged in request order wherever their owner is.
struct GubernatorJob {
  explicit GubernatorJob(const ApiContext& context_in) : context(context_in) {}

  // Round `r` of the batch, created on first use.
  CheckBatch& Round(size_t r) {
    while (rounds.size() <= r) rounds.push_back(std::make_unique<CheckBatch>(context));
    return *rounds[r];
  }

  // Runs rounds[r] and the ones after it through `router`, then calls `done` (exactly once; with an
  // error response if a round could not run).
  void RunRoundsFrom(size_t r, CheckRouter& router, std::shared_ptr<GubernatorJob> self,
                     std::function<void(std::optional<ApiError>)> done) {
    if (r >= rounds.size()) return done(std::nullopt);
    CheckBatch& batch = *rounds[r];
    auto error = batch.RunRouted(now, router, [this, r, &router, self, done]() mutable {
      RunRoundsFrom(r + 1, router, std::move(self), std::move(done));
    });
    if (error) done(std::move(error));
  }

  const ApiContext& context;
  google::protobuf::Arena arena;
  api::GetRateLimitsReq* parsed = nullptr;
  std::vector<std::string> errors;                    // per item; "" when valid
  std::vector<std::pair<int32_t, int32_t>> check_of;  // item -> (round, check index); round -1: none
  std::vector<std::unique_ptr<CheckBatch>> rounds;
  limiter::TimeNs now = 0;
};

using Prepared = std::variant<HttpResponse, std::shared_ptr<GubernatorJob>>;

// Parses the request into a job: every valid item with a positive limit becomes one check, in round 0
// unless `in_rounds` (routed) puts repeated keys into later rounds.
Prepared Prepare(const ApiContext& context, const HttpRequest& request, bool in_rounds) {
  json::value root;
  if (auto error = ParseJsonBody(request.body(), &root)) return ToResponse(*error);
  if (!root.is_object()) return ToResponse({ErrorKind::kInvalidField, "body: must be a JSON object"});
  const json::value* requests_value = root.get_object().if_contains("requests");
  static const json::array kEmpty;
  const json::array* requests = &kEmpty;
  if (requests_value != nullptr && !requests_value->is_null()) {
    if (!requests_value->is_array())
      return ToResponse({ErrorKind::kInvalidField, "requests: must be an array"});
    requests = &requests_value->get_array();
  }
  if (requests->size() > context.options.max_checks) {
    return ToResponse({ErrorKind::kTooManyChecks, "Requests.RateLimits list too large; max size is '" +
                                                      std::to_string(context.options.max_checks) + "'"});
  }

  auto job = std::make_shared<GubernatorJob>(context);
  job->parsed = google::protobuf::Arena::CreateMessage<api::GetRateLimitsReq>(&job->arena);
  job->errors.resize(requests->size());
  job->check_of.assign(requests->size(), {-1, -1});
  std::unordered_map<std::string_view, int32_t> rounds_of_key;  // key -> items seen so far
  for (size_t i = 0; i < requests->size(); ++i) {
    if (!(*requests)[i].is_object()) {
      return ToResponse({ErrorKind::kInvalidField, "requests[" + std::to_string(i) + "]: must be an object"});
    }
    api::RateLimitReq* req = job->parsed->add_requests();
    if (auto error = ReadRateLimitReq((*requests)[i].get_object(), req)) {
      return ToResponse(Prefixed("requests[" + std::to_string(i) + "].", std::move(*error)));
    }
  }
  for (size_t i = 0; i < requests->size(); ++i) {
    const api::RateLimitReq& req = job->parsed->requests(static_cast<int>(i));
    limiter::LimitSpec spec;
    job->errors[i] = ItemError(req, &spec);
    if (!job->errors[i].empty() || spec.limit == 0) continue;
    const int32_t round = in_rounds ? rounds_of_key[req.unique_key()]++ : 0;
    CheckBatch& batch = job->Round(static_cast<size_t>(round));
    job->check_of[i] = {round, static_cast<int32_t>(batch.checks().size())};
    batch.AddInline(req.unique_key(), req.name(), spec, static_cast<uint64_t>(req.hits()),
                    (req.behavior() & kResetRemaining) != 0, i);
  }
  job->now = context.clock();
  return job;
}

// The response once every round of `job` has run.
HttpResponse Finish(const GubernatorJob& job) {
  const int64_t now_ms = job.now / limiter::kMillisecond;
  const int n = job.parsed->requests_size();
  std::string body;
  body.reserve(64 + static_cast<size_t>(n) * 144);
  JsonWriter w(&body);
  w.BeginObject();
  w.Key("responses");
  w.BeginArray();
  for (int i = 0; i < n; ++i) {
    const api::RateLimitReq& req = job.parsed->requests(i);
    const auto [round, index] = job.check_of[static_cast<size_t>(i)];
    if (!job.errors[static_cast<size_t>(i)].empty()) {
      WriteResp(&w, false, 0, 0, 0, job.errors[static_cast<size_t>(i)]);
    } else if (round < 0) {  // limit 0: nothing is ever admitted
      WriteResp(&w, req.hits() > 0, 0, 0, now_ms + req.duration(), "");
    } else {
      const CheckBatch& batch = *job.rounds[static_cast<size_t>(round)];
      if (batch.unavailable(static_cast<size_t>(index))) {
        WriteResp(&w, false, 0, 0, 0, batch.unavailable()->message);
        continue;
      }
      const limiter::Decision& d = batch.decisions()[static_cast<size_t>(index)];
      const int64_t reset_ms = d.reset_after <= 0 ? 0 : (d.reset_after - 1) / limiter::kMillisecond + 1;
      const std::string_view owner =
          batch.owners().empty() ? std::string_view() : batch.owners()[static_cast<size_t>(index)];
      WriteResp(&w, !d.allowed, static_cast<int64_t>(d.limit), static_cast<int64_t>(d.remaining),
                now_ms + reset_ms, "", owner);
    }
  }
  w.EndArray();
  w.EndObject();
  HttpResponse response{http::status::ok, 11};
  response.set(http::field::content_type, "application/json");
  response.body() = std::move(body);
  response.prepare_payload();
  return response;
}

}  // namespace

HttpResponse HandleGetRateLimits(const ApiContext& context, const HttpRequest& request) {
  Prepared prepared = Prepare(context, request, /*in_rounds=*/false);
  if (auto* response = std::get_if<HttpResponse>(&prepared)) return std::move(*response);
  GubernatorJob& job = *std::get<std::shared_ptr<GubernatorJob>>(prepared);
  if (!job.rounds.empty()) {
    if (auto error = job.rounds[0]->Run(job.now, /*group_by_key=*/false)) return ToResponse(*error);
  }
  return Finish(job);
}

void HandleGetRateLimitsRouted(const ApiContext& context, CheckRouter& router, const HttpRequest& request,
                               std::function<void(HttpResponse&&)> respond) {
  Prepared prepared = Prepare(context, request, /*in_rounds=*/true);
  if (auto* response = std::get_if<HttpResponse>(&prepared)) return respond(std::move(*response));
  std::shared_ptr<GubernatorJob> job = std::get<std::shared_ptr<GubernatorJob>>(std::move(prepared));
  GubernatorJob* raw = job.get();
  raw->RunRoundsFrom(0, router, job, [job, respond](std::optional<ApiError> error) mutable {
    HttpResponse response = error ? ToResponse(*error) : Finish(*job);
    // The job (and its batches) dies here, after its last use.
    job.reset();
    respond(std::move(response));
  });
}

}  // namespace ringlimit::node
