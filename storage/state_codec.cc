#include "storage/state_codec.h"

#include <algorithm>
#include <array>

#include "limiter/merge.h"
#include "limiter/spec_wire.h"
#include "state.pb.h"
#include "storage/proto_append.h"
#include "storage/proto_read.h"

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

namespace {

namespace pr = proto_read;

// What StateFromProto reads of a message, wherever it was read from.
struct StateFields {
  // The spec, valid or why not (SpecFromProto's answer).
  const Result<limiter::LimitSpec>* spec = nullptr;
  uint64_t version = 0;
  int32_t algorithm = 0;  // state::Algorithm's number
  std::string_view merged;
};

// A state with merged bytes, or one never written (no words, no algorithm): the two forms written since
// states became mergeable. Rows from before that go through StateFromProto's legacy branch.
[[nodiscard]] bool CurrentForm(const StateFields& f, bool words) {
  return !f.merged.empty() || (!words && f.algorithm == state::ALGORITHM_UNSPECIFIED);
}

// StateFromProto for a message in its current form (CurrentForm), into `out` (its vectors keep their
// storage). false: not a valid state (`out` unspecified).
bool CurrentFormInto(std::string_view name, const StateFields& f, StoredState& out) {
  if (!f.spec->ok()) return false;
  out.name.assign(name);
  out.spec = **f.spec;
  out.version = f.version;
  if (f.merged.empty()) {
    limiter::Clear(out.state);
    return true;
  }
  const auto algorithm = static_cast<state::Algorithm>(f.algorithm);
  if (!limiter::AlgorithmFromProto(algorithm).ok() && algorithm != state::ALGORITHM_UNSPECIFIED) return false;
  return limiter::ParseMergeStateInto(f.merged, out.state).ok();
}

std::optional<StoredState> FromCurrentForm(std::string_view name, const StateFields& f) {
  StoredState s;
  if (!CurrentFormInto(name, f, s)) return std::nullopt;
  return s;
}

// A LimitSpec's fields into `spec` (proto3: a field read twice keeps the last value). false: ask Protobuf.
bool ReadSpec(std::string_view bytes, state::LimitSpec& spec) {
  pr::Reader r(bytes);
  while (r.Next()) {
    uint64_t v = 0;
    if (r.field() >= 1 && r.field() <= 10 && !r.Varint(v)) return false;
    switch (r.field()) {
      case 1:
        spec.set_algorithm(static_cast<state::Algorithm>(static_cast<int32_t>(v)));
        break;
      case 2:
        spec.set_limit(v);
        break;
      case 3:
        spec.set_window_ns(static_cast<int64_t>(v));
        break;
      case 4:
        spec.set_burst(v);
        break;
      case 5:
        spec.set_buckets(static_cast<uint32_t>(v));
        break;
      case 6:
        spec.set_max_delay_ns(static_cast<int64_t>(v));
        break;
      case 7:
        spec.set_mode(static_cast<state::Mode>(static_cast<int32_t>(v)));
        break;
      case 8:
        spec.set_soft_pct(static_cast<uint32_t>(v));
        break;
      case 9:
        spec.set_dynamic_limit(v);
        break;
      case 10:
        spec.set_count_denied(v != 0);
        break;
      default:
        if (!r.Skip()) return false;
    }
  }
  return r.done();
}

// A spec's bytes decoded and validated: what ReadSpec and SpecFromProto answer for them. A node sees few
// distinct specs (one per policy and override), and every replicated, handed-off or loaded state carries
// its spec: the answers for the last kSpecCacheSize byte strings are kept per thread, so a state of a
// spec seen before skips both (~0.9 k instructions of a replica's apply, measured by cluster_bench
// --callgrind). The same bytes always decode to the same answer, so a cached one is the one computed.
// The reference returned stays valid until this thread's next call.
struct DecodedSpec {
  bool read = false;  // false: ReadSpec refused the bytes (ask Protobuf)
  Result<limiter::LimitSpec> spec = Status::InvalidArgument("spec", "not read");
};

constexpr size_t kSpecCacheSize = 8;

const DecodedSpec& DecodeSpec(std::string_view bytes) {
  struct Entry {
    std::string bytes;
    DecodedSpec decoded;
    bool used = false;
  };
  thread_local std::array<Entry, kSpecCacheSize> cache;
  thread_local size_t next = 0;  // the entry replaced on a miss (round robin)
  for (const Entry& e : cache) {
    if (e.used && std::string_view(e.bytes) == bytes) return e.decoded;
  }
  Entry& e = cache[next];
  next = (next + 1) % kSpecCacheSize;
  e.used = true;
  e.bytes.assign(bytes);
  state::LimitSpec spec;
  e.decoded.read = ReadSpec(bytes, spec);
  e.decoded.spec = e.decoded.read ? limiter::SpecFromProto(spec)
                                  : Result<limiter::LimitSpec>(Status::InvalidArgument("spec", "not read"));
  return e.decoded;
}

// The fields of a state::StoredState read in place. false: ask Protobuf (malformed bytes, a group, a
// spec given twice -- which Protobuf merges --, or a row from before mergeable states).
bool ReadState(std::string_view bytes, StateFields& f, int64_t& expiry) {
  if (!pr::Reader::Fits(bytes)) return false;
  pr::Reader r(bytes);
  bool spec_seen = false;
  std::string_view spec_bytes;  // absent: an empty spec, as Protobuf reads it
  while (r.Next()) {
    uint64_t v = 0;
    switch (r.field()) {
      case 1: {
        if (spec_seen || !r.Bytes(spec_bytes)) return false;
        spec_seen = true;
        break;
      }
      case 2:
        if (!r.Fixed64(v)) return false;  // the fingerprint: derived from the spec, not read
        break;
      case 3:
        if (!r.Varint(v)) return false;
        f.algorithm = static_cast<int32_t>(v);
        break;
      case 4:
      case 5:
        return false;  // words: a row from before mergeable states
      case 6:
        if (!r.Varint(f.version)) return false;
        break;
      case 7:
        if (!r.Varint(v)) return false;
        expiry = static_cast<int64_t>(v);
        break;
      case 8:
        if (!r.Bytes(f.merged)) return false;
        break;
      default:
        if (!r.Skip()) return false;
    }
  }
  if (!r.done()) return false;
  const DecodedSpec& spec = DecodeSpec(spec_bytes);
  if (!spec.read) return false;
  f.spec = &spec.spec;
  return CurrentForm(f, /*words=*/false);
}

}  // namespace

