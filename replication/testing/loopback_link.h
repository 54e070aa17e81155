// LoopbackNetwork: an in-process "cluster" for the tests of replication/ (and of anything that talks to
// peers only through ClusterLink). Each member has a real store (a MemoryStore of its own, or one the test
// gives), a ring view of its own, and a ClusterLink (LoopbackMember) whose Send delivers the request to the
// target member's handler for that peer::Method.
//
// Delivery is asynchronous, as over a real network: every member has one inbound worker thread that runs
// its handlers in arrival order (one ordered connection per member), and replies -- including failures --
// are never delivered inline from Send, so a caller may hold its own locks while sending. A timer thread
// fails calls whose `timeout` passes before their handler returns (the handler's late answer is then
// dropped): Send's `reply` is called exactly once.
//
// Faults, per member:
//  - SetReachable(id, false): Reachable(id) is false on every link and Send to it fails (nullopt, at once).
//  - SetFailing(id, true): Reachable(id) stays true but Send to it fails (a crashed member not yet
//    declared dead).
//  - SetPaused(id, true): requests to it queue up unhandled until unpaused (a stalled member); their
//    timeouts still fire.
// Counters: Sent(to, method) counts Send calls addressed to `to`; Handled(to, method) counts requests its
// handler answered (before their timeout).
//
// Thread safety: every method is safe for concurrent use. Lifetime: handlers run on the network's threads,
// so call Shutdown() (the destructor does) before destroying anything a handler references; after
// Shutdown every Send fails (its reply runs inline) and no handler runs again.
#ifndef RINGLIMIT_REPLICATION_TESTING_LOOPBACK_LINK_H_
#define RINGLIMIT_REPLICATION_TESTING_LOOPBACK_LINK_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "peer.pb.h"
#include "replication/cluster_link.h"
#include "ring/ring_view.h"
#include "storage/memory_store.h"
#include "storage/store.h"

namespace ringlimit::replication::testing {

class LoopbackNetwork;

// The ClusterLink of one member of a LoopbackNetwork.
class LoopbackMember final : public ClusterLink {
 public:
  // Answers one request (its serialized payload) with a serialized response, or nullopt (a failed call).
  using Handler = std::function<std::optional<std::string>(std::string_view payload)>;

  LoopbackMember(LoopbackNetwork& network, std::string id, storage::Store* store)
      : network_(network), id_(std::move(id)) {
    if (store == nullptr) {
      owned_store_ = std::make_unique<storage::MemoryStore>();
      store = owned_store_.get();
    }
    store_ = store;
  }

  // ClusterLink.
  const std::string& self_id() const override { return id_; }
  std::shared_ptr<const ring::RingView> ring() const override {
    std::lock_guard lock(mu_);
    return ring_;
  }
  bool Reachable(std::string_view id) const override;
  void Send(std::string_view id, peer::Method method, std::string payload, std::chrono::milliseconds timeout,
            Reply reply) override;

  // The member's store (owned by the member unless the test gave one).
  storage::Store& store() { return *store_; }

  // This member's ring view (LoopbackNetwork::SetRing sets every member's).
  void SetRing(std::shared_ptr<const ring::RingView> view) {
    std::lock_guard lock(mu_);
    ring_ = std::move(view);
  }

  // Registers (or, with an empty function, removes) the handler of `method` on this member. A request of
  // a method without a handler fails.
  void Handle(peer::Method method, Handler handler) {
    std::lock_guard lock(mu_);
    if (handler) {
      handlers_[method] = std::make_shared<Handler>(std::move(handler));
    } else {
      handlers_.erase(method);
    }
  }

 private:
  friend class LoopbackNetwork;

  std::shared_ptr<Handler> HandlerFor(peer::Method method) const {
    std::lock_guard lock(mu_);
    auto it = handlers_.find(method);
    return it == handlers_.end() ? nullptr : it->second;
  }

  LoopbackNetwork& network_;
  const std::string id_;
  std::unique_ptr<storage::Store> owned_store_;
  storage::Store* store_ = nullptr;

  mutable std::mutex mu_;  // guards ring_ and handlers_
  std::shared_ptr<const ring::RingView> ring_;
  std::map<peer::Method, std::shared_ptr<Handler>> handlers_;
};

class LoopbackNetwork {
 public:
  LoopbackNetwork() : timer_([this] { TimerLoop(); }) {}
  ~LoopbackNetwork() { Shutdown(); }

  LoopbackNetwork(const LoopbackNetwork&) = delete;
  LoopbackNetwork& operator=(const LoopbackNetwork&) = delete;

