#include "node/grants/grant_driver.h"

#include <algorithm>
#include <tuple>
#include <utility>
#include <vector>

#include "limiter/spec_wire.h"
#include "ring/token.h"
#include "spdlog/spdlog.h"

namespace ringlimit::cluster {
namespace {

template <class T>
void AppendAll(std::vector<T>& into, std::vector<T>& from) {
  into.insert(into.end(), std::make_move_iterator(from.begin()), std::make_move_iterator(from.end()));
}

// Adds `from`'s actions to `into` (Check's `local` and `forward` stay `into`'s).
void Append(GrantActions& into, GrantActions from) {
  AppendAll(into.requests, from.requests);
  AppendAll(into.releases, from.releases);
  AppendAll(into.lends, from.lends);
  AppendAll(into.refusals, from.refusals);
  AppendAll(into.settles, from.settles);
  AppendAll(into.recalls, from.recalls);
}

peer::PeerResult Encoded(const google::protobuf::MessageLite& message) {
  return peer::PeerResult::Value(message.SerializeAsString());
}

peer::PeerResult Refused(uint64_t request, std::string_view self) {
  peer::GrantReply reply;
  reply.set_request(request);
  reply.set_owner(std::string(self));
  return Encoded(reply);
}

// The planner's options with this node incarnation's number: random, so that two owners of one key (a
// restart, a failover) never mint the same grant ids (AddGrant would refuse the second anyway).
GrantOptions WithIncarnation(GrantOptions options, uint64_t random) {
  const auto incarnation = static_cast<uint32_t>(random ^ (random >> 32));
  options.incarnation = incarnation != 0 ? incarnation : 1;
  return options;
}

}  // namespace

bool DriverLends(const limiter::LimitSpec& spec) {
  return spec.mode == limiter::Mode::kHard && !spec.count_denied && limiter::Lends(spec);
}

GrantDriver::GrantDriver(ForwardHost& host, GrantDriverOptions options, GrantRows& rows, Ack ack)
    : host_(host),
      options_(std::move(options)),
      rows_(rows),
      ack_(std::move(ack)),
      owner_(WithIncarnation(options_.planner, host.Random())) {
  shards_.reserve(kShards);
  for (size_t i = 0; i < kShards; ++i) shards_.push_back(std::make_unique<Shard>(options_.planner));
}

GrantDriver::Shard& GrantDriver::ShardOf(std::string_view pkey) const {
  return *shards_[std::hash<std::string_view>{}(pkey) % kShards];
}

std::optional<GrantKey> GrantDriver::KnownKey(std::string_view pkey, std::string* owner) const {
  Shard& shard = ShardOf(pkey);
  std::lock_guard<std::mutex> lock(shard.mu);
  auto it = shard.known.find(pkey);
  if (it == shard.known.end()) return std::nullopt;
  if (owner != nullptr) *owner = it->second.owner;
  return it->second.key;
}

void GrantDriver::NoteKnown(std::string_view pkey, const GrantKey& key, std::string_view owner,
                            std::chrono::nanoseconds now) {
  Shard& shard = ShardOf(pkey);
  std::lock_guard<std::mutex> lock(shard.mu);
  auto it = shard.known.find(pkey);
  if (it == shard.known.end()) it = shard.known.emplace(std::string(pkey), Known{}).first;
  Known& k = it->second;
  k.key = key;
  if (!owner.empty()) k.owner = std::string(owner);
  k.last_seen = std::max(k.last_seen, now);
}

void GrantDriver::PlannerKeyInto(std::string_view key, std::string_view name, std::string& out) {
  out.clear();
  out.reserve(key.size() + 1 + name.size());
  out.append(key);
  out.push_back('\0');  // entity keys and names never hold a NUL
  out.append(name);
}

std::string GrantDriver::PlannerKey(std::string_view key, std::string_view name) {
  std::string out;
  PlannerKeyInto(key, name, out);
  return out;
}

double GrantDriver::ObserveRate(Shard& shard, std::string_view pkey, uint64_t cost,
                                std::chrono::nanoseconds now) {
  auto it = shard.rates.find(pkey);
  if (it == shard.rates.end()) {
    if (shard.rates.size() >= std::max<size_t>(1, options_.max_tracked_keys / kShards)) return 0;
    it = shard.rates.emplace(std::string(pkey), Rate{now, 0, 0}).first;
  }
  Rate& r = it->second;
  const std::chrono::nanoseconds w = options_.rate_window;
  if (now - r.window_start >= 2 * w) {
    r.previous = 0;
    r.current = 0;
    r.window_start = now;
  } else if (now - r.window_start >= w) {
    r.previous = r.current;
    r.current = 0;
    r.window_start += w;
  }
  r.current += cost;
  const double seconds = std::chrono::duration<double>(w).count();
  return static_cast<double>(std::max(r.previous, r.current)) / seconds;
}

void GrantDriver::FenceIfPaused(Shard& shard, std::chrono::nanoseconds now, GrantActions& out) {
  FenceIf(host_.Paused(), shard, now, out);
}

void GrantDriver::FenceIf(bool paused, Shard& shard, std::chrono::nanoseconds now, GrantActions& out) {
  if (!paused) {
    shard.fenced = false;
    return;
  }
  if (shard.fenced) return;
  shard.fenced = true;
  Append(out, shard.planner.Fence(now, now + options_.planner.margin));
}

bool GrantDriver::Offered(const node::EntryCheck& check, std::string_view decider) const {
  // (Headroom matters to dynamic mode only, which is not lent.)
  return check.spec != nullptr && check.cost != 0 && !check.reset && !decider.empty() &&
         decider != host_.self_id() && DriverLends(*check.spec);
}

bool GrantDriver::MayDecideHere(const node::EntryCheck& check, std::string_view decider) {
  if (!Offered(check, decider)) return false;
  const std::chrono::nanoseconds now = host_.SteadyNow();
  thread_local std::string pkey;
  PlannerKeyInto(check.key, check.name, pkey);
  Shard& shard = ShardOf(pkey);
  std::lock_guard<std::mutex> lock(shard.mu);
  return !shard.fenced && shard.planner.LocalUnits(now, pkey) >= check.cost;
}

std::optional<uint64_t> GrantDriver::DecideHere(const node::EntryCheck& check, std::string_view decider) {
  if (!Offered(check, decider)) return std::nullopt;
  const std::chrono::nanoseconds now = host_.SteadyNow();
  // The planner key is built in this thread's buffer: nothing below calls back in before it is done with.
  thread_local std::string pkey;
  PlannerKeyInto(check.key, check.name, pkey);
  GrantActions actions;
  uint64_t left = 0;
  {
    // Only this key's shard: checks of keys in other shards go on in parallel.
    Shard& shard = ShardOf(pkey);
    std::lock_guard<std::mutex> lock(shard.mu);
    FenceIfPaused(shard, now, actions);
    if (!shard.fenced) {
      const double rate = ObserveRate(shard, pkey, check.cost, now);
      GrantActions checked = shard.planner.Check(now, pkey, check.cost, rate, true);
      auto known = shard.known.find(pkey);
      if (!checked.requests.empty() && known == shard.known.end()) {
        known = shard.known.emplace(pkey, Known{}).first;
      }
      if (known != shard.known.end()) {
        // Assigned in place: the same key, name and owner check after check copy nothing.
        Known& k = known->second;
        if (k.key.key != check.key) k.key.key.assign(check.key);
        if (k.key.name != check.name) k.key.name.assign(check.name);
        k.key.spec = *check.spec;
        if (k.owner != decider) k.owner.assign(decider);
        k.last_seen = now;
      }
      actions.local = checked.local;
      Append(actions, std::move(checked));
      if (actions.local) left = shard.planner.LocalUnits(now, pkey);
    }
  }
  const bool local = actions.local.has_value();
  Execute(std::move(actions));
  if (!local) return std::nullopt;
  return left;
}

void GrantDriver::Execute(GrantActions actions) {
  for (const cluster::SendRequest& r : actions.requests) SendRequest(r);
  for (const cluster::SendRelease& r : actions.releases) SendRelease(r);
  for (const cluster::SendRecall& r : actions.recalls) SendRecall(r);
  for (const cluster::Settle& s : actions.settles) Settle(s);
}

std::string GrantDriver::AddressOf(std::string_view id) const {
  const ring::MemberInfo* member = host_.routing().Member(id);
  return member != nullptr ? member->peer_address : "";
}

void GrantDriver::SendRequest(const cluster::SendRequest& r) {
  peer::GrantRequest message;
  std::string owner;
  if (std::optional<GrantKey> key = KnownKey(r.key, &owner)) {
    message.set_key(key->key);
    message.mutable_limit()->set_name(key->name);
    limiter::SpecToProto(key->spec, message.mutable_limit()->mutable_spec());
  }
  const std::string address = owner.empty() ? "" : AddressOf(owner);
  auto failed = [this, key = r.key, request = r.request] {
    send_failures_.fetch_add(1, std::memory_order_relaxed);
    GrantActions a;
    {
      Shard& shard = ShardOf(key);
      std::lock_guard<std::mutex> lock(shard.mu);
      a = shard.planner.GrantRefused(host_.SteadyNow(), key, request);
    }
    Execute(std::move(a));
  };
  if (address.empty()) {
    failed();
    return;
  }
  message.set_from(host_.self_id());
  message.set_request(r.request);
  message.set_want(r.want);
  message.set_term_ns(r.term.count());
  host_.Call(
      address, peer::METHOD_GRANT_REQUEST, message.SerializeAsString(), options_.timeout,
      [this, key = r.key, request = r.request, failed](peer::PeerResult result) {
        peer::GrantReply reply;
        if (!result.ok() || !reply.ParseFromString(result.TakePayload()) || reply.request() != request) {
          failed();
          return;
        }
        GrantActions a;
        {
          Shard& shard = ShardOf(key);
          std::lock_guard<std::mutex> lock(shard.mu);
          const std::chrono::nanoseconds now = host_.SteadyNow();
          a = reply.units() == 0 || reply.grant() == 0
                  ? shard.planner.GrantRefused(now, key, request)
                  : shard.planner.GrantReplied(now, key, request, reply.grant(), reply.units(),
                                               std::chrono::nanoseconds(reply.term_ns()));
        }
        Execute(std::move(a));
      });
}

void GrantDriver::SendRelease(const cluster::SendRelease& r) {
  peer::GrantRelease message;
  const std::optional<GrantKey> key = KnownKey(r.key);
  if (key) {
    message.set_key(key->key);
    message.mutable_limit()->set_name(key->name);
    limiter::SpecToProto(key->spec, message.mutable_limit()->mutable_spec());
  } else {  // forgotten long after its term: the owner reclaimed it
    Released(r.grant);
    return;
  }
  // To whoever decides the key now: the ledger is in the key's row, which follows the key.
  const std::string decider(host_.routing().Decider(ring::RingToken(message.key())));
  const std::string address = AddressOf(decider);
  if (address.empty()) {
    send_failures_.fetch_add(1, std::memory_order_relaxed);
    std::lock_guard<std::mutex> lock(mu_);
    RetryRelease(r, host_.SteadyNow());
    return;
  }
  message.set_from(host_.self_id());
  message.set_grant(r.grant);
  message.set_used(r.used);
  host_.Call(address, peer::METHOD_GRANT_RELEASE, message.SerializeAsString(), options_.timeout,
             [this, r](peer::PeerResult result) {
               if (result.ok()) return Released(r.grant);
               send_failures_.fetch_add(1, std::memory_order_relaxed);
               std::lock_guard<std::mutex> lock(mu_);
               RetryRelease(r, host_.SteadyNow());
             });
}

void GrantDriver::Released(GrantId grant) {
  std::function<void()> done;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!leaving_) return;
    leaving_->releases.erase(grant);
    done = LeftLocked(host_.SteadyNow());
  }
  if (done) done();
}

