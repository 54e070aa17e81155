#include "storage/state_codec.h"

#include <algorithm>

#include "limiter/merge.h"
#include "limiter/spec_wire.h"
#include "state.pb.h"
#include "storage/proto_append.h"

namespace ringlimit::storage {

void StateToProto(const StoredState& s, limiter::TimeNs expiry, state::StoredState* out) {
  out->Clear();
  limiter::SpecToProto(s.spec, out->mutable_spec());
  out->set_fingerprint(limiter::Fingerprint(s.spec));
  out->set_state_algorithm(limiter::AlgorithmToProto(s.state.algorithm));
  out->set_merged(limiter::EncodeMergeState(s.state));
  out->set_version(s.version);
  out->set_expiry_ns(expiry);
}

std::optional<StoredState> StateFromProto(std::string_view name, const state::StoredState& msg) {
  StoredState s;
  Result<limiter::LimitSpec> spec = limiter::SpecFromProto(msg.spec());
  if (!spec.ok()) return std::nullopt;
  s.name = std::string(name);
  s.spec = *spec;
  s.version = msg.version();
  if (!msg.merged().empty()) {
    if (!limiter::AlgorithmFromProto(msg.state_algorithm()).ok() &&
        msg.state_algorithm() != state::ALGORITHM_UNSPECIFIED)
      return std::nullopt;
    Result<limiter::MergeState> merged = limiter::ParseMergeState(msg.merged());
    if (!merged.ok()) return std::nullopt;
    s.state = std::move(*merged);
    return s;
  }
  // A row from before mergeable states (or a state never written: no words at all).
  if (msg.word_size() == 0 && msg.state_algorithm() == state::ALGORITHM_UNSPECIFIED) return s;
  if (msg.word_size() != 3) return std::nullopt;
  limiter::State plain;
  // ALGORITHM_UNSPECIFIED is valid here: the state was never written (State::algorithm{}).
  if (msg.state_algorithm() != state::ALGORITHM_UNSPECIFIED) {
    Result<limiter::Algorithm> algorithm = limiter::AlgorithmFromProto(msg.state_algorithm());
    if (!algorithm.ok()) return std::nullopt;
    plain.algorithm = *algorithm;
  }
  for (int i = 0; i < 3; ++i) plain.word[i] = msg.word(i);
  plain.tail.assign(msg.tail().begin(), msg.tail().end());
  s.state = limiter::FromPlain(s.spec, plain, kLegacyContributor, std::max<uint64_t>(1, msg.version()));
  // Words no limiter could have written (a negative level, a corrupt row) convert to a merged state that
  // its own encoding refuses: the row would decode now and be lost at its next write-back. Refuse it now,
  // as any other corrupt row (found by fuzz/stored_state_fuzz.cc).
  if (!limiter::ParseMergeState(limiter::EncodeMergeState(s.state)).ok()) return std::nullopt;
  return s;
}

// Fields in number order, scalars only when not zero and the spec always (StateToProto sets it): what
// Protobuf writes for a proto3 message.
void AppendStateMessage(const StoredState& s, limiter::TimeNs expiry, std::string& out) {
  namespace pa = proto_append;
  state::LimitSpec spec;
  limiter::SpecToProto(s.spec, &spec);
  const size_t spec_size = spec.ByteSizeLong();
  pa::Tag(out, 1, pa::kLengthDelimited);
  pa::Varint(out, spec_size);
  const size_t at = out.size();
  out.resize(at + spec_size);
  spec.SerializeWithCachedSizesToArray(reinterpret_cast<uint8_t*>(out.data() + at));
  if (const uint64_t fingerprint = limiter::Fingerprint(s.spec); fingerprint != 0)
    pa::Fixed64(out, 2, fingerprint);
  if (const state::Algorithm algorithm = limiter::AlgorithmToProto(s.state.algorithm); algorithm != 0) {
    pa::Tag(out, 3, pa::kVarint);
    pa::Varint(out, static_cast<uint64_t>(static_cast<int64_t>(algorithm)));  // int32: sign-extended
  }
  if (s.version != 0) {
    pa::Tag(out, 6, pa::kVarint);
    pa::Varint(out, s.version);
  }
  if (expiry != 0) {
    pa::Tag(out, 7, pa::kVarint);
    pa::Varint(out, static_cast<uint64_t>(expiry));
  }
  const std::string merged = limiter::EncodeMergeState(s.state);
  if (!merged.empty()) pa::Bytes(out, 8, merged);
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
