#include "node/api/check_handlers.h"

#include <google/protobuf/arena.h>

#include <array>
#include <boost/json.hpp>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <variant>

#include "node/api/check_json.h"
#include "node/http/http_error.h"
#include "node/service/api_json.h"
#include "node/service/check_engine.h"
#include "node/service/check_service.h"
#include "node/service/cluster_hooks.h"
#include "node/service/json_writer.h"
#include "node/service/ratelimit_headers.h"

namespace ringlimit::node {

namespace http = boost::beast::http;
namespace json = boost::json;
using namespace std::string_view_literals;

namespace {

using limiter::DurationNs;

int64_t CeilDiv(DurationNs d, DurationNs unit) { return d <= 0 ? 0 : (d - 1) / unit + 1; }

// retry_after in ms; -1 for "never" (the cost exceeds what the limit can ever admit).
int64_t RetryAfterMs(DurationNs d) { return d == limiter::kNever ? -1 : CeilDiv(d, limiter::kMillisecond); }

// The JSON of CheckResponse (field names and order as in proto/api.proto CheckResponse/CheckResult;
// check_handlers_test verifies them against the descriptor). Written with literal fragments: the hot path
// of GET and POST /v1/check.
void WriteCheckResponse(const CheckBatch& batch, std::string* out) {
  Appender a(*out, 32 + batch.checks().size() * 256);
  a.Put(batch.all_allowed() ? R"({"allowed":true,"results":[)"sv : R"({"allowed":false,"results":[)"sv);
  for (size_t i = 0; i < batch.checks().size(); ++i) {
    const PendingCheck& c = batch.checks()[i];
    const limiter::Decision& d = batch.decisions()[i];
    a.Put(i == 0 ? R"({"key":)"sv : R"(,{"key":)"sv);
    a.JsonString(c.key);
    a.Put(R"(,"name":)"sv);
    a.JsonString(c.state_name);
    a.Put(d.allowed ? R"(,"allowed":true,"limit":)"sv : R"(,"allowed":false,"limit":)"sv);
    a.Uint(d.limit);
    a.Put(R"(,"remaining":)"sv);
    a.Uint(d.remaining);
    a.Put(R"(,"reset_ms":)"sv);
    a.Int(CeilDiv(d.reset_after, limiter::kMillisecond));
    a.Put(R"(,"retry_after_ms":)"sv);
    a.Int(d.allowed ? 0 : RetryAfterMs(d.retry_after));
    a.Put(R"(,"delay_ms":)"sv);
    a.Int(CeilDiv(d.delay, limiter::kMillisecond));
    a.Put(R"(,"mode":")"sv);
    a.Put(limiter::ModeName(c.spec->mode));
    a.Put(d.would_deny ? R"(","would_deny":true)"sv : R"(","would_deny":false)"sv);
    // The deciding node; "" for a handler that is not part of a cluster.
    a.Put(R"(,"owner":)"sv);
    a.JsonString(batch.owners().empty() ? std::string_view() : batch.owners()[i]);
    a.Put('}');
  }
  a.Put("]}"sv);
}

// (No Content-Length: the HTTP transport frames every response by its body -- node/server/session.cc.)
HttpResponse JsonOk(http::status status, std::string body) {
  HttpResponse response{status, 11};
  response.insert(http::field::content_type, "application/json");
  response.body() = std::move(body);
  return response;
}

// The status of a GET check's answer: 200 admitted, else ?deny_status= or 429.
unsigned GetStatus(const CheckBatch& batch, unsigned deny_status) {
  if (batch.all_allowed()) return 200;
  return deny_status != 0 ? deny_status : 429;
}

// The fields of a GET check's answer after its Content-Type, in order, handed to
// sink(http::field id, std::string_view name, std::string_view value): RateLimit-Policy / RateLimit
// (draft-ietf-httpapi-ratelimit-headers-10), one list member per limit; X-RateLimit-* and Retry-After from
// the binding limit (the refusing one with the longest wait, else the one with the fewest units left); the
// deciding node (RateLimit-Owner) when the batch was routed.
template <class Sink>
void RateLimitFields(const CheckBatch& batch, Sink&& sink) {
  RateLimitHeaders headers;
  size_t binding = 0;
  for (size_t i = 0; i < batch.checks().size(); ++i) {
    const PendingCheck& c = batch.checks()[i];
    const limiter::Decision& d = batch.decisions()[i];
    headers.Add(c.state_name, static_cast<int64_t>(d.limit), CeilDiv(c.spec->window, limiter::kSecond),
                static_cast<int64_t>(d.remaining), CeilDiv(d.reset_after, limiter::kSecond));
    const limiter::Decision& b = batch.decisions()[binding];
    const bool better = (!d.allowed && b.allowed) ||
                        (!d.allowed && !b.allowed && d.retry_after > b.retry_after) ||
                        (d.allowed && b.allowed && d.remaining < b.remaining);
    if (better) binding = i;
  }
  sink(http::field::unknown, "RateLimit-Policy", headers.policy());
  sink(http::field::unknown, "RateLimit", headers.state());
  char buf[24];
  auto number = [&buf](int64_t v) {
    auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
    return std::string_view(buf, static_cast<size_t>(end - buf));
  };
  const limiter::Decision& b = batch.decisions()[binding];
  sink(http::field::unknown, "X-RateLimit-Limit", number(static_cast<int64_t>(b.limit)));
  sink(http::field::unknown, "X-RateLimit-Remaining", number(static_cast<int64_t>(b.remaining)));
  sink(http::field::unknown, "X-RateLimit-Reset", number(CeilDiv(b.reset_after, limiter::kSecond)));
  if (!batch.all_allowed() && b.retry_after != limiter::kNever) {
    sink(http::field::retry_after, "Retry-After",
         number(std::max<int64_t>(1, CeilDiv(b.retry_after, limiter::kSecond))));
  }
  if (!batch.owners().empty()) sink(http::field::unknown, "RateLimit-Owner", batch.owners()[0]);
}

}  // namespace

// A parsed check request, kept alive (with the arena its keys point into) until every decision is in.
struct CheckJob {
  explicit CheckJob(const CheckService& context) : arena(arena_block, sizeof arena_block), batch(context) {}