  // Adds member `id` (reachable, no handlers, no ring yet) with `store`, or a MemoryStore of its own when
  // `store` is null (not owned; must outlive the network). REQUIRES: `id` is new.
  LoopbackMember& Add(const std::string& id, storage::Store* store = nullptr) {
    auto node = std::make_unique<Node>();
    node->member = std::make_unique<LoopbackMember>(*this, id, store);
    Node* raw = node.get();
    {
      std::lock_guard lock(mu_);
      nodes_.emplace(id, std::move(node));
    }
    raw->worker = std::thread([this, raw] { WorkerLoop(*raw); });
    return *raw->member;
  }

  // The member `id`. REQUIRES: it was added.
  LoopbackMember& member(std::string_view id) { return *FindNode(id)->member; }

  // Builds a ring over `ids` (each with `vnodes` virtual nodes) and gives it to every member (also to
  // members not in it). Returns the view.
  std::shared_ptr<const ring::RingView> SetRing(const std::vector<std::string>& ids, uint32_t vnodes = 64) {
    std::vector<ring::RingMember> members;
    for (const std::string& id : ids) members.push_back({id, vnodes});
    auto view = ring::RingView::Build(++ring_version_, std::move(members)).view;
    std::vector<LoopbackMember*> all;
    {
      std::lock_guard lock(mu_);
      for (auto& [id, node] : nodes_) all.push_back(node->member.get());
    }
    for (LoopbackMember* m : all) m->SetRing(view);
    return view;
  }

  void SetReachable(std::string_view id, bool reachable) { FindNode(id)->reachable = reachable; }
  void SetFailing(std::string_view id, bool failing) { FindNode(id)->failing = failing; }
  void SetPaused(std::string_view id, bool paused) {
    Node* node = FindNode(id);
    {
      std::lock_guard lock(node->mu);
      node->paused = paused;
    }
    node->cv.notify_all();
  }

  [[nodiscard]] bool IsReachable(std::string_view id) const {
    const Node* node = FindNode(id);
    return node != nullptr && node->reachable.load();
  }

  // Requests addressed to / answered by member `to` for `method`.
  [[nodiscard]] uint64_t Sent(std::string_view to, peer::Method method) const {
    return Count(to, method, false);
  }
  [[nodiscard]] uint64_t Handled(std::string_view to, peer::Method method) const {
    return Count(to, method, true);
  }
  // Send calls of every method to every member.
  [[nodiscard]] uint64_t TotalSent() const { return total_sent_.load(); }

  // Stops every thread: queued requests fail, later sends fail inline, no handler runs after it returns.
  // Idempotent.
  void Shutdown() {
    std::vector<Node*> nodes;
    {
      std::lock_guard lock(mu_);
      if (shutdown_) return;
      shutdown_ = true;
      for (auto& [id, node] : nodes_) nodes.push_back(node.get());
    }
    timer_cv_.notify_all();
    for (Node* node : nodes) {
      {
        std::lock_guard lock(node->mu);
        node->stop = true;
      }
      node->cv.notify_all();
    }
    for (Node* node : nodes) {
      if (node->worker.joinable()) node->worker.join();
    }
    if (timer_.joinable()) timer_.join();
    // Whatever is left (queued requests, pending timeouts) fails now.
    std::vector<std::shared_ptr<Call>> left;
    for (Node* node : nodes) {
      std::lock_guard lock(node->mu);
      for (auto& call : node->inbox) left.push_back(std::move(call));
      node->inbox.clear();
    }
    {
      std::lock_guard lock(mu_);
      for (auto& [deadline, call] : timeouts_) left.push_back(std::move(call));
      timeouts_.clear();
    }
    for (auto& call : left) Fail(*call);
  }

 private:
  friend class LoopbackMember;
  using Clock = std::chrono::steady_clock;

  struct Call {
    std::string to;
    peer::Method method = peer::METHOD_UNSPECIFIED;
    std::string payload;
    Clock::time_point deadline;
    ClusterLink::Reply reply;
    std::atomic<bool> finished{false};
  };

  struct Node {
    std::unique_ptr<LoopbackMember> member;
    std::atomic<bool> reachable{true};
    std::atomic<bool> failing{false};
    std::thread worker;
    std::mutex mu;  // guards the fields below
    std::condition_variable cv;
    std::deque<std::shared_ptr<Call>> inbox;
    bool paused = false;
    bool stop = false;
  };