std::function<void()> GrantDriver::LeftLocked(std::chrono::nanoseconds now) {
  if (!leaving_ || !leaving_->done || (!leaving_->releases.empty() && now < leaving_->until)) return nullptr;
  return std::exchange(leaving_->done, nullptr);
}

void GrantDriver::Leave(std::function<void()> done) {
  const std::chrono::nanoseconds now = host_.SteadyNow();
  GrantActions actions;
  for (const std::unique_ptr<Shard>& shard : shards_) {
    std::lock_guard<std::mutex> lock(shard->mu);
    Append(actions, shard->planner.Retire(now));
  }
  std::function<void()> left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    leaving_ = Leaving{{}, now + options_.planner.term + options_.planner.margin, std::move(done)};
    for (const cluster::SendRelease& r : actions.releases) leaving_->releases.insert(r.grant);
    left = LeftLocked(now);  // nothing to release
  }
  spdlog::info("grants: leaving; {} slices released to their owners", actions.releases.size());
  Execute(std::move(actions));
  if (left) left();
}

std::chrono::nanoseconds GrantDriver::RetryingSince(GrantId grant, std::chrono::nanoseconds now) {
  return retry_since_.try_emplace(grant, now).first->second;
}

void GrantDriver::RetryRelease(const cluster::SendRelease& release, std::chrono::nanoseconds now) {
  for (const Unsent& u : unsent_) {
    if (u.release.grant == release.grant) return;  // already waiting
  }
  unsent_.push_back({release, now + options_.planner.margin, RetryingSince(release.grant, now)});
}