  // The arena's first block: a request of a few checks parses without a heap allocation.
  alignas(16) char arena_block[1024];
  google::protobuf::Arena arena;
  CheckFields get;  // GET: the query's check (its views point into the arena)
  CheckBatch batch;
  bool is_get = false;
  unsigned deny_status = 0;
  Respond respond;  // routed: whom to answer once every decision is in
  // A GET answered in place later (AnswerCheckGetInPlace): whom to answer, whether as /v1/auth, and since
  // when (its latency is counted when it is answered).
  WireRespond wire_respond;
  bool auth = false;
  std::chrono::steady_clock::time_point start;
};

namespace {

// A job is about 2 KiB, above what glibc's per-thread malloc cache holds (1032 bytes): each thread keeps
// up to kKept freed job blocks for its next jobs, freed for good when the thread ends.
class JobCache {
 public:
  static constexpr size_t kKept = 16;
  ~JobCache() {
    for (size_t i = 0; i < count_; ++i) std::free(blocks_[i]);
  }
  void* Take() {
    if (count_ > 0) return blocks_[--count_];
    void* block = std::malloc(sizeof(CheckJob));
    if (block == nullptr) throw std::bad_alloc();
    return block;
  }
  void Give(void* block) {
    if (count_ == kKept) {
      std::free(block);
    } else {
      blocks_[count_++] = block;
    }
  }