  // Answers `call` unless it is answered already.
  static void Finish(Call& call, std::optional<std::string>&& answer) {
    if (!call.finished.exchange(true)) {
      ClusterLink::Reply reply = std::move(call.reply);
      reply(std::move(answer));
    }
  }
  static void Fail(Call& call) {
    if (!call.finished.exchange(true)) {
      ClusterLink::Reply reply = std::move(call.reply);
      reply(std::nullopt);
    }
  }

  Node* FindNode(std::string_view id) const {
    std::lock_guard lock(mu_);
    auto it = nodes_.find(std::string(id));
    return it == nodes_.end() ? nullptr : it->second.get();
  }

  uint64_t Count(std::string_view to, peer::Method method, bool handled) const {
    std::lock_guard lock(mu_);
    auto it = counts_.find({std::string(to), method});
    if (it == counts_.end()) return 0;
    return handled ? it->second.second : it->second.first;
  }

  void Bump(const std::string& to, peer::Method method, bool handled) {
    std::lock_guard lock(mu_);
    auto& c = counts_[{to, method}];
    (handled ? c.second : c.first) += 1;
  }

  void Deliver(const std::string& from, std::string_view to, peer::Method method, std::string payload,
               std::chrono::milliseconds timeout, ClusterLink::Reply reply) {
    auto call = std::make_shared<Call>();
    call->to = std::string(to);
    call->method = method;
    call->payload = std::move(payload);
    call->deadline = Clock::now() + timeout;
    call->reply = std::move(reply);
    total_sent_.fetch_add(1);
    Bump(call->to, method, false);
    Node* node = FindNode(to);
    bool ok = node != nullptr && call->to != from && node->reachable.load() && !node->failing.load();
    bool shut = false;
    {
      std::lock_guard lock(mu_);
      shut = shutdown_;
      // The timer fails the call at its deadline -- or at once when it cannot be delivered.
      if (!shut) timeouts_.emplace(ok ? call->deadline : Clock::time_point::min(), call);
    }
    if (shut) {
      Fail(*call);
      return;
    }
    timer_cv_.notify_all();
    if (!ok) return;
    {
      std::lock_guard lock(node->mu);
      node->inbox.push_back(std::move(call));
    }
    node->cv.notify_all();
  }

  void WorkerLoop(Node& node) {
    std::unique_lock lock(node.mu);
    while (true) {
      node.cv.wait(lock, [&] { return node.stop || (!node.paused && !node.inbox.empty()); });
      if (node.stop) return;
      std::shared_ptr<Call> call = std::move(node.inbox.front());
      node.inbox.pop_front();
      lock.unlock();
      if (!call->finished.load()) {
        std::shared_ptr<LoopbackMember::Handler> handler = node.member->HandlerFor(call->method);
        std::optional<std::string> answer;
        if (handler != nullptr) answer = (*handler)(call->payload);
        if (!call->finished.load()) {
          if (answer.has_value()) Bump(call->to, call->method, true);
          Finish(*call, std::move(answer));
        }
      }
      lock.lock();
    }
  }

  void TimerLoop() {
    std::unique_lock lock(mu_);
    while (!shutdown_) {
      if (timeouts_.empty()) {
        timer_cv_.wait(lock);
        continue;
      }
      auto first = timeouts_.begin();
      if (first->first > Clock::now()) {
        timer_cv_.wait_until(lock, first->first);
        continue;
      }
      std::shared_ptr<Call> call = std::move(first->second);
      timeouts_.erase(first);
      lock.unlock();
      Fail(*call);
      lock.lock();
    }
  }

  mutable std::mutex mu_;  // guards nodes_ (the map, not the nodes), counts_, timeouts_, shutdown_
  std::map<std::string, std::unique_ptr<Node>, std::less<>> nodes_;
  std::map<std::pair<std::string, peer::Method>, std::pair<uint64_t, uint64_t>> counts_;  // sent, handled
  std::multimap<Clock::time_point, std::shared_ptr<Call>> timeouts_;
  bool shutdown_ = false;
  std::condition_variable timer_cv_;
  std::atomic<uint64_t> total_sent_{0};
  std::atomic<uint64_t> ring_version_{0};
  std::thread timer_;  // last: started once everything above exists
};

inline bool LoopbackMember::Reachable(std::string_view id) const {
  return id != id_ && network_.IsReachable(id);
}

inline void LoopbackMember::Send(std::string_view id, peer::Method method, std::string payload,
                                 std::chrono::milliseconds timeout, Reply reply) {
  network_.Deliver(id_, id, method, std::move(payload), timeout, std::move(reply));
}

}  // namespace ringlimit::replication::testing

#endif  // RINGLIMIT_REPLICATION_TESTING_LOOPBACK_LINK_H_