void GrantDriver::SendRecall(const cluster::SendRecall& r) {
  peer::GrantRecall message;
  const std::optional<GrantKey> key = KnownKey(r.key);
  if (!key) return;
  message.set_key(key->key);
  message.set_name(key->name);
  const std::string address = AddressOf(r.to);
  if (address.empty()) return;
  message.set_from(host_.self_id());
  message.set_grant(r.grant);
  host_.Call(address, peer::METHOD_GRANT_RECALL, message.SerializeAsString(), options_.timeout,
             [this](peer::PeerResult result) {
               if (!result.ok()) send_failures_.fetch_add(1, std::memory_order_relaxed);
             });
}

void GrantDriver::Settle(const cluster::Settle& s) {
  const std::optional<GrantKey> key = KnownKey(s.key);
  if (!key) {
    spdlog::warn("grants: cannot settle grant {:#x}: its key is no longer known", s.grant);
    return;
  }
  if (!Deciding(key->key)) {
    // A reclaim while fenced or after the key moved: not in this node's copy, which may miss a settle made
    // elsewhere. Tried again from Tick (this node may decide the key again once its fence is down); the
    // key's decider settles it otherwise (from the holder's Release, or adopting it when asked a slice).
    std::lock_guard<std::mutex> lock(mu_);
    bool waiting = false;
    for (const Unsettled& u : unsettled_) waiting = waiting || u.settle.grant == s.grant;
    const std::chrono::nanoseconds now = host_.SteadyNow();
    if (!waiting) unsettled_.push_back({s, now + options_.planner.margin, RetryingSince(s.grant, now)});
    return;
  }
  (void)rows_.Settle(*key, s.grant, s.used, WallNow());
}

