// Forwarding through the HTTP API: two real ApiHandlers (each with its own store) joined by a router that
// carries ForwardCheckRequests between them in-process, serialized as on the wire. The peer transport
// and the ring are tested in node/cluster and tests/cluster; here the API's side of the seam.
#include "node/service/forwarded.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "node/api/api_handler.h"
#include "node/http/wire.h"
#include "node/metrics/metrics.h"
#include "node/service/check_service.h"
#include "node/service/cluster_hooks.h"
#include "node/service/policies.h"
#include "storage/memory_store.h"

namespace ringlimit::node {
namespace {

namespace http = boost::beast::http;
namespace json = boost::json;

constexpr limiter::TimeNs kNow = 1'699'999'200LL * limiter::kSecond;

struct TestNode {
  explicit TestNode(std::string id_in)
      : id(std::move(id_in)),
        service(
            store, [] { return kNow; }, policies, metrics, ApiOptions{}),
        handler(service) {
    service.SetReady(true);
  }
  std::string id;
  storage::MemoryStore store;
  Policies policies;
  Metrics metrics;
  CheckService service;
  ApiHandler handler;
};

// Keys starting with "b:" belong to `peer`; everything else is local. Forward serializes the request,
// lets the peer decide it and parses the answer, optionally on another thread (as the transport does).
class PairRouter final : public CheckRouter {
 public:
  PairRouter(TestNode& self, TestNode& peer) : self_(self), peer_(peer) {}

  const std::string& self_id() const override { return self_.id; }
  void Classify(std::span<const std::string_view> keys, std::span<uint8_t> remote) const override {
    for (size_t i = 0; i < keys.size(); ++i) remote[i] = keys[i].starts_with("b:") ? 1 : 0;
  }
  // Keys starting with "b:hot" are admitted from a slice here while `slice_left` is set.
  std::optional<uint64_t> DecideAtEntry(const EntryCheck& check) override {
    offered.push_back(std::string(check.key) + "/" + std::string(check.name));
    if (!check.key.starts_with("b:hot") || !slice_left) return std::nullopt;
    return *slice_left;
  }
  void Forward(peer::ForwardedCheck check, ForwardDone done) override {
    ++forwarded;
    if (peer_down) return done(std::nullopt);
    peer::ForwardCheckRequest request;
    request.set_from(self_.id);
    *request.add_checks() = std::move(check);
    auto decide = [this, payload = request.SerializeAsString(), done = std::move(done)] {
      Result<std::string> answer = DecideForwarded(peer_.service, payload, peer_.id);
      peer::ForwardCheckResponse response;
      if (!answer.ok() || !response.ParseFromString(*answer) || response.results_size() != 1)
        return done(std::nullopt);
      done(std::move(*response.mutable_results(0)));
    };
    if (!async) return decide();
    threads_.emplace_back(std::move(decide));
  }
  ~PairRouter() override {
    for (auto& t : threads_) t.join();
  }

  bool DecidesAtOnce() const override { return at_once; }
  bool MayDecideAtEntry(const EntryCheck& check) override {
    return check.key.starts_with("b:hot") && slice_left.has_value();
  }

  bool peer_down = false;
  bool async = false;
  bool at_once = true;
  int forwarded = 0;
  std::optional<uint64_t> slice_left;
  std::vector<std::string> offered;  // key/name of every check offered to DecideAtEntry

