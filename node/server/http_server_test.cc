// The transport on its own: an in-process HttpServer serving a small real RequestHandler (echo,
// and answers completed later from another thread), driven over loopback by the test client.
#include "node/server/http_server.h"

#include <gtest/gtest.h>

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/url/parse.hpp>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "node/http/http_error.h"
#include "tests/support/http_client.h"

namespace ringlimit::node {
namespace {

namespace http = boost::beast::http;
using namespace std::chrono_literals;
using testing::HttpClient;

// Answers:
//   /echo           200, body = "<method> <body>"
//   /later?ms=N&id= 200 with body = id, completed N ms later by a worker thread
//   /close          200 with Connection: close requested by the client as usual
//   /now?id=        200 with body "in place <id>" when offered to AnswerInPlace, "handled <id>" through
//                   Handle
//   /soon?ms=N&id=  offered to AnswerInPlace: taken to answer later (AnswerLater), 200 with body
//                   "soon <id>" N ms later from the worker thread (ms=hold: once ReleaseHeld is called);
//                   through Handle: "handled <id>" at once
//   anything else   404 (ErrorResponse)
class TestHandler : public RequestHandler {
 public:
  TestHandler() : worker_([this] { Work(); }) {}
  ~TestHandler() override {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }

  void Handle(HttpRequest&& request, Respond respond) override {
    handled_.fetch_add(1);
    const std::string target(request.target());
    const std::string path = target.substr(0, target.find('?'));
    if (path == "/echo") {
      HttpResponse response{http::status::ok, 11};
      response.body() = std::string(request.method_string()) + " " + request.body();
      respond(std::move(response));
      return;
    }
    if (path == "/later") {
      auto url = boost::urls::parse_origin_form(target);
      int ms = 0;
      std::string id;
      for (auto param : url->params()) {
        if (param.key == "ms") ms = std::stoi(std::string(param.value));
        if (param.key == "id") id = std::string(param.value);
      }
      std::lock_guard lock(mutex_);
      jobs_.push_back({std::chrono::steady_clock::now() + std::chrono::milliseconds(ms), id,
                       std::move(respond), nullptr});
      cv_.notify_all();
      return;
    }
    if (path == "/now" || path == "/soon") {
      HttpResponse response{http::status::ok, 11};
      response.body() = "handled " + target.substr(target.find("id=") + 3);
      respond(std::move(response));
      return;
    }
    respond(ErrorResponse(http::status::not_found, "not_found", "no such path"));
  }

  unsigned AnswerInPlace(const RequestHead& head, std::string& out, AnswerLater* later) override {
    if (head.method == http::verb::get && head.target.starts_with("/soon?") && later != nullptr) {
      const std::string target(head.target);
      const size_t ms_at = target.find("ms=");
      const bool hold = target.find("ms=hold") != std::string::npos;
      const int ms = ms_at == std::string::npos || hold ? 0 : std::stoi(target.substr(ms_at + 3));
      const std::string id = target.substr(target.find("id=") + 3);
      WireRespond respond = later->Take();
      std::lock_guard lock(mutex_);
      jobs_.push_back({hold ? std::chrono::steady_clock::time_point::max()
                            : std::chrono::steady_clock::now() + std::chrono::milliseconds(ms),
                       id, nullptr, std::move(respond)});
      later_.fetch_add(1);
      cv_.notify_all();
      return kAnsweredLater;
    }
    if (head.method == http::verb::get && head.target == "/big") {
      // More than the kernel takes at once: the rest is written asynchronously.
      WireResponse(out, 200).Finish(std::string(kBigBody, 'b'));
      return 200;
    }
    if (head.method != http::verb::get || !head.target.starts_with("/now?id=")) return 0;
    in_place_.fetch_add(1);
    WireResponse response(out, 200);
    response.Field("X-Host", head.Field("host").value_or("-"));
    response.Finish("in place " + std::string(head.target.substr(8)));
    return 200;
  }

  static constexpr size_t kBigBody = 16 << 20;

  int handled() const { return handled_.load(); }
  int in_place() const { return in_place_.load(); }
  int later() const { return later_.load(); }
  // The held answers (ms=hold) are due now.
  void ReleaseHeld() {
    std::lock_guard lock(mutex_);
    for (Job& job : jobs_) {
      if (job.due == std::chrono::steady_clock::time_point::max()) job.due = std::chrono::steady_clock::now();
    }
    cv_.notify_all();
  }