bool GrantDriver::Deciding(std::string_view key) const {
  return !host_.Paused() && host_.routing().Decider(ring::RingToken(key)) == host_.self_id();
}

void GrantDriver::ServeRequest(const peer::GrantRequest& request, Respond respond) {
  const std::string& self = host_.self_id();
  Result<limiter::LimitSpec> spec = limiter::SpecFromProto(request.limit().spec());
  const bool deciding = Deciding(request.key()) && !host_.ClockSkewed() && host_.MinorityRefusal().ok();
  if (!spec.ok() || !DriverLends(spec.value()) || !deciding || request.want() == 0 ||
      request.term_ns() <= 0) {
    respond(Refused(request.request(), self));
    return;
  }
  requests_served_.fetch_add(1, std::memory_order_relaxed);
  GrantKey key{request.key(), request.limit().name(), spec.value()};
  const std::string pkey = PlannerKey(key.key, key.name);
  const std::chrono::nanoseconds now = host_.SteadyNow();
  GrantActions actions =
      rows_.Lend(key, WallNow(), [&](const KeyBudget& budget, const std::vector<GrantId>& unsettled) {
        NoteKnown(pkey, key, self, now);
        std::lock_guard<std::mutex> lock(mu_);
        // Grants in the row this planner did not lend (a previous owner's, or this node's before a
        // restart) are reclaimed term + margin from now unless their Release comes first.
        GrantActions out = owner_.Adopt(now, pkey, unsettled);
        Append(out, owner_.GrantRequested(now, request.from(), pkey, request.request(), request.want(),
                                          std::chrono::nanoseconds(request.term_ns()), budget));
        return out;
      });
  std::vector<Lend> lends = std::move(actions.lends);
  actions.lends.clear();
  actions.refusals.clear();
  Execute(std::move(actions));
  if (lends.empty()) {
    respond(Refused(request.request(), self));
    return;
  }
  const Lend lend = lends.front();
  // The record is in the row; answer only once it is acknowledged under the mode's rule.
  ack_(key.key, [this, lend, self, respond = std::move(respond)](bool acked) {
    if (!acked) {
      // Recorded but not answered: the owner reclaims it after its term (under-admission, never over).
      not_acked_.fetch_add(1, std::memory_order_relaxed);
      respond(Refused(lend.request, self));
      return;
    }
    peer::GrantReply reply;
    reply.set_request(lend.request);
    reply.set_grant(lend.grant);
    reply.set_units(lend.units);
    reply.set_term_ns(lend.term.count());
    reply.set_owner(self);
    respond(Encoded(reply));
  });
}