 private:
  TestNode& self_;
  TestNode& peer_;
  std::vector<std::thread> threads_;
};

HttpResponse Call(ApiHandler& handler, http::verb method, std::string target, std::string body = "") {
  HttpRequest request{method, target, 11};
  if (!body.empty()) request.set(http::field::content_type, "application/json");
  request.body() = std::move(body);
  request.prepare_payload();
  std::promise<HttpResponse> promise;
  auto future = promise.get_future();
  std::atomic<int> calls{0};
  handler.Handle(std::move(request), [&](HttpResponse&& r) {
    if (calls.fetch_add(1) == 0) promise.set_value(std::move(r));
  });
  EXPECT_EQ(future.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  HttpResponse response = future.get();
  EXPECT_EQ(calls.load(), 1);
  return response;
}

class ForwardedTest : public ::testing::Test {
 protected:
  ForwardedTest() : self_("n1"), peer_("n2"), router_(self_, peer_) {
    self_.service.SetCluster(&router_, nullptr);
  }

  json::array Results(const HttpResponse& r) {
    EXPECT_EQ(r.result_int(), 200) << r.body();
    return json::parse(r.body()).at("results").as_array();
  }

  TestNode self_;
  TestNode peer_;
  PairRouter router_;
};

constexpr const char* kMixed =
    R"({"checks":[{"key":"a:1","limit":2,"window_ms":60000,"algorithm":"fixed_window"},)"
    R"({"key":"b:1","name":"x","limit":5,"window_ms":60000,"algorithm":"fixed_window","cost":2},)"
    R"({"key":"b:1","name":"y","limit":4,"window_ms":60000,"algorithm":"fixed_window","cost":1}]})";

TEST_F(ForwardedTest, RemoteKeysAreDecidedByTheirOwnerInRequestOrder) {
  json::array results = Results(Call(self_.handler, http::verb::post, "/v1/check", kMixed));
  ASSERT_EQ(results.size(), 3u);
  EXPECT_EQ(results[0].at("owner").as_string(), "n1");
  EXPECT_EQ(results[1].at("owner").as_string(), "n2");
  EXPECT_EQ(results[2].at("owner").as_string(), "n2");
  EXPECT_EQ(results[0].at("remaining").as_int64(), 1);
  EXPECT_EQ(results[1].at("remaining").as_int64(), 3);  // per-limit cost 2 of 5
  EXPECT_EQ(results[2].at("remaining").as_int64(), 3);  // cost 1 of 4
  EXPECT_EQ(router_.forwarded, 1);                      // one message for both limits of b:1

  // The state of b:1 lives on the owner: checked there directly, it continues where the forward left.
  json::array direct = Results(Call(peer_.handler, http::verb::post, "/v1/check",
                                    R"({"checks":[{"key":"b:1","name":"y","limit":4,"window_ms":60000,)"
                                    R"("algorithm":"fixed_window"}]})"));
  EXPECT_EQ(direct[0].at("remaining").as_int64(), 2);
  EXPECT_EQ(direct[0].at("owner").as_string(), "");  // the peer handler itself has no router
}

// GET /v1/check as the transport offers it first (RequestHandler::AnswerInPlace): `out` gets the answer.
unsigned InPlace(ApiHandler& handler, std::string_view target, std::string& out) {
  out.clear();
  return handler.AnswerInPlace(
      RequestHead{.method = http::verb::get, .target = target, .fields = "Host: x\r\n"}, out);
}

TEST_F(ForwardedTest, OnlyAKeyThisNodeDecidesAtOnceIsAnsweredInPlace) {
  std::string out;
  // Local: answered in place, with this node as its owner.
  ASSERT_EQ(InPlace(self_.handler, "/v1/check?key=a:1&limit=2&window_ms=60000", out), 200u);
  EXPECT_NE(out.find("\r\nRateLimit-Owner: n1\r\n"), std::string::npos) << out;
  EXPECT_NE(out.find("\r\nX-RateLimit-Remaining: 1\r\n"), std::string::npos) << out;
  // Another node's key with no slice here: left to Handle, nothing forwarded or offered to a slice.
  EXPECT_EQ(InPlace(self_.handler, "/v1/check?key=b:1&limit=2&window_ms=60000", out), 0u);
  EXPECT_EQ(InPlace(self_.handler, "/v1/check?key=b:hot&limit=2&window_ms=60000", out), 0u);
  EXPECT_EQ(out, "");
  EXPECT_EQ(router_.forwarded, 0);
  EXPECT_TRUE(router_.offered.empty());
  // With a slice of it held here: decided from the slice in place, offered once.
  router_.slice_left = 7;
  ASSERT_EQ(InPlace(self_.handler, "/v1/check?key=b:hot&limit=20&window_ms=60000", out), 200u);
  EXPECT_NE(out.find("\r\nRateLimit-Owner: n1\r\n"), std::string::npos) << out;
  EXPECT_NE(out.find("\r\nX-RateLimit-Remaining: 7\r\n"), std::string::npos) << out;
  EXPECT_EQ(router_.offered, std::vector<std::string>{"b:hot/default"});
  EXPECT_EQ(router_.forwarded, 0);
  // A router that waits for replicas: a local key is left to Handle with nothing charged; a slice's check
  // waits for nothing.
  router_.at_once = false;
  EXPECT_EQ(InPlace(self_.handler, "/v1/check?key=a:1&limit=2&window_ms=60000", out), 0u);
  EXPECT_EQ(InPlace(self_.handler, "/v1/check?key=b:hot&limit=20&window_ms=60000", out), 200u);
  router_.slice_left.reset();
  router_.at_once = true;
  ASSERT_EQ(InPlace(self_.handler, "/v1/check?key=a:1&limit=2&window_ms=60000", out), 200u);
  EXPECT_NE(out.find("\r\nX-RateLimit-Remaining: 0\r\n"), std::string::npos) << out;
  // Through Handle, b:1 is forwarded and charged once, at its owner.
  HttpResponse r = Call(self_.handler, http::verb::get, "/v1/check?key=b:1&limit=2&window_ms=60000");
  EXPECT_EQ(r["RateLimit-Owner"], "n2");
  EXPECT_EQ(r["X-RateLimit-Remaining"], "1");
  EXPECT_EQ(router_.forwarded, 1);
}

// A transport's AnswerLater: the answer it is given, waited for.
class TestLater final : public AnswerLater {
 public:
  WireRespond Take() override {
    ++taken;
    return [this](std::string&& bytes, unsigned status) {
      ++answers;
      promise_.set_value({std::move(bytes), status});
    };
  }
  std::pair<std::string, unsigned> Wait() {
    auto future = promise_.get_future();
    EXPECT_EQ(future.wait_for(std::chrono::seconds(10)), std::future_status::ready);
    return future.get();
  }
  int taken = 0;
  std::atomic<int> answers{0};

 private:
  std::promise<std::pair<std::string, unsigned>> promise_;
};

// A response as the transport writes it (keep-alive).
std::string Bytes(const HttpResponse& response) {
  std::string out;
  AppendHttpResponse(response, /*head=*/false, /*close=*/false, out);
  return out;
}

// Two clusters of two nodes each: a1 answers through AnswerInPlace with an AnswerLater, b1 through Handle;
// the same requests should give the same bytes.
class ForwardedLaterTest : public ::testing::Test {
 protected:
  ForwardedLaterTest() : a1("n1"), a2("n2"), b1("n1"), b2("n2"), later_router(a1, a2), handle_router(b1, b2) {
    a1.service.SetCluster(&later_router, nullptr);
    b1.service.SetCluster(&handle_router, nullptr);
  }
  TestNode a1, a2, b1, b2;
  PairRouter later_router, handle_router;
};

TEST_F(ForwardedLaterTest, AnotherNodesKeyTakenInPlaceIsAnsweredInTheBytesHandleAnswersIt) {
  for (const bool async : {false, true}) {
    later_router.async = async;
    handle_router.async = async;
    const std::string key = async ? "b:async" : "b:sync";
    for (const std::string path : {"/v1/check", "/v1/auth"}) {
      // Allowed, allowed, denied (limit 2), and once more denied.
      for (int i = 0; i < 4; ++i) {
        const std::string target =
            path + "?key=" + key + path.substr(4) + "&limit=2&window_ms=60000&algorithm=fixed_window";
        TestLater later;
        std::string out;
        ASSERT_EQ(a1.handler.AnswerInPlace(
                      RequestHead{.method = http::verb::get, .target = target, .fields = "Host: x\r\n"}, out,
                      &later),
                  RequestHandler::kAnsweredLater)
            << target;
        EXPECT_EQ(out, "");  // nothing written at once
        EXPECT_EQ(later.taken, 1);
        const auto [bytes, status] = later.Wait();
        const HttpResponse handled = Call(b1.handler, http::verb::get, target);
        EXPECT_EQ(bytes, Bytes(handled)) << target;
        EXPECT_EQ(status, handled.result_int());
        EXPECT_EQ(later.answers.load(), 1);
        EXPECT_NE(bytes.find("\r\nRateLimit-Owner: n2\r\n"), std::string::npos) << bytes;
      }
    }
  }
  EXPECT_EQ(later_router.forwarded, handle_router.forwarded);
  EXPECT_EQ(later_router.forwarded, 16);
  // Counted as Handle counts them.
  for (const Endpoint endpoint : {Endpoint::kCheckGet, Endpoint::kAuth}) {
    for (const unsigned status : {200u, 403u, 429u}) {
      EXPECT_EQ(a1.metrics.TEST_Requests(endpoint, status), b1.metrics.TEST_Requests(endpoint, status))
          << EndpointName(endpoint) << " " << status;
    }
  }
  EXPECT_EQ(a1.metrics.TEST_Requests(Endpoint::kCheckGet, 200), 4u);
  EXPECT_EQ(a1.metrics.TEST_Requests(Endpoint::kAuth, 403), 4u);
}

TEST_F(ForwardedLaterTest, WhatTheCheckPointsIntoOutlivesTheRequest) {
  // A percent-encoded key and name, and a key from the key header: the request's bytes are overwritten once
  // the check is taken (the transport reuses its buffer), before the owner answers.
  later_router.async = handle_router.async = true;
  struct Case {
    std::string target;
    std::string fields;
  };
  for (const Case& c : {Case{"/v1/check?key=b%3Aenc%2Bk&name=n%2D1&limit=5&window_ms=60000", "Host: x\r\n"},
                        Case{"/v1/check?name=plain&limit=5&window_ms=60000",
                             "Host: x\r\nX-RateLimit-Key: b:from-header\r\n"}}) {
    std::string target = c.target;
    std::string fields = c.fields;
    TestLater later;
    std::string out;
    ASSERT_EQ(a1.handler.AnswerInPlace(
                  RequestHead{.method = http::verb::get, .target = target, .fields = fields}, out, &later),
              RequestHandler::kAnsweredLater)
        << c.target;
    std::fill(target.begin(), target.end(), '#');
    std::fill(fields.begin(), fields.end(), '#');
    const auto [bytes, status] = later.Wait();
    HttpRequest request{http::verb::get, c.target, 11};
    if (c.fields.find("X-RateLimit-Key") != std::string::npos)
      request.set("X-RateLimit-Key", "b:from-header");
    std::promise<HttpResponse> handled;
    b1.handler.Handle(std::move(request), [&](HttpResponse&& r) { handled.set_value(std::move(r)); });
    const HttpResponse expected = handled.get_future().get();
    EXPECT_EQ(bytes, Bytes(expected)) << c.target;
    EXPECT_EQ(status, 200u) << bytes;
    EXPECT_EQ(bytes.find('#'), std::string::npos) << bytes;
  }
  EXPECT_EQ(later_router.forwarded, 2);
}

TEST_F(ForwardedLaterTest, AnOwnerThatDoesNotAnswerAndAReplicaWaitAreAnsweredLaterToo) {
  // The owner is down: decided here, owned by this node. Then a local key whose answer waits for replicas.
  later_router.peer_down = handle_router.peer_down = true;
  later_router.at_once = handle_router.at_once = false;
  for (const std::string target :
       {"/v1/check?key=b:down&limit=3&window_ms=60000", "/v1/check?key=a:local&limit=3&window_ms=60000"}) {
    TestLater later;
    std::string out;
    ASSERT_EQ(
        a1.handler.AnswerInPlace(
            RequestHead{.method = http::verb::get, .target = target, .fields = "Host: x\r\n"}, out, &later),
        RequestHandler::kAnsweredLater);
    const auto [bytes, status] = later.Wait();
    EXPECT_EQ(bytes, Bytes(Call(b1.handler, http::verb::get, target))) << target;
    EXPECT_EQ(status, 200u);
    EXPECT_NE(bytes.find("\r\nRateLimit-Owner: n1\r\n"), std::string::npos) << bytes;
  }
}

TEST_F(ForwardedLaterTest, ABadRequestIsLeftToHandleWithNothingTakenOrForwarded) {
  for (const std::string target : {"/v1/check?key=b:1&limit=0&window_ms=60000", "/v1/check?limit=2",
                                   "/v1/auth?limit=2&window_ms=60000", "/v1/keys/b:1"}) {
    TestLater later;
    std::string out;
    EXPECT_EQ(
        a1.handler.AnswerInPlace(
            RequestHead{.method = http::verb::get, .target = target, .fields = "Host: x\r\n"}, out, &later),
        0u)
        << target;
    EXPECT_EQ(later.taken, 0);
    EXPECT_EQ(out, "");
  }
  EXPECT_EQ(later_router.forwarded, 0);
}

TEST_F(ForwardedTest, AllOrNothingHoldsAcrossTheForward) {
  // y (limit 4, cost 1) would admit, x (limit 5, cost 2) refuses on the third request: nothing charged.
  for (int i = 0; i < 2; ++i) Results(Call(self_.handler, http::verb::post, "/v1/check", kMixed));
  json::array results = Results(Call(self_.handler, http::verb::post, "/v1/check", kMixed));
  EXPECT_FALSE(results[1].at("allowed").as_bool());
  EXPECT_FALSE(results[2].at("allowed").as_bool());
  // y was not charged the third time: a direct cost-1 check on the owner leaves 4 - 2 - 1 = 1.
  json::array direct = Results(Call(peer_.handler, http::verb::post, "/v1/check",
                                    R"({"checks":[{"key":"b:1","name":"y","limit":4,"window_ms":60000,)"
                                    R"("algorithm":"fixed_window"}]})"));
  EXPECT_TRUE(direct[0].at("allowed").as_bool());
  EXPECT_EQ(direct[0].at("remaining").as_int64(), 1);
}

TEST_F(ForwardedTest, GetCarriesTheOwnerHeader) {
  HttpResponse r = Call(self_.handler, http::verb::get,
                        "/v1/check?key=b:7&limit=1&window_ms=60000&algorithm=fixed_window");
  EXPECT_EQ(r.result_int(), 200);
  EXPECT_EQ(r["RateLimit-Owner"], "n2");
  r = Call(self_.handler, http::verb::get,
           "/v1/check?key=b:7&limit=1&window_ms=60000&algorithm=fixed_window");
  EXPECT_EQ(r.result_int(), 429);
  EXPECT_EQ(json::parse(r.body()).at("results").at(0).at("owner").as_string(), "n2");
}

TEST_F(ForwardedTest, AOneLimitCheckIsOfferedToASliceBeforeItIsForwarded) {
  // Declined: forwarded as usual, decided by the owner.
  HttpResponse r = Call(self_.handler, http::verb::get,
                        "/v1/check?key=b:hot&limit=10&window_ms=60000&algorithm=fixed_window");
  EXPECT_EQ(r.result_int(), 200);
  EXPECT_EQ(r["RateLimit-Owner"], "n2");
  EXPECT_EQ(router_.forwarded, 1);
  EXPECT_EQ(router_.offered, (std::vector<std::string>{"b:hot/default"}));
  // Admitted from a slice: answered here, with this node as the owner and what the slices have left, and
  // nothing forwarded or charged at the owner.
  router_.slice_left = 6;
  r = Call(self_.handler, http::verb::get,
           "/v1/check?key=b:hot&limit=10&window_ms=60000&algorithm=fixed_window");
  EXPECT_EQ(r.result_int(), 200) << r.body();
  EXPECT_EQ(r["RateLimit-Owner"], "n1");
  EXPECT_EQ(r["X-RateLimit-Remaining"], "6");
  EXPECT_EQ(router_.forwarded, 1);
  json::array direct = Results(Call(peer_.handler, http::verb::get,
                                    "/v1/check?key=b:hot&limit=10&window_ms=60000&algorithm=fixed_window"));
  EXPECT_EQ(direct[0].at("remaining").as_int64(), 8) << "the owner was charged once, by the forward";
  // Local keys and a key's several limits (all-or-nothing at its decider) are never offered.
  router_.offered.clear();
  Results(Call(self_.handler, http::verb::post, "/v1/check", kMixed));
  EXPECT_TRUE(router_.offered.empty());
  EXPECT_EQ(router_.forwarded, 2);
}

TEST_F(ForwardedTest, AnUnreachableOwnerFallsBackToThisNode) {
  router_.peer_down = true;
  json::array results = Results(Call(self_.handler, http::verb::post, "/v1/check", kMixed));
  EXPECT_EQ(results[1].at("owner").as_string(), "n1");
  EXPECT_EQ(results[1].at("remaining").as_int64(), 3);
}

TEST_F(ForwardedTest, CompletionsOnOtherThreadsAnswerOnce) {
  router_.async = true;
  std::string body = R"({"checks":[)";
  for (int i = 0; i < 20; ++i) {
    if (i > 0) body += ",";
    body += R"({"key":")" + std::string(i % 2 ? "b:" : "a:") + std::to_string(i) +
            R"(","limit":3,"window_ms":60000})";
  }
  body += "]}";
  json::array results = Results(Call(self_.handler, http::verb::post, "/v1/check", body));
  ASSERT_EQ(results.size(), 20u);
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(results[i].at("key").as_string(), (i % 2 ? "b:" : "a:") + std::to_string(i));
    EXPECT_EQ(results[i].at("owner").as_string(), i % 2 ? "n2" : "n1");
  }
}

