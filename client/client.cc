#include "client/client.h"

#include <algorithm>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <future>

#include "client/codec.h"
#include "client/node_pool.h"
#include "client/ring_routes.h"

namespace ringlimit::client {
namespace asio = boost::asio;
namespace http = boost::beast::http;

// Where an attempt goes: the member id (ring-aware; "" in plain mode) and its HTTP address.
struct Client::Target {
  std::string id{};
  std::string address{};
};

struct Client::RawRequest {
  http::verb method = http::verb::get;
  std::string target{};
  std::string body{};  // sent as application/json when not empty
  bool admin = false;
};

// A response below 500 (or the last attempt's 5xx) and who sent it.
struct Client::RawAnswer {
  HttpResponse response{};
  Target from{};
};

namespace {

Error InvalidArgument(std::string message) {
  return Error{
      .kind = Error::Kind::kInvalidArgument, .code = "invalid_argument", .message = std::move(message)};
}

bool IsOk(const HttpResponse& r) { return r.result_int() >= 200 && r.result_int() < 300; }

// Assigns the results of one sub-batch to its checks in order: an inline check has one result, a policy
// check those named after the policy ("api" or "api/...").
size_t ResultsOf(const Check& check, const std::vector<CheckResult>& results, size_t from) {
  if (!check.policy) return from < results.size() ? 1 : 0;
  const std::string& p = *check.policy;
  size_t n = 0;
  while (from + n < results.size()) {
    const CheckResult& r = results[from + n];
    const bool named = r.name == p || (r.name.size() > p.size() && r.name.compare(0, p.size(), p) == 0 &&
                                       r.name[p.size()] == '/');
    if (r.key != check.key || !named) break;
    ++n;
  }
  return n;
}

}  // namespace

Result<std::unique_ptr<Client>> Client::Create(ClientOptions options) {
  if (options.nodes.empty()) return InvalidArgument("no node given");
  for (const std::string& node : options.nodes) {
    if (auto split = SplitAddress(node); !split) return split.error();
  }
  if (options.max_attempts < 1) return InvalidArgument("max_attempts must be >= 1");
  if (options.io_threads < 1) return InvalidArgument("io_threads must be >= 1");
  if (options.timeout.count() <= 0) return InvalidArgument("timeout must be > 0");
  return std::unique_ptr<Client>(new Client(std::move(options)));
}

Client::Client(ClientOptions options)
    : options_(std::move(options)), io_(std::make_unique<asio::io_context>()) {
  for (int i = 0; i < options_.io_threads; ++i) {
    threads_.emplace_back([this] {
      auto guard = asio::make_work_guard(*io_);
      io_->run();
    });
  }
}

Client::~Client() {
  io_->stop();
  for (std::thread& t : threads_) t.join();
  // Idle connections hold sockets of io_: drop them first. Pools still referenced by pending handlers
  // die with those handlers, inside the io_context's destruction.
  {
    std::lock_guard lock(mutex_);
    pools_.clear();
    routes_.reset();
  }
  io_.reset();
}

std::shared_ptr<const RingRoutes> Client::routes() const {
  std::lock_guard lock(mutex_);
  return routes_;
}

Result<std::shared_ptr<NodePool>> Client::Pool(const std::string& address) {
  {
    std::lock_guard lock(mutex_);
    if (auto it = pools_.find(address); it != pools_.end()) return it->second;
  }
  auto created = NodePool::Create(*io_, address, options_.max_idle_per_node);  // may resolve: no lock held
  if (!created) return created.error();
  std::lock_guard lock(mutex_);
  return pools_.emplace(address, *created).first->second;
}

std::vector<Client::Target> Client::Candidates(const std::string* key) {
  std::vector<Target> out{};
  const size_t n = static_cast<size_t>(options_.max_attempts);
  if (options_.ring_aware && key != nullptr) {
    if (auto r = routes(); r != nullptr) {
      for (Route& route : r->PreferenceList(*key, n)) out.push_back(Target{route.id, route.http_address});
    }
  }
  const size_t start = next_node_.fetch_add(1, std::memory_order_relaxed);
  for (size_t i = 0; i < options_.nodes.size() && out.size() < n; ++i) {
    const std::string& address = options_.nodes[(start + i) % options_.nodes.size()];
    bool seen = false;
    for (const Target& t : out) seen = seen || t.address == address;
    if (!seen) out.push_back(Target{"", address});
  }
  // A single node is retried on itself: a restarted node or a dropped keep-alive connection recovers.
  while (out.size() < n) out.push_back(out.front());
  return out;
}

void Client::Send(std::shared_ptr<std::vector<Target>> candidates, size_t i, RawRequest request,
                  RawHandler handler) {
  const Target& target = (*candidates)[i];
  auto pool = Pool(target.address);
  auto retry_or_fail = [this, candidates, i](RawRequest request, RawHandler handler, Error e) {
    if (options_.ring_aware) MaybeRefresh();
    if (i + 1 < candidates->size()) return Send(candidates, i + 1, std::move(request), std::move(handler));
    if (candidates->size() > 1) {
      e.message += " (after " + std::to_string(candidates->size()) + " attempts)";
    }
    handler(std::move(e));
  };
  if (!pool) {
    // Never complete inside the caller's call: post (handlers always run on the I/O threads).
    return asio::post(*io_, [retry_or_fail, request = std::move(request), handler = std::move(handler),
                             e = pool.error()]() mutable {
      retry_or_fail(std::move(request), std::move(handler), std::move(e));
    });
  }

  HttpRequest req{request.method, request.target, 11};
  if (!request.body.empty()) {
    req.set(http::field::content_type, "application/json");
    req.body() = request.body;
  }
  if (request.admin && !options_.admin_token.empty()) {
    req.set(http::field::authorization, "Bearer " + options_.admin_token);
  }
  (*pool)->AsyncSend(std::move(req), options_.timeout,
                     [this, candidates, i, request = std::move(request), handler = std::move(handler),
                      retry_or_fail, pool = *pool](Result<HttpResponse> r) mutable {
                       const Target& from = (*candidates)[i];
                       if (!r) {
                         pool->CloseIdle();
                         return retry_or_fail(std::move(request), std::move(handler), r.error());
                       }
                       if (r->result_int() >= 500 && i + 1 < candidates->size()) {
                         Error e = ErrorFromResponse(r->result_int(), r->body(), from.address);
                         return retry_or_fail(std::move(request), std::move(handler), std::move(e));
                       }
                       handler(RawAnswer{std::move(*r), from});
                     });
}

template <class T>
Result<T> Client::Wait(const std::function<void(Handler<T>)>& start) {
  auto promise = std::make_shared<std::promise<Result<T>>>();
  auto future = promise->get_future();
  start([promise](Result<T> r) { promise->set_value(std::move(r)); });
  return future.get();
}

// ---------------------------------------------------------------------------------------------------------
// Checks.

Result<CheckResponse> Client::Check(std::vector<client::Check> checks) {
  return Wait<CheckResponse>([&](Handler<CheckResponse> h) { AsyncCheck(std::move(checks), std::move(h)); });
}

Result<CheckResponse> Client::Check(client::Check check) {
  std::vector<client::Check> checks{};
  checks.push_back(std::move(check));
  return Check(std::move(checks));
}

void Client::AsyncCheck(std::vector<client::Check> checks, Handler<CheckResponse> handler) {
  if (checks.empty()) {
    return asio::post(*io_, [handler = std::move(handler)] { handler(InvalidArgument("no checks")); });
  }
  auto r = options_.ring_aware ? routes() : nullptr;
  if (r == nullptr) {
    if (options_.ring_aware) MaybeRefresh();
    return CheckGroup(std::move(checks), std::move(handler));
  }
  // Split by owner; keep each check's index to restore the request order.
  std::map<std::string, std::vector<size_t>> by_owner;
  for (size_t i = 0; i < checks.size(); ++i) by_owner[r->Owner(checks[i].key).id].push_back(i);
  if (by_owner.size() == 1) return CheckGroup(std::move(checks), std::move(handler));

  struct Join {
    std::mutex mutex;
    size_t pending = 0;
    std::vector<client::Check> checks;
    std::vector<std::vector<CheckResult>> per_check;  // results of check i
    std::optional<Error> error;
    Handler<CheckResponse> handler;
  };
  auto join = std::make_shared<Join>();
  join->pending = by_owner.size();
  join->checks = std::move(checks);
  join->per_check.resize(join->checks.size());
  join->handler = std::move(handler);
  for (auto& [owner, indexes] : by_owner) {
    std::vector<client::Check> group;
    for (size_t i : indexes) group.push_back(join->checks[i]);
    CheckGroup(std::move(group), [join, indexes = indexes](Result<CheckResponse> r) {
      std::unique_lock lock(join->mutex);
      if (!r) {
        if (!join->error) join->error = r.error();
      } else {
        size_t at = 0;
        for (size_t i : indexes) {
          const size_t n = ResultsOf(join->checks[i], r->results, at);
          join->per_check[i].assign(r->results.begin() + static_cast<ptrdiff_t>(at),
                                    r->results.begin() + static_cast<ptrdiff_t>(at + n));
          at += n;
        }
      }
      if (--join->pending > 0) return;
      lock.unlock();
      if (join->error) return join->handler(*join->error);
      CheckResponse out;
      out.allowed = true;
      for (auto& results : join->per_check) {
        for (CheckResult& result : results) {
          out.allowed = out.allowed && result.allowed;
          out.results.push_back(std::move(result));
        }
      }
      join->handler(std::move(out));
    });
  }
}

void Client::CheckGroup(std::vector<client::Check> checks, Handler<CheckResponse> handler) {
  auto candidates = std::make_shared<std::vector<Target>>(Candidates(&checks.front().key));
  RawRequest request{.method = http::verb::post, .target = "/v1/check", .body = EncodeChecks(checks)};
  Send(candidates, 0, std::move(request),
       [this, handler = std::move(handler), owner = candidates->front()](Result<RawAnswer> a) {
         if (!a) return handler(a.error());
         const HttpResponse& res = a->response;
         if (!IsOk(res)) return handler(ErrorFromResponse(res.result_int(), res.body(), a->from.address));
         auto decoded = DecodeCheckResponse(res.body());
         if (!decoded) {
           decoded.error().node = a->from.address;
           return handler(decoded.error());
         }
         bool moved = false;
         for (CheckResult& result : decoded->results) {
           result.sent_to = a->from.address;
           // Sent to the ring's owner but decided elsewhere: the ring changed.
           moved = moved || (!owner.id.empty() && a->from.id == owner.id && !result.owner.empty() &&
                             result.owner != owner.id);
         }
         if (moved) MaybeRefresh();
         handler(std::move(*decoded));
       });
}

Result<GetDecision> Client::CheckGet(client::Check check) {
  return Wait<GetDecision>([&](Handler<GetDecision> h) { AsyncCheckGet(std::move(check), std::move(h)); });
}

void Client::AsyncCheckGet(client::Check check, Handler<GetDecision> handler) {
  if (options_.ring_aware && routes() == nullptr) MaybeRefresh();
  auto candidates = std::make_shared<std::vector<Target>>(Candidates(&check.key));
  Send(candidates, 0, RawRequest{.target = CheckTarget(check)},
       [this, handler = std::move(handler), owner = candidates->front()](Result<RawAnswer> a) {
         if (!a) return handler(a.error());
         const HttpResponse& res = a->response;
         const int status = res.result_int();
         if (status != 200 && status != 429)
           return handler(ErrorFromResponse(status, res.body(), a->from.address));
         GetDecision d{.http_status = status, .allowed = status == 200};
         if (auto it = res.find("RateLimit-Owner"); it != res.end()) d.owner = std::string(it->value());
         if (!owner.id.empty() && a->from.id == owner.id && !d.owner.empty() && d.owner != owner.id) {
           MaybeRefresh();
         }
         handler(std::move(d));
       });
}

// ---------------------------------------------------------------------------------------------------------
// Keys and cluster.

template <class T>
Result<T> Client::Call(std::vector<Target> candidates, RawRequest request,
                       const std::function<Result<T>(const std::string& body)>& decode) {
  return Wait<T>([&](Handler<T> h) {
    Send(std::make_shared<std::vector<Target>>(std::move(candidates)), 0, std::move(request),
         [h = std::move(h), &decode](Result<RawAnswer> a) {
           if (!a) return h(a.error());
           if (!IsOk(a->response)) {
             return h(ErrorFromResponse(a->response.result_int(), a->response.body(), a->from.address));
           }
           h(decode(a->response.body()));
         });
  });
}

Result<KeyInfo> Client::Inspect(const std::string& key) {
  if (key.empty()) return InvalidArgument("empty key");
  return Call<KeyInfo>(Candidates(&key), RawRequest{.target = "/v1/keys/" + PercentEncode(key)},
                       [](const std::string& body) { return DecodeKeyInfo(body); });
}

Result<uint64_t> Client::Reset(const std::string& key, const std::string& name) {
  if (key.empty()) return InvalidArgument("empty key");
  std::string target = "/v1/keys/" + PercentEncode(key);
  if (!name.empty()) target += "?name=" + PercentEncode(name);
  return Call<uint64_t>(Candidates(&key),
                        RawRequest{.method = http::verb::delete_, .target = target, .admin = true},
                        [](const std::string& body) { return DecodeRemoved(body); });
}

Result<ClusterInfo> Client::ClusterStatus() {
  return Call<ClusterInfo>(Candidates(nullptr), RawRequest{.target = "/v1/cluster"},
                           [](const std::string& body) { return DecodeClusterInfo(body); });
}

Result<std::string> Client::Leave(const std::string& node) {
  if (node.empty()) return InvalidArgument("no node given");
  std::string address = node;
  if (!SplitAddress(node)) {  // a member id
    auto info = ClusterStatus();
    if (!info) return info.error();
    address.clear();
    for (const Member& m : info->members) {
      if (m.id == node) address = m.http_address;
    }
    if (address.empty()) return InvalidArgument("no member \"" + node + "\" in the cluster");
  }
  return Call<std::string>(
      {Target{"", address}},
      RawRequest{.method = http::verb::post, .target = "/v1/cluster/leave", .admin = true},
      [](const std::string& body) { return Result<std::string>(body); });
}

// ---------------------------------------------------------------------------------------------------------
// Ring refresh.

Result<void> Client::Refresh() {
  if (!options_.ring_aware) return InvalidArgument("Refresh needs ring_aware mode");
  return Wait<void>([&](Handler<void> h) { AsyncRefresh(std::move(h)); });
}

void Client::MaybeRefresh() {
  {
    std::lock_guard lock(mutex_);
    if (routes_ != nullptr &&
        std::chrono::steady_clock::now() - last_refresh_ < options_.min_refresh_interval) {
      return;
    }
  }
  if (refreshing_.exchange(true)) return;
  // Post: the caller may hold a handler's context; the refresh runs on its own.
  asio::post(*io_, [this] { AsyncRefresh([this](Result<void>) { refreshing_.store(false); }); });
}

void Client::AsyncRefresh(std::function<void(Result<void>)> done) {
  // Ask the members we know first (the seeds may be gone), then the seeds.
  auto candidates = std::make_shared<std::vector<Target>>();
  std::vector<std::string> addresses{};
  if (auto r = routes(); r != nullptr) {
    for (const Route& m : r->Members()) addresses.push_back(m.http_address);
  }
  addresses.insert(addresses.end(), options_.nodes.begin(), options_.nodes.end());
  for (const std::string& address : addresses) {
    bool seen = false;
    for (const Target& t : *candidates) seen = seen || t.address == address;
    if (!seen) candidates->push_back(Target{"", address});
  }
  // Rotate so that a dead first node is not always asked first.
  const size_t start = next_node_.fetch_add(1, std::memory_order_relaxed) % candidates->size();
  std::rotate(candidates->begin(), candidates->begin() + static_cast<ptrdiff_t>(start), candidates->end());
  Send(candidates, 0, RawRequest{.target = "/v1/cluster"},
       [this, done = std::move(done)](Result<RawAnswer> a) {
         if (!a) return done(a.error());
         if (!IsOk(a->response)) {
           return done(ErrorFromResponse(a->response.result_int(), a->response.body(), a->from.address));
         }
         auto info = DecodeClusterInfo(a->response.body());
         if (!info) return done(info.error());
         auto built = RingRoutes::Build(*info);
         if (!built) return done(built.error());
         {
           std::lock_guard lock(mutex_);
           routes_ = std::move(*built);
           last_refresh_ = std::chrono::steady_clock::now();
         }
         refreshes_.fetch_add(1, std::memory_order_relaxed);
         done(Result<void>());
       });
}

}  // namespace ringlimit::client