void GrantDriver::Serve(peer::Method method, std::string payload, Respond respond) {
  const std::chrono::nanoseconds now = host_.SteadyNow();
  auto bad = [&respond](std::string_view what) {
    respond(peer::PeerResult::Error(peer::PeerErrorKind::kRemoteError, std::string(what)));
  };
  switch (method) {
    case peer::METHOD_GRANT_REQUEST: {
      peer::GrantRequest request;
      if (!request.ParseFromString(payload)) return bad("bad grant request");
      ServeRequest(request, std::move(respond));
      return;
    }
    case peer::METHOD_GRANT_RELEASE: {
      peer::GrantRelease release;
      if (!release.ParseFromString(payload)) return bad("bad grant release");
      Result<limiter::LimitSpec> spec = limiter::SpecFromProto(release.limit().spec());
      if (!spec.ok()) return bad("bad grant release spec");
      if (!Deciding(release.key())) {
        // A copy this node no longer decides (or a pause: others may have taken the key over meanwhile) may
        // not know the grant was settled already: settling there would charge its used units twice. The
        // holder sends the Release again, to the decider of the moment.
        return bad("not deciding this key");
      }
      const std::string pkey = PlannerKey(release.key(), release.limit().name());
      // Known also after a failover: this node may never have lent it.
      NoteKnown(pkey, GrantKey{release.key(), release.limit().name(), spec.value()}, "", now);
      GrantActions a;
      {
        std::lock_guard<std::mutex> lock(mu_);
        a = owner_.ReleaseReceived(now, pkey, release.grant(), release.used());
      }
      Execute(std::move(a));
      respond(Encoded(peer::GrantAck()));
      return;
    }
    case peer::METHOD_GRANT_RECALL: {
      peer::GrantRecall recall;
      if (!recall.ParseFromString(payload)) return bad("bad grant recall");
      const std::string pkey = PlannerKey(recall.key(), recall.name());
      GrantActions a;
      {
        Shard& shard = ShardOf(pkey);
        std::lock_guard<std::mutex> lock(shard.mu);
        a = shard.planner.RecallReceived(now, pkey, recall.grant());
      }
      Execute(std::move(a));
      respond(Encoded(peer::GrantAck()));
      return;
    }
    default:
      return bad("not a grant method");
  }
}

