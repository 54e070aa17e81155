#include "storage/state_codec.h"

#include "limiter/spec_wire.h"
#include "state.pb.h"

namespace ringlimit::storage {

void StateToProto(const StoredState& s, limiter::TimeNs expiry, state::StoredState* out) {
  out->Clear();
  limiter::SpecToProto(s.spec, out->mutable_spec());
  out->set_fingerprint(limiter::Fingerprint(s.spec));
  out->set_state_algorithm(limiter::AlgorithmToProto(s.state.algorithm));
  for (int64_t w : s.state.word) out->add_word(w);
  out->mutable_tail()->Add(s.state.tail.begin(), s.state.tail.end());
  out->set_version(s.version);
  out->set_expiry_ns(expiry);
}

std::optional<StoredState> StateFromProto(std::string_view name, const state::StoredState& msg) {
  if (msg.word_size() != 3) return std::nullopt;
  StoredState s;
  // ALGORITHM_UNSPECIFIED is valid here: the state was never written (State::algorithm{}).
  if (msg.state_algorithm() != state::ALGORITHM_UNSPECIFIED) {
    Result<limiter::Algorithm> algorithm = limiter::AlgorithmFromProto(msg.state_algorithm());
    if (!algorithm.ok()) return std::nullopt;
    s.state.algorithm = *algorithm;
  }
  Result<limiter::LimitSpec> spec = limiter::SpecFromProto(msg.spec());
  if (!spec.ok()) return std::nullopt;
  s.name = std::string(name);
  s.spec = *spec;
  for (int i = 0; i < 3; ++i) s.state.word[i] = msg.word(i);
  s.state.tail.assign(msg.tail().begin(), msg.tail().end());
  s.version = msg.version();
  return s;
}

std::string EncodeStateValue(const StoredState& s, limiter::TimeNs expiry) {
  // One message per thread, reused: the flusher encodes thousands of values per batch and Clear() keeps
  // the sub-message and repeated-field allocations.
  thread_local state::StoredState msg;
  StateToProto(s, expiry, &msg);
  return msg.SerializeAsString();
}

std::optional<StoredState> DecodeStateValue(std::string_view name, std::string_view value) {
  state::StoredState msg;
  if (!msg.ParseFromArray(value.data(), static_cast<int>(value.size()))) return std::nullopt;
  return StateFromProto(name, msg);
}

std::optional<limiter::TimeNs> DecodeExpiry(std::string_view value) {
  state::StoredState msg;
  if (!msg.ParseFromArray(value.data(), static_cast<int>(value.size()))) return std::nullopt;
  return msg.expiry_ns();
}

}  // namespace ringlimit::storage
