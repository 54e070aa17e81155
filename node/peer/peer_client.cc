#include "node/peer/peer_client.h"

#include <boost/asio/post.hpp>
#include <utility>
#include <vector>

#include "node/peer/client_channel.h"

namespace ringlimit::peer {

namespace {

// The channel for `peer`, created on first use; nullptr (with `error` set) when it cannot exist.
std::shared_ptr<internal::PeerChannel> FindOrCreate(internal::ClientShared& shared,
                                                    const std::shared_ptr<internal::ClientShared>& owner,
                                                    std::string_view peer, PeerStatus& error) {
  // The common case, on every call: an existing channel, found in the published index without a lock.
  if (!shared.stopped.load(std::memory_order_relaxed)) {
    const std::shared_ptr<const internal::ClientShared::ChannelIndex>& index = shared.index.Cached();
    if (index != nullptr) {
      if (auto it = index->find(peer); it != index->end()) {
        if (std::shared_ptr<internal::PeerChannel> channel = it->second.lock()) return channel;
      }
    }
  }
  std::lock_guard lock(shared.mu);
  if (shared.stopped.load()) {
    error = PeerStatus(PeerErrorKind::kShutdown, "peer client stopped");
    return nullptr;
  }
  std::string name(peer);
  if (auto it = shared.channels.find(name); it != shared.channels.end()) return it->second;
  std::optional<HostPort> address = ParseHostPort(peer);
  if (!address) {
    error = PeerStatus(PeerErrorKind::kInvalidArgument, "bad peer address '" + name + "' (want host:port)");
    return nullptr;
  }
  auto channel = std::make_shared<internal::PeerChannel>(owner, name, std::move(*address));
  shared.channels.emplace(std::move(name), channel);
  shared.PublishIndexLocked();
  return channel;
}

// Refuses what can never be sent: the reserved method 0 and payloads above the frame limit.
PeerStatus CheckMessage(const PeerClientOptions& options, uint32_t method, const std::string& payload) {
  if (method == 0) return PeerStatus(PeerErrorKind::kInvalidArgument, "method 0 is reserved");
  if (payload.size() + internal::kEnvelopeOverheadBytes + internal::kFrameHeaderBytes >
      options.framing.max_frame_bytes) {
    return PeerStatus(PeerErrorKind::kInvalidArgument, "payload exceeds the frame size limit");
  }
  return PeerStatus::Ok();
}

}  // namespace

PeerClient::PeerClient(boost::asio::io_context& io, PeerClientOptions options)
    : io_(io), shared_(std::make_shared<internal::ClientShared>(io, std::move(options))) {}

PeerClient::~PeerClient() { Stop(); }

void PeerClient::Call(std::string_view peer, uint32_t method, std::string payload, PeerCallback done,
                      CallOptions options) {
  PeerStatus error = CheckMessage(shared_->options, method, payload);
  std::shared_ptr<internal::PeerChannel> channel;
  if (error.ok()) channel = FindOrCreate(*shared_, shared_, peer, error);
  if (!channel) {
    boost::asio::post(io_, [done = std::move(done), error = std::move(error)] {
      done(PeerResult::Error(error.kind(), error.message()));
    });
    return;
  }
  const auto timeout = options.timeout.count() > 0 ? options.timeout : shared_->options.default_timeout;
  channel->Call(method, std::move(payload), std::move(done), timeout);
}

PeerStatus PeerClient::Send(std::string_view peer, uint32_t method, std::string payload) {
  PeerStatus error = CheckMessage(shared_->options, method, payload);
  if (!error.ok()) return error;
  std::shared_ptr<internal::PeerChannel> channel = FindOrCreate(*shared_, shared_, peer, error);
  if (!channel) return error;
  return channel->Send(method, std::move(payload));
}

void PeerClient::Disconnect(std::string_view peer) {
  std::shared_ptr<internal::PeerChannel> channel;
  {
    std::lock_guard lock(shared_->mu);
    auto it = shared_->channels.find(std::string(peer));
    if (it == shared_->channels.end()) return;
    channel = std::move(it->second);
    shared_->channels.erase(it);
    shared_->PublishIndexLocked();
  }
  channel->Close(
      PeerStatus(PeerErrorKind::kConnectionLost, "peer " + std::string(peer) + " was disconnected"));
}

void PeerClient::Stop() {
  std::vector<std::shared_ptr<internal::PeerChannel>> channels;
  {
    std::lock_guard lock(shared_->mu);
    if (shared_->stopped.exchange(true)) return;
    for (auto& [name, channel] : shared_->channels) channels.push_back(std::move(channel));
    shared_->channels.clear();
    shared_->PublishIndexLocked();
  }
  for (auto& channel : channels) channel->Close(PeerStatus(PeerErrorKind::kShutdown, "peer client stopped"));
}

PeerStats PeerClient::Stats() const { return shared_->stats.Snapshot(); }

size_t PeerClient::TEST_Outstanding(std::string_view peer) const {
  std::lock_guard lock(shared_->mu);
  auto it = shared_->channels.find(std::string(peer));
  return it == shared_->channels.end() ? 0 : it->second->outstanding();
}

}  // namespace ringlimit::peer