void GrantDriver::Tick() {
  const std::chrono::nanoseconds now = host_.SteadyNow();
  GrantActions actions;
  std::vector<std::string> watched_keys;  // planner keys with slices out to watch (owner)
  std::vector<ring::TokenRange> due;      // ranges taken over, to scan now
  std::set<std::string, std::less<>> busy;
  // A key is forgotten well after anything of it can still be out -- its slices' terms, the owner's
  // reclaims (term + margin) and a late Release -- and not while this node has a grant of it unsettled
  // or a Release or a settle of it waits to be tried again (for at most `keep` each).
  const std::chrono::nanoseconds keep = 4 * (options_.planner.term + options_.planner.margin);
  std::function<void()> left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Append(actions, owner_.Timer(now));
    busy = owner_.LentKeys();
    std::erase_if(unsent_, [&](const Unsent& u) { return now - u.since >= keep; });
    std::erase_if(unsettled_, [&](const Unsettled& u) { return now - u.since >= keep; });
    for (const Unsent& u : unsent_) busy.insert(u.release.key);
    for (const Unsettled& u : unsettled_) busy.insert(u.settle.key);
    // (A grant's retries end `keep` after its first; its record outlives any retry in flight by `keep`.)
    std::erase_if(retry_since_, [&](const auto& entry) { return now - entry.second >= 2 * keep; });
    // Releases that got no answer, again (SendRelease puts one back, RetryRelease, when it fails again).
    for (auto it = unsent_.begin(); it != unsent_.end();) {
      if (now < it->next_try) {
        ++it;
        continue;
      }
      actions.releases.push_back(it->release);
      releases_resent_.fetch_add(1, std::memory_order_relaxed);
      it = unsent_.erase(it);
    }
    for (auto it = unsettled_.begin(); it != unsettled_.end();) {
      if (now < it->next_try) {
        ++it;
        continue;
      }
      actions.settles.push_back(it->settle);
      it = unsettled_.erase(it);
    }
    watched_keys = owner_.Watched();
    NoteGainedRanges(now);
    for (auto it = scans_.begin(); it != scans_.end();) {
      if (now < it->second) {
        ++it;
        continue;
      }
      due.push_back(it->first);
      it = scans_.erase(it);
    }
    left = LeftLocked(now);
  }
  const bool paused = host_.Paused();  // once for all shards
  for (const std::unique_ptr<Shard>& shard : shards_) {
    std::lock_guard<std::mutex> lock(shard->mu);
    FenceIf(paused, *shard, now, actions);
    // (A planner with no slice, request or back-off has nothing due: most shards, most ticks.)
    if (!shard->planner.Idle()) Append(actions, shard->planner.Timer(now));
    std::erase_if(shard->rates, [&](const auto& entry) {
      return now - entry.second.window_start >= 2 * options_.rate_window;
    });
    std::erase_if(shard->known, [&](const auto& entry) {
      return now - entry.second.last_seen >= keep && !busy.contains(entry.first);
    });
  }
  std::vector<std::pair<std::string, GrantKey>> watched;  // (planner key, key)
  for (std::string& pkey : watched_keys) {
    if (std::optional<GrantKey> key = KnownKey(pkey)) watched.emplace_back(std::move(pkey), std::move(*key));
  }
  Execute(std::move(actions));
  Watch(now, watched);
  if (left) left();
  if (!due.empty()) AdoptScanned(now, due);
}

void GrantDriver::NoteGainedRanges(std::chrono::nanoseconds now) {
  std::shared_ptr<const ring::RingView> ring = host_.routing().ring;
  if (ring == nullptr || ring == scanned_ring_) return;
  scanned_ring_ = ring;
  std::vector<ring::TokenRange> arcs = ring->Arcs(host_.self_id());
  for (const ring::TokenRange& arc : arcs) {
    // An arc owned before, unchanged, holds nothing new; a grown or new one is scanned whole.
    if (std::find(owned_arcs_.begin(), owned_arcs_.end(), arc) != owned_arcs_.end()) continue;
    scans_.emplace_back(arc, now);
    scans_.emplace_back(arc, now + options_.planner.term + options_.planner.margin);
  }
  owned_arcs_ = std::move(arcs);
}

void GrantDriver::AdoptScanned(std::chrono::nanoseconds now, const std::vector<ring::TokenRange>& ranges) {
  for (const ring::TokenRange& range : ranges) {
    for (GrantRows::UnsettledRow& row : rows_.Unsettled(range.first, range.last)) {
      // Only what this node decides: another decider (a handoff still switching the range) adopts its own.
      if (!Deciding(row.key.key)) continue;
      const std::string pkey = PlannerKey(row.key.key, row.key.name);
      NoteKnown(pkey, row.key, host_.self_id(), now);
      std::lock_guard<std::mutex> lock(mu_);
      // (Its actions are only the next wake-up: the reclaims come from Tick.)
      static_cast<void>(owner_.Adopt(now, pkey, row.grants));
    }
  }
}