 private:
  struct Job {
    std::chrono::steady_clock::time_point due;
    std::string id;
    Respond respond;   // through Handle
    WireRespond wire;  // or taken in place to answer later
  };

  void Work() {
    std::unique_lock lock(mutex_);
    while (!stop_ || !jobs_.empty()) {
      if (jobs_.empty()) {
        cv_.wait(lock);
        continue;
      }
      auto next = std::min_element(jobs_.begin(), jobs_.end(),
                                   [](const Job& a, const Job& b) { return a.due < b.due; });
      if (!stop_ && next->due > std::chrono::steady_clock::now()) {
        // A copy: wait_until re-reads its deadline after waking, and Handle may have grown jobs_.
        const auto due = next->due;
        cv_.wait_until(lock, due);
        continue;
      }
      Job job = std::move(*next);
      jobs_.erase(next);
      lock.unlock();
      if (job.wire) {
        std::string bytes;
        WireResponse(bytes, 200).Finish("soon " + job.id);
        job.wire(std::move(bytes), 200);
      } else {
        HttpResponse response{http::status::ok, 11};
        response.body() = job.id;
        job.respond(std::move(response));
      }
      lock.lock();
    }
  }

  std::atomic<int> handled_{0};
  std::atomic<int> in_place_{0};
  std::atomic<int> later_{0};
  std::mutex mutex_;  // guards jobs_, stop_
  std::condition_variable cv_;
  std::vector<Job> jobs_;
  bool stop_ = false;
  std::thread worker_;
};

// Every case twice: two threads running the io_context with a strand per connection, and one thread
// with ServerOptions::single_thread (connections on the io_context's own executor).
class HttpServerTest : public ::testing::TestWithParam<bool> {
 protected:
  void StartServer(ServerOptions options) {
    options.port = 0;
    options.single_thread = GetParam();
    server_ = std::make_unique<HttpServer>(
        io_, options, handler_, [this](unsigned status, std::chrono::nanoseconds, bool from_transport) {
          if (from_transport) transport_errors_.fetch_add(1);
          if (status == 200) ok_.fetch_add(1);
        });
    ASSERT_TRUE(server_->Start().ok());
    ASSERT_NE(server_->port(), 0);
    work_.emplace(io_.get_executor());
    for (int i = 0; i < (GetParam() ? 1 : 2); ++i) threads_.emplace_back([this] { io_.run(); });
  }

  void TearDown() override {
    if (server_) {
      server_->StopAccepting();
      server_->Drain();
    }
    work_.reset();
    io_.stop();
    for (auto& t : threads_) t.join();
  }

  // Waits until `condition` holds, for at most `timeout`.
  static bool Eventually(const std::function<bool()>& condition, std::chrono::milliseconds timeout = 5s) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!condition()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(2ms);
    }
    return true;
  }

  static std::string ErrorCode(const testing::ClientResponse& response) {
    const std::string& body = response.body();
    const auto at = body.find("\"code\":\"");
    if (at == std::string::npos) return "";
    const auto start = at + 8;
    return body.substr(start, body.find('"', start) - start);
  }

  boost::asio::io_context io_;
  TestHandler handler_;  // destroyed before io_: its last answers are posted into it
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> work_;
  std::vector<std::thread> threads_;
  std::unique_ptr<HttpServer> server_;
  std::atomic<int> transport_errors_{0};
  std::atomic<int> ok_{0};
};

TEST_P(HttpServerTest, KeepAliveServesManyRequestsOnOneConnection) {
  StartServer({});
  HttpClient client(server_->port());
  for (int i = 0; i < 100; ++i) {
    auto response = client.Post("/echo", "n" + std::to_string(i));
    ASSERT_TRUE(response) << response.error().message();
    EXPECT_EQ(response->result_int(), 200);
    EXPECT_EQ(response->body(), "POST n" + std::to_string(i));
    EXPECT_TRUE(response->keep_alive());
  }
  EXPECT_TRUE(client.connected());
  EXPECT_EQ(server_->connections(), 1u);
  EXPECT_EQ(ok_.load(), 100);
}