TEST_F(ForwardedTest, BadRequestsAreRefusedBeforeAnythingIsForwarded) {
  HttpResponse r = Call(self_.handler, http::verb::post, "/v1/check",
                        R"({"checks":[{"key":"b:1","limit":2,"window_ms":60000},)"
                        R"({"key":"b:1","limit":2,"window_ms":60000}]})");
  EXPECT_EQ(r.result_int(), 400) << r.body();
  EXPECT_EQ(router_.forwarded, 0);
}

TEST(DecideForwardedTest, InvalidSpecsAndGarbage) {
  TestNode node("n2");
  EXPECT_TRUE(DecideForwarded(node.service, "\xff\xff garbage", "n2").status().IsCorruption());
  peer::ForwardCheckRequest request;
  peer::ForwardedCheck* check = request.add_checks();
  check->set_key("k");
  check->set_cost(1);
  peer::NamedLimit* limit = check->add_limits();
  limit->set_name("default");
  limit->mutable_spec()->set_algorithm(state::ALGORITHM_FIXED_WINDOW);  // limit 0: invalid
  limit->mutable_spec()->set_window_ns(60 * limiter::kSecond);
  Result<std::string> answer = DecideForwarded(node.service, request.SerializeAsString(), "n2");
  ASSERT_TRUE(answer.ok()) << answer.status().ToString();
  peer::ForwardCheckResponse response;
  ASSERT_TRUE(response.ParseFromString(*answer));
  ASSERT_EQ(response.results_size(), 1);
  EXPECT_EQ(response.results(0).status(), peer::CHECK_INVALID);
  EXPECT_FALSE(response.results(0).error().empty());
}

}  // namespace
}  // namespace ringlimit::node