void GrantDriver::Watch(std::chrono::nanoseconds now,
                        const std::vector<std::pair<std::string, GrantKey>>& keys) {
  GrantActions actions;
  for (const auto& [pkey, key] : keys) {
    // A copy this node does not decide may miss a reset or another node's checks: it recalls nothing.
    if (!Deciding(key.key)) continue;
    const std::optional<KeyBudget> budget = rows_.Read(key, WallNow());  // not under mu_ (lock order)
    std::lock_guard<std::mutex> lock(mu_);
    Append(actions, owner_.OwnerChecked(now, pkey, budget.value_or(KeyBudget{})));
  }
  Execute(std::move(actions));
}

GrantDriverStats GrantDriver::stats() const {
  GrantDriverStats out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    out.planner = owner_.stats();
  }
  for (const std::unique_ptr<Shard>& shard : shards_) {  // holders' figures: the shards' sum
    std::lock_guard<std::mutex> lock(shard->mu);
    const GrantStats& s = shard->planner.stats();
    out.planner.local_checks += s.local_checks;
    out.planner.forwarded_checks += s.forwarded_checks;
    out.planner.requests += s.requests;
    out.planner.slices_held += s.slices_held;
    out.planner.released_units += s.released_units;
    out.tracked_keys += shard->rates.size();
  }
  out.requests_served = requests_served_.load(std::memory_order_relaxed);
  out.not_acked = not_acked_.load(std::memory_order_relaxed);
  out.send_failures = send_failures_.load(std::memory_order_relaxed);
  out.releases_resent = releases_resent_.load(std::memory_order_relaxed);
  return out;
}

namespace {

// A planner key's entity key and limit name (PlannerKey's two parts).
std::pair<std::string, std::string> SplitPlannerKey(std::string_view pkey) {
  const size_t nul = pkey.find('\0');
  if (nul == std::string_view::npos) return {std::string(pkey), std::string()};
  return {std::string(pkey.substr(0, nul)), std::string(pkey.substr(nul + 1))};
}

}  // namespace

GrantDriver::HotKeys GrantDriver::Hot(size_t max) const {
  HotKeys out;
  std::vector<GrantPlanner::LentKey> lent;
  {
    std::lock_guard<std::mutex> lock(mu_);
    lent = owner_.LentSummary();
  }
  for (GrantPlanner::LentKey& l : lent) {
    HotKeys::Lent k;
    std::tie(k.key, k.name) = SplitPlannerKey(l.key);
    k.units = l.units;
    k.grants = l.grants;
    k.holders = std::move(l.holders);
    k.recalled = l.recalled;
    out.lent.push_back(std::move(k));
  }
  const std::chrono::nanoseconds now = host_.SteadyNow();
  for (const std::unique_ptr<Shard>& shard : shards_) {
    std::lock_guard<std::mutex> lock(shard->mu);
    for (GrantPlanner::HeldKey& h : shard->planner.HeldSummary(now)) {
      HotKeys::Held k;
      std::tie(k.key, k.name) = SplitPlannerKey(h.key);
      if (auto known = shard->known.find(h.key); known != shard->known.end()) k.owner = known->second.owner;
      k.units_left = h.units_left;
      k.slices = h.slices;
      k.expires_in = h.expires_in;
      out.held.push_back(std::move(k));
    }
  }
  std::sort(out.lent.begin(), out.lent.end(), [](const HotKeys::Lent& a, const HotKeys::Lent& b) {
    return a.units != b.units ? a.units > b.units : std::tie(a.key, a.name) < std::tie(b.key, b.name);
  });
  std::sort(out.held.begin(), out.held.end(), [](const HotKeys::Held& a, const HotKeys::Held& b) {
    return a.units_left != b.units_left ? a.units_left > b.units_left
                                        : std::tie(a.key, a.name) < std::tie(b.key, b.name);
  });
  if (out.lent.size() > max) out.lent.resize(max);
  if (out.held.size() > max) out.held.resize(max);
  return out;
}

}  // namespace ringlimit::cluster