TEST_P(HttpServerTest, PipelinedResponsesComeBackInRequestOrder) {
  StartServer({});
  HttpClient client(server_->port());
  // The first request is answered last by the handler; the responses must still be in order.
  std::string pipeline;
  const int delays[] = {150, 0, 60, 0, 20};
  for (int i = 0; i < 5; ++i) {
    pipeline += "GET /later?ms=" + std::to_string(delays[i]) + "&id=r" + std::to_string(i) +
                " HTTP/1.1\r\nHost: x\r\n\r\n";
  }
  pipeline += "GET /echo HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_TRUE(client.SendRaw(pipeline));
  for (int i = 0; i < 5; ++i) {
    auto response = client.ReadResponse();
    ASSERT_TRUE(response) << response.error().message();
    EXPECT_EQ(response->body(), "r" + std::to_string(i));
  }
  auto last = client.ReadResponse();
  ASSERT_TRUE(last);
  EXPECT_EQ(last->body(), "GET ");
}

TEST_P(HttpServerTest, ARequestWithNothingOwedBeforeItIsAnsweredInPlaceInOrderOtherwise) {
  StartServer({});
  HttpClient client(server_->port());
  auto first = client.Get("/now?id=a");
  ASSERT_TRUE(first) << first.error().message();
  EXPECT_EQ(first->body(), "in place a");
  EXPECT_NE((*first)["X-Host"], "-");  // the head's fields reach the handler
  EXPECT_TRUE(first->keep_alive());
  // Pipelined behind an answer still owed: through Handle, in request order.
  ASSERT_TRUE(
      client.SendRaw("GET /later?ms=60&id=b HTTP/1.1\r\nHost: x\r\n\r\n"
                     "GET /now?id=c HTTP/1.1\r\nHost: x\r\n\r\n"
                     "GET /now?id=d HTTP/1.1\r\nHost: x\r\n\r\n"));
  for (const std::string expected : {"b", "handled c", "handled d"}) {
    auto response = client.ReadResponse();
    ASSERT_TRUE(response) << response.error().message();
    EXPECT_EQ(response->body(), expected);
  }
  auto last = client.Get("/now?id=e");
  ASSERT_TRUE(last) << last.error().message();
  EXPECT_EQ(last->body(), "in place e");
  EXPECT_EQ(handler_.in_place(), 2);
  EXPECT_EQ(ok_.load(), 5);  // the observer counts answers in place too
  EXPECT_TRUE(client.connected());
}

TEST_P(HttpServerTest, ARequestTakenInPlaceToAnswerLaterKeepsItsTurnOnTheConnection) {
  StartServer({});
  HttpClient client(server_->port());
  // Taken in place, answered last by the handler (another thread); the requests behind it go through Handle
  // (an answer is owed before them) and their answers wait for it.
  ASSERT_TRUE(
      client.SendRaw("GET /soon?ms=hold&id=a HTTP/1.1\r\nHost: x\r\n\r\n"
                     "GET /now?id=b HTTP/1.1\r\nHost: x\r\n\r\n"
                     "GET /later?ms=0&id=c HTTP/1.1\r\nHost: x\r\n\r\n"));
  ASSERT_TRUE(Eventually([&] { return handler_.later() == 1 && handler_.handled() == 2; }));
  handler_.ReleaseHeld();
  for (const std::string expected : {"soon a", "handled b", "c"}) {
    auto response = client.ReadResponse();
    ASSERT_TRUE(response) << response.error().message();
    EXPECT_EQ(response->body(), expected);
    EXPECT_TRUE(response->keep_alive());
  }
  // Nothing owed: the next one is taken in place again.
  auto next = client.Get("/soon?ms=0&id=d");
  ASSERT_TRUE(next) << next.error().message();
  EXPECT_EQ(next->body(), "soon d");
  EXPECT_EQ(handler_.later(), 2);
  EXPECT_EQ(handler_.in_place(), 0);
  EXPECT_EQ(ok_.load(), 4);  // the observer counts answers given later too
  EXPECT_TRUE(client.connected());
}

