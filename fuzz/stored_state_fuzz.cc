// Fuzz target: the stored-state decoder (storage/state_codec.h: DecodeStateValue, the RocksDB value of a
// state; StateFromProto, the same message inside replication and handoff batches), down to the merged
// state inside it (limiter::ParseMergeState) and the spec (limiter::SpecFromProto). The input is a value.
//
// Invariants: the in-place decoder (DecodeStateValue, DecodeExpiry) answers what Protobuf's parser answers
// (DecodeStateValueByProtobuf, the message's expiry_ns) on every input. For every value that decodes:
// DecodeExpiry reads it too; its spec is valid; encoding the decoded state and decoding that again gives the
// same state and expiry (a row written before states were mergeable comes back as its merged form); the
// expiry written is the one read.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "fuzz/fuzz_util.h"
#include "fuzz/proto_util.h"
#include "limiter/limiter.h"
#include "state.pb.h"
#include "storage/state_codec.h"

namespace {

using ringlimit::storage::StoredState;

bool Same(const StoredState& a, const StoredState& b) {
  return a.name == b.name && a.spec == b.spec && a.state == b.state && a.version == b.version;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool quiet = ringlimit::fuzz::QuietProtobuf();
  (void)quiet;
  const std::string_view value(reinterpret_cast<const char*>(data), size);
  const std::optional<StoredState> decoded = ringlimit::storage::DecodeStateValue("api/per_minute", value);
  const std::optional<StoredState> by_protobuf =
      ringlimit::storage::DecodeStateValueByProtobuf("api/per_minute", value);
  FUZZ_CHECK(decoded.has_value() == by_protobuf.has_value() && (!decoded || Same(*decoded, *by_protobuf)),
             "the in-place decoder and Protobuf's parser disagree");
  ringlimit::state::StoredState message;
  const bool parses = message.ParseFromArray(value.data(), static_cast<int>(value.size()));
  FUZZ_CHECK(ringlimit::storage::DecodeExpiry(value) ==
                 (parses ? std::optional<ringlimit::limiter::TimeNs>(message.expiry_ns()) : std::nullopt),
             "DecodeExpiry and Protobuf's parser disagree");
  if (!decoded) return 0;
  FUZZ_CHECK(parses, "decoded, yet unparseable");
  const std::optional<ringlimit::limiter::TimeNs> expiry = ringlimit::storage::DecodeExpiry(value);
  FUZZ_CHECK(expiry.has_value(), "a value that decodes has no readable expiry");
  FUZZ_CHECK(decoded->name == "api/per_minute", "the name is not the row key's");
  FUZZ_CHECK(!ringlimit::limiter::Validate(decoded->spec).has_value(), "a decoded state has an invalid spec");

  const std::string encoded = ringlimit::storage::EncodeStateValue(*decoded, *expiry);
  ringlimit::state::StoredState by_message;
  ringlimit::storage::StateToProto(*decoded, *expiry, &by_message);
  FUZZ_CHECK(by_message.SerializeAsString() == encoded, "the value written is not the message's bytes");
  const std::optional<StoredState> again = ringlimit::storage::DecodeStateValue("api/per_minute", encoded);
  FUZZ_CHECK(again.has_value(), "an encoded state does not decode");
  FUZZ_CHECK(Same(*decoded, *again), "decode -> encode -> decode changes the state");
  FUZZ_CHECK(ringlimit::storage::DecodeExpiry(encoded) == expiry, "the expiry does not round-trip");
  // Canonical from here on: a second encoding is byte-identical.
  FUZZ_CHECK(ringlimit::storage::EncodeStateValue(*again, *expiry) == encoded, "encoding is not stable");
  return 0;
}