 private:
  std::array<void*, kKept> blocks_{};
  size_t count_ = 0;
};

thread_local JobCache job_cache;

struct JobDeleter {
  void operator()(CheckJob* job) const noexcept {
    job->~CheckJob();
    job_cache.Give(job);
  }
};
using JobPtr = std::unique_ptr<CheckJob, JobDeleter>;

JobPtr NewJob(const CheckService& context) {
  void* block = job_cache.Take();
  try {
    return JobPtr(new (block) CheckJob(context));
  } catch (...) {
    job_cache.Give(block);
    throw;
  }
}

using Prepared = std::variant<HttpResponse, JobPtr>;

// The DOM path: every body the streaming reader declines, and so every error answer.
Prepared PrepareCheckPostDom(const CheckService& context, const HttpRequest& request) {
  unsigned char buffer[16384];
  json::monotonic_resource resource(buffer, sizeof buffer);
  json::storage_ptr storage(&resource);
  json::value root(storage);
  if (auto error = ParseJsonBody(request.body(), &root)) return ToResponse(*error);
  if (!root.is_object())
    return ToResponse({ErrorKind::kInvalidField, "body: must be a JSON object with \"checks\""});
  const json::value* checks_value = nullptr;
  for (const auto& [key, value] : root.get_object()) {
    if (key == "checks") {
      checks_value = &value;
    } else {
      std::string message;
      AppendJsonString(&message, key);
      return ToResponse({ErrorKind::kInvalidField, message + ": unknown field"});
    }
  }
  if (checks_value == nullptr || !checks_value->is_array()) {
    return ToResponse({ErrorKind::kInvalidField, "checks: required, an array of checks"});
  }
  const json::array& checks = checks_value->get_array();
  if (checks.empty()) return ToResponse({ErrorKind::kInvalidField, "checks: must not be empty"});
  if (checks.size() > context.options.max_checks) {
    return ToResponse(
        {ErrorKind::kTooManyChecks, "checks: " + std::to_string(checks.size()) + " checks, at most " +
                                        std::to_string(context.options.max_checks) + " allowed"});
  }

  JobPtr job = NewJob(context);
  job->batch.Reserve(checks.size());
  for (size_t i = 0; i < checks.size(); ++i) {
    auto prefix = [i] { return "checks[" + std::to_string(i) + "]."; };
    if (!checks[i].is_object())
      return ToResponse({ErrorKind::kInvalidField, "checks[" + std::to_string(i) + "]: must be an object"});
    auto* check = google::protobuf::Arena::CreateMessage<api::Check>(&job->arena);
    if (auto error = CheckFromJson(checks[i].get_object(), /*allow_target=*/true, check)) {
      return ToResponse(Prefixed(prefix(), std::move(*error)));
    }
    if (auto error = job->batch.Add(*check, i)) return ToResponse(Prefixed(prefix(), std::move(*error)));
  }
  return job;
}

Prepared PrepareCheckPost(const CheckService& context, const HttpRequest& request) {
  JobPtr job = NewJob(context);
  std::vector<api::Check*> checks;
  if (!ReadChecksStreaming(request.body(), context.options.max_checks, &job->arena, &checks)) {
    return PrepareCheckPostDom(context, request);
  }
  // Every field decoded as the DOM path decodes it: its first error, if any, is the first Add's.
  job->batch.Reserve(checks.size());
  for (size_t i = 0; i < checks.size(); ++i) {
    if (auto error = job->batch.Add(*checks[i], i)) {
      return ToResponse(Prefixed("checks[" + std::to_string(i) + "].", std::move(*error)));
    }
  }
  return job;
}

// A copy of `s` in `arena` (no heap allocation while its first block lasts).
std::string_view Keep(google::protobuf::Arena& arena, std::string_view s) {
  if (s.empty()) return {};
  char* copy = google::protobuf::Arena::CreateArray<char>(&arena, s.size());
  std::memcpy(copy, s.data(), s.size());
  return {copy, s.size()};
}

// GET's check from `query`, and with no key there from the key header `key_field` finds (a callable
// returning an optional value), added to `batch`.
template <class KeyField>
std::optional<ApiError> AddGetCheck(const CheckService& context, std::string_view query, KeyField&& key_field,
                                    CheckFields& check, unsigned* deny_status, CheckBatch& batch) {
  if (auto error = CheckFromQuery(query, &check, deny_status)) return error;
  if (check.key.empty() && !context.options.key_header.empty()) {
    if (std::optional<std::string_view> value = key_field(context.options.key_header)) check.key = *value;
  }
  return batch.Add(check, 0);
}

Prepared PrepareCheckGet(const CheckService& context, const HttpRequest& request, std::string_view query) {
  JobPtr job = NewJob(context);
  job->is_get = true;
  // The job may outlive the request (a forwarded check): what its check points into is copied.
  auto key_field = [&](const std::string& name) -> std::optional<std::string_view> {
    auto it = request.find(name);
    if (it == request.end()) return std::nullopt;
    return Keep(job->arena, it->value());
  };
  if (auto error =
          AddGetCheck(context, Keep(job->arena, query), key_field, job->get, &job->deny_status, job->batch)) {
    return ToResponse(*error);
  }
  return job;
}

// The response once every decision of `job` is in.
HttpResponse Finish(const CheckJob& job) {
  const CheckBatch& batch = job.batch;
  if (batch.unavailable()) return ToResponse(*batch.unavailable());
  std::string body;
  WriteCheckResponse(batch, &body);
  if (!job.is_get) return JsonOk(http::status::ok, std::move(body));
  HttpResponse response =
      JsonOk(static_cast<http::status>(GetStatus(batch, job.deny_status)), std::move(body));
  RateLimitFields(batch, [&response](http::field id, std::string_view name, std::string_view value) {
    if (id == http::field::unknown) {
      response.insert_extension(name, value);
    } else {
      response.insert(id, value);
    }
  });
  return response;
}

HttpResponse RunLocal(const CheckService& context, Prepared prepared) {
  if (auto* response = std::get_if<HttpResponse>(&prepared)) return std::move(*response);
  CheckJob& job = *std::get<JobPtr>(prepared);
  if (auto error = job.batch.Run(context.clock(), /*group_by_key=*/true)) return ToResponse(*error);
  return Finish(job);
}

}  // namespace

HttpResponse HandleCheckPost(const CheckService& context, const HttpRequest& request) {
  return RunLocal(context, PrepareCheckPost(context, request));
}

HttpResponse HandleCheckGet(const CheckService& context, const HttpRequest& request, std::string_view query) {
  return RunLocal(context, PrepareCheckGet(context, request, query));
}

namespace {

// GET /v1/check's answer (or /v1/auth's, AuthAnswer's form) once every decision of `batch` is in, appended to
// `out`: the bytes Finish's response goes out as. Returns its status.
unsigned AppendGetAnswer(const CheckService& context, const CheckBatch& batch, unsigned deny_status,
                         bool auth, std::string& out) {
  if (batch.unavailable()) {
    const HttpResponse error = ToResponse(*batch.unavailable());
    AppendHttpResponse(error, /*head=*/false, /*close=*/false, out);
    return error.result_int();
  }
  auto field = [](WireResponse& response) {
    return [&response](http::field, std::string_view name, std::string_view value) {
      response.Field(name, value);
    };
  };
  if (auth) {
    // AuthAnswer's form: 200 or the auth deny status, the rate-limit fields, then the short body.
    const unsigned status = batch.all_allowed() ? 200 : context.options.auth_deny_status;
    WireResponse response(out, status);
    RateLimitFields(batch, field(response));
    response.Field("Content-Type", "application/json");
    response.Finish(batch.all_allowed() ? R"({"allowed":true})" : R"({"allowed":false})");
    return status;
  }
  // The body first (its length precedes it), in a buffer each thread keeps.
  thread_local std::string body;
  body.clear();
  WriteCheckResponse(batch, &body);
  const unsigned status = GetStatus(batch, deny_status);
  WireResponse response(out, status);
  response.Field("Content-Type", "application/json");
  RateLimitFields(batch, field(response));
  response.Finish(body);
  return status;
}

// A job's GET taken to answer later: the answer's bytes to its transport, counted in metrics; the job dies
// first.
void AnswerLaterNow(const CheckService& context, CheckJob* job, const std::optional<ApiError>& error) {
  std::string bytes;
  unsigned status = 0;
  if (error) {
    const HttpResponse response =
        job->auth ? AuthAnswer(context.options, ToResponse(*error)) : ToResponse(*error);
    AppendHttpResponse(response, /*head=*/false, /*close=*/false, bytes);
    status = response.result_int();
  } else {
    status = AppendGetAnswer(context, job->batch, job->deny_status, job->auth, bytes);
  }
  context.metrics.CountRequest(job->auth ? Endpoint::kAuth : Endpoint::kCheckGet, status,
                               std::chrono::steady_clock::now() - job->start);
  WireRespond to = std::move(job->wire_respond);
  JobDeleter()(job);  // the job (and its batch) dies after its last use
  to(std::move(bytes), status);
}

}  // namespace

unsigned AnswerCheckGetInPlace(const CheckService& context, const RequestHead& head, std::string_view query,
                               bool auth, std::string& out, AnswerLater* later,
                               std::chrono::steady_clock::time_point start) {
  // A node that refuses checks answers through Handle (503).
  if (context.router != nullptr && RefusalOf(*context.router, "")) return 0;
  // The check's views point into the request (or into its own decoded values) until it moves into a job.
  CheckFields check;
  unsigned deny_status = 0;
  {
    // The batch lives until the answer is written.
    CheckBatch batch(context);
    auto key_field = [&head](const std::string& name) { return head.Field(name); };
    if (AddGetCheck(context, query, key_field, check, &deny_status, batch)) return 0;  // Handle answers it
    const limiter::TimeNs now = context.clock();
    // Decided here before returning; or not, with nothing charged (a key another node decides, a decision
    // that waits for replicas).
    if (context.router == nullptr) {
      if (batch.Run(now, /*group_by_key=*/true)) return 0;
      return AppendGetAnswer(context, batch, deny_status, auth, out);
    }
    if (batch.RunHere(now, *context.router)) return AppendGetAnswer(context, batch, deny_status, auth, out);
  }
  if (later == nullptr) return 0;  // left to Handle
  // The check, in a job that outlives the request -- what it points into of the request copied into the job's
  // arena -- routed (forwarded to the node that decides its key) and answered when it is decided.
  JobPtr prepared = NewJob(context);
  CheckJob& job = *prepared;
  job.is_get = true;
  job.auth = auth;
  job.start = start;
  job.deny_status = deny_status;
  job.get = std::move(check);  // (its decoded values move with it, at the same addresses)
  const std::string_view query_copy = Keep(job.arena, query);
  auto rebase = [&](std::string_view& view) {
    if (view.empty()) return;
    if (view.data() >= query.data() && view.data() + view.size() <= query.data() + query.size()) {
      view = query_copy.substr(static_cast<size_t>(view.data() - query.data()), view.size());
    } else if (view.data() >= head.fields.data() &&
               view.data() + view.size() <= head.fields.data() + head.fields.size()) {
      view = Keep(job.arena, view);  // the key header's value
    }
  };
  for (std::string_view* view :
       {&job.get.key, &job.get.name, &job.get.policy, &job.get.tier, &job.get.algorithm, &job.get.mode}) {
    rebase(*view);
  }
  if (job.batch.Add(job.get, 0)) return 0;  // (added once already: not expected)
  job.wire_respond = later->Take();
  // The job owns itself until its last decision is in; the completion captures two pointers, which
  // std::function keeps inline.
  CheckJob* owned = prepared.release();
  const CheckService* service = &context;
  if (auto error = owned->batch.RunRouted(context.clock(), *context.router, [owned, service] {
        AnswerLaterNow(*service, owned, std::nullopt);
      })) {
    AnswerLaterNow(context, owned, error);
  }
  return RequestHandler::kAnsweredLater;
}

void HandleCheckRouted(const CheckService& context, CheckRouter& router, const HttpRequest& request,
                       std::string_view query, bool is_get, std::function<void(HttpResponse&&)> respond) {
  Prepared prepared = is_get ? PrepareCheckGet(context, request, query) : PrepareCheckPost(context, request);
  if (auto* response = std::get_if<HttpResponse>(&prepared)) return respond(std::move(*response));
  // The job owns itself until its last decision is in; the completion captures one raw pointer, which
  // std::function keeps inline (no allocation per check).
  CheckJob* job = std::get<JobPtr>(std::move(prepared)).release();
  job->respond = std::move(respond);
  auto answer = [job](HttpResponse response) {
    Respond to = std::move(job->respond);
    JobDeleter()(job);  // the job (and its batch) dies after its last use
    to(std::move(response));
  };
  auto error = job->batch.RunRouted(context.clock(), router, [job, answer] { answer(Finish(*job)); });
  if (error) answer(ToResponse(*error));
}

bool AuthHasKey(const CheckService& context, const HttpRequest& request, std::string_view query) {
  bool has_key = false;
  (void)ForEachQueryParam(query, [&](std::string_view name, std::string_view value) {
    if (name == "key" && !value.empty()) has_key = true;
    return true;
  });
  if (has_key || context.options.key_header.empty()) return has_key;
  auto it = request.find(context.options.key_header);
  return it != request.end() && !it->value().empty();
}

HttpResponse AuthAnswer(const ApiOptions& options, HttpResponse&& check) {
  const unsigned status = check.result_int();
  if (status >= 500) return std::move(check);  // unavailable: the proxy's own fail-open/closed rule applies
  HttpResponse out{status == 200 ? http::status::ok : static_cast<http::status>(options.auth_deny_status),
                   11};
  for (const auto& field : check) {
    const std::string_view name = field.name_string();
    if (name.starts_with("RateLimit") || name.starts_with("X-RateLimit") || name == "Retry-After") {
      out.set(field.name_string(), field.value());
    }
  }
  if (status != 200 && status != 429 && status != 403) {
    // A bad request (a typo in the proxy's config): refused, and the reason in a header the proxy can log.
    std::string reason = check.body();
    if (reason.size() > 512) reason.resize(512);
    for (char& c : reason) {
      if (c == '\r' || c == '\n') c = ' ';
    }
    out.set("X-RateLimit-Error", reason);
  }
  out.set(http::field::content_type, "application/json");
  out.body() = status == 200 ? R"({"allowed":true})" : R"({"allowed":false})";
  out.prepare_payload();
  return out;
}

HttpResponse AuthWithoutKey(const ApiOptions& options) {
  const bool allow = options.auth_allow_without_key;
  HttpResponse out{allow ? http::status::ok : static_cast<http::status>(options.auth_deny_status), 11};
  out.set("X-RateLimit-Error", "no key: give ?key= or the " + options.key_header + " header");
  out.set(http::field::content_type, "application/json");
  out.body() = allow ? R"({"allowed":true})" : R"({"allowed":false})";
  out.prepare_payload();
  return out;
}

}  // namespace ringlimit::node