TEST_P(HttpServerTest, ADrainClosesTheConnectionAfterAnAnswerTakenInPlaceToAnswerLater) {
  StartServer({});
  HttpClient client(server_->port());
  ASSERT_TRUE(client.SendRaw("GET /soon?ms=hold&id=inflight HTTP/1.1\r\nHost: x\r\n\r\n"));
  ASSERT_TRUE(Eventually([&] { return handler_.later() == 1; }));
  server_->StopAccepting();
  server_->Drain();
  handler_.ReleaseHeld();
  // Answered, with `Connection: close` added to the handler's keep-alive bytes, then closed.
  auto response = client.ReadResponse();
  ASSERT_TRUE(response) << response.error().message();
  EXPECT_EQ(response->body(), "soon inflight");
  EXPECT_FALSE(response->keep_alive());
  EXPECT_TRUE(Eventually([&] { return server_->connections() == 0; }));
}

TEST_P(HttpServerTest, AnAnswerInPlaceLargerThanTheKernelTakesIsWrittenWholeAndTheConnectionGoesOn) {
  StartServer({});
  HttpClient client(server_->port());
  auto big = client.Get("/big");
  ASSERT_TRUE(big) << big.error().message();
  EXPECT_EQ(big->body().size(), TestHandler::kBigBody);
  EXPECT_EQ(big->body().find_first_not_of('b'), std::string::npos);
  auto next = client.Get("/now?id=after");
  ASSERT_TRUE(next) << next.error().message();
  EXPECT_EQ(next->body(), "in place after");
}