std::optional<StoredState> StateFromProto(std::string_view name, const state::StoredState& msg) {
  const Result<limiter::LimitSpec> spec = limiter::SpecFromProto(msg.spec());
  const StateFields fields{&spec, msg.version(), msg.state_algorithm(), msg.merged()};
  if (CurrentForm(fields, msg.word_size() > 0)) return FromCurrentForm(name, fields);
  // A row from before mergeable states.
  StoredState s;
  if (!spec.ok()) return std::nullopt;
  s.name = std::string(name);
  s.spec = *spec;
  s.version = msg.version();
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
  // The spec: state::LimitSpec as SpecToProto fills it (enums as int32, i.e. sign-extended), written into
  // a buffer first (its size goes before it): ten fields of at most a 1-byte tag and a 10-byte varint.
  uint8_t spec[10 * 11];
  uint8_t* end = spec;
  auto scalar = [&](uint32_t field, uint64_t v) {
    if (v == 0) return;
    *end++ = static_cast<uint8_t>(field << 3);  // wire type 0 (varint)
    end = google::protobuf::io::CodedOutputStream::WriteVarint64ToArray(v, end);
  };
  scalar(1, static_cast<uint64_t>(static_cast<int64_t>(limiter::AlgorithmToProto(s.spec.algorithm))));
  scalar(2, s.spec.limit);
  scalar(3, static_cast<uint64_t>(s.spec.window));
  scalar(4, s.spec.burst);
  scalar(5, s.spec.buckets);
  scalar(6, static_cast<uint64_t>(s.spec.max_delay));
  scalar(7, static_cast<uint64_t>(static_cast<int64_t>(limiter::ModeToProto(s.spec.mode))));
  scalar(8, s.spec.soft_pct);
  scalar(9, s.spec.dynamic_limit);
  scalar(10, s.spec.count_denied ? 1 : 0);
  // always: StateToProto sets it
  pa::Bytes(out, 1, std::string_view(reinterpret_cast<const char*>(spec), static_cast<size_t>(end - spec)));
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
  thread_local std::string merged;  // kept for its capacity
  merged.clear();
  limiter::AppendMergeState(s.state, merged);
  if (!merged.empty()) pa::Bytes(out, 8, merged);
}

std::string EncodeStateValue(const StoredState& s, limiter::TimeNs expiry) {
  std::string value;
  AppendStateMessage(s, expiry, value);
  return value;
}

Status ReadStateValueInto(std::string_view name, std::string_view value, StoredState& out) {
  StateFields fields;
  int64_t expiry = 0;
  if (ReadState(value, fields, expiry)) {
    if (CurrentFormInto(name, fields, out)) return Status::OK();
    return Status::InvalidArgument("not a valid state");
  }
  state::StoredState msg;
  if (!msg.ParseFromArray(value.data(), static_cast<int>(value.size()))) {
    return Status::Corruption("not a state message");
  }
  std::optional<StoredState> s = StateFromProto(name, msg);
  if (!s.has_value()) return Status::InvalidArgument("not a valid state");
  out = std::move(*s);
  return Status::OK();
}

Result<StoredState> ReadStateValue(std::string_view name, std::string_view value) {
  StoredState s;
  if (Status read = ReadStateValueInto(name, value, s); !read.ok()) return read;
  return s;
}

std::optional<StoredState> DecodeStateValue(std::string_view name, std::string_view value) {
  Result<StoredState> s = ReadStateValue(name, value);
  if (!s.ok()) return std::nullopt;
  return std::move(*s);
}

std::optional<StoredState> DecodeStateValueByProtobuf(std::string_view name, std::string_view value) {
  state::StoredState msg;
  if (!msg.ParseFromArray(value.data(), static_cast<int>(value.size()))) return std::nullopt;
  return StateFromProto(name, msg);
}

std::optional<limiter::TimeNs> DecodeExpiry(std::string_view value) {
  StateFields fields;
  int64_t expiry = 0;
  if (ReadState(value, fields, expiry)) return expiry;
  state::StoredState msg;
  if (!msg.ParseFromArray(value.data(), static_cast<int>(value.size()))) return std::nullopt;
  return msg.expiry_ns();
}

}  // namespace ringlimit::storage