TEST_P(HttpServerTest, HeadResponsesCarryTheLengthButNoBody) {
  StartServer({});
  HttpClient client(server_->port());
  // Pipelined, so a body written after the HEAD answer would show up before the second response.
  ASSERT_TRUE(
      client.SendRaw("HEAD /echo HTTP/1.1\r\nHost: x\r\n\r\n"
                     "GET /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
  auto bytes = client.ReadUntilClosed();
  ASSERT_TRUE(bytes) << bytes.error().message();
  const size_t head_end = bytes->find("\r\n\r\n");
  ASSERT_NE(head_end, std::string::npos) << *bytes;
  const std::string head = bytes->substr(0, head_end);
  EXPECT_EQ(head.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << head;
  EXPECT_NE(head.find("Content-Length: 5"), std::string::npos) << head;  // the length of "HEAD "
  const std::string rest = bytes->substr(head_end + 4);
  EXPECT_EQ(rest.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << rest;
  EXPECT_TRUE(rest.ends_with("\r\n\r\nGET ")) << rest;
}

TEST_P(HttpServerTest, PipelineDeeperThanTheBoundIsStillAnsweredInOrder) {
  ServerOptions options;
  options.max_pipelined = 2;
  StartServer(options);
  HttpClient client(server_->port());
  std::string pipeline;
  for (int i = 0; i < 20; ++i) {
    pipeline += "GET /later?ms=" + std::to_string(i % 3 * 5) + "&id=" + std::to_string(i) +
                " HTTP/1.1\r\nHost: x\r\n\r\n";
  }
  ASSERT_TRUE(client.SendRaw(pipeline));
  for (int i = 0; i < 20; ++i) {
    auto response = client.ReadResponse();
    ASSERT_TRUE(response) << response.error().message();
    EXPECT_EQ(response->body(), std::to_string(i));
  }
}

TEST_P(HttpServerTest, ConnectionCloseIsHonoured) {
  StartServer({});
  HttpClient client(server_->port());
  ASSERT_TRUE(client.SendRaw("GET /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
  auto response = client.ReadResponse();
  ASSERT_TRUE(response);
  EXPECT_FALSE(response->keep_alive());
  EXPECT_FALSE(client.connected());  // the client saw Connection: close
}

TEST_P(HttpServerTest, Http10WithoutKeepAliveGetsOneAnswer) {
  StartServer({});
  HttpClient client(server_->port());
  ASSERT_TRUE(client.SendRaw("GET /echo HTTP/1.0\r\n\r\n"));
  auto rest = client.ReadUntilClosed();
  ASSERT_TRUE(rest) << rest.error().message();
  EXPECT_NE(rest->find("200 OK"), std::string::npos);
}

TEST_P(HttpServerTest, OversizedBodyGets413Json) {
  ServerOptions options;
  options.max_body_bytes = 1000;
  StartServer(options);
  HttpClient client(server_->port());
  auto response = client.Post("/echo", std::string(1001, 'x'));
  ASSERT_TRUE(response) << response.error().message();
  EXPECT_EQ(response->result_int(), 413);
  EXPECT_EQ(response->at(http::field::content_type), "application/json");
  EXPECT_EQ(ErrorCode(*response), "body_too_large");
  EXPECT_EQ(handler_.handled(), 0);
  // A body at the limit is fine.
  auto ok = client.Post("/echo", std::string(1000, 'x'));
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->result_int(), 200);
}

TEST_P(HttpServerTest, OversizedHeadersGet431Json) {
  ServerOptions options;
  options.max_header_bytes = 4096;
  StartServer(options);
  HttpClient client(server_->port());
  auto response = client.Get("/echo", {{"X-Big", std::string(5000, 'a')}});
  ASSERT_TRUE(response) << response.error().message();
  EXPECT_EQ(response->result_int(), 431);
  EXPECT_EQ(ErrorCode(*response), "headers_too_large");
  EXPECT_GE(transport_errors_.load(), 1);
}

TEST_P(HttpServerTest, MalformedRequestGets400Json) {
  StartServer({});
  HttpClient client(server_->port());
  ASSERT_TRUE(client.SendRaw("GET /echo HTTP/1.1\r\nContent-Length: banana\r\n\r\n"));
  auto response = client.ReadResponse();
  ASSERT_TRUE(response) << response.error().message();
  EXPECT_EQ(response->result_int(), 400);
  EXPECT_EQ(ErrorCode(*response), "bad_http");
}

TEST_P(HttpServerTest, PartialRequestTimesOutWith408) {
  ServerOptions options;
  options.read_timeout = 200ms;
  StartServer(options);
  HttpClient client(server_->port());
  ASSERT_TRUE(client.SendRaw("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nonly a part"));
  const auto start = std::chrono::steady_clock::now();
  auto response = client.ReadResponse();
  ASSERT_TRUE(response) << response.error().message();
  EXPECT_EQ(response->result_int(), 408);
  EXPECT_EQ(ErrorCode(*response), "request_timeout");
  EXPECT_GE(std::chrono::steady_clock::now() - start, 150ms);
  EXPECT_TRUE(Eventually([&] { return server_->connections() == 0; }));
}

TEST_P(HttpServerTest, SlowHeadersTimeOutWith408) {
  ServerOptions options;
  options.read_timeout = 200ms;
  StartServer(options);
  HttpClient client(server_->port());
  ASSERT_TRUE(client.SendRaw("GET /echo HTTP/1.1\r\nHo"));
  auto response = client.ReadResponse();
  ASSERT_TRUE(response) << response.error().message();
  EXPECT_EQ(response->result_int(), 408);
}

TEST_P(HttpServerTest, IdleConnectionIsClosedQuietly) {
  ServerOptions options;
  options.idle_timeout = 200ms;
  StartServer(options);
  HttpClient client(server_->port());
  auto response = client.Get("/echo");
  ASSERT_TRUE(response);
  auto rest = client.ReadUntilClosed();
  ASSERT_TRUE(rest) << rest.error().message();
  EXPECT_EQ(*rest, "");  // closed without a response
  EXPECT_TRUE(Eventually([&] { return server_->connections() == 0; }));
}

// At max_connections a new connection takes the place of the connection idle the longest; when every
// connection is busy it gets 503. Beyond the per-client cap, 503 too.
TEST_P(HttpServerTest, ConnectionsBeyondTheCapGet503UnlessAnIdleOneIsReclaimed) {
  ServerOptions options;
  options.max_connections = 2;
  options.max_connections_per_client = 3;  // every test client is 127.0.0.1: only the total cap applies
  StartServer(options);
  HttpClient a(server_->port()), b(server_->port()), c(server_->port());
  // Both connections busy (a response owed): nothing to reclaim.
  ASSERT_TRUE(a.SendRaw("GET /later?ms=1000&id=a HTTP/1.1\r\nHost: x\r\n\r\n"));
  ASSERT_TRUE(b.SendRaw("GET /later?ms=1000&id=b HTTP/1.1\r\nHost: x\r\n\r\n"));
  ASSERT_TRUE(Eventually([&] { return handler_.handled() == 2; }));
  auto refused = c.Get("/echo");
  ASSERT_TRUE(refused) << refused.error().message();
  EXPECT_EQ(refused->result_int(), 503);
  EXPECT_EQ(ErrorCode(*refused), "too_many_connections");
  EXPECT_EQ(server_->rejected_connections(), 1u);
  // Once answered, both are idle: a newcomer takes the place of the one idle the longest.
  ASSERT_TRUE(a.ReadResponse());
  ASSERT_TRUE(b.ReadResponse());
  HttpClient d(server_->port());
  auto served = d.Get("/echo");
  ASSERT_TRUE(served) << served.error().message();
  EXPECT_EQ(served->result_int(), 200);
  EXPECT_EQ(server_->reclaimed_connections(), 1u);
  EXPECT_EQ(server_->rejected_connections(), 1u);
}

TEST_P(HttpServerTest, OneClientAddressIsCappedAtItsShare) {
  ServerOptions options;
  options.max_connections = 10;
  options.max_connections_per_client = 1;
  StartServer(options);
  HttpClient a(server_->port()), b(server_->port());
  ASSERT_TRUE(a.Get("/echo"));
  auto refused = b.Get("/echo");
  ASSERT_TRUE(refused) << refused.error().message();
  EXPECT_EQ(refused->result_int(), 503);
  a.Close();
  ASSERT_TRUE(Eventually([&] { return server_->connections() == 0; }));
  HttpClient c(server_->port());
  auto served = c.Get("/echo");
  ASSERT_TRUE(served);
  EXPECT_EQ(served->result_int(), 200);
}

TEST_P(HttpServerTest, DrainFinishesRequestsInFlightAndClosesIdleConnections) {
  StartServer({});
  HttpClient idle(server_->port());
  ASSERT_TRUE(idle.Get("/echo"));
  HttpClient busy(server_->port());
  ASSERT_TRUE(busy.SendRaw("GET /later?ms=200&id=inflight HTTP/1.1\r\nHost: x\r\n\r\n"));
  ASSERT_TRUE(Eventually([&] { return handler_.handled() == 2; }));
  server_->StopAccepting();
  server_->Drain();
  auto response = busy.ReadResponse();
  ASSERT_TRUE(response) << response.error().message();
  EXPECT_EQ(response->body(), "inflight");
  EXPECT_FALSE(response->keep_alive());
  auto rest = idle.ReadUntilClosed();
  ASSERT_TRUE(rest) << rest.error().message();
  EXPECT_TRUE(Eventually([&] { return server_->connections() == 0; }));
  // No new connection is accepted.
  HttpClient late(server_->port(), 500ms);
  EXPECT_FALSE(late.Get("/echo"));
}

TEST_P(HttpServerTest, DrainWaitsForAPartlyReceivedRequest) {
  StartServer({});
  HttpClient client(server_->port());
  ASSERT_TRUE(client.SendRaw("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 6\r\n\r\nabc"));
  ASSERT_TRUE(Eventually([&] { return server_->connections() == 1; }));
  // Drain before the ticker could notice the bytes: the request must still be awaited.
  server_->StopAccepting();
  server_->Drain();
  ASSERT_TRUE(client.SendRaw("def"));
  auto response = client.ReadResponse();
  ASSERT_TRUE(response) << response.error().message();
  EXPECT_EQ(response->body(), "POST abcdef");
  EXPECT_FALSE(response->keep_alive());
  EXPECT_TRUE(Eventually([&] { return server_->connections() == 0; }));
}

TEST_P(HttpServerTest, ManyConcurrentClients) {
  StartServer({});
  std::atomic<int> ok{0};
  std::vector<std::thread> clients;
  for (int t = 0; t < 16; ++t) {
    clients.emplace_back([&, t] {
      HttpClient client(server_->port());
      for (int i = 0; i < 50; ++i) {
        auto response = (i % 2) ? client.Post("/echo", std::to_string(t)) : client.Get("/later?ms=0&id=x");
        if (response && response->result_int() == 200) ok.fetch_add(1);
      }
    });
  }
  for (auto& c : clients) c.join();
  EXPECT_EQ(ok.load(), 16 * 50);
}

TEST_P(HttpServerTest, StartFailsOnAPortInUse) {
  StartServer({});
  ServerOptions options;
  options.port = server_->port();
  HttpServer second(io_, options, handler_, nullptr);
  EXPECT_TRUE(second.Start().IsIOError());
}

INSTANTIATE_TEST_SUITE_P(Threads, HttpServerTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "OneThreadNoStrand" : "TwoThreadsStrandPerConnection";
                         });

}  // namespace
}  // namespace ringlimit::node
